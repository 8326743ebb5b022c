/* SpatialBN: batch normalization per channel of NCHW (or [N, C]) float32,
 * and SpatialBNGradient.
 *
 * Train mode normalizes with the batch's mean and biased variance, saves
 * the mean and 1/sqrt(var + epsilon) as hidden outputs "_sm" and "_siv" for
 * the gradient, and updates the running statistics in place through their
 * input tensors:
 *   rm  = momentum * rm  + (1 - momentum) * mean
 *   riv = momentum * riv + (1 - momentum) * var * count / (count - 1)
 * where count = N*H*W: the running variance is the unbiased estimate (as in
 * Caffe and PyTorch); despite its Caffe2 name, riv holds a variance, not an
 * inverse. Test mode normalizes with rm and riv and leaves them alone. */
#include <math.h>

#include "engine/op.h"
#include "ops/families.h"

enum { A_EPSILON, A_MOMENTUM };

static const dpm_arg_def bn_args[] = {
    {"epsilon", DPM_ARG_FLOAT, "1e-5", NULL, 1e-12, 1e9},
    {"momentum", DPM_ARG_FLOAT, "0.9", NULL, 0, 1},
    {NULL},
};

/* Inputs after X, in this order: scale, bias, running mean, running var. */
static const dpm_param_def bn_params[] = {
    {"_s", DPM_BLOB_PARAM, "constant", NULL, 1, NULL},
    {"_b", DPM_BLOB_PARAM, "constant", NULL, 0, NULL},
    {"_rm", DPM_BLOB_COMPUTED, "constant", NULL, 0, NULL},
    {"_riv", DPM_BLOB_COMPUTED, "constant", NULL, 1, NULL},
    {NULL},
};

static const char *const bn_aux[] = {"_sm", "_siv", NULL};

/* X as [N, C, HW]. */
typedef struct bn_geom {
  int64_t n, c, hw;
} bn_geom;

static bn_geom geom_of(const dpm_shape *x) {
  return (bn_geom){x->d[0], x->d[1], dpm_shape_span(x, 2, x->ndim)};
}

static dpm_status check_x(const dpm_shape *x, dpm_err *err) {
  if (dpm_expect_dtype(x, DPM_F32, "input", err)) return err->code;
  if (x->ndim != 2 && x->ndim != 4) {
    char b[64];
    return dpm_errf(err, DPM_SHAPE, "input must be [N,C] or [N,C,H,W], got %s",
                    dpm_shape_str(x, b, sizeof b));
  }
  return DPM_OK;
}

static dpm_shape channels(const dpm_shape *x) {
  return dpm_shape_make(DPM_F32, 1, &x->d[1]);
}

static dpm_status bn_param_shapes(const dpm_node *nd, const dpm_shape *data_in,
                                  dpm_shape *param, dpm_err *err) {
  (void)nd;
  if (check_x(&data_in[0], err)) return err->code;
  for (int k = 0; k < 4; k++) param[k] = channels(&data_in[0]);
  return DPM_OK;
}

/* Inputs from..to-1 must each be [C]. */
static dpm_status expect_channels(const dpm_shape *in, int from, int to, dpm_err *err) {
  dpm_shape want = channels(&in[0]);
  for (int k = from; k < to; k++)
    if (!dpm_shape_equal(&in[k], &want)) {
      char a[64], b[64];
      return dpm_errf(err, DPM_SHAPE, "input %d must be %s, got %s", k,
                      dpm_shape_str(&want, a, sizeof a),
                      dpm_shape_str(&in[k], b, sizeof b));
    }
  return DPM_OK;
}

/* SpatialBN(X, s, b, rm, riv) -> Y, Y_sm, Y_siv */
static dpm_status bn_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  (void)nd;
  if (check_x(&in[0], err) || expect_channels(in, 1, 5, err)) return err->code;
  out[0] = in[0];
  out[1] = out[2] = channels(&in[0]);
  return DPM_OK;
}

/* SpatialBNGradient(X, s, Y_sm, Y_siv, dY) -> dX, ds, db */
static dpm_status bn_grad_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  (void)nd;
  if (check_x(&in[0], err) || expect_channels(in, 1, 4, err)) return err->code;
  if (!dpm_shape_equal(&in[4], &in[0]))
    return dpm_errf(err, DPM_SHAPE, "output gradient must have the input's shape");
  out[0] = in[0];
  out[1] = out[2] = channels(&in[0]);
  return DPM_OK;
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
  const double eps = op->node->arg[A_EPSILON].f, mom = op->node->arg[A_MOMENTUM].f;
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

/* Scale and bias get gradients; the running statistics never do. */
static dpm_status bn_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->fwd->in[1], g->fwd->out[1], g->fwd->out[2],
                      g->gout[0]};
  const char *out[] = {g->gin[0], g->gin[1], g->gin[2]};
  return dpm_grad_emit(g, DPM_OP_SPATIAL_BN_GRADIENT, 5, in, 3, out, err);
}

const dpm_op_def DPM_OP_DEF(SPATIAL_BN) = {
    .id = DPM_OP_SPATIAL_BN,
    .name = "SpatialBN",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = bn_args,
    .params = bn_params,
    .aux = bn_aux,
    .param_shapes = bn_param_shapes,
    .infer = bn_infer,
    .grad = bn_grad,
    .run = bn_run,
    .flags = DPM_OP_UPDATES_COMPUTED,
};
const dpm_op_def DPM_OP_DEF(SPATIAL_BN_GRADIENT) = {
    .id = DPM_OP_SPATIAL_BN_GRADIENT,
    .name = "SpatialBNGradient",
    .min_in = 5,
    .max_in = 5,
    .min_out = 3,
    .max_out = 3,
    .args = bn_args,
    .infer = bn_grad_infer,
    .run = bn_grad_run,
    .flags = DPM_OP_HIDDEN,
};
