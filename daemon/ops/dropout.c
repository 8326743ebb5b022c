/* Dropout (inverted) over float32 of any shape, and DropoutGradient.
 *
 * Train mode keeps each element with probability 1 - ratio and scales the
 * kept ones by 1 / (1 - ratio), so test mode is the identity. The draws come
 * from the device context's stream (seeded per device, advanced per use),
 * so a run is reproducible from its seed. The hidden output "_mask" holds
 * each element's factor, 0 or 1 / (1 - ratio); it is written in train mode
 * only. Both ops may run in place. */
#include <string.h>

#include "engine/op.h"
#include "engine/rng.h"
#include "ops/families.h"

enum { A_RATIO };

static const dpm_arg_def dropout_args[] = {
    {"ratio", DPM_ARG_FLOAT, "0.5", NULL, 0, 1},
    {NULL},
};

static const char *const dropout_aux[] = {"_mask", NULL};

/* Dropout(X) -> Y, Y_mask */
static dpm_status dropout_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  if (dpm_expect_dtype(&in[0], DPM_F32, "input", err)) return err->code;
  if (nd->arg[A_RATIO].f >= 1)
    return dpm_errf(err, DPM_SPEC, "ratio must be below 1, got %g", nd->arg[A_RATIO].f);
  out[0] = out[1] = in[0];
  return DPM_OK;
}

/* DropoutGradient(dY, Y_mask) -> dX */
static dpm_status dropout_grad_infer(const dpm_node *nd, const dpm_shape *in,
                                     dpm_shape *out, dpm_err *err) {
  (void)nd;
  if (dpm_expect_dtype(&in[0], DPM_F32, "output gradient", err)) return err->code;
  if (!dpm_shape_equal(&in[0], &in[1]))
    return dpm_errf(err, DPM_SHAPE, "mask must have the output gradient's shape");
  out[0] = in[0];
  return DPM_OK;
}

/* y = x in test mode; an in-place op has nothing to do. */
static void copy(const dpm_tensor *from, dpm_tensor *to) {
  if (to->data != from->data) memcpy(to->data, from->data, dpm_shape_bytes(&from->shape));
}

static void dropout_run(const dpm_op *op) {
  if (op->node->is_test) {
    copy(op->in[0], op->out[0]);
    return;
  }
  const double ratio = op->node->arg[A_RATIO].f;
  const float keep = (float)(1 / (1 - ratio));
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]), *mask = dpm_f32(op->out[1]);
  uint64_t *rng = op->ctx->rng;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) mask[i] = dpm_rng_uniform(rng) < ratio ? 0.f : keep;
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

static void dropout_grad_run(const dpm_op *op) {
  if (op->node->is_test) {
    copy(op->in[0], op->out[0]);
    return;
  }
  const float *dy = dpm_f32(op->in[0]), *mask = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i];
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
    .run = dropout_run,
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
    .run = dropout_grad_run,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
