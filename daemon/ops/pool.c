/* Pooling over NCHW float32: MaxPool and AveragePool with square windows,
 * and their gradients.
 *
 * Output size is floor((H + 2p - k) / s) + 1 (Caffe2). Padding never takes
 * part: a max is over the in-bounds elements of its window and an average
 * divides by their count (count_include_pad = false); pad < kernel ensures
 * every window has some. MaxPool records each window's argmax (index in its
 * H*W plane; ties go to the first in row-major order) as a hidden int32
 * output "_idx", so MaxPoolGradient scatters dY without reading Y. Both
 * gradients take X for its shape; fused with the ReluGradient of an in-place
 * Relu before the pool (DPM_FUSE_RELU_GRAD), MaxPoolGradient also masks dX
 * by X > 0.
 *
 * For the common 2x2 windows at stride 2 without padding, MaxPool,
 * AveragePool and AveragePoolGradient have loops of their own, free of
 * branches so that gcc vectorises them, with the results of the generic
 * loops. MaxPoolGradient, for any windows, works plane by plane in cache. */
#include <math.h>
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"

enum { A_KERNEL, A_STRIDE, A_PAD };

static const dpm_arg_def pool_args[] = {
    {"kernel", DPM_ARG_INT, NULL, NULL, 1, 1 << 10},
    {"stride", DPM_ARG_INT, "1", NULL, 1, 1 << 10},
    {"pad", DPM_ARG_INT, "0", NULL, 0, 1 << 10},
    {NULL},
};

static const char *const max_aux[] = {"_idx", NULL};

/* Sizes of one pooling. */
typedef struct pool_geom {
  int64_t planes, h, w; /* N*C planes of H x W */
  int64_t k, s, p;      /* window side, stride, padding */
  int64_t ho, wo;       /* output plane */
} pool_geom;

static pool_geom geom_of(const dpm_node *nd, const dpm_shape *x) {
  pool_geom g = {
      .planes = x->d[0] * x->d[1],
      .h = x->d[2],
      .w = x->d[3],
      .k = nd->arg[A_KERNEL].i,
      .s = nd->arg[A_STRIDE].i,
      .p = nd->arg[A_PAD].i,
  };
  g.ho = (g.h + 2 * g.p - g.k) / g.s + 1;
  g.wo = (g.w + 2 * g.p - g.k) / g.s + 1;
  return g;
}

/* Checks X and returns the output shape (N, C, Ho, Wo) in *y. */
static dpm_status check_x(const dpm_node *nd, const dpm_shape *x, dpm_shape *y,
                          dpm_err *err) {
  if (dpm_expect_dtype(x, DPM_F32, "input", err) ||
      dpm_expect_ndim(x, 4, 4, "input", err))
    return err->code;
  pool_geom g = geom_of(nd, x);
  if (g.p >= g.k)
    return dpm_errf(err, DPM_SHAPE, "pad %lld must be smaller than kernel %lld",
                    (long long)g.p, (long long)g.k);
  if (g.k > g.h + 2 * g.p || g.k > g.w + 2 * g.p)
    return dpm_errf(
        err, DPM_SHAPE, "kernel %lld is larger than the padded input %lldx%lld",
        (long long)g.k, (long long)(g.h + 2 * g.p), (long long)(g.w + 2 * g.p));
  if (g.h * g.w > INT32_MAX)
    return dpm_errf(err, DPM_SHAPE,
                    "input planes are too large for int32 argmax indices");
  *y = dpm_shape_make(DPM_F32, 4, (int64_t[]){x->d[0], x->d[1], g.ho, g.wo});
  return DPM_OK;
}

/* MaxPool(X) -> Y, Y_idx */
static dpm_status max_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  if (check_x(nd, &in[0], &out[0], err)) return err->code;
  out[1] = out[0];
  out[1].dtype = DPM_I32;
  return DPM_OK;
}

/* AveragePool(X) -> Y */
static dpm_status avg_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  return check_x(nd, &in[0], &out[0], err);
}

/* Fails unless blob `what` has exactly the shape `want`. */
static dpm_status expect_shape(const dpm_shape *got, const dpm_shape *want,
                               const char *what, dpm_err *err) {
  if (dpm_shape_equal(got, want)) return DPM_OK;
  char a[64], b[64];
  return dpm_errf(err, DPM_SHAPE, "%s must be %s, got %s", what,
                  dpm_shape_str(want, a, sizeof a), dpm_shape_str(got, b, sizeof b));
}

/* AveragePoolGradient(X, dY) -> dX */
static dpm_status avg_grad_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  dpm_shape y;
  if (check_x(nd, &in[0], &y, err) || expect_shape(&in[1], &y, "output gradient", err))
    return err->code;
  out[0] = in[0];
  return DPM_OK;
}

/* MaxPoolGradient(X, dY, Y_idx) -> dX */
static dpm_status max_grad_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  if (avg_grad_infer(nd, in, out, err)) return err->code;
  dpm_shape idx = in[1];
  idx.dtype = DPM_I32;
  return expect_shape(&in[2], &idx, "argmax indices", err);
}

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
  pool_geom g = geom_of(op->node, &op->in[0]->shape);
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
  pool_geom g = geom_of(op->node, &op->in[0]->shape);
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
  pool_geom g = geom_of(op->node, &op->in[0]->shape);
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
  pool_geom g = geom_of(op->node, &op->in[0]->shape);
  const float *dy = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  if (is_2x2(&g))
    avg_grad_2x2(&g, dy, dx);
  else
    avg_grad_any(&g, dy, dx);
}

static dpm_status max_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->gout[0], g->fwd->out[1]};
  return dpm_grad_emit(g, DPM_OP_MAX_POOL_GRADIENT, 3, in, 1, &g->gin[0], err);
}

static dpm_status avg_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->gout[0]};
  return dpm_grad_emit(g, DPM_OP_AVERAGE_POOL_GRADIENT, 2, in, 1, &g->gin[0], err);
}

const dpm_op_def DPM_OP_DEF(MAX_POOL) = {
    .id = DPM_OP_MAX_POOL,
    .name = "MaxPool",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = pool_args,
    .aux = max_aux,
    .infer = max_infer,
    .grad = max_grad,
    .run = max_run,
};
const dpm_op_def DPM_OP_DEF(MAX_POOL_GRADIENT) = {
    .id = DPM_OP_MAX_POOL_GRADIENT,
    .name = "MaxPoolGradient",
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 1,
    .args = pool_args,
    .infer = max_grad_infer,
    .run = max_grad_run,
    .flags = DPM_OP_HIDDEN,
    .fusable = DPM_FUSE_RELU_GRAD,
};
const dpm_op_def DPM_OP_DEF(AVERAGE_POOL) = {
    .id = DPM_OP_AVERAGE_POOL,
    .name = "AveragePool",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = pool_args,
    .infer = avg_infer,
    .grad = avg_grad,
    .run = avg_run,
};
const dpm_op_def DPM_OP_DEF(AVERAGE_POOL_GRADIENT) = {
    .id = DPM_OP_AVERAGE_POOL_GRADIENT,
    .name = "AveragePoolGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = pool_args,
    .infer = avg_grad_infer,
    .run = avg_grad_run,
    .flags = DPM_OP_HIDDEN,
};
