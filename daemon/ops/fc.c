/* FC: the fully connected layer Y = X W^T + b (Caffe2 layout), and its
 * gradient: arguments, parameters, shape inference and the gradient maker.
 * X [N, ...] is read as [N, K] (flattened at axis 1), W is [M, K], b is
 * [M], Y is [N, M]. A following in-place Relu fuses into FC. The kernels
 * are each backend's (CPU: backend/cpu/fc.c). */
#include "engine/op.h"
#include "ops/families.h"

#define FC_INITS "xavier|msra|gaussian|uniform|constant"

/* arg[0] is dim_out; the others are read by the engine's param fills. */
static const dpm_arg_def fc_args[] = {
    {"dim_out", DPM_ARG_INT, NULL, NULL, 1, INT32_MAX},
    {"weight_init", DPM_ARG_STRING, "xavier", FC_INITS, 0, 0},
    {"weight_std", DPM_ARG_FLOAT, "0.01", NULL, 0, 0},
    {"bias_init", DPM_ARG_STRING, "constant", FC_INITS, 0, 0},
    {"bias_value", DPM_ARG_FLOAT, "0", NULL, 0, 0},
    {NULL},
};

static const dpm_param_def fc_params[] = {
    {"_w", DPM_BLOB_PARAM, "xavier", "weight_init", 0.01, "weight_std", .is_weight = 1},
    {"_b", DPM_BLOB_PARAM, "constant", "bias_init", 0, "bias_value", .is_weight = 0},
    {NULL},
};

/* X must be floating (f32, or bf16/f16 in a low-precision model) with 2 to
 * 4 dimensions. */
static dpm_status check_x(const dpm_shape *x, dpm_err *err) {
  if (dpm_expect_float(x, "input", err)) return err->code;
  return dpm_expect_ndim(x, 2, DPM_MAX_DIMS, "input", err);
}

static dpm_status fc_param_shapes(const dpm_node *n, const dpm_shape *data_in,
                                  dpm_shape *param, dpm_err *err) {
  if (check_x(&data_in[0], err)) return err->code;
  int64_t m = n->arg[0].i, k = dpm_shape_span(&data_in[0], 1, data_in[0].ndim);
  param[0] = dpm_shape_make(DPM_F32, 2, (int64_t[]){m, k});
  param[1] = dpm_shape_make(DPM_F32, 1, &m);
  return DPM_OK;
}

/* Y's shape from X's and W's; W must be what fc_param_shapes gives for X,
 * in X's type (the params are f32 masters; a low-precision model reads
 * their working copies), and Y is of X's type. */
static dpm_status infer_y(const dpm_node *n, const dpm_shape *x, const dpm_shape *w,
                          dpm_shape *y, dpm_err *err) {
  dpm_shape want[2];
  char a[64], b[64], c[64];
  if (fc_param_shapes(n, x, want, err)) return err->code;
  want[0].dtype = x->dtype;
  if (!dpm_shape_equal(w, &want[0]))
    return dpm_errf(err, DPM_SHAPE, "weight is %s, expected %s for input %s",
                    dpm_shape_str(w, a, sizeof a), dpm_shape_str(&want[0], b, sizeof b),
                    dpm_shape_str(x, c, sizeof c));
  *y = dpm_shape_make(x->dtype, 2, (int64_t[]){x->d[0], w->d[0]});
  return DPM_OK;
}

/* FC(X, W, b) -> Y. */
static dpm_status fc_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  char a[64];
  if (infer_y(n, &in[0], &in[1], &out[0], err)) return err->code;
  if (in[2].dtype != in[0].dtype || in[2].ndim != 1 || in[2].d[0] != in[1].d[0])
    return dpm_errf(err, DPM_SHAPE, "bias is %s, expected %s[%lld]",
                    dpm_shape_str(&in[2], a, sizeof a), dpm_dtype_name(in[0].dtype),
                    (long long)in[1].d[0]);
  return DPM_OK;
}

/* FCGradient(X, W, dY) -> dW, db, dX; each output may be absent (NULL). */
static dpm_status fc_grad_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  dpm_shape y;
  char a[64], b[64];
  if (infer_y(n, &in[0], &in[1], &y, err)) return err->code;
  if (!dpm_shape_equal(&in[2], &y))
    return dpm_errf(err, DPM_SHAPE, "output gradient is %s, expected %s",
                    dpm_shape_str(&in[2], a, sizeof a), dpm_shape_str(&y, b, sizeof b));
  out[0] = in[1];
  out[1] = dpm_shape_make(in[1].dtype, 1, in[1].d);
  out[2] = in[0];
  if (n->fuse & DPM_FUSE_GRAD_F32) out[0].dtype = out[1].dtype = DPM_F32;
  return DPM_OK;
}

static dpm_status fc_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->fwd->in[1], g->gout[0]};
  const char *out[] = {g->gin[1], g->gin[2], g->gin[0]};
  return dpm_grad_emit(g, DPM_OP_FC_GRADIENT, 3, in, 3, out, err);
}

const dpm_op_def DPM_OP_DEF(FC) = {
    .id = DPM_OP_FC,
    .name = "FC",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = fc_args,
    .params = fc_params,
    .param_shapes = fc_param_shapes,
    .infer = fc_infer,
    .grad = fc_grad,
    .fusable = DPM_FUSE_RELU,
};
const dpm_op_def DPM_OP_DEF(FC_GRADIENT) = {
    .id = DPM_OP_FC_GRADIENT,
    .name = "FCGradient",
    .min_in = 3,
    .max_in = 3,
    .min_out = 3,
    .max_out = 3,
    .args = fc_args,
    .infer = fc_grad_infer,
    .flags = DPM_OP_HIDDEN,
    .fusable = DPM_FUSE_GRAD_F32,
};
