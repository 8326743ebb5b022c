/* The CPU kernels of SpatialBN and SpatialBNGradient (ops/norm.c: batch
 * normalization per channel, the running statistics and the hidden outputs
 * are described there). Each channel's sums run in float along a row of
 * H*W values, which vectorises, and are gathered in double across rows. */
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

static void bn_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *s = dpm_f32(op->in[1]), *b = dpm_f32(op->in[2]);
  float *rm = dpm_f32(op->in[3]), *rv = dpm_f32(op->in[4]);
  float *y = dpm_f32(op->out[0]), *sm = dpm_f32(op->out[1]), *siv = dpm_f32(op->out[2]);
  const double eps = op->node->arg[BN_ARG_EPSILON].f,
               mom = op->node->arg[BN_ARG_MOMENTUM].f;
  const int64_t cnt = g.n * g.hw;
  for (int64_t c = 0; c < g.c; c++) {
    double mean = rm[c], var = rv[c];
    if (!op->node->is_test) {
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

/* With xh = (x - mean) * siv, db = sum(dy) and ds = sum(dy * xh):
 *   train: dx = s * siv * (dy - db / count - xh * ds / count)
 *   test:  dx = s * siv * dy   (the statistics are constants)
 * Either way dx = dy * a + x * e + f per channel. */
static void bn_grad_run(const dpm_op *op) {
  bn_geom g = geom_of(&op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *s = dpm_f32(op->in[1]);
  const float *sm = dpm_f32(op->in[2]), *siv = dpm_f32(op->in[3]),
              *dy = dpm_f32(op->in[4]);
  float *dx = op->out[0] ? dpm_f32(op->out[0]) : NULL;
  float *ds = op->out[1] ? dpm_f32(op->out[1]) : NULL;
  float *db = op->out[2] ? dpm_f32(op->out[2]) : NULL;
  const double cnt = (double)(g.n * g.hw);
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
    const double k = (double)s[c] * siv[c];
    const double e = op->node->is_test ? 0 : -k * siv[c] * dsc / cnt;
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
