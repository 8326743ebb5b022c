/* The CPU kernels of MaxPool, AveragePool and their gradients over NCHW
 * float32 (ops/pool.c: sizes, padding, argmax ties and the fused Relu mask
 * are the ops' semantics, described there).
 *
 * For the common 2x2 windows at stride 2 without padding, MaxPool,
 * AveragePool and AveragePoolGradient have loops of their own, free of
 * branches so that gcc vectorises them, with the results of the generic
 * loops. MaxPoolGradient, for any windows, works plane by plane in cache. */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "ops/pool.h"

/* In-bounds input positions [*lo, *hi) of window o along a side of n. */
static void span(const pool_geom *g, int64_t o, int64_t n, int64_t *lo, int64_t *hi) {
  int64_t a = o * g->s - g->p, b = a + g->k;
  *lo = a > 0 ? a : 0;
  *hi = b < n ? b : n;
}

/* 2x2 windows at stride 2 without padding: the fast paths' case. */
static int is_2x2(const pool_geom *g) { return g->k == 2 && g->s == 2 && g->p == 0; }

/* ---- MaxPool ------------------------------------------------------------ */

/* One step of a window's max, inputs taken in row-major order: v at plane
 * index i replaces (*m, *at) only if larger, so ties keep the first. No
 * branches, as which input wins is unpredictable: isgreater is v > *m
 * without the invalid-operation flag a NaN raises, which lets gcc vectorise
 * the selects (a plain > may trap, so it stays a branch), and the index is
 * selected by a mask, which gcc keeps branch-free in scalar loop tails too. */
static inline void take_max(float v, int32_t i, float *m, int32_t *at) {
  int32_t gt = isgreater(v, *m);
  *m = gt ? v : *m;
  *at += -gt & (i - *at);
}

static void max_any(const pool_geom *g, const float *x, float *y, int32_t *idx) {
  for (int64_t pl = 0; pl < g->planes; pl++) {
    const float *xp = x + pl * g->h * g->w;
    for (int64_t oy = 0; oy < g->ho; oy++) {
      int64_t y0, y1;
      span(g, oy, g->h, &y0, &y1);
      for (int64_t ox = 0; ox < g->wo; ox++, y++, idx++) {
        int64_t x0, x1;
        span(g, ox, g->w, &x0, &x1);
        int32_t at = (int32_t)(y0 * g->w + x0);
        float m = xp[at];
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++)
            take_max(xp[iy * g->w + ix], (int32_t)(iy * g->w + ix), &m, &at);
        *y = m;
        *idx = at;
      }
    }
  }
}

/* Indices are int32, which plane indices fit (check_x), so that they
 * vectorise alongside the floats. */
static void max_2x2(const pool_geom *g, const float *restrict x, float *restrict y,
                    int32_t *restrict idx) {
  const int32_t w = (int32_t)g->w, ho = (int32_t)g->ho, wo = (int32_t)g->wo;
  for (int64_t pl = 0; pl < g->planes; pl++, x += g->h * g->w)
    for (int32_t oy = 0; oy < ho; oy++, y += wo, idx += wo) {
      const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
      for (int32_t ox = 0; ox < wo; ox++) {
        const int32_t i = 2 * (oy * w + ox); /* the window's top left input */
        float m = r0[2 * ox];
        int32_t at = i;
        take_max(r0[2 * ox + 1], i + 1, &m, &at);
        take_max(r1[2 * ox], i + w, &m, &at);
        take_max(r1[2 * ox + 1], i + w + 1, &m, &at);
        y[ox] = m;
        idx[ox] = at;
      }
    }
}

