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
 * inverse. Test mode normalizes with rm and riv and leaves them alone.
 *
 * Combined statistics (parallel.combine_spatial_bn, parallel/sync_bn.c):
 * the hidden SpatialBNStats(X, rm) -> S writes one replica's per-channel
 * sums shifted by the running mean, S = [sum(x - rm) (C), sum((x - rm)^2)
 * (C), count (1)], which an Allreduce (dtype f64) sums over the replicas;
 * SpatialBN then takes S as a sixth input and, in train mode, uses the global
 * mean = rm + S1/count and var = S2/count - (S1/count)^2 (count the
 * global one) in place of its batch's. Likewise SpatialBNGradientStats(X,
 * Y_sm, dY) -> G = [sum(dy) (C), sum(dy * (x - mean)) (C), count (1)],
 * summed by an Allreduce (dtype f64) and taken by SpatialBNGradient as a
 * sixth input: dX uses the global sums, while ds and db stay this
 * replica's (the gradient all-reduce sums them as any parameter's). The
 * running mean is the same on every replica, so the shift is common to all
 * of them. S and G are 2C+1 doubles each, computed, summed and read in
 * double: the engine has no f64 tensors, so their blobs are f32[2(2C+1)]
 * whose bytes hold the doubles (a float sum of the replicas' statistics
 * rounds, which behind MaxPool can flip a near tie of the max).
 *
 * Here: arguments, parameters, shape inference and the gradient maker; the
 * kernels are each backend's (CPU: backend/cpu/norm.c). */
#include "ops/norm.h"
#include "engine/op.h"
#include "ops/families.h"

/* In the order of BN_ARG_* (ops/norm.h). */
static const dpm_arg_def bn_args[] = {
    {"epsilon", DPM_ARG_FLOAT, "1e-5", NULL, 1e-12, 1e9},
    {"momentum", DPM_ARG_FLOAT, "0.9", NULL, 0, 1},
    {NULL},
};

/* Inputs after X, in this order: scale, bias, running mean, running var.
 * Scale and shift are not weights: weight_decay leaves them alone unless
 * weight_decay_bias (the usual practice for normalisation parameters). */
static const dpm_param_def bn_params[] = {
    {"_s", DPM_BLOB_PARAM, "constant", NULL, 1, NULL, .is_weight = 0},
    {"_b", DPM_BLOB_PARAM, "constant", NULL, 0, NULL, .is_weight = 0},
    {"_rm", DPM_BLOB_COMPUTED, "constant", NULL, 0, NULL, .is_weight = 0},
    {"_riv", DPM_BLOB_COMPUTED, "constant", NULL, 1, NULL, .is_weight = 0},
    {NULL},
};

static const char *const bn_aux[] = {"_sm", "_siv", NULL};

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
  /* a 16-bit input is cast to f32 before the op runs (engine/precision.h);
     the params are f32 either way */
  dpm_shape x = data_in[0];
  if (dpm_dtype_is_low(x.dtype)) x.dtype = DPM_F32;
  if (check_x(&x, err)) return err->code;
  for (int k = 0; k < 4; k++) param[k] = channels(&x);
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

/* The per-channel sums of SpatialBNStats and SpatialBNGradientStats: 2C+1
 * doubles, held as f32[2(2C+1)] (the engine has no f64 tensors). */
static dpm_shape sums(const dpm_shape *x) {
  int64_t n = 2 * (2 * x->d[1] + 1);
  return dpm_shape_make(DPM_F32, 1, &n);
}

/* The combined sums of input k, when the node has one. */
static dpm_status expect_sums(const dpm_node *nd, const dpm_shape *in, int k,
                              dpm_err *err) {
  dpm_shape want = sums(&in[0]);
  if (nd->n_in <= k || dpm_shape_equal(&in[k], &want)) return DPM_OK;
  char a[64], b[64];
  return dpm_errf(err, DPM_SHAPE, "input %d (combined sums) must be %s, got %s", k,
                  dpm_shape_str(&want, a, sizeof a), dpm_shape_str(&in[k], b, sizeof b));
}

/* SpatialBN(X, s, b, rm, riv[, S]) -> Y, Y_sm, Y_siv */
static dpm_status bn_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  if (check_x(&in[0], err) || expect_channels(in, 1, 5, err) ||
      expect_sums(nd, in, 5, err))
    return err->code;
  out[0] = in[0];
  out[1] = out[2] = channels(&in[0]);
  return DPM_OK;
}

/* SpatialBNGradient(X, s, Y_sm, Y_siv, dY[, G]) -> dX, ds, db */
static dpm_status bn_grad_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  if (check_x(&in[0], err) || expect_channels(in, 1, 4, err) ||
      expect_sums(nd, in, 5, err))
    return err->code;
  if (!dpm_shape_equal(&in[4], &in[0]))
    return dpm_errf(err, DPM_SHAPE, "output gradient must have the input's shape");
  out[0] = in[0];
  out[1] = out[2] = channels(&in[0]);
  return DPM_OK;
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
    .flags = DPM_OP_HIDDEN,
};

/* SpatialBNStats(X, rm) -> S */
static dpm_status bn_stats_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  (void)nd;
  if (check_x(&in[0], err) || expect_channels(in, 1, 2, err)) return err->code;
  out[0] = sums(&in[0]);
  return DPM_OK;
}

/* SpatialBNGradientStats(X, Y_sm, dY) -> G */
static dpm_status bn_grad_stats_infer(const dpm_node *nd, const dpm_shape *in,
                                      dpm_shape *out, dpm_err *err) {
  (void)nd;
  if (check_x(&in[0], err) || expect_channels(in, 1, 2, err)) return err->code;
  if (!dpm_shape_equal(&in[2], &in[0]))
    return dpm_errf(err, DPM_SHAPE, "output gradient must have the input's shape");
  out[0] = sums(&in[0]);
  return DPM_OK;
}

const dpm_op_def DPM_OP_DEF(SPATIAL_BN_STATS) = {
    .id = DPM_OP_SPATIAL_BN_STATS,
    .name = "SpatialBNStats",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = bn_args,
    .infer = bn_stats_infer,
    .flags = DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(SPATIAL_BN_GRADIENT_STATS) = {
    .id = DPM_OP_SPATIAL_BN_GRADIENT_STATS,
    .name = "SpatialBNGradientStats",
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 1,
    .args = bn_args,
    .infer = bn_grad_stats_infer,
    .flags = DPM_OP_HIDDEN,
};
