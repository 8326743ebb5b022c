/* Conv: 2-D convolution of NCHW float32 with square kernels, and
 * ConvGradient: arguments, parameters, shape inference and the gradient
 * maker. X [N, C, H, W], W [M, C, k, k], b [M], Y [N, M, Ho, Wo] with
 * Ho = (H + 2 pad - k) / stride + 1 (and Wo alike). With no_bias the op
 * has no b at all (no parameter, no gradient, nothing in a checkpoint).
 * With group G (ResNeXt's grouped convolution; G divides C and dim_out),
 * W is [M, C/G, k, k] and output channels [i M/G, (i+1) M/G) see input
 * channels [i C/G, (i+1) C/G) only. A following in-place
 * Relu fuses into Conv. The kernels are each backend's (CPU:
 * backend/cpu/conv.c); ops/conv.h holds what both halves read. */
#include <limits.h>

#include "engine/op.h"
#include "ops/conv.h"
#include "ops/families.h"

#define CONV_INITS "xavier|msra|gaussian|uniform|constant"

/* The first four in the order of CONV_ARG_* (ops/conv.h); the init
 * arguments are read by the engine. */
static const dpm_arg_def conv_args[] = {
    {"dim_out", DPM_ARG_INT, NULL, NULL, 1, 1 << 20},
    {"kernel", DPM_ARG_INT, NULL, NULL, 1, 1 << 10},
    {"stride", DPM_ARG_INT, "1", NULL, 1, 1 << 10},
    {"pad", DPM_ARG_INT, "0", NULL, 0, 1 << 10},
    {"weight_init", DPM_ARG_STRING, "xavier", CONV_INITS, 0, 0},
    {"weight_std", DPM_ARG_FLOAT, "0.01", NULL, 0, 0},
    {"bias_init", DPM_ARG_STRING, "constant", CONV_INITS, 0, 0},
    {"bias_value", DPM_ARG_FLOAT, "0", NULL, 0, 0},
    {"no_bias", DPM_ARG_BOOL, "false", NULL, 0, 0},
    {"group", DPM_ARG_INT, "1", NULL, 1, 1 << 20},
    {NULL},
};

static const dpm_param_def conv_params[] = {
    {"_w", DPM_BLOB_PARAM, "xavier", "weight_init", 0.01, "weight_std", .is_weight = 1},
    {"_b", DPM_BLOB_PARAM, "constant", "bias_init", 0, "bias_value", .is_weight = 0,
     .omit_arg = "no_bias"},
    {NULL},
};

/* Checks the data input X and returns its geometry in *g. */
static dpm_status check_x(const dpm_node *nd, const dpm_shape *x, conv_geom *g,
                          dpm_err *err) {
  if (dpm_expect_float(x, "input", err) || dpm_expect_ndim(x, 4, 4, "input", err))
    return err->code;
  *g = conv_geom_of(nd, x);
  if (g->ct % g->grp || g->mt % g->grp)
    return dpm_errf(err, DPM_SHAPE,
                    "group %lld must divide the input channels (%lld) and dim_out (%lld)",
                    (long long)g->grp, (long long)g->ct, (long long)g->mt);
  if (g->k > g->h + 2 * g->p || g->k > g->w + 2 * g->p)
    return dpm_errf(
        err, DPM_SHAPE, "kernel %lld is larger than the padded input %lldx%lld",
        (long long)g->k, (long long)(g->h + 2 * g->p), (long long)(g->w + 2 * g->p));
  /* 128-bit: with checked input shapes each factor fits 64 bits, products may not */
  if ((__int128)(g->r + 1) * g->ll > INT_MAX || (__int128)g->m * g->ho * g->wo > INT_MAX)
    return dpm_errf(err, DPM_SHAPE, "convolution of an image is too large for BLAS");
  return DPM_OK;
}

/* Shapes of W, b and Y of type t: f32 for the params (the masters), X's
 * type for what the op reads and writes. */
