/* SpatialBN kernels (norm_launch.h), in three passes on the stream:
 *
 * 1. sums: one block per (channel, part) adds its range of the channel's
 *    elements in double (per thread, strided, then a fixed tree) into the
 *    scratch: forward sum(x - k) and sum((x - k)^2), with k the channel's
 *    first value as the CPU shifts them; backward sum(dy) and
 *    sum(dy * (x - mean)).
 * 2. per channel, one thread: adds the parts in order and computes what
 *    the CPU computes in double (mean, biased variance, the running
 *    statistics' update with the unbiased variance, the saved mean and
 *    inverse std; ds, db and the gradient's coefficients), then the
 *    elementwise coefficients as floats.
 * 3. elementwise: y = x * a + d, or dx = dy * a + x * e + f, with products
 *    and sums rounded one by one (no fused multiply-add), as the CPU's
 *    float arithmetic does.
 * Test mode skips pass 1 of the forward (the running statistics are the
 * statistics).
 *
 * Combined statistics (ops/norm.c): cuda_bn_sums runs pass 1 alone and
 * packs each channel's sums as doubles [s1 (c), s2 (c), count] (forward
 * shifted by the running mean); the forward and backward given such
 * all-reduced sums (gsum) skip their own pass 1 (forward) or use them for
 * dx's coefficients in place of the batch's (backward: ds and db stay the
 * batch's).
 *
 * The CPU gathers each row's sums in float and the rows in double; here
 * every sum is in double, so results agree to float rounding, not bits.
 *
 * Threads and errors: launchers queue on the given stream and return. */
#include "backend/cuda/norm_launch.h"

#define BN_THREADS 256
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536
#define MAX_GRID (1 << 24)

/* Block (ch, p) = ch * parts + p (grid-stride over blocks), partial sums
 * of channel ch's part p: over rows of hw values, c * hw
 * apart. fwd (dy NULL): (x - k, (x - k)^2) with k = mean[ch], or x[ch * hw]
 * when mean is NULL; else (dy, dy * (x - mean[ch])). */
__global__ void bn_sums(const float *__restrict__ x, const float *__restrict__ dy,
                        const float *__restrict__ mean, int64_t n, int64_t c, int64_t hw,
                        int64_t parts, double *__restrict__ part) {
  __shared__ double sh1[BN_THREADS], sh2[BN_THREADS];
  for (int64_t blk = blockIdx.x; blk < c * parts; blk += gridDim.x) {
    const int64_t ch = blk / parts, p = blk % parts;
    const int64_t e = n * hw, lo = e * p / parts, hi = e * (p + 1) / parts;
    double a = 0, b = 0;
    if (lo < hi) {
      const float k = mean ? mean[ch] : x[ch * hw];
      for (int64_t r = lo / hw; r <= (hi - 1) / hw; r++) {
        const int64_t i0 = r * hw > lo ? r * hw : lo;
        const int64_t i1 = (r + 1) * hw < hi ? (r + 1) * hw : hi;
        const int64_t off = (r * c + ch) * hw - r * hw;
        for (int64_t i = i0 + threadIdx.x; i < i1; i += BN_THREADS) {
          const double d = (double)(x[off + i] - k);
          if (dy) {
            const double g = (double)dy[off + i];
            a += g;
            b += g * d;
          } else {
            a += d;
            b += d * d;
          }
        }
      }
    }
    sh1[threadIdx.x] = a;
    sh2[threadIdx.x] = b;
    __syncthreads();
    for (int w = BN_THREADS / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) {
        sh1[threadIdx.x] += sh1[threadIdx.x + w];
        sh2[threadIdx.x] += sh2[threadIdx.x + w];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      part[2 * (ch * parts + p)] = sh1[0];
      part[2 * (ch * parts + p) + 1] = sh2[0];
    }
    __syncthreads(); /* sh1, sh2 are reused by the next block index */
  }
}

