/* Pooling kernels (pool_launch.h): one thread per output for the forward
 * ops, one thread per input for the gradients (gathers), grid-stride
 * loops over int64 indices; each over f32 or bf16 tensors (a template on
 * the element: bf16 is widened on load and rounded once on store, elem.h,
 * as the CPU's low-precision wrapper runs the f32 kernel).
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
#include "backend/cuda/elem.h"
#include "backend/cuda/pool_launch.h"

/* An element of a bf16 tensor. */
struct bf16_t {
  uint16_t bits;
};
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16_t *p) { return dpm_from_bf16(p->bits); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16_t *p, float v) { p->bits = dpm_to_bf16(v); }

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

/* Output o of the forward ops: its plane, and its window's in-bounds input
 * rows [y0, y1) and columns [x0, x1). */
struct pool_window {
  int64_t plane, y0, y1, x0, x1;
};
__device__ __forceinline__ pool_window window_of(const cuda_pool_geom &g, int64_t o) {
  pool_window w;
  w.plane = o / (g.wo * g.ho);
  span(g, o / g.wo % g.ho, g.h, &w.y0, &w.y1);
  span(g, o % g.wo, g.w, &w.x0, &w.x1);
  return w;
}

/* Input i of the gradients: its plane, row and column, and the windows
 * [oy0, oy1) x [ox0, ox1) that cover it. */
struct pool_cover {
  int64_t plane, iy, ix, oy0, oy1, ox0, ox1;
};
__device__ __forceinline__ pool_cover cover_of(const cuda_pool_geom &g, int64_t i) {
  pool_cover c;
  c.ix = i % g.w;
  c.iy = i / g.w % g.h;
  c.plane = i / (g.w * g.h);
  covering(g, c.iy, g.ho, &c.oy0, &c.oy1);
  covering(g, c.ix, g.wo, &c.ox0, &c.ox1);
  return c;
}

template <typename T>
__global__ void max_pool_kernel(cuda_pool_geom g, const T *__restrict__ x,
                                T *__restrict__ y, int32_t *__restrict__ idx) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const pool_window w = window_of(g, o);
    const T *xp = x + w.plane * g.h * g.w;
    int64_t at = w.y0 * g.w + w.x0;
    float m = ld(xp + at);
    for (int64_t iy = w.y0; iy < w.y1; iy++)
      for (int64_t ix = w.x0; ix < w.x1; ix++) {
        float v = ld(xp + iy * g.w + ix);
        if (v > m) {
          m = v;
          at = iy * g.w + ix;
        }
      }
    st(y + o, m);
    idx[o] = (int32_t)at;
  }
}

template <typename T>
__global__ void max_pool_grad_kernel(cuda_pool_geom g, const T *__restrict__ x,
                                     const T *__restrict__ dy,
                                     const int32_t *__restrict__ idx,
                                     T *__restrict__ dx, int relu_mask) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const pool_cover c = cover_of(g, i);
    const int32_t self = (int32_t)(c.iy * g.w + c.ix);
    const int64_t base = c.plane * g.ho * g.wo;
    float sum = 0.f;
    for (int64_t oy = c.oy0; oy < c.oy1; oy++)
      for (int64_t ox = c.ox0; ox < c.ox1; ox++) {
        const int64_t o = base + oy * g.wo + ox;
        if (idx[o] == self) sum += ld(dy + o);
      }
    st(dx + i, relu_mask && !(ld(x + i) > 0.f) ? 0.f : sum);
  }
}

template <typename T>
__global__ void avg_pool_kernel(cuda_pool_geom g, const T *__restrict__ x,
                                T *__restrict__ y) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const pool_window w = window_of(g, o);
    const T *xp = x + w.plane * g.h * g.w;
    float sum = 0.f;
    for (int64_t iy = w.y0; iy < w.y1; iy++)
      for (int64_t ix = w.x0; ix < w.x1; ix++) sum += ld(xp + iy * g.w + ix);
    st(y + o, sum / (float)((w.y1 - w.y0) * (w.x1 - w.x0)));
  }
}

template <typename T>
__global__ void avg_pool_grad_kernel(cuda_pool_geom g, const T *__restrict__ dy,
                                     T *__restrict__ dx) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const pool_cover c = cover_of(g, i);
    const T *dyp = dy + c.plane * g.ho * g.wo;
    float sum = 0.f;
    for (int64_t oy = c.oy0; oy < c.oy1; oy++) {
      int64_t y0, y1;
      span(g, oy, g.h, &y0, &y1);
      for (int64_t ox = c.ox0; ox < c.ox1; ox++) {
        int64_t x0, x1;
        span(g, ox, g.w, &x0, &x1);
        sum += ld(dyp + oy * g.wo + ox) / (float)((y1 - y0) * (x1 - x0));
      }
    }
    st(dx + i, sum);
  }
}

static unsigned blocks_for(int64_t n) {
  int64_t b = (n + POOL_THREADS - 1) / POOL_THREADS;
  return (unsigned)(b > POOL_MAX_BLOCKS ? POOL_MAX_BLOCKS : b);
}

/* Each launcher runs the kernel on bf16_t where bf16, else on float. */
#define AS(T, p) static_cast<T>(p)

extern "C" void cuda_max_pool(const cuda_pool_geom *g, const void *x, void *y,
                              int32_t *idx, int bf16, cudaStream_t s) {
  const int64_t n = g->planes * g->ho * g->wo;
  if (n <= 0) return;
  if (bf16)
    max_pool_kernel<bf16_t><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const bf16_t *, x), AS(bf16_t *, y), idx);
  else
    max_pool_kernel<float><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const float *, x), AS(float *, y), idx);
}

extern "C" void cuda_max_pool_grad(const cuda_pool_geom *g, const void *x, const void *dy,
                                   const int32_t *idx, void *dx, int relu_mask, int bf16,
                                   cudaStream_t s) {
  const int64_t n = g->planes * g->h * g->w;
  if (n <= 0) return;
  if (bf16)
    max_pool_grad_kernel<bf16_t><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const bf16_t *, x), AS(const bf16_t *, dy), idx, AS(bf16_t *, dx),
        relu_mask);
  else
    max_pool_grad_kernel<float><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const float *, x), AS(const float *, dy), idx, AS(float *, dx), relu_mask);
}

extern "C" void cuda_avg_pool(const cuda_pool_geom *g, const void *x, void *y, int bf16,
                              cudaStream_t s) {
  const int64_t n = g->planes * g->ho * g->wo;
  if (n <= 0) return;
  if (bf16)
    avg_pool_kernel<bf16_t><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const bf16_t *, x), AS(bf16_t *, y));
  else
    avg_pool_kernel<float><<<blocks_for(n), POOL_THREADS, 0, s>>>(*g, AS(const float *, x),
                                                                  AS(float *, y));
}

extern "C" void cuda_avg_pool_grad(const cuda_pool_geom *g, const void *dy, void *dx,
                                   int bf16, cudaStream_t s) {
  const int64_t n = g->planes * g->h * g->w;
  if (n <= 0) return;
  if (bf16)
    avg_pool_grad_kernel<bf16_t><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const bf16_t *, dy), AS(bf16_t *, dx));
  else
    avg_pool_grad_kernel<float><<<blocks_for(n), POOL_THREADS, 0, s>>>(
        *g, AS(const float *, dy), AS(float *, dx));
}
