/* The cuda kernels of the elementwise ops (ops/elementwise.c): Relu,
 * Sigmoid, Tanh and their gradients, Add, Sum, Scale, Copy and
 * StopGradient. Each unpacks its op and queues one launch of
 * elementwise_kernels.cu (or, for the copies, one device-to-device copy)
 * on the device's compute stream, without waiting; the arithmetic is
 * elem.h's, the CPU kernels' (backend/cpu/elementwise.c) operation for
 * operation. Every op may run in place, as on the CPU: a copy onto itself
 * does nothing, the others read each element before writing it.
 *
 * Errors: a failed launch or copy is the device's sticky error (CUDA_OK). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"

_Static_assert(DPM_OP_MAX_IO <= DPM_CUDA_SUM_MAX, "Sum's inputs fit the launcher");

/* Y = X (Copy, StopGradient); nothing when run in place. */
static void copy_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  size_t bytes = cuda_bytes(op->in[0]);
  if (op->out[0]->data == op->in[0]->data || bytes == 0) return;
  CUDA_OK(dev, cudaMemcpyAsync(op->out[0]->data, op->in[0]->data, bytes,
                               cudaMemcpyDeviceToDevice, dev->compute));
}

static void unary(const dpm_op *op, dpm_cuda_unary_op kind, float s) {
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_unary(kind, op->in[0]->data, op->out[0]->data, cuda_numel(op->in[0]), s,
                 dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* <Act>Gradient(Y, dY) -> dX. */
static void binary(const dpm_op *op, dpm_cuda_binary_op kind) {
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_binary(kind, op->in[0]->data, op->in[1]->data, op->out[0]->data,
                  cuda_numel(op->in[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void relu_run(const dpm_op *op) {
  if (op->in[0]->shape.dtype != DPM_BF16) {
    unary(op, DPM_CUDA_RELU, 0.f);
    return;
  }
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_unary_bf16(DPM_CUDA_RELU, op->in[0]->data, op->out[0]->data,
                      cuda_numel(op->in[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}
static void sigmoid_run(const dpm_op *op) { unary(op, DPM_CUDA_SIGMOID, 0.f); }
static void tanh_run(const dpm_op *op) { unary(op, DPM_CUDA_TANH, 0.f); }
static void scale_run(const dpm_op *op) {
  unary(op, DPM_CUDA_SCALE, (float)op->node->arg[0].f);
}
static void relu_grad_run(const dpm_op *op) {
  if (op->in[0]->shape.dtype != DPM_BF16) {
    binary(op, DPM_CUDA_RELU_GRAD);
    return;
  }
  cuda_dev *dev = cuda_dev_of(op);
  dpm_cuda_binary_bf16(DPM_CUDA_RELU_GRAD, op->in[0]->data, op->in[1]->data,
                       op->out[0]->data, cuda_numel(op->in[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}
static void sigmoid_grad_run(const dpm_op *op) { binary(op, DPM_CUDA_SIGMOID_GRAD); }
static void tanh_grad_run(const dpm_op *op) { binary(op, DPM_CUDA_TANH_GRAD); }

/* Add and Sum: inputs added left to right per element; the output may be
 * any input (the engine accumulates gradients in place). */
static void sum_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const float *x[DPM_CUDA_SUM_MAX];
  for (int k = 0; k < op->n_in; k++) x[k] = op->in[k]->data;
  dpm_cuda_sum(x, op->n_in, op->out[0]->data, cuda_numel(op->out[0]), dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

/* Relu and ReluGradient also on bf16 tensors (every tensor of the op bf16:
 * the precision rewrite types a PASS op's inputs alike). */
const dpm_kernel_def DPM_CUDA_KERNEL(RELU) = {.run = relu_run,
                                              .lowp = DPM_LOWP_BIT(DPM_BF16)};
const dpm_kernel_def DPM_CUDA_KERNEL(RELU_GRADIENT) = {.run = relu_grad_run,
                                                       .lowp = DPM_LOWP_BIT(DPM_BF16)};
const dpm_kernel_def DPM_CUDA_KERNEL(SIGMOID) = {.run = sigmoid_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SIGMOID_GRADIENT) = {.run = sigmoid_grad_run};
const dpm_kernel_def DPM_CUDA_KERNEL(TANH) = {.run = tanh_run};
const dpm_kernel_def DPM_CUDA_KERNEL(TANH_GRADIENT) = {.run = tanh_grad_run};
const dpm_kernel_def DPM_CUDA_KERNEL(ADD) = {.run = sum_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SUM) = {.run = sum_run};
const dpm_kernel_def DPM_CUDA_KERNEL(SCALE) = {.run = scale_run};
/* Copy and StopGradient move bytes: bf16 too. */
const dpm_kernel_def DPM_CUDA_KERNEL(COPY) = {.run = copy_run,
                                              .lowp = DPM_LOWP_BIT(DPM_BF16)};
const dpm_kernel_def DPM_CUDA_KERNEL(STOP_GRADIENT) = {.run = copy_run,
                                                       .lowp = DPM_LOWP_BIT(DPM_BF16)};