/* Adds channel ch's parts in order. */
__device__ void add_parts(const double *part, int64_t ch, int64_t parts, double *s1,
                          double *s2) {
  double a = 0, b = 0;
  for (int64_t p = 0; p < parts; p++) {
    a += part[2 * (ch * parts + p)];
    b += part[2 * (ch * parts + p) + 1];
  }
  *s1 = a;
  *s2 = b;
}

/* Per channel: channel ch's parts packed as doubles into out [2c + 1]. */
__global__ void bn_pack(int64_t n, int64_t c, int64_t hw, int64_t parts,
                        const double *__restrict__ part, double *__restrict__ out) {
  for (int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; ch < c;
       ch += (int64_t)gridDim.x * blockDim.x) {
    double s1, s2;
    add_parts(part, ch, parts, &s1, &s2);
    out[ch] = s1;
    out[c + ch] = s2;
    if (ch == 0) out[2 * c] = (double)(n * hw);
  }
}

/* Per channel: statistics (the batch's, or from the combined sums gsum
 * shifted by rm), running statistics, saved outputs, and coef [2c] = (a, d)
 * of y = x * a + d. */
__global__ void bn_stats(const float *__restrict__ x, const float *__restrict__ s,
                         const float *__restrict__ b, float *rm, float *rv,
                         float *__restrict__ sm, float *__restrict__ siv, int64_t n,
                         int64_t c, int64_t hw, double eps, double mom, int is_test,
                         int64_t parts, const double *__restrict__ part,
                         const double *__restrict__ gsum, float *__restrict__ coef) {
  for (int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; ch < c;
       ch += (int64_t)gridDim.x * blockDim.x) {
    double mean = rm[ch], var = rv[ch];
    if (!is_test) {
      const double cnt = gsum ? gsum[2 * c] : (double)(n * hw);
      const float k = gsum ? rm[ch] : cnt > 0 ? x[ch * hw] : 0.f;
      double s1, s2;
      if (gsum)
        s1 = gsum[ch], s2 = gsum[c + ch];
      else
        add_parts(part, ch, parts, &s1, &s2);
      const double dc = cnt, m = s1 / dc;
      mean = k + m;
      var = fmax(s2 / dc - m * m, 0.0);
      rm[ch] = (float)(mom * rm[ch] + (1 - mom) * mean);
      rv[ch] =
          (float)(mom * rv[ch] + (1 - mom) * var * (cnt > 1 ? dc / (dc - 1.0) : 1.0));
    }
    const float smc = (float)mean, sivc = (float)(1 / sqrt(var + eps));
    sm[ch] = smc;
    siv[ch] = sivc;
    const float a = __fmul_rn(s[ch], sivc);
    coef[2 * ch] = a;
    coef[2 * ch + 1] = __fsub_rn(b[ch], __fmul_rn(smc, a));
  }
}

/* Per channel: ds, db and coef [3c] = (a, e, f) of dx = dy * a + x * e + f
 * (with the combined sums gsum, when given, in the coefficients). */
__global__ void bn_grad_stats(const float *__restrict__ s, const float *__restrict__ sm,
                              const float *__restrict__ siv, float *__restrict__ ds,
                              float *__restrict__ db, int64_t n, int64_t c, int64_t hw,
                              int is_test, int64_t parts, const double *__restrict__ part,
                              const double *__restrict__ gsum, float *__restrict__ coef) {
  for (int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; ch < c;
       ch += (int64_t)gridDim.x * blockDim.x) {
    double sdy, sdyx;
    add_parts(part, ch, parts, &sdy, &sdyx);
    const double dsc = sdyx * siv[ch];
    if (ds) ds[ch] = (float)dsc;
    if (db) db[ch] = (float)sdy;
    const double cnt = gsum ? gsum[2 * c] : (double)(n * hw);
    if (gsum) sdy = gsum[ch], sdyx = gsum[c + ch];
    const double k = (double)s[ch] * siv[ch];
    const double e = is_test ? 0 : -k * siv[ch] * (sdyx * siv[ch]) / cnt;
    coef[3 * ch] = (float)k;
    coef[3 * ch + 1] = (float)e;
    coef[3 * ch + 2] = (float)(is_test ? 0 : -k * sdy / cnt - e * sm[ch]);
  }
}