static dpm_shape w_shape(const conv_geom *g, dpm_dtype t) {
  return dpm_shape_make(t, 4, (int64_t[]){g->mt, g->c, g->k, g->k});
}
static dpm_shape b_shape(const conv_geom *g, dpm_dtype t) {
  return dpm_shape_make(t, 1, (int64_t[]){g->mt});
}
static dpm_shape y_shape(const conv_geom *g, dpm_dtype t) {
  return dpm_shape_make(t, 4, (int64_t[]){g->n, g->mt, g->ho, g->wo});
}

/* Fails unless blob `what` has exactly the shape `want`. */
static dpm_status expect_shape(const dpm_shape *got, dpm_shape want, const char *what,
                               dpm_err *err) {
  if (dpm_shape_equal(got, &want)) return DPM_OK;
  char a[64], b[64];
  return dpm_errf(err, DPM_SHAPE, "%s must be %s, got %s", what,
                  dpm_shape_str(&want, a, sizeof a), dpm_shape_str(got, b, sizeof b));
}

static dpm_status conv_param_shapes(const dpm_node *nd, const dpm_shape *data_in,
                                    dpm_shape *param, dpm_err *err) {
  conv_geom g;
  if (check_x(nd, &data_in[0], &g, err)) return err->code;
  param[0] = w_shape(&g, DPM_F32);
  param[1] = b_shape(&g, DPM_F32); /* read only when there is a bias */
  return DPM_OK;
}

/* Conv(X, W, b) -> Y; Conv(X, W) -> Y with no_bias. */
static dpm_status conv_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  conv_geom g;
  dpm_dtype t = in[0].dtype;
  if (check_x(nd, &in[0], &g, err) ||
      expect_shape(&in[1], w_shape(&g, t), "weight", err) ||
      (conv_has_bias(nd) && expect_shape(&in[2], b_shape(&g, t), "bias", err)))
    return err->code;
  out[0] = y_shape(&g, t);
  return DPM_OK;
}

/* ConvGradient(X, W, dY) -> dW, db, dX; db is NULL with no_bias. */
static dpm_status conv_grad_infer(const dpm_node *nd, const dpm_shape *in, dpm_shape *out,
                                  dpm_err *err) {
  conv_geom g;
  dpm_dtype t = in[0].dtype;
  if (check_x(nd, &in[0], &g, err) ||
      expect_shape(&in[1], w_shape(&g, t), "weight", err) ||
      expect_shape(&in[2], y_shape(&g, t), "output gradient", err))
    return err->code;
  out[0] = w_shape(&g, t);
  out[1] = b_shape(&g, t);
  out[2] = in[0];
  return DPM_OK;
}

/* Unwanted gradients get NULL outputs; without dX (a first layer, whose
 * input needs none) the whole dL and unlower path is skipped. */
static dpm_status conv_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->fwd->in[1], g->gout[0]};
  const char *out[] = {g->gin[1], conv_has_bias(g->fwd) ? g->gin[2] : NULL, g->gin[0]};
  return dpm_grad_emit(g, DPM_OP_CONV_GRADIENT, 3, in, 3, out, err);
}

const dpm_op_def DPM_OP_DEF(CONV) = {
    .id = DPM_OP_CONV,
    .name = "Conv",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = conv_args,
    .params = conv_params,
    .param_shapes = conv_param_shapes,
    .infer = conv_infer,
    .grad = conv_grad,
    .fusable = DPM_FUSE_RELU,
};
const dpm_op_def DPM_OP_DEF(CONV_GRADIENT) = {
    .id = DPM_OP_CONV_GRADIENT,
    .name = "ConvGradient",
    .min_in = 3,
    .max_in = 3,
    .min_out = 3,
    .max_out = 3,
    .args = conv_args,
    .infer = conv_grad_infer,
    .flags = DPM_OP_HIDDEN,
};
