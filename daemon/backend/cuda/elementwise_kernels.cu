// The CUDA kernels of the element-wise ops and of Dropout, behind the
// launchers of elementwise_launch.h: grid-stride loops over int64
// indices, one element per iteration, doing elem.h's arithmetic (that of
// the CPU kernels). Each launcher queues one kernel on the given stream,
// or nothing when n is 0; launch errors are read back by the caller.
#include <cuda_runtime.h>

#include "backend/cuda/elem.h"
#include "backend/cuda/elementwise_launch.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192; // 2M threads; the loop strides over the rest

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return (int)(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ inline int64_t first_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ inline int64_t stride() { return (int64_t)gridDim.x * blockDim.x; }

__global__ void unary_kernel(dpm_cuda_unary_op op, const float *x, float *y, int64_t n,
                             float s) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    float v = x[i];
    switch (op) {
    case DPM_CUDA_RELU:
      v = dpm_relu(v);
      break;
    case DPM_CUDA_SIGMOID:
      v = dpm_sigmoid(v);
      break;
    case DPM_CUDA_TANH:
      v = dpm_tanh(v);
      break;
    case DPM_CUDA_SCALE:
      v = dpm_scale(s, v);
      break;
    }
    y[i] = v;
  }
}

__global__ void binary_kernel(dpm_cuda_binary_op op, const float *a, const float *b,
                              float *dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    float va = a[i], vb = b[i], v = 0.f;
    switch (op) {
    case DPM_CUDA_RELU_GRAD:
      v = dpm_relu_grad(va, vb);
      break;
    case DPM_CUDA_SIGMOID_GRAD:
      v = dpm_sigmoid_grad(va, vb);
      break;
    case DPM_CUDA_TANH_GRAD:
      v = dpm_tanh_grad(va, vb);
      break;
    case DPM_CUDA_DROPOUT_GRAD:
      v = dpm_dropout_apply(va, vb);
      break;
    }
    dx[i] = v;
  }
}

// The inputs travel by value in the kernel's parameters.
struct sum_inputs {
  const float *x[DPM_CUDA_SUM_MAX];
};

__global__ void sum_kernel(sum_inputs in, int n_in, float *y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) y[i] = dpm_sum_at(in.x, n_in, i);
}

__global__ void dropout_kernel(const float *x, float *y, float *mask, int64_t n,
                               double ratio, float keep, uint64_t k0, uint64_t k1) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    float m = dpm_dropout_factor(dpm_dropout_uniform(k0, k1, (uint64_t)i), ratio, keep);
    if (mask) mask[i] = m;
    y[i] = dpm_dropout_apply(x[i], m);
  }
}

__global__ void unary_bf16_kernel(dpm_cuda_unary_op op, const uint16_t *x, uint16_t *y,
                                  int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride())
    if (op == DPM_CUDA_RELU) y[i] = dpm_relu_bf16(x[i]);
}

__global__ void binary_bf16_kernel(dpm_cuda_binary_op op, const uint16_t *a,
                                   const uint16_t *b, uint16_t *dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride())
    if (op == DPM_CUDA_RELU_GRAD) dx[i] = dpm_relu_grad_bf16(a[i], b[i]);
}

__device__ inline float widen_at(dpm_cuda_ftype t, const void *x, int64_t i) {
  if (t == DPM_CUDA_T_BF16) return dpm_from_bf16(static_cast<const uint16_t *>(x)[i]);
  if (t == DPM_CUDA_T_F16) return dpm_from_f16(static_cast<const uint16_t *>(x)[i]);
  return static_cast<const float *>(x)[i];
}

__device__ inline void narrow_at(dpm_cuda_ftype t, void *y, int64_t i, float v) {
  if (t == DPM_CUDA_T_BF16)
    static_cast<uint16_t *>(y)[i] = dpm_to_bf16(v);
  else if (t == DPM_CUDA_T_F16)
    static_cast<uint16_t *>(y)[i] = dpm_to_f16(v);
  else
    static_cast<float *>(y)[i] = v;
}

__global__ void cast_kernel(dpm_cuda_ftype from, dpm_cuda_ftype to, const void *x, void *y,
                            int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride())
    narrow_at(to, y, i, widen_at(from, x, i));
}

__global__ void bias_act_bf16_kernel(uint16_t *y, const uint16_t *b, int64_t n, int64_t m,
                                     int relu) {
  for (int64_t i = first_index(); i < n * m; i += stride()) {
    float v = dpm_fadd(0.f, dpm_from_bf16(b[i % m]));
    y[i] = dpm_to_bf16(relu ? dpm_relu(v) : v);
  }
}

__global__ void bias_act_nchw_bf16_kernel(uint16_t *y, const uint16_t *b, int64_t n,
                                          int64_t c, int64_t inner, int relu) {
  for (int64_t i = first_index(); i < n; i += stride())
    y[i] = dpm_bias_act_bf16(y[i], b ? b[(i / inner) % c] : 0, b != nullptr, relu);
}

} // namespace

extern "C" void dpm_cuda_unary(dpm_cuda_unary_op op, const float *x, float *y, int64_t n,
                               float s, cudaStream_t stream) {
  if (n <= 0) return;
  unary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, x, y, n, s);
}

extern "C" void dpm_cuda_binary(dpm_cuda_binary_op op, const float *a, const float *b,
                                float *dx, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, a, b, dx, n);
}

extern "C" void dpm_cuda_sum(const float *const *x, int n_in, float *y, int64_t n,
                             cudaStream_t stream) {
  if (n <= 0 || n_in < 1 || n_in > DPM_CUDA_SUM_MAX) return;
  sum_inputs in = {};
  for (int k = 0; k < n_in; k++) in.x[k] = x[k];
  sum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n_in, y, n);
}

extern "C" void dpm_cuda_dropout(const float *x, float *y, float *mask, int64_t n,
                                 double ratio, float keep, uint64_t k0, uint64_t k1,
                                 cudaStream_t stream) {
  if (n <= 0) return;
  dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, mask, n, ratio, keep, k0,
                                                         k1);
}

extern "C" void dpm_cuda_unary_bf16(dpm_cuda_unary_op op, const uint16_t *x, uint16_t *y,
                                    int64_t n, cudaStream_t stream) {
  if (n <= 0 || op != DPM_CUDA_RELU) return;
  unary_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, x, y, n);
}

extern "C" void dpm_cuda_binary_bf16(dpm_cuda_binary_op op, const uint16_t *a,
                                     const uint16_t *b, uint16_t *dx, int64_t n,
                                     cudaStream_t stream) {
  if (n <= 0 || op != DPM_CUDA_RELU_GRAD) return;
  binary_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, a, b, dx, n);
}

extern "C" void dpm_cuda_cast(dpm_cuda_ftype from, dpm_cuda_ftype to, const void *x,
                              void *y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(from, to, x, y, n);
}

extern "C" void dpm_cuda_bias_act_nchw_bf16(uint16_t *y, const uint16_t *b, int64_t outer,
                                            int64_t c, int64_t inner, int relu,
                                            cudaStream_t stream) {
  const int64_t n = outer * c * inner;
  if (n <= 0 || (!b && !relu)) return;
  bias_act_nchw_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, b, n, c, inner,
                                                                     relu);
}

extern "C" void dpm_cuda_bias_act_bf16(uint16_t *y, const uint16_t *b, int64_t n,
                                       int64_t m, int relu, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return;
  bias_act_bf16_kernel<<<blocks_for(n * m), kThreads, 0, stream>>>(y, b, n, m, relu);
}
