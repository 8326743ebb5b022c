/* The cuda kernels of the loss ops (ops/loss.c): Softmax, SoftmaxWithLoss,
 * Accuracy and the gradients of the first two, over rows (dimension 0 of
 * the first input, every other dimension flattened) as on the CPU
 * (backend/cpu/loss.c). Each unpacks its op and queues the launches of
 * loss_kernels.cu on the device's compute stream, without waiting: the
 * softmax rows and their reductions are deterministic (fixed-order
 * combination, no atomics), the loss is summed in double like the CPU's,
 * and the loss gradient reads its scale (dloss) on the device. Softmax and
 * SoftmaxWithLoss may run in place, as on the CPU.
 *
 * Errors: a failed launch is the device's sticky error (CUDA_OK). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"

static int64_t rows(const dpm_tensor *t) { return t->shape.d[0]; }
static int64_t cols(const dpm_tensor *t) {
  int64_t n = 1;
  for (int i = 1; i < t->shape.ndim; i++) n *= t->shape.d[i];
  return n;
}

static void softmax_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_softmax(op->in[0]->data, op->out[0]->data, rows(op->in[0]), cols(op->in[0]),
                   dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* SoftmaxGradient(Y, dY) -> dX. */
static void softmax_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_softmax_grad(op->in[0]->data, op->in[1]->data, op->out[0]->data,
                        rows(op->in[0]), cols(op->in[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* SoftmaxWithLoss(logits, label i32[N]) -> (softmax, loss scalar). */
static void swl_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int64_t n = rows(op->in[0]), d = cols(op->in[0]);
  dpm_cuda_softmax(op->in[0]->data, op->out[0]->data, n, d, dev->compute);
  if (!CUDA_OK(dev, cudaGetLastError())) return;
  dpm_cuda_swl_loss(op->out[0]->data, op->in[1]->data, op->out[1]->data, n, d,
                    (float)op->node->arg[0].f, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* SoftmaxWithLossGradient(softmax, label, dloss[, dsoftmax]) -> dlogits. */
static void swl_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const float *dsoftmax = op->n_in > 3 && op->in[3] ? op->in[3]->data : NULL;
  dpm_cuda_swl_grad(op->in[0]->data, op->in[1]->data, op->in[2]->data, dsoftmax,
                    op->out[0]->data, rows(op->in[0]), cols(op->in[0]),
                    (float)op->node->arg[0].f, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* Accuracy(pred, label) -> fraction of rows whose label is in their top_k. */
static void accuracy_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_accuracy(op->in[0]->data, op->in[1]->data, op->out[0]->data, rows(op->in[0]),
                    cols(op->in[0]), op->node->arg[0].i, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

const dpm_kernel_def DPM_CUDA_KERNEL(SOFTMAX) = {.run = softmax_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SOFTMAX_GRADIENT) = {.run = softmax_grad_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SOFTMAX_WITH_LOSS) = {.run = swl_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SOFTMAX_WITH_LOSS_GRADIENT) = {.run = swl_grad_run};
const dpm_kernel_def DPM_CUDA_KERNEL(ACCURACY) = {.run = accuracy_run};
