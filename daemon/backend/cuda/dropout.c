/* The cuda kernels of Dropout and DropoutGradient (ops/dropout.c: inverted
 * dropout; the mask holds 0 or 1 / (1 - ratio); test mode is the
 * identity). As on the CPU (backend/cpu/dropout.c), element i is dropped
 * when its uniform draw is below ratio, but the draws come from a
 * counter-based generator (elem.h: a hash of the keys and i) so that every
 * thread draws its own elements: the keys are the context's stream
 * (op->ctx->rng, seeded by the trainer per seed, step and replica), which
 * each train-mode Dropout then advances by one step of that stream, so two
 * Dropouts of one step draw different masks. The mask has the CPU's
 * distribution and values, not its bits.
 *
 * The keys are read on the host when the op is queued: a CUDA graph that
 * captured the op replays the keys of its capture.
 *
 * Errors: a failed launch or copy is the device's sticky error (CUDA_OK). */
#include "ops/dropout.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"
#include "engine/rng.h"

/* Test mode: y = x; nothing when run in place. */
static void copy(cuda_dev *dev, const dpm_tensor *from, dpm_tensor *to) {
  size_t bytes = cuda_bytes(from);
  if (to->data == from->data || bytes == 0) return;
  CUDA_OK(dev, cudaMemcpyAsync(to->data, from->data, bytes, cudaMemcpyDeviceToDevice,
                               dev->compute));
}

static void dropout_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  if (op->node->is_test) {
    copy(dev, op->in[0], op->out[0]);
    return;
  }
  const double ratio = op->node->arg[DROPOUT_ARG_RATIO].f;
  const float keep = (float)(1 / (1 - ratio));
  float *mask = op->n_out > 1 && op->out[1] ? op->out[1]->data : NULL;
  uint64_t *rng = op->ctx->rng;
  dpm_cuda_dropout(op->in[0]->data, op->out[0]->data, mask, cuda_numel(op->in[0]), ratio,
                   keep, rng[0], rng[1], dev->compute);
  CUDA_OK(dev, cudaGetLastError());
  dpm_rng_next(rng);
}

/* dX = dY * mask (train mode), dY (test mode). */
static void dropout_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  if (op->node->is_test) {
    copy(dev, op->in[0], op->out[0]);
    return;
  }
  dpm_cuda_binary(DPM_CUDA_DROPOUT_GRAD, op->in[0]->data, op->in[1]->data,
                  op->out[0]->data, cuda_numel(op->in[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

const dpm_kernel_def DPM_CUDA_KERNEL(DROPOUT) = {.run = dropout_run};
const dpm_kernel_def DPM_CUDA_KERNEL(DROPOUT_GRADIENT) = {.run = dropout_grad_run};
