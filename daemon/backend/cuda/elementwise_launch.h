/* Launchers of the CUDA element-wise, dropout and loss kernels
 * (elementwise_kernels.cu, loss_kernels.cu), called by the plugin's family files
 * (elementwise.c, dropout.c, loss.c) with raw device pointers, sizes and
 * the device's compute stream. Each queues its kernels on the stream and
 * returns without waiting; launching nothing when there is nothing to do
 * (n == 0). A launch failure is left for the caller's
 * CUDA_OK(dev, cudaGetLastError()). The arithmetic is elem.h's.
 *
 * Threads: any thread; calls on one stream run in the order they were made. */
#ifndef DPM_BACKEND_CUDA_ELEMENTWISE_LAUNCH_H
#define DPM_BACKEND_CUDA_ELEMENTWISE_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = f(x) over n elements; y may be x. s: Scale's factor (else unused). */
typedef enum {
  DPM_CUDA_RELU,
  DPM_CUDA_SIGMOID,
  DPM_CUDA_TANH,
  DPM_CUDA_SCALE,
} dpm_cuda_unary_op;
void dpm_cuda_unary(dpm_cuda_unary_op op, const float *x, float *y, int64_t n, float s,
                    cudaStream_t stream);

/* dx = g(a, b) over n elements; dx may be a or b. Gradients of the
 * activations take (Y, dY); DropoutGradient takes (dY, mask). */
typedef enum {
  DPM_CUDA_RELU_GRAD,
  DPM_CUDA_SIGMOID_GRAD,
  DPM_CUDA_TANH_GRAD,
  DPM_CUDA_DROPOUT_GRAD,
} dpm_cuda_binary_op;
void dpm_cuda_binary(dpm_cuda_binary_op op, const float *a, const float *b, float *dx,
                     int64_t n, cudaStream_t stream);

/* bf16 tensors (a model whose precision.compute is bf16): Relu
 * (DPM_CUDA_RELU) and ReluGradient (DPM_CUDA_RELU_GRAD) on bf16 patterns,
 * elem.h's dpm_relu_bf16 and dpm_relu_grad_bf16 per element; y (dx) may be
 * x (a or b). Other kinds queue nothing (the kernel defs offer bf16 for
 * Relu and ReluGradient only). */
void dpm_cuda_unary_bf16(dpm_cuda_unary_op op, const uint16_t *x, uint16_t *y, int64_t n,
                         cudaStream_t stream);
void dpm_cuda_binary_bf16(dpm_cuda_binary_op op, const uint16_t *a, const uint16_t *b,
                          uint16_t *dx, int64_t n, cudaStream_t stream);

/* Cast: n values of type `from` at x into type `to` at y (different types;
 * x and y do not overlap), by elem.h's conversions: narrowing rounds to
 * nearest even, widening is exact, bf16 <-> f16 goes through f32. */
typedef enum { DPM_CUDA_T_F32, DPM_CUDA_T_BF16, DPM_CUDA_T_F16 } dpm_cuda_ftype;
void dpm_cuda_cast(dpm_cuda_ftype from, dpm_cuda_ftype to, const void *x, void *y,
                   int64_t n, cudaStream_t stream);

/* y [n, m] (bf16) = bias b [m] (bf16) per row, through Relu when relu: the
 * bf16 FC of an empty inner dimension (0 + b, rounded once). */
void dpm_cuda_bias_act_bf16(uint16_t *y, const uint16_t *b, int64_t n, int64_t m,
                            int relu, cudaStream_t stream);

/* y [outer, c, inner] (bf16) += bias b [c] (bf16; NULL: none), through Relu
 * when relu, in place: elem.h's dpm_bias_act_bf16 per element (the bf16
 * Conv's bias and fused Relu). */
void dpm_cuda_bias_act_nchw_bf16(uint16_t *y, const uint16_t *b, int64_t outer, int64_t c,
                                 int64_t inner, int relu, cudaStream_t stream);

/* y = x[0] + ... + x[n_in - 1] over n elements (1 <= n_in <= 16); y may be
 * any of the x. */
#define DPM_CUDA_SUM_MAX 16
void dpm_cuda_sum(const float *const *x, int n_in, float *y, int64_t n,
                  cudaStream_t stream);

/* Dropout in train mode: mask[i] = 0 where element i's draw (elem.h,
 * keys k0, k1) is below ratio, else keep; y = x * mask. y may be x; mask
 * may be NULL (then only y is written). */
void dpm_cuda_dropout(const float *x, float *y, float *mask, int64_t n, double ratio,
                      float keep, uint64_t k0, uint64_t k1, cudaStream_t stream);

/* Softmax of each of the n rows of x (d each) into y; y may be x. */
void dpm_cuda_softmax(const float *x, float *y, int64_t n, int64_t d,
                      cudaStream_t stream);
/* SoftmaxGradient: dx = y * (dy - <y, dy>) row by row; dx may be y or dy. */
void dpm_cuda_softmax_grad(const float *y, const float *dy, float *dx, int64_t n,
                           int64_t d, cudaStream_t stream);
/* SoftmaxWithLoss's loss: *loss = mean over the n rows of the softmax y of
 * -log(max(y[label], 1e-20)) (NaN when n is 0, as on the CPU); with label
 * smoothing eps, of -sum q log y (elem.h: dpm_swl_row_loss). */
void dpm_cuda_swl_loss(const float *y, const int32_t *label, float *loss, int64_t n,
                       int64_t d, float eps, cudaStream_t stream);
/* SoftmaxWithLossGradient: dx = (y - q) * dloss[0] / n, q = onehot(label)
 * smoothed by eps, plus SoftmaxGradient of dy where dy is not NULL. dloss
 * is on the device. */
void dpm_cuda_swl_grad(const float *y, const int32_t *label, const float *dloss,
                       const float *dy, float *dx, int64_t n, int64_t d, float eps,
                       cudaStream_t stream);
/* Accuracy: *out = fraction of the n rows whose label is among their top k
 * (elem.h: dpm_accuracy_row). */
void dpm_cuda_accuracy(const float *x, const int32_t *label, float *out, int64_t n,
                       int64_t d, int64_t k, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
