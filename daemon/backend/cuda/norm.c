/* The CUDA kernels of SpatialBN and SpatialBNGradient, and of the
 * combined statistics' SpatialBNStats and SpatialBNGradientStats
 * (ops/norm.c): X is
 * unpacked as [N, C, HW] and the plugin's own kernels (norm_kernels.cu) run on the
 * device's compute stream, with their partial sums and coefficients in
 * the op's scratch (cuda_bn_scratch bytes, from the shapes).
 *
 * Own kernels, not cuDNN's batch normalization, because the semantics
 * must be the CPU's (backend/cpu/norm.c) and cuDNN's differ in places:
 * - test mode: SpatialBN still writes its hidden outputs (the running
 *   mean as _sm and 1/sqrt(running var + epsilon) as _siv), which cuDNN's
 *   inference call does not, and SpatialBNGradient in test mode treats the
 *   statistics as constants (dx = s * siv * dy), which cuDNN's backward
 *   (always batch statistics) cannot do;
 * - the running variance: rv = momentum * rv + (1 - momentum) * var *
 *   count / (count - 1), the unbiased estimate as in cuDNN
 *   (exponentialAverageFactor would be 1 - momentum), but with a factor 1
 *   when count is 1, where cuDNN's is undefined;
 * - epsilon: the op accepts down to 1e-12, below CUDNN_BN_MIN_EPSILON on
 *   older cuDNN versions.
 * Train mode updates the running statistics (inputs 3 and 4) in place
 * (DPM_OP_UPDATES_COMPUTED); test mode reads them only. Sums are
 * deterministic (fixed parts, fixed order, no atomics).
 *
 * Threads: as any kernel (backend.h). Errors: a failed launch is recorded
 * as the device's sticky error (cuda.h). */
#include "ops/norm.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/norm_launch.h"

/* X as [N, C, HW]. */
static void geom(const dpm_shape *x, int64_t *n, int64_t *c, int64_t *hw) {
  *n = x->d[0];
  *c = x->d[1];
  *hw = 1;
  for (int i = 2; i < x->ndim; i++) *hw *= x->d[i];
}

static size_t bn_scratch(const dpm_node *nd, const dpm_shape *in) {
  (void)nd;
  int64_t n, c, hw;
  geom(&in[0], &n, &c, &hw);
  return cuda_bn_scratch(n, c, hw);
}

static float *f32(const dpm_tensor *t) { return t ? (float *)t->data : NULL; }
/* The combined sums' blob: 2C+1 doubles in an f32 shape (ops/norm.c). */
static double *f64(const dpm_tensor *t) { return t ? (double *)t->data : NULL; }

static void bn_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int64_t n, c, hw;
  geom(&op->in[0]->shape, &n, &c, &hw);
  cuda_bn_forward(f32(op->in[0]), f32(op->in[1]), f32(op->in[2]), f32(op->in[3]),
                  f32(op->in[4]), f32(op->out[0]), f32(op->out[1]), f32(op->out[2]), n, c,
                  hw, op->node->arg[BN_ARG_EPSILON].f, op->node->arg[BN_ARG_MOMENTUM].f,
                  op->node->is_test, op->n_in > 5 ? f64(op->in[5]) : NULL,
                  op->ctx->scratch, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void bn_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int64_t n, c, hw;
  geom(&op->in[0]->shape, &n, &c, &hw);
  cuda_bn_backward(f32(op->in[0]), f32(op->in[1]), f32(op->in[2]), f32(op->in[3]),
                   f32(op->in[4]), f32(op->out[0]), f32(op->out[1]), f32(op->out[2]), n,
                   c, hw, op->node->is_test, op->n_in > 5 ? f64(op->in[5]) : NULL,
                   op->ctx->scratch, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* SpatialBNStats(X, rm) and SpatialBNGradientStats(X, Y_sm, dY). */
static void bn_sums_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int64_t n, c, hw;
  geom(&op->in[0]->shape, &n, &c, &hw);
  const int grad = op->n_in == 3;
  cuda_bn_sums(f32(op->in[0]), grad ? f32(op->in[2]) : NULL, f32(op->in[1]), n, c, hw,
               f64(op->out[0]), op->ctx->scratch, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

const dpm_kernel_def DPM_CUDA_KERNEL(SPATIAL_BN) = {.run = bn_run, .scratch = bn_scratch};
const dpm_kernel_def DPM_CUDA_KERNEL(SPATIAL_BN_GRADIENT) = {.run = bn_grad_run,
                                                             .scratch = bn_scratch};
const dpm_kernel_def DPM_CUDA_KERNEL(SPATIAL_BN_STATS) = {.run = bn_sums_run,
                                                          .scratch = bn_scratch};
const dpm_kernel_def DPM_CUDA_KERNEL(SPATIAL_BN_GRADIENT_STATS) = {.run = bn_sums_run,
                                                                   .scratch = bn_scratch};
