/* The CUDA kernels of MaxPool, MaxPoolGradient, AveragePool and
 * AveragePoolGradient (ops/pool.c): the op's geometry is unpacked here and
 * the plugin's own kernels (pool_kernels.cu) run on the device's compute
 * stream.
 *
 * Own kernels, not cuDNN's pooling: MaxPool has a hidden int32 output, the
 * argmax of each window as an index in its plane (ties to the first in
 * row-major order), which cuDNN does not produce, and MaxPoolGradient
 * routes dY through those indices (not through a comparison of X with Y)
 * and may mask dX by X > 0 (DPM_FUSE_RELU_GRAD). AveragePool's semantics
 * (padding excluded from the count, floor output size) would match
 * cuDNN's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, but cuDNN's
 * backward takes Y, which AveragePoolGradient does not have; the own
 * kernels also add in the CPU's order, so results match it bit for bit.
 * The gradients are gathers without atomics: deterministic. bf16 tensors
 * (precision.compute bf16) take the same kernels on bf16 elements.
 *
 * Threads: as any kernel (backend.h). Errors: a failed launch is recorded
 * as the device's sticky error (cuda.h). */
#include "ops/pool.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/pool_launch.h"

static cuda_pool_geom geom(const dpm_op *op) {
  pool_geom g = pool_geom_of(op->node, &op->in[0]->shape);
  return (cuda_pool_geom){g.planes, g.h, g.w, g.k, g.s, g.p, g.ho, g.wo};
}

/* Whether the op's float tensors are bf16 (precision.compute bf16). */
static int bf16(const dpm_op *op) { return op->in[0]->shape.dtype == DPM_BF16; }

static void max_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  cuda_pool_geom g = geom(op);
  cuda_max_pool(&g, op->in[0]->data, op->out[0]->data, (int32_t *)op->out[1]->data,
                bf16(op), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void max_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  cuda_pool_geom g = geom(op);
  cuda_max_pool_grad(&g, op->in[0]->data, op->in[1]->data,
                     (const int32_t *)op->in[2]->data, op->out[0]->data,
                     (op->node->fuse & DPM_FUSE_RELU_GRAD) != 0, bf16(op), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void avg_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  cuda_pool_geom g = geom(op);
  cuda_avg_pool(&g, op->in[0]->data, op->out[0]->data, bf16(op), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void avg_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  cuda_pool_geom g = geom(op);
  cuda_avg_pool_grad(&g, op->in[1]->data, op->out[0]->data, bf16(op), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* All four also on bf16 tensors. */
#define BF16 .lowp = DPM_LOWP_BIT(DPM_BF16)
const dpm_kernel_def DPM_CUDA_KERNEL(MAX_POOL) = {.run = max_run, BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(MAX_POOL_GRADIENT) = {.run = max_grad_run, BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(AVERAGE_POOL) = {.run = avg_run, BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(AVERAGE_POOL_GRADIENT) = {.run = avg_grad_run, BF16};
