/* The CPU kernels of SpatialBN, SpatialBNGradient and of the combined
 * statistics' SpatialBNStats and SpatialBNGradientStats (ops/norm.c: batch
 * normalization per channel, the running statistics, the hidden outputs
 * and the combined sums are described there). Each channel's sums run in
 * float along a row of H*W values, which vectorises, and are gathered in
 * double across rows; the combined sums stay double, in their blob's
 * bytes (ops/norm.c), through the Allreduce that sums them as doubles. */
#include <math.h>

#include "backend/cpu/kernels.h"
#include "ops/norm.h"

/* X as [N, C, HW]. */
typedef struct bn_geom {
  int64_t n, c, hw;
} bn_geom;

static bn_geom geom_of(const dpm_shape *x) {
  return (bn_geom){x->d[0], x->d[1], dpm_shape_span(x, 2, x->ndim)};
}

/* Mean and biased variance of channel c, in double. Sums are shifted by
 * the channel's first value, which keeps sum((x-k)^2) - sum(x-k)^2/count
 * accurate when the mean is large against the spread. */
static void moments(const bn_geom *g, const float *x, int64_t c, double *mean,
                    double *var) {
  const float k = x[c * g->hw];
  double s1 = 0, s2 = 0;
  for (int64_t n = 0; n < g->n; n++) {
    const float *row = x + (n * g->c + c) * g->hw;
    float a = 0.f, b = 0.f; /* per row in float: vectorizes */
    for (int64_t i = 0; i < g->hw; i++) {
      float d = row[i] - k;
      a += d;
      b += d * d;
    }
    s1 += a;
    s2 += b;
  }
  double cnt = (double)(g->n * g->hw), m = s1 / cnt;
  *mean = k + m;
  *var = fmax(s2 / cnt - m * m, 0.0);
}

/* Sums of channel c shifted by k, in double: sum(x - k), sum((x - k)^2). */
static void shifted_sums(const bn_geom *g, const float *x, int64_t c, float k, double *s1,
                         double *s2) {
  *s1 = *s2 = 0;
  for (int64_t n = 0; n < g->n; n++) {
    const float *row = x + (n * g->c + c) * g->hw;
    float a = 0.f, b = 0.f;
    for (int64_t i = 0; i < g->hw; i++) {
      float d = row[i] - k;
      a += d;
      b += d * d;
    }
    *s1 += a;
    *s2 += b;
  }
}

/* SpatialBNStats(X, rm) -> [sum(x - rm), sum((x - rm)^2), count] */
static void bn_stats_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *rm = dpm_f32(op->in[1]);
  double *out = op->out[0]->data; /* 2C+1 doubles (ops/norm.c) */
  for (int64_t c = 0; c < g.c; c++) {
    double s1, s2;
    shifted_sums(&g, x, c, rm[c], &s1, &s2);
    out[c] = s1;
    out[g.c + c] = s2;
  }
  out[2 * g.c] = (double)(g.n * g.hw);
}

/* Mean and biased variance of channel c from the combined sums S (shifted
 * by rm[c]); *cnt is the global count. */
static void combined_moments(const double *sums, int64_t nc, int64_t c, float rm,
                             double *mean, double *var, double *cnt) {
  *cnt = sums[2 * nc];
  double m = sums[c] / *cnt;
  *mean = rm + m;
  *var = fmax(sums[nc + c] / *cnt - m * m, 0.0);
}

static void bn_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *s = dpm_f32(op->in[1]), *b = dpm_f32(op->in[2]);
  float *rm = dpm_f32(op->in[3]), *rv = dpm_f32(op->in[4]);
  float *y = dpm_f32(op->out[0]), *sm = dpm_f32(op->out[1]), *siv = dpm_f32(op->out[2]);
  const double eps = op->node->arg[BN_ARG_EPSILON].f,
               mom = op->node->arg[BN_ARG_MOMENTUM].f;
  const double *sums = op->n_in > 5 ? op->in[5]->data : NULL;
  for (int64_t c = 0; c < g.c; c++) {
    double mean = rm[c], var = rv[c], cnt = (double)(g.n * g.hw);
    if (!op->node->is_test) {
      if (sums)
        combined_moments(sums, g.c, c, rm[c], &mean, &var, &cnt);
      else
        moments(&g, x, c, &mean, &var);
      rm[c] = (float)(mom * rm[c] + (1 - mom) * mean);
      rv[c] =
          (float)(mom * rv[c] + (1 - mom) * var * (cnt > 1 ? cnt / (cnt - 1.0) : 1.0));
    }
    sm[c] = (float)mean;
    siv[c] = (float)(1 / sqrt(var + eps));
    /* y = x * a + d */
    const float a = s[c] * siv[c], d = b[c] - sm[c] * a;
    for (int64_t n = 0; n < g.n; n++) {
      const float *xr = x + (n * g.c + c) * g.hw;
      float *yr = y + (n * g.c + c) * g.hw;
      for (int64_t i = 0; i < g.hw; i++) yr[i] = xr[i] * a + d;
    }
  }
}

