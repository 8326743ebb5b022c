// The optimizer kernels of the cuda backend (launchers in optim_launch.h,
// called by optim.c).
//
// Updates are fused multi-tensor kernels, after PyTorch's multi_tensor_apply:
// a launch carries up to PACK_MAX parameter descriptors by value in its
// kernel arguments (a __grid_constant__ struct under 4 KiB, so nothing is
// allocated or copied per step and a captured graph keeps them), and the
// grid covers every descriptor's elements in chunks of CHUNK: block b finds
// its descriptor by a binary search of the first block of each, then its
// threads walk the chunk. More parameters than one launch holds take more
// launches, in order.
//
// Numerics are the CPU kernels' (backend/cpu/optim.c): every float
// operation is rounded on its own (__fadd_rn and friends, never a fused
// multiply-add, which nvcc would otherwise contract), sqrt and division are
// IEEE, and Adam's bias-corrected step and the learning-rate policies are
// computed in double from the values on the device. Double pow is within 2
// ulp of glibc's, so those rates agree with the CPU's to the last bit of
// the float result in practice, and always to far below 1e-5.
//
// Errors: a launcher returns the first launch error (cudaGetLastError after
// each launch). Threads: any; a stream is used by one thread at a time.
#include "backend/cuda/optim_launch.h"

#include "backend/cuda/elem.h"
#include "ops/optim.h"

#include <cuda_runtime.h>

namespace {

constexpr int THREADS = 256;
constexpr int64_t CHUNK = 4096;         // elements per block
constexpr int64_t MAX_BLOCKS = 1 << 30; // blocks per launch, well inside the grid's limit
constexpr int PACK_MAX = 36;            // descriptors per launch

template <typename T> struct Pack {
  int count;               // descriptors in t
  int start[PACK_MAX + 1]; // first block of each; start[count]: blocks in all
  T t[PACK_MAX];
};
static_assert(sizeof(Pack<optim_adam_t>) <= 4000, "kernel arguments stay under 4 KiB");
static_assert(sizeof(Pack<optim_momentum_t>) <= 4000,
              "kernel arguments stay under 4 KiB");
static_assert(sizeof(Pack<optim_sgd_t>) <= 4000, "kernel arguments stay under 4 KiB");

// The descriptor of block b: k with start[k] <= b < start[k + 1] (empty
// descriptors are never packed, so k is unique).
template <typename T> __device__ int find_tensor(const Pack<T> &pk, int b) {
  int lo = 0, hi = pk.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (pk.start[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// ---- per-tensor updates ------------------------------------------------------

// What an update reads once per block (U::prepare, by one thread, into
// shared memory): for SGD and momentum the learning rate alone.
template <typename D> struct LrBlock {
  using Desc = D;
  struct Block {
    float lr;
  };
  __device__ static void prepare(const Desc &d, Block &s) { s.lr = *d.lr; }
};

// The updated param p_new at i, and its working copy (elem.h's rounding, the
// Cast's bits) where the descriptor has one.
template <typename D> __device__ __forceinline__ void store_p(const D &d, int64_t i, float p) {
  d.p[i] = p;
  if (d.wc) d.wc[i] = dpm_to_bf16(p);
}

struct Sgd : LrBlock<optim_sgd_t> {
  __device__ static void update(const Desc &d, const Block &s, int64_t i) {
    float p = d.p[i];
    store_p(d, i, __fsub_rn(p, __fmul_rn(s.lr, __fadd_rn(d.g[i], __fmul_rn(d.wd, p)))));
  }
};

struct Momentum : LrBlock<optim_momentum_t> {
  __device__ static void update(const Desc &d, const Block &s, int64_t i) {
    float p = d.p[i], mi = d.m[i];
    float mn = __fadd_rn(__fmul_rn(d.mu, mi),
                         __fmul_rn(s.lr, __fadd_rn(d.g[i], __fmul_rn(d.wd, p))));
    d.m[i] = mn;
    if (d.nesterov)
      store_p(d, i,
              __fsub_rn(p, __fsub_rn(__fmul_rn(__fadd_rn(1.f, d.mu), mn),
                                     __fmul_rn(d.mu, mi))));
    else
      store_p(d, i, __fsub_rn(p, mn));
  }
};

struct Adam {
  using Desc = optim_adam_t;
  struct Block {
    float step;
  };
  __device__ static void prepare(const Desc &d, Block &s) {
    double t = __dadd_rn((double)*d.iter, 1.0);
    double lr = (double)*d.lr;
    s.step = (float)__ddiv_rn(__dmul_rn(lr, sqrt(__dsub_rn(1.0, pow(d.b2, t)))),
                              __dsub_rn(1.0, pow(d.b1, t)));
  }
  __device__ static void update(const Desc &d, const Block &s, int64_t i) {
    const float b1 = (float)d.b1, b2 = (float)d.b2;
    float p = d.p[i];
    float g = __fadd_rn(d.g[i], __fmul_rn(d.wd, p));
    float m1 = __fadd_rn(__fmul_rn(b1, d.m1[i]), __fmul_rn(__fsub_rn(1.f, b1), g));
    float m2 =
        __fadd_rn(__fmul_rn(b2, d.m2[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.f, b2), g), g));
    d.m1[i] = m1;
    d.m2[i] = m2;
    store_p(d, i,
            __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step, m1), __fadd_rn(__fsqrt_rn(m2), d.eps))));
  }
};

