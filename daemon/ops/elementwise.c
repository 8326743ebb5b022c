/* Elementwise ops: Relu, Sigmoid, Tanh, Add, Sum, Scale, Copy, StopGradient
 * and their gradients: arguments, shape inference and the gradient makers.
 * The kernels are each backend's (CPU: backend/cpu/elementwise.c). */
#include "engine/op.h"
#include "ops/families.h"

/* out[0] has the shape of in[0]; used by every unary elementwise op. */
static dpm_status infer_same(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)n;
  if (dpm_expect_float(&in[0], "input", err)) return err->code;
  out[0] = in[0];
  return DPM_OK;
}

/* Gradient of an op whose gradient is dY itself for every input (Add, Sum,
 * Copy): one Copy of dY into each wanted input gradient. */
static dpm_status pass_through_grad(dpm_grad *g, dpm_err *err) {
  for (int k = 0; k < g->fwd->n_in; k++) {
    if (!g->gin[k]) continue;
    dpm_status s = dpm_grad_emit(g, DPM_OP_COPY, 1, &g->gout[0], 1, &g->gin[k], err);
    if (s) return s;
  }
  return DPM_OK;
}

/* Gradient of an activation y = f(x) whose derivative is a function of y:
 * <Op>Gradient(Y, dY) -> dX. Reading only Y lets the forward op run in place. */
static dpm_status emit_from_output(dpm_grad *g, dpm_op_id op, dpm_err *err) {
  const char *in[] = {g->fwd->out[0], g->gout[0]};
  return dpm_grad_emit(g, op, 2, in, 1, &g->gin[0], err);
}

/* ---- Add, Sum ------------------------------------------------------------ */

/* Every input is floating and of the shape (and type) of the first. */
static dpm_status infer_sum(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  char a[64], b[64];
  for (int k = 0; k < n->n_in; k++) {
    if (dpm_expect_float(&in[k], "input", err)) return err->code;
    if (!dpm_shape_equal(&in[k], &in[0]))
      return dpm_errf(err, DPM_SHAPE, "input %d is %s, input 0 is %s: shapes differ", k,
                      dpm_shape_str(&in[k], a, sizeof a),
                      dpm_shape_str(&in[0], b, sizeof b));
  }
  out[0] = in[0];
  return DPM_OK;
}

/* ---- Scale --------------------------------------------------------------- */

static const dpm_arg_def scale_args[] = {
    {"scale", DPM_ARG_FLOAT, "1", NULL, 0, 0},
    {NULL},
};

/* dX = scale * dY: the gradient is Scale itself, with the same argument. */
static dpm_status scale_grad(dpm_grad *g, dpm_err *err) {
  return dpm_grad_emit(g, DPM_OP_SCALE, 1, &g->gout[0], 1, &g->gin[0], err);
}

/* ---- defs ---------------------------------------------------------------- */

/* An activation y = f(x) and its gradient dx = f'(y) * dy, which reads the
 * output only: both may run in place. */
/* clang-format off */
#define ACTIVATION(ID, op_name)                                                          \
  static dpm_status grad_of_##ID(dpm_grad *g, dpm_err *err) {                            \
    return emit_from_output(g, DPM_OP_##ID##_GRADIENT, err);                             \
  }                                                                                      \
  const dpm_op_def DPM_OP_DEF(ID) = {                                                    \
      .id = DPM_OP_##ID, .name = op_name,                                                \
      .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,                              \
      .infer = infer_same, .grad = grad_of_##ID, .flags = DPM_OP_INPLACE};               \
  const dpm_op_def DPM_OP_DEF(ID##_GRADIENT) = {                                         \
      .id = DPM_OP_##ID##_GRADIENT, .name = op_name "Gradient",                          \
      .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,                              \
      .infer = infer_same, .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN}
/* clang-format on */

ACTIVATION(RELU, "Relu");
ACTIVATION(SIGMOID, "Sigmoid");
ACTIVATION(TANH, "Tanh");

const dpm_op_def DPM_OP_DEF(ADD) = {
    .id = DPM_OP_ADD,
    .name = "Add",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .infer = infer_sum,
    .grad = pass_through_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(SUM) = {
    .id = DPM_OP_SUM,
    .name = "Sum",
    .min_in = 1,
    .max_in = DPM_OP_MAX_IO,
    .min_out = 1,
    .max_out = 1,
    .infer = infer_sum,
    .grad = pass_through_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(SCALE) = {
    .id = DPM_OP_SCALE,
    .name = "Scale",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = scale_args,
    .infer = infer_same,
    .grad = scale_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(COPY) = {
    .id = DPM_OP_COPY,
    .name = "Copy",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .infer = infer_same,
    .grad = pass_through_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(STOP_GRADIENT) = {
    .id = DPM_OP_STOP_GRADIENT,
    .name = "StopGradient",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .infer = infer_same,
    .flags = DPM_OP_INPLACE | DPM_OP_NO_GRAD,
};