/* SpatialBNGradientStats(X, Y_sm, dY) -> [sum(dy), sum(dy * (x - mean)),
 * count] */
static void bn_grad_stats_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *sm = dpm_f32(op->in[1]), *dy = dpm_f32(op->in[2]);
  double *out = op->out[0]->data; /* 2C+1 doubles (ops/norm.c) */
  for (int64_t c = 0; c < g.c; c++) {
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < g.n; n++) {
      const float *xr = x + (n * g.c + c) * g.hw, *dyr = dy + (n * g.c + c) * g.hw;
      float a = 0.f, b = 0.f;
      for (int64_t i = 0; i < g.hw; i++) {
        a += dyr[i];
        b += dyr[i] * (xr[i] - sm[c]);
      }
      sdy += a;
      sdyx += b;
    }
    out[c] = sdy;
    out[g.c + c] = sdyx;
  }
  out[2 * g.c] = (double)(g.n * g.hw);
}

/* With xh = (x - mean) * siv, db = sum(dy) and ds = sum(dy * xh):
 *   train: dx = s * siv * (dy - db / count - xh * ds / count)
 *   test:  dx = s * siv * dy   (the statistics are constants)
 * Either way dx = dy * a + x * e + f per channel. With the combined sums G
 * (input 5), dx's sums and count are G's (the global batch's) while ds and
 * db stay this batch's. */
static void bn_grad_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *s = dpm_f32(op->in[1]);
  const float *sm = dpm_f32(op->in[2]), *siv = dpm_f32(op->in[3]),
              *dy = dpm_f32(op->in[4]);
  float *dx = op->out[0] ? dpm_f32(op->out[0]) : NULL;
  float *ds = op->out[1] ? dpm_f32(op->out[1]) : NULL;
  float *db = op->out[2] ? dpm_f32(op->out[2]) : NULL;
  const double *gsum = op->n_in > 5 ? op->in[5]->data : NULL;
  const double cnt = gsum ? gsum[2 * g.c] : (double)(g.n * g.hw);
  for (int64_t c = 0; c < g.c; c++) {
    const float mu = sm[c];
    double sdy = 0, sdyx = 0; /* sum(dy), sum(dy * (x - mean)) */
    for (int64_t n = 0; n < g.n; n++) {
      const float *xr = x + (n * g.c + c) * g.hw, *dyr = dy + (n * g.c + c) * g.hw;
      float a = 0.f, b = 0.f;
      for (int64_t i = 0; i < g.hw; i++) {
        a += dyr[i];
        b += dyr[i] * (xr[i] - mu);
      }
      sdy += a;
      sdyx += b;
    }
    const double dsc = sdyx * siv[c];
    if (ds) ds[c] = (float)dsc;
    if (db) db[c] = (float)sdy;
    if (!dx) continue;
    if (gsum) sdy = gsum[c], sdyx = gsum[g.c + c];
    const double k = (double)s[c] * siv[c];
    const double e = op->node->is_test ? 0 : -k * siv[c] * (sdyx * siv[c]) / cnt;
    const float a = (float)k, ef = (float)e,
                f = (float)(op->node->is_test ? 0 : -k * sdy / cnt - e * mu);
    for (int64_t n = 0; n < g.n; n++) {
      const float *xr = x + (n * g.c + c) * g.hw, *dyr = dy + (n * g.c + c) * g.hw;
      float *dxr = dx + (n * g.c + c) * g.hw;
      for (int64_t i = 0; i < g.hw; i++) dxr[i] = dyr[i] * a + xr[i] * ef + f;
    }
  }
}

const dpm_kernel_def DPM_CPU_KERNEL(SPATIAL_BN) = {.run = bn_run};
const dpm_kernel_def DPM_CPU_KERNEL(SPATIAL_BN_GRADIENT) = {.run = bn_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(SPATIAL_BN_STATS) = {.run = bn_stats_run};
const dpm_kernel_def DPM_CPU_KERNEL(SPATIAL_BN_GRADIENT_STATS) = {.run = bn_grad_stats_run};
