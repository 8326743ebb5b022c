/* The cuda kernels of the shape ops (ops/shape.c). Flatten, Reshape and
 * their gradients copy the input's bytes under the output's shape; Concat
 * and ConcatGradient copy each part's rows between the joined tensor and
 * the part (as backend/cpu/shape.c: a part's row is its span from the axis
 * on, the rows are the span before it), one strided device-to-device copy
 * per part. Everything is queued on the device's compute stream, without
 * waiting; no kernel of our own.
 *
 * Errors: a failed copy is the device's sticky error (CUDA_OK). */
#include <stdint.h>

#include "backend/cuda/cuda.h"

/* Bytes of one element of t (4 for f32, 2 for bf16). */
static size_t elem_bytes(const dpm_tensor *t) {
  dpm_tensor one = {.shape = {.dtype = t->shape.dtype, .ndim = 0}};
  return cuda_bytes(&one);
}

/* Product of dims [from, to) (dpm_shape_span without the engine). */
static int64_t span(const dpm_shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= s->d[i];
  return n;
}

/* The output's bytes of the input (forward: X under Y's shape; gradient:
 * dY under X's shape); nothing when both are one buffer. */
static void copy_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  size_t bytes = cuda_bytes(op->out[0]);
  if (op->out[0]->data == op->in[0]->data || bytes == 0) return;
  CUDA_OK(dev, cudaMemcpyAsync(op->out[0]->data, op->in[0]->data, bytes,
                               cudaMemcpyDeviceToDevice, dev->compute));
}

/* `rows` rows of `width` elements of f bytes from src (rows `spitch`
 * elements apart) to dst (`dpitch` apart): one 2D copy, or one copy per row where a pitch
 * is beyond what a 2D copy takes. */
static void copy_rows(cuda_dev *dev, char *dst, int64_t dpitch, const char *src,
                      int64_t spitch, int64_t width, int64_t rows, size_t f) {
  if (width == 0 || rows == 0) return;
  if (rows == 1) {
    CUDA_OK(dev, cudaMemcpyAsync(dst, src, (size_t)width * f, cudaMemcpyDeviceToDevice,
                                 dev->compute));
  } else if ((uint64_t)dpitch * f <= INT32_MAX && (uint64_t)spitch * f <= INT32_MAX) {
    CUDA_OK(dev, cudaMemcpy2DAsync(dst, (size_t)dpitch * f, src, (size_t)spitch * f,
                                   (size_t)width * f, (size_t)rows,
                                   cudaMemcpyDeviceToDevice, dev->compute));
  } else {
    for (int64_t r = 0; r < rows; r++)
      if (!CUDA_OK(dev, cudaMemcpyAsync(dst + (size_t)(r * dpitch) * f,
                                        src + (size_t)(r * spitch) * f, (size_t)width * f,
                                        cudaMemcpyDeviceToDevice, dev->compute)))
        return;
  }
}

/* Concat(X0 .. Xn-1) -> Y: part k's rows go to columns [off_k, off_k + len_k)
 * of Y's rows. */
static void concat_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int axis = (int)op->node->arg[0].i;
  const dpm_shape *y = &op->out[0]->shape;
  int64_t rows = span(y, 0, axis), total = span(y, axis, y->ndim), off = 0;
  char *joined = op->out[0]->data;
  const size_t f = elem_bytes(op->out[0]);
  for (int k = 0; k < op->n_in; k++) {
    int64_t len = span(&op->in[k]->shape, axis, op->in[k]->shape.ndim);
    copy_rows(dev, joined + (size_t)off * f, total, op->in[k]->data, len, len, rows, f);
    off += len;
  }
}

/* ConcatGradient(dY, X0 .. Xn-2) -> dX0 .. dXn-1: part k's size along the
 * axis is X_k's, the last part's what the others leave of dY; absent
 * (NULL) parts are skipped. */
static void concat_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  int axis = (int)op->node->arg[0].i;
  const dpm_shape *dy = &op->in[0]->shape;
  int64_t rows = span(dy, 0, axis), total = span(dy, axis, dy->ndim);
  int64_t inner = span(dy, axis + 1, dy->ndim), last = dy->d[axis], off = 0;
  const char *joined = op->in[0]->data;
  const size_t f = elem_bytes(op->in[0]);
  for (int k = 0; k < op->n_out; k++) {
    int64_t len;
    if (k + 1 < op->n_out) {
      len = op->in[k + 1]->shape.d[axis] * inner;
      last -= op->in[k + 1]->shape.d[axis];
    } else {
      len = last * inner;
    }
    if (op->out[k])
      copy_rows(dev, op->out[k]->data, len, joined + (size_t)off * f, total, len, rows,
                f);
    off += len;
  }
}

/* All also on bf16 tensors: they move bytes (the CPU's wrapper widens and
 * rounds back, which leaves every pattern as it is but a signalling NaN's,
 * which it quiets). */
#define BF16 DPM_LOWP_BIT(DPM_BF16)
const dpm_kernel_def DPM_CUDA_KERNEL(FLATTEN) = {.run = copy_run, .lowp = BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(FLATTEN_GRADIENT) = {.run = copy_run, .lowp = BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(RESHAPE) = {.run = copy_run, .lowp = BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(RESHAPE_GRADIENT) = {.run = copy_run, .lowp = BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(CONCAT) = {.run = concat_run, .lowp = BF16};
const dpm_kernel_def DPM_CUDA_KERNEL(CONCAT_GRADIENT) = {.run = concat_grad_run,
                                                         .lowp = BF16};
