/* The cuda kernels of the fill ops (ops/fill.c): ConstantFill, XavierFill,
 * MSRAFill, GaussianFill, UniformFill. ConstantFill is a kernel on the
 * compute stream (optim_const_launch), storing the value converted on the
 * host as the CPU converts it ((float), (int32_t), (int64_t)): it runs in
 * every training step (the loss-gradient seed, engine/autodiff.c), which
 * is captured as a CUDA graph, where a host copy and a wait are illegal.
 * The random fills run the CPU's kernel (backend/cpu/fill.c, through the
 * host's table: cuda_host->cpu) on a host copy of the op, into a malloc'd
 * buffer of the output's shape, and copy the values to the device on the
 * compute stream, so a model on cuda starts from bitwise the CPU model's
 * parameters. They run in init nets (a step net holding one is not
 * captured: the capture fails and the step runs without a graph): the copy
 * is waited for before the host buffer is freed. The host context is the
 * op's with no device; its Dropout stream (rng) is copied back in case a
 * fill advanced it.
 *
 * Ownership: the host buffer lives for the call. Threads: the device's
 * worker. Errors: an allocation or copy failure is the device's sticky
 * error (cuda_check), the output then left as it was. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/optim_launch.h"
#include "ops/fill.h"

static void constant_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_tensor *out = op->out[0];
  double v = op->node->arg[C_VALUE].f;
  uint64_t bits = 0;
  int size = 4;
  if (out->shape.dtype == DPM_F32) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    bits = u;
  } else if (out->shape.dtype == DPM_I32) {
    bits = (uint32_t)(int32_t)v;
  } else {
    bits = (uint64_t)(int64_t)v;
    size = 8;
  }
  CUDA_OK(dev, optim_const_launch(out->data, bits, size, cuda_numel(out), dev->compute));
}

static void fill_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_tensor *out = op->out[0];
  size_t bytes = cuda_bytes(out);
  size_t cap = (bytes + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
  void *host = aligned_alloc(DPM_ALIGN, cap ? cap : DPM_ALIGN);
  if (!host) {
    cuda_check(dev, 0, (int)cudaErrorMemoryAllocation,
               "fill: host buffer (aligned_alloc)");
    return;
  }
  dpm_tensor t = *out;
  t.data = host;
  t.capacity = cap ? cap : DPM_ALIGN;
  t.dev = NULL;
  dpm_ctx ctx = *op->ctx;
  ctx.dev = NULL;
  ctx.scratch = NULL;
  ctx.scratch_bytes = 0;
  dpm_op h = *op;
  h.ctx = &ctx;
  h.out[0] = &t;
  h.kernel = cuda_host->cpu->kernel(op->node->def->id);
  h.kernel->run(&h);
  memcpy(op->ctx->rng, ctx.rng, sizeof ctx.rng);
  if (bytes && CUDA_OK(dev, cudaMemcpyAsync(out->data, host, bytes,
                                            cudaMemcpyHostToDevice, dev->compute)))
    CUDA_OK(dev, cudaStreamSynchronize(dev->compute));
  free(host);
}

const dpm_kernel_def DPM_CUDA_KERNEL(CONSTANT_FILL) = {.run = constant_run};
const dpm_kernel_def DPM_CUDA_KERNEL(XAVIER_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(MSRA_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(GAUSSIAN_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(UNIFORM_FILL) = {.run = fill_run};
