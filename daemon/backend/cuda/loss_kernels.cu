// The CUDA kernels of the loss ops (Softmax, SoftmaxWithLoss, Accuracy and
// the gradients), behind the launchers of elementwise_launch.h, with
// elem.h's arithmetic.
//
// Rows: one warp per row (8 rows per block of 256 threads, grid-stride over
// the rows). Each lane takes the row's elements lane, lane + 32 ... (the
// *_part bodies); the 32 partial results go to shared memory and lane 0
// combines them in dpm_tree_*'s fixed order, so a row's result never
// depends on timing. The loss mean and the accuracy count are reduced by
// one block of 256 threads the same way (doubles for the loss, as the CPU
// sums in double). No atomics anywhere: every result repeats bit for bit.
#include <cuda_runtime.h>

#include "backend/cuda/elem.h"
#include "backend/cuda/elementwise_launch.h"

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8; // warps per block
constexpr int kThreads = kWarp * kRowsPerBlock;
constexpr int64_t kMaxBlocks = 8192;
constexpr int kReduceThreads = 256; // the one block of the loss and accuracy reductions

int row_blocks(int64_t n) {
  int64_t b = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  return (int)(b < kMaxBlocks ? b : kMaxBlocks);
}

// The first row of this warp and the stride between its rows.
__device__ inline int64_t first_row() {
  return (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
}
__device__ inline int64_t row_stride() { return (int64_t)gridDim.x * kRowsPerBlock; }

// Lane 0 combines the warp's 32 partials in part (a shared row of 32)
// with tree (dpm_tree_sum or dpm_tree_max, elem.h); every lane gets the
// result. part is free again when this returns.
template <float (*tree)(float *, int)>
__device__ inline float warp_tree(float *part, int lane, float v) {
  part[lane] = v;
  __syncwarp();
  if (lane == 0) tree(part, kWarp);
  __syncwarp();
  float r = part[0];
  __syncwarp();
  return r;
}
__device__ inline float warp_sum(float *part, int lane, float v) {
  return warp_tree<dpm_tree_sum>(part, lane, v);
}
__device__ inline float warp_max(float *part, int lane, float v) {
  return warp_tree<dpm_tree_max>(part, lane, v);
}

__global__ void softmax_kernel(const float *x, float *y, int64_t n, int64_t d) {
  __shared__ float part[kRowsPerBlock][kWarp];
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int64_t r = first_row(); r < n; r += row_stride()) {
    const float *xr = x + r * d;
    float *yr = y + r * d;
    float mx = warp_max(part[w], lane, dpm_softmax_max_part(xr, d, lane, kWarp));
    float sum = warp_sum(part[w], lane, dpm_softmax_exp_part(xr, yr, d, mx, lane, kWarp));
    dpm_softmax_scale_part(yr, d, dpm_fdiv(1.f, sum), lane, kWarp);
  }
}

__global__ void softmax_grad_kernel(const float *y, const float *dy, float *dx, int64_t n,
                                    int64_t d) {
  __shared__ float part[kRowsPerBlock][kWarp];
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int64_t r = first_row(); r < n; r += row_stride()) {
    const float *yr = y + r * d, *dyr = dy + r * d;
    float *dxr = dx + r * d;
    // Every lane has read the row for the dot before any lane writes dx.
    float dot = warp_sum(part[w], lane, dpm_softmax_dot_part(yr, dyr, d, lane, kWarp));
    for (int64_t j = lane; j < d; j += kWarp)
      dxr[j] = dpm_softmax_grad(yr[j], dyr[j], dot);
  }
}

__global__ void swl_grad_kernel(const float *y, const int32_t *label, const float *dloss,
                                const float *dy, float *dx, int64_t n, int64_t d,
                                float eps) {
  __shared__ float part[kRowsPerBlock][kWarp];
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float dl = dloss[0];
  for (int64_t r = first_row(); r < n; r += row_stride()) {
    const float *yr = y + r * d, *dyr = dy ? dy + r * d : nullptr;
    float *dxr = dx + r * d;
    const int32_t l = label[r];
    const float s = dpm_swl_row_scale(dl, n, l, d);
    float dot = 0.f;
    if (dyr) dot = warp_sum(part[w], lane, dpm_softmax_dot_part(yr, dyr, d, lane, kWarp));
    for (int64_t j = lane; j < d; j += kWarp)
      dxr[j] = dpm_swl_grad(yr[j], j, l, s, eps, d, dyr != nullptr, dyr ? dyr[j] : 0.f,
                            dot);
  }
}

__global__ void swl_loss_kernel(const float *y, const int32_t *label, float *loss,
                                int64_t n, int64_t d, float eps) {
  __shared__ double part[kReduceThreads];
  const int t = threadIdx.x;
  part[t] = dpm_swl_loss_part(y, label, n, d, eps, t, kReduceThreads);
  __syncthreads();
  if (t == 0) *loss = (float)(dpm_tree_sum_d(part, kReduceThreads) / (double)n);
}

__global__ void accuracy_kernel(const float *x, const int32_t *label, float *out,
                                int64_t n, int64_t d, int64_t k) {
  __shared__ int64_t part[kReduceThreads];
  const int t = threadIdx.x;
  part[t] = dpm_accuracy_part(x, label, n, d, k, t, kReduceThreads);
  __syncthreads();
  if (t == 0) {
    int64_t correct = 0;
    for (int k = 0; k < kReduceThreads; k++) correct += part[k];
    *out = (float)((double)correct / (double)n);
  }
}

} // namespace

extern "C" void dpm_cuda_softmax(const float *x, float *y, int64_t n, int64_t d,
                                 cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  softmax_kernel<<<row_blocks(n), kThreads, 0, stream>>>(x, y, n, d);
}

extern "C" void dpm_cuda_softmax_grad(const float *y, const float *dy, float *dx,
                                      int64_t n, int64_t d, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  softmax_grad_kernel<<<row_blocks(n), kThreads, 0, stream>>>(y, dy, dx, n, d);
}

// Launched for n == 0 too: the loss is then 0 / 0, NaN, as on the CPU.
extern "C" void dpm_cuda_swl_loss(const float *y, const int32_t *label, float *loss,
                                  int64_t n, int64_t d, float eps, cudaStream_t stream) {
  swl_loss_kernel<<<1, kReduceThreads, 0, stream>>>(y, label, loss, n, d, eps);
}

extern "C" void dpm_cuda_swl_grad(const float *y, const int32_t *label,
                                  const float *dloss, const float *dy, float *dx,
                                  int64_t n, int64_t d, float eps, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  swl_grad_kernel<<<row_blocks(n), kThreads, 0, stream>>>(y, label, dloss, dy, dx, n, d,
                                                          eps);
}

// Launched for n == 0 too (0 / 0: NaN, as on the CPU).
extern "C" void dpm_cuda_accuracy(const float *x, const int32_t *label, float *out,
                                  int64_t n, int64_t d, int64_t k, cudaStream_t stream) {
  accuracy_kernel<<<1, kReduceThreads, 0, stream>>>(x, label, out, n, d, k);
}
