/* Pooling kernels (pool_launch.h): one thread per output for the forward
 * ops, one thread per input for the gradients (gathers), grid-stride
 * loops over int64 indices.
 *
 * Each follows the CPU kernel's arithmetic (backend/cpu/pool.c): the max
 * starts at the window's first in-bounds element and takes a later one
 * only if strictly greater (ties keep the first; a NaN never wins, as with
 * the CPU's isgreater); the average sums in row-major order and divides by
 * the in-bounds count; the average's gradient adds dy / count per window;
 * the max's gradient adds dy of the windows whose argmax is this element.
 * Gradients add in output order, as the CPU does, so results are the
 * CPU's bit for bit (up to the sign of a zero).
 *
 * Threads and errors: launchers queue on the given stream and return. */
#include "backend/cuda/pool_launch.h"

#define POOL_THREADS 256
#define POOL_MAX_BLOCKS 65536

/* In-bounds input positions [*lo, *hi) of window o along a side of n. */
__device__ __forceinline__ void span(const cuda_pool_geom &g, int64_t o, int64_t n,
                                     int64_t *lo, int64_t *hi) {
  int64_t a = o * g.s - g.p, b = a + g.k;
  *lo = a > 0 ? a : 0;
  *hi = b < n ? b : n;
}

/* Windows [*lo, *hi) along a side of no outputs whose span covers input i. */
__device__ __forceinline__ void covering(const cuda_pool_geom &g, int64_t i, int64_t no,
                                         int64_t *lo, int64_t *hi) {
  /* window o covers i when o*s - p <= i < o*s - p + k */
  int64_t t = i + g.p - g.k + 1, a = t > 0 ? (t + g.s - 1) / g.s : 0;
  int64_t b = (i + g.p) / g.s + 1;
  *lo = a;
  *hi = b < no ? b : no;
}

__global__ void max_pool_kernel(cuda_pool_geom g, const float *__restrict__ x,
                                float *__restrict__ y, int32_t *__restrict__ idx) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = o % g.wo, oy = o / g.wo % g.ho, pl = o / (g.wo * g.ho);
    const float *xp = x + pl * g.h * g.w;
    int64_t y0, y1, x0, x1;
    span(g, oy, g.h, &y0, &y1);
    span(g, ox, g.w, &x0, &x1);
    int64_t at = y0 * g.w + x0;
    float m = xp[at];
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t ix = x0; ix < x1; ix++) {
        float v = xp[iy * g.w + ix];
        if (v > m) {
          m = v;
          at = iy * g.w + ix;
        }
      }
    y[o] = m;
    idx[o] = (int32_t)at;
  }
}

__global__ void max_pool_grad_kernel(cuda_pool_geom g, const float *__restrict__ x,
                                     const float *__restrict__ dy,
                                     const int32_t *__restrict__ idx,
                                     float *__restrict__ dx, int relu_mask) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ix = i % g.w, iy = i / g.w % g.h, pl = i / (g.w * g.h);
    const int32_t self = (int32_t)(iy * g.w + ix);
    const int64_t base = pl * g.ho * g.wo;
    int64_t oy0, oy1, ox0, ox1;
    covering(g, iy, g.ho, &oy0, &oy1);
    covering(g, ix, g.wo, &ox0, &ox1);
    float sum = 0.f;
    for (int64_t oy = oy0; oy < oy1; oy++)
      for (int64_t ox = ox0; ox < ox1; ox++) {
        const int64_t o = base + oy * g.wo + ox;
        if (idx[o] == self) sum += dy[o];
      }
    dx[i] = relu_mask && !(x[i] > 0.f) ? 0.f : sum;
  }
}

__global__ void avg_pool_kernel(cuda_pool_geom g, const float *__restrict__ x,
                                float *__restrict__ y) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = o % g.wo, oy = o / g.wo % g.ho, pl = o / (g.wo * g.ho);
    const float *xp = x + pl * g.h * g.w;
    int64_t y0, y1, x0, x1;
    span(g, oy, g.h, &y0, &y1);
    span(g, ox, g.w, &x0, &x1);
    float sum = 0.f;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t ix = x0; ix < x1; ix++) sum += xp[iy * g.w + ix];
    y[o] = sum / (float)((y1 - y0) * (x1 - x0));
  }
}

__global__ void avg_pool_grad_kernel(cuda_pool_geom g, const float *__restrict__ dy,
                                     float *__restrict__ dx) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ix = i % g.w, iy = i / g.w % g.h, pl = i / (g.w * g.h);
    const float *dyp = dy + pl * g.ho * g.wo;
    int64_t oy0, oy1, ox0, ox1;
    covering(g, iy, g.ho, &oy0, &oy1);
    covering(g, ix, g.wo, &ox0, &ox1);
    float sum = 0.f;
    for (int64_t oy = oy0; oy < oy1; oy++) {
      int64_t y0, y1;
      span(g, oy, g.h, &y0, &y1);
      for (int64_t ox = ox0; ox < ox1; ox++) {
        int64_t x0, x1;
        span(g, ox, g.w, &x0, &x1);
        sum += dyp[oy * g.wo + ox] / (float)((y1 - y0) * (x1 - x0));
      }
    }
    dx[i] = sum;
  }
}

static unsigned blocks_for(int64_t n) {
  int64_t b = (n + POOL_THREADS - 1) / POOL_THREADS;
  return (unsigned)(b > POOL_MAX_BLOCKS ? POOL_MAX_BLOCKS : b);
}

extern "C" void cuda_max_pool(const cuda_pool_geom *g, const float *x, float *y,
                              int32_t *idx, cudaStream_t s) {
  const int64_t n = g->planes * g->ho * g->wo;
  if (n <= 0) return;
  max_pool_kernel<<<blocks_for(n), POOL_THREADS, 0, s>>>(*g, x, y, idx);
}

extern "C" void cuda_max_pool_grad(const cuda_pool_geom *g, const float *x,
                                   const float *dy, const int32_t *idx, float *dx,
                                   int relu_mask, cudaStream_t s) {
  const int64_t n = g->planes * g->h * g->w;
  if (n <= 0) return;
  max_pool_grad_kernel<<<blocks_for(n), POOL_THREADS, 0, s>>>(*g, x, dy, idx, dx,
                                                              relu_mask);
}

extern "C" void cuda_avg_pool(const cuda_pool_geom *g, const float *x, float *y,
                              cudaStream_t s) {
  const int64_t n = g->planes * g->ho * g->wo;
  if (n <= 0) return;
  avg_pool_kernel<<<blocks_for(n), POOL_THREADS, 0, s>>>(*g, x, y);
}

extern "C" void cuda_avg_pool_grad(const cuda_pool_geom *g, const float *dy, float *dx,
                                   cudaStream_t s) {
  const int64_t n = g->planes * g->h * g->w;
  if (n <= 0) return;
  avg_pool_grad_kernel<<<blocks_for(n), POOL_THREADS, 0, s>>>(*g, dy, dx);
}
