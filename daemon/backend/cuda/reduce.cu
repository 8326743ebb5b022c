/* Per-channel kernels (reduce_launch.h): the deterministic channel sum of
 * bias gradients and the bias (+ Relu) added after a convolution.
 *
 * The sum runs in two kernels. The first has one block per (channel,
 * part): each thread adds its strided share of the part in double and the
 * block combines its threads in a fixed tree; for inner == 1 (rows of
 * [outer, C]) a block instead takes 128 consecutive channels of a range of
 * rows, one thread per channel, so that reads stay coalesced. The second
 * adds each channel's parts in order. Nothing depends on timing or
 * atomics: the result is the same bits on every run.
 *
 * Threads and errors: launchers queue on the given stream and return. */
#include "backend/cuda/reduce_launch.h"

#define SUM_THREADS 256
#define COL_THREADS 128
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536
#define MAX_GRID (1 << 24)

/* Block (c, p) = c * parts + p (grid-stride over blocks): part p of
 * channel c's outer * inner elements, rows of `inner` contiguous values
 * C * inner apart. */
__global__ void chan_sum_parts(const float *__restrict__ x, int64_t outer, int64_t c,
                               int64_t inner, int64_t parts, double *__restrict__ part) {
  __shared__ double sh[SUM_THREADS];
  for (int64_t blk = blockIdx.x; blk < c * parts; blk += gridDim.x) {
    const int64_t ch = blk / parts, p = blk % parts;
    const int64_t e = outer * inner, lo = e * p / parts, hi = e * (p + 1) / parts;
    double acc = 0;
    if (lo < hi) {
      for (int64_t o = lo / inner; o <= (hi - 1) / inner; o++) {
        const int64_t a = o * inner > lo ? o * inner : lo;
        const int64_t b = (o + 1) * inner < hi ? (o + 1) * inner : hi;
        const float *row = x + (o * c + ch) * inner - o * inner;
        for (int64_t i = a + threadIdx.x; i < b; i += SUM_THREADS) acc += row[i];
      }
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = SUM_THREADS / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) part[ch * parts + p] = sh[0];
    __syncthreads(); /* sh is reused by the next block index */
  }
}

/* inner == 1: block index p * col_blocks + column block (grid-stride);
 * thread j sums column j over part p's rows. */
__global__ void chan_sum_cols(const float *__restrict__ x, int64_t outer, int64_t c,
                              int64_t parts, int64_t col_blocks,
                              double *__restrict__ part) {
  for (int64_t blk = blockIdx.x; blk < col_blocks * parts; blk += gridDim.x) {
    const int64_t p = blk / col_blocks;
    const int64_t j = (blk % col_blocks) * COL_THREADS + threadIdx.x;
    if (j >= c) continue;
    const int64_t lo = outer * p / parts, hi = outer * (p + 1) / parts;
    double acc = 0;
    for (int64_t r = lo; r < hi; r++) acc += x[r * c + j];
    part[j * parts + p] = acc;
  }
}

__global__ void chan_sum_final(const double *__restrict__ part, int64_t c, int64_t parts,
                               float *__restrict__ out) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    double acc = 0;
    for (int64_t p = 0; p < parts; p++) acc += part[j * parts + p];
    out[j] = (float)acc;
  }
}

__global__ void bias_act_kernel(float *__restrict__ y, const float *__restrict__ b,
                                int64_t n, int64_t c, int64_t inner, int relu) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = b ? y[i] + b[(i / inner) % c] : y[i];
    y[i] = relu ? fmaxf(v, 0.f) : v;
  }
}

static unsigned ew_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b);
}

/* Blocks for a grid-stride loop over nblocks block indices. */
static unsigned grid_of(int64_t nblocks) {
  return (unsigned)(nblocks > MAX_GRID ? MAX_GRID : nblocks);
}

extern "C" void cuda_chan_sum(const float *x, int64_t outer, int64_t c, int64_t inner,
                              float *out, double *scratch, cudaStream_t s) {
  if (c <= 0) return;
  const int64_t parts = cuda_chan_parts(outer, c, inner);
  if (inner == 1) {
    const int64_t col_blocks = (c + COL_THREADS - 1) / COL_THREADS;
    chan_sum_cols<<<grid_of(col_blocks * parts), COL_THREADS, 0, s>>>(
        x, outer, c, parts, col_blocks, scratch);
  } else {
    chan_sum_parts<<<grid_of(c * parts), SUM_THREADS, 0, s>>>(x, outer, c, inner, parts,
                                                              scratch);
  }
  chan_sum_final<<<ew_blocks(c, EW_THREADS), EW_THREADS, 0, s>>>(scratch, c, parts, out);
}

extern "C" void cuda_bias_act(float *y, const float *b, int64_t outer, int64_t c,
                              int64_t inner, int relu, cudaStream_t s) {
  const int64_t n = outer * c * inner;
  if (n <= 0 || (!b && !relu)) return;
  bias_act_kernel<<<ew_blocks(n, EW_THREADS), EW_THREADS, 0, s>>>(y, b, n, c, inner,
                                                                  relu);
}