template <typename U>
__global__ void __launch_bounds__(THREADS)
    multi_tensor(const __grid_constant__ Pack<typename U::Desc> pk) {
  __shared__ typename U::Block s;
  const int b = (int)blockIdx.x;
  const int k = find_tensor(pk, b);
  const typename U::Desc &d = pk.t[k];
  if (threadIdx.x == 0) U::prepare(d, s);
  __syncthreads();
  const int64_t lo = (int64_t)(b - pk.start[k]) * CHUNK;
  const int64_t hi = d.n - lo < CHUNK ? d.n : lo + CHUNK;
  for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) U::update(d, s, i);
}

// Packs the descriptors with elements, PACK_MAX (or MAX_BLOCKS) at a time,
// and launches each pack.
template <typename U>
cudaError_t apply(const typename U::Desc *t, int n, cudaStream_t stream) {
  Pack<typename U::Desc> pk;
  pk.count = 0;
  pk.start[0] = 0;
  for (int i = 0; i <= n; i++) {
    int64_t blocks = i < n ? (t[i].n + CHUNK - 1) / CHUNK : 0;
    bool flush = pk.count > 0 && (i == n || pk.count == PACK_MAX ||
                                  pk.start[pk.count] + blocks > MAX_BLOCKS);
    if (flush) {
      multi_tensor<U><<<pk.start[pk.count], THREADS, 0, stream>>>(pk);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) return e;
      pk.count = 0;
    }
    if (i == n || blocks == 0) continue;
    pk.t[pk.count] = t[i];
    pk.start[pk.count + 1] = pk.start[pk.count] + (int)blocks;
    pk.count++;
  }
  return cudaSuccess;
}

// ---- LearningRate and Iter ---------------------------------------------------

__global__ void lr_kernel(const int64_t *iter, float *lr, optim_lr_args a) {
  const double it = (double)*iter;
  double f = 1.0;
  switch (a.policy) {
  case POL_STEP:
    f = pow(a.gamma, floor(__ddiv_rn(it, a.stepsize)));
    break;
  case POL_MULTISTEP: {
    int passed = 0;
    for (int k = 0; k < a.n_steps; k++) passed += a.steps[k] <= it;
    f = pow(a.gamma, (double)passed);
    break;
  }
  case POL_EXP:
    f = pow(a.gamma, it);
    break;
  case POL_INV:
    f = pow(__dadd_rn(1.0, __dmul_rn(a.gamma, it)), -a.power);
    break;
  case POL_POLY: {
    double left = __dsub_rn(1.0, __ddiv_rn(it, a.max_iter));
    f = left > 0 ? pow(left, a.power) : 0.0;
    break;
  }
  case POL_COSINE: {
    double t = it < a.max_iter ? it : a.max_iter;
    double c = cos(__ddiv_rn(__dmul_rn(M_PI, t), a.max_iter));
    f = __dadd_rn(a.final_multiplier, __dmul_rn(__dmul_rn(__dsub_rn(1.0, a.final_multiplier), 0.5),
                                               __dadd_rn(1.0, c)));
    break;
  }
  default: /* POL_FIXED */
    break;
  }
  double rate = __dmul_rn(a.base, f);
  if (it < (double)a.warmup_iters) {
    double w = (double)a.warmup_iters;
    double scale =
        __dadd_rn(a.start_multiplier,
                  __ddiv_rn(__dmul_rn(__dsub_rn(1.0, a.start_multiplier), it), w));
    rate = __dmul_rn(rate, scale);
  }
  *lr = (float)rate;
}

__global__ void iter_kernel(const int64_t *in, int64_t *out) { *out = *in + 1; }

// ---- ConstantFill --------------------------------------------------------------

template <typename T> __global__ void const_kernel(T *y, T v, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = v;
}

} // namespace

extern "C" cudaError_t optim_sgd_launch(const optim_sgd_t *t, int n,
                                        cudaStream_t stream) {
  return apply<Sgd>(t, n, stream);
}

extern "C" cudaError_t optim_momentum_launch(const optim_momentum_t *t, int n,
                                             cudaStream_t stream) {
  return apply<Momentum>(t, n, stream);
}

extern "C" cudaError_t optim_adam_launch(const optim_adam_t *t, int n,
                                         cudaStream_t stream) {
  return apply<Adam>(t, n, stream);
}

extern "C" cudaError_t optim_lr_launch(const int64_t *iter, float *lr,
                                       const optim_lr_args *a, cudaStream_t stream) {
  lr_kernel<<<1, 1, 0, stream>>>(iter, lr, *a);
  return cudaGetLastError();
}

extern "C" cudaError_t optim_iter_launch(const int64_t *in, int64_t *out,
                                         cudaStream_t stream) {
  iter_kernel<<<1, 1, 0, stream>>>(in, out);
  return cudaGetLastError();
}

extern "C" cudaError_t optim_const_launch(void *y, uint64_t bits, int size, int64_t n,
                                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t want = (n + THREADS - 1) / THREADS;
  const int blocks = (int)(want < 65535 ? want : 65535); // grid-stride beyond
  if (size == 8)
    const_kernel<uint64_t><<<blocks, THREADS, 0, stream>>>((uint64_t *)y, bits, n);
  else
    const_kernel<uint32_t>
        <<<blocks, THREADS, 0, stream>>>((uint32_t *)y, (uint32_t)bits, n);
  return cudaGetLastError();
}
