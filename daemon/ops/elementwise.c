/* Elementwise ops: Relu, Sigmoid, Tanh, Add, Sum, Scale, Copy, StopGradient
 * and their gradients. */
#include <math.h>
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"

/* out[0] has the shape of in[0]; used by every unary elementwise op. */
static dpm_status infer_same(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)n;
  if (dpm_expect_dtype(&in[0], DPM_F32, "input", err)) return err->code;
  out[0] = in[0];
  return DPM_OK;
}

/* ---- Relu ---------------------------------------------------------------- */

static void relu_run(const dpm_op *op) {
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

/* ReluGradient(Y, dY) -> dX; reads the output, so Relu may run in place. */
static void relu_grad_run(const dpm_op *op) {
  const float *y = dpm_f32(op->in[0]), *dy = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

static dpm_status relu_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->out[0], g->gout[0]};
  return dpm_grad_emit(g, "ReluGradient", 2, in, 1, &g->gin[0], err);
}

static const dpm_op_def relu = {
    .name = "Relu", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .infer = infer_same, .grad = relu_grad, .run = relu_run,
    .flags = DPM_OP_INPLACE,
};
static const dpm_op_def relu_gradient = {
    .name = "ReluGradient", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .infer = infer_same, .run = relu_grad_run, .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};

const dpm_op_def *const dpm_ops_elementwise[] = {&relu, &relu_gradient, NULL};