__global__ void bn_apply(const float *__restrict__ x, const float *__restrict__ coef,
                         float *__restrict__ y, int64_t total, int64_t c, int64_t hw) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = i / hw % c;
    y[i] = __fadd_rn(__fmul_rn(x[i], coef[2 * ch]), coef[2 * ch + 1]);
  }
}

__global__ void bn_grad_apply(const float *__restrict__ x, const float *__restrict__ dy,
                              const float *__restrict__ coef, float *__restrict__ dx,
                              int64_t total, int64_t c, int64_t hw) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = i / hw % c;
    const float t =
        __fadd_rn(__fmul_rn(dy[i], coef[3 * ch]), __fmul_rn(x[i], coef[3 * ch + 1]));
    dx[i] = __fadd_rn(t, coef[3 * ch + 2]);
  }
}

/* Blocks for a grid-stride loop over nblocks block indices. */
static unsigned grid_of(int64_t nblocks) {
  return (unsigned)(nblocks > MAX_GRID ? MAX_GRID : nblocks);
}

static unsigned blocks_for(int64_t n) {
  int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
  return (unsigned)(b < 1 ? 1 : b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b);
}

extern "C" void cuda_bn_forward(const float *x, const float *s, const float *b, float *rm,
                                float *rv, float *y, float *sm, float *siv, int64_t n,
                                int64_t c, int64_t hw, double eps, double momentum,
                                int is_test, const double *gsum, void *scratch,
                                cudaStream_t st) {
  if (c <= 0) return;
  const int64_t parts = cuda_bn_parts(n, hw);
  double *part = (double *)scratch;
  float *coef = (float *)(part + 2 * c * parts);
  if (!is_test && !gsum)
    bn_sums<<<grid_of(c * parts), BN_THREADS, 0, st>>>(x, NULL, NULL, n, c, hw, parts,
                                                       part);
  bn_stats<<<blocks_for(c), EW_THREADS, 0, st>>>(x, s, b, rm, rv, sm, siv, n, c, hw, eps,
                                                 momentum, is_test, parts, part, gsum,
                                                 coef);
  const int64_t total = n * c * hw;
  if (total > 0)
    bn_apply<<<blocks_for(total), EW_THREADS, 0, st>>>(x, coef, y, total, c, hw);
}

extern "C" void cuda_bn_backward(const float *x, const float *s, const float *sm,
                                 const float *siv, const float *dy, float *dx, float *ds,
                                 float *db, int64_t n, int64_t c, int64_t hw, int is_test,
                                 const double *gsum, void *scratch, cudaStream_t st) {
  if (c <= 0) return;
  const int64_t parts = cuda_bn_parts(n, hw);
  double *part = (double *)scratch;
  float *coef = (float *)(part + 2 * c * parts);
  bn_sums<<<grid_of(c * parts), BN_THREADS, 0, st>>>(x, dy, sm, n, c, hw, parts, part);
  bn_grad_stats<<<blocks_for(c), EW_THREADS, 0, st>>>(s, sm, siv, ds, db, n, c, hw,
                                                      is_test, parts, part, gsum, coef);
  const int64_t total = n * c * hw;
  if (dx && total > 0)
    bn_grad_apply<<<blocks_for(total), EW_THREADS, 0, st>>>(x, dy, coef, dx, total, c,
                                                            hw);
}

extern "C" void cuda_bn_sums(const float *x, const float *dy, const float *shift, int64_t n,
                             int64_t c, int64_t hw, double *out, void *scratch,
                             cudaStream_t st) {
  if (c <= 0) return;
  const int64_t parts = cuda_bn_parts(n, hw);
  double *part = (double *)scratch;
  bn_sums<<<grid_of(c * parts), BN_THREADS, 0, st>>>(x, dy, shift, n, c, hw, parts, part);
  bn_pack<<<blocks_for(c), EW_THREADS, 0, st>>>(n, c, hw, parts, part, out);
}
