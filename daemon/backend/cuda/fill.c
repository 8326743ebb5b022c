/* The cuda kernels of the fill ops (ops/fill.c): ConstantFill, XavierFill,
 * MSRAFill, GaussianFill, UniformFill. Each runs the CPU's kernel
 * (backend/cpu/fill.c, through the host's table: cuda_host->cpu) on a host
 * copy of the op, into a malloc'd buffer of the output's shape, and copies
 * the values to the device on the compute stream, so a model on cuda starts
 * from bitwise the CPU model's parameters. Fills run in init nets, never
 * in a captured step: the copy is waited for before the host buffer is
 * freed. The host context is the op's with no device; its Dropout stream
 * (rng) is copied back in case a fill advanced it.
 *
 * Ownership: the host buffer lives for the call. Threads: the device's
 * worker. Errors: an allocation or copy failure is the device's sticky
 * error (cuda_check), the output then left as it was. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

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

const dpm_kernel_def DPM_CUDA_KERNEL(CONSTANT_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(XAVIER_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(MSRA_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(GAUSSIAN_FILL) = {.run = fill_run};
const dpm_kernel_def DPM_CUDA_KERNEL(UNIFORM_FILL) = {.run = fill_run};