static void max_run(const dpm_op *op) {
  pool_geom g = pool_geom_of(op->node, &op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  int32_t *idx = dpm_i32(op->out[1]);
  if (is_2x2(&g))
    max_2x2(&g, x, y, idx);
  else
    max_any(&g, x, y, idx);
}

/* dX masked by X > 0, as the fused ReluGradient does. */
static void relu_mask(float *restrict dx, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.f ? dx[i] : 0.f;
}

/* Plane by plane, while it is in cache: dX = 0, then each dY goes to its
 * window's argmax, then the mask if fused. */
static void max_grad_run(const dpm_op *op) {
  pool_geom g = pool_geom_of(op->node, &op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *dy = dpm_f32(op->in[1]);
  const int32_t *idx = dpm_i32(op->in[2]);
  float *dx = dpm_f32(op->out[0]);
  const int relu = (op->node->fuse & DPM_FUSE_RELU_GRAD) != 0;
  const int64_t hw = g.h * g.w, ohw = g.ho * g.wo;
  for (int64_t pl = 0; pl < g.planes; pl++, x += hw, dx += hw, dy += ohw, idx += ohw) {
    memset(dx, 0, hw * sizeof *dx);
    for (int64_t i = 0; i < ohw; i++) dx[idx[i]] += dy[i];
    if (relu) relu_mask(dx, x, hw);
  }
}

/* ---- AveragePool -------------------------------------------------------- */

static void avg_any(const pool_geom *g, const float *x, float *y) {
  for (int64_t pl = 0; pl < g->planes; pl++) {
    const float *xp = x + pl * g->h * g->w;
    for (int64_t oy = 0; oy < g->ho; oy++) {
      int64_t y0, y1;
      span(g, oy, g->h, &y0, &y1);
      for (int64_t ox = 0; ox < g->wo; ox++, y++) {
        int64_t x0, x1;
        span(g, ox, g->w, &x0, &x1);
        float sum = 0.f;
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) sum += xp[iy * g->w + ix];
        *y = sum / (float)((y1 - y0) * (x1 - x0));
      }
    }
  }
}

/* The sum in avg_any's order: the same values, but for the sign of a zero. */
static void avg_2x2(const pool_geom *g, const float *restrict x, float *restrict y) {
  for (int64_t pl = 0; pl < g->planes; pl++, x += g->h * g->w)
    for (int64_t oy = 0; oy < g->ho; oy++, y += g->wo) {
      const float *r0 = x + 2 * oy * g->w, *r1 = r0 + g->w;
      for (int64_t ox = 0; ox < g->wo; ox++)
        y[ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) / 4.f;
    }
}

static void avg_run(const dpm_op *op) {
  pool_geom g = pool_geom_of(op->node, &op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]);
  if (is_2x2(&g))
    avg_2x2(&g, x, y);
  else
    avg_any(&g, x, y);
}

/* dX = 0, then each dY is spread evenly over its window's in-bounds inputs. */
static void avg_grad_any(const pool_geom *g, const float *dy, float *dx) {
  memset(dx, 0, g->planes * g->h * g->w * sizeof *dx);
  for (int64_t pl = 0; pl < g->planes; pl++) {
    float *dxp = dx + pl * g->h * g->w;
    for (int64_t oy = 0; oy < g->ho; oy++) {
      int64_t y0, y1;
      span(g, oy, g->h, &y0, &y1);
      for (int64_t ox = 0; ox < g->wo; ox++, dy++) {
        int64_t x0, x1;
        span(g, ox, g->w, &x0, &x1);
        float share = *dy / (float)((y1 - y0) * (x1 - x0));
        for (int64_t iy = y0; iy < y1; iy++)
          for (int64_t ix = x0; ix < x1; ix++) dxp[iy * g->w + ix] += share;
      }
    }
  }
}

/* Each input gets a quarter of its window's dY; the last column and row,
 * in no window when W or H is odd, get 0. */
static void avg_grad_2x2(const pool_geom *g, const float *restrict dy,
                         float *restrict dx) {
  const int64_t w = g->w, wo = g->wo;
  for (int64_t pl = 0; pl < g->planes; pl++, dy += g->ho * wo) {
    for (int64_t iy = 0; iy < 2 * g->ho; iy++, dx += w) {
      const float *dyr = dy + iy / 2 * wo;
      for (int64_t ox = 0; ox < wo; ox++) dx[2 * ox] = dx[2 * ox + 1] = dyr[ox] / 4.f;
      if (w & 1) dx[w - 1] = 0.f;
    }
    if (g->h & 1) {
      memset(dx, 0, w * sizeof *dx);
      dx += w;
    }
  }
}

static void avg_grad_run(const dpm_op *op) {
  pool_geom g = pool_geom_of(op->node, &op->in[0]->shape);
  const float *dy = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  if (is_2x2(&g))
    avg_grad_2x2(&g, dy, dx);
  else
    avg_grad_any(&g, dy, dx);
}

const dpm_kernel_def DPM_CPU_KERNEL(MAX_POOL) = {.run = max_run};
const dpm_kernel_def DPM_CPU_KERNEL(MAX_POOL_GRADIENT) = {.run = max_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(AVERAGE_POOL) = {.run = avg_run};
const dpm_kernel_def DPM_CPU_KERNEL(AVERAGE_POOL_GRADIENT) = {.run = avg_grad_run};
