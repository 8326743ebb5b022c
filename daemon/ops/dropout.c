/* Dropout (inverted) over float32 of any shape, and DropoutGradient.
 *
 * Train mode keeps each element with probability 1 - ratio and scales the
 * kept ones by 1 / (1 - ratio), so test mode is the identity. The draws come
 * from the device context's stream (seeded per device, advanced per use),
 * so a run is reproducible from its seed. The hidden output "_mask" holds
 * each element's factor, 0 or 1 / (1 - ratio); it is written in train mode
 * only. Both ops may run in place.
 *
 * Here: arguments, shape inference and the gradient maker; the kernels are
 * each backend's (CPU: backend/cpu/dropout.c). */
#include "ops/dropout.h"
#include "engine/op.h"
#include "ops/families.h"

/* In the order of DROPOUT_ARG_* (ops/dropout.h). */
static const dpm_arg_def dropout_args[] = {
    {"ratio", DPM_ARG_FLOAT, "0.5", NULL, 0, 1},
    {NULL},
};

static const char *const dropout_aux[] = {"_mask", NULL};

/* Dropout(X) -> Y, Y_mask */
static dpm_status dropout_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  if (dpm_expect_float(&in[0], "input", err)) return err->code;
  if (nd->arg[DROPOUT_ARG_RATIO].f >= 1)
    return dpm_errf(err, DPM_SPEC, "ratio must be below 1, got %g",
                    nd->arg[DROPOUT_ARG_RATIO].f);
  out[0] = out[1] = in[0];
  return DPM_OK;
}

/* DropoutGradient(dY, Y_mask) -> dX */
static dpm_status dropout_grad_infer(const dpm_node *nd, const dpm_shape *in,
                                     dpm_shape *out, dpm_err *err) {
  (void)nd;
  if (dpm_expect_float(&in[0], "output gradient", err)) return err->code;
  if (!dpm_shape_equal(&in[0], &in[1]))
    return dpm_errf(err, DPM_SHAPE, "mask must have the output gradient's shape");
  out[0] = in[0];
  return DPM_OK;
}

static dpm_status dropout_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->gout[0], g->fwd->out[1]};
  return dpm_grad_emit(g, DPM_OP_DROPOUT_GRADIENT, 2, in, 1, &g->gin[0], err);
}

const dpm_op_def DPM_OP_DEF(DROPOUT) = {
    .id = DPM_OP_DROPOUT,
    .name = "Dropout",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = dropout_args,
    .aux = dropout_aux,
    .infer = dropout_infer,
    .grad = dropout_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(DROPOUT_GRADIENT) = {
    .id = DPM_OP_DROPOUT_GRADIENT,
    .name = "DropoutGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = dropout_args,
    .infer = dropout_grad_infer,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
