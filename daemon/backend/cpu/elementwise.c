/* The CPU kernels of the elementwise ops (ops/elementwise.c): Relu,
 * Sigmoid, Tanh, Add, Sum, Scale, Copy, StopGradient and the activations'
 * gradients. Plain loops over the elements, which gcc vectorises; each may
 * run in place. ReluGradient over bf16 also runs natively (lowp_run.h). */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp_run.h"

/* Y = x unchanged (Copy, StopGradient); a no-op when run in place. */
static void copy_run(const dpm_op *op) {
  if (op->out[0]->data != op->in[0]->data)
    memcpy(op->out[0]->data, op->in[0]->data, dpm_shape_bytes(&op->in[0]->shape));
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
  for (int64_t i = 0; i < n; i++) {
    float g = dy[i]; /* loaded unconditionally, so the select vectorizes */
    dx[i] = y[i] > 0.f ? g : 0.f;
  }
}

/* ReluGradient with Y, dY and dX all bf16, on the bits: what the fallback
 * computes (widen, select, round back) without the copies. y > 0 exactly
 * for the patterns 0x0001..0x7f80 (positive, nonzero, not NaN); dY passes
 * unchanged but a NaN, which rounding back quiets (lowp.h). */
int dpm_cpu_relu_grad_bf16_run(const dpm_op *op) {
  if (op->node->def->id != DPM_OP_RELU_GRADIENT || op->in[0]->shape.dtype != DPM_BF16 ||
      op->in[1]->shape.dtype != DPM_BF16 || op->out[0]->shape.dtype != DPM_BF16)
    return 0;
  const uint16_t *y = op->in[0]->data, *dy = op->in[1]->data;
  uint16_t *dx = op->out[0]->data;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) {
    uint16_t g = dy[i], q = (uint16_t)((g & 0x7fffu) > 0x7f80u ? g | 0x0040u : g);
    dx[i] = (uint16_t)(y[i] - 1u) < 0x7f80u ? q : 0;
  }
  return 1;
}

/* ---- Sigmoid, Tanh ------------------------------------------------------- */

static void sigmoid_run(const dpm_op *op) {
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) y[i] = 1.f / (1.f + expf(-x[i]));
}

/* SigmoidGradient(Y, dY) -> dX = dY * y * (1 - y). */
static void sigmoid_grad_run(const dpm_op *op) {
  const float *y = dpm_f32(op->in[0]), *dy = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.f - y[i]);
}

static void tanh_run(const dpm_op *op) {
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

/* TanhGradient(Y, dY) -> dX = dY * (1 - y^2). */
static void tanh_grad_run(const dpm_op *op) {
  const float *y = dpm_f32(op->in[0]), *dy = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.f - y[i] * y[i]);
}

/* ---- Add, Sum ------------------------------------------------------------ */

/* The sum is built in an L1-sized block and stored last, so the output may
 * be any of the inputs (the engine accumulates gradients with Sum in place). */
#define SUM_BLOCK 1024

static void sum_run(const dpm_op *op) {
  int64_t n = dpm_tensor_numel(op->out[0]);
  float acc[SUM_BLOCK];
  for (int64_t c = 0; c < n; c += SUM_BLOCK) {
    int64_t m = n - c < SUM_BLOCK ? n - c : SUM_BLOCK;
    memcpy(acc, dpm_f32(op->in[0]) + c, (size_t)m * sizeof *acc);
    for (int k = 1; k < op->n_in; k++) {
      const float *x = dpm_f32(op->in[k]) + c;
      for (int64_t j = 0; j < m; j++) acc[j] += x[j];
    }
    memcpy(dpm_f32(op->out[0]) + c, acc, (size_t)m * sizeof *acc);
  }
}

/* ---- Scale --------------------------------------------------------------- */

static void scale_run(const dpm_op *op) {
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  float s = (float)op->node->arg[0].f;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

/* ---- table --------------------------------------------------------------- */

const dpm_kernel_def DPM_CPU_KERNEL(RELU) = {.run = relu_run};
const dpm_kernel_def DPM_CPU_KERNEL(RELU_GRADIENT) = {.run = relu_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(SIGMOID) = {.run = sigmoid_run};
const dpm_kernel_def DPM_CPU_KERNEL(SIGMOID_GRADIENT) = {.run = sigmoid_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(TANH) = {.run = tanh_run};
const dpm_kernel_def DPM_CPU_KERNEL(TANH_GRADIENT) = {.run = tanh_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(ADD) = {.run = sum_run};
const dpm_kernel_def DPM_CPU_KERNEL(SUM) = {.run = sum_run};
const dpm_kernel_def DPM_CPU_KERNEL(SCALE) = {.run = scale_run};
const dpm_kernel_def DPM_CPU_KERNEL(COPY) = {.run = copy_run};
const dpm_kernel_def DPM_CPU_KERNEL(STOP_GRADIENT) = {.run = copy_run};
