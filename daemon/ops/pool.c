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
 * by X > 0. AveragePool with global_pooling averages each whole H x W plane
 * into [N, C, 1, 1] (kernel, stride and pad refused with it).
 *
 * Here: arguments, shape inference and the gradient makers; the kernels are
 * each backend's (CPU: backend/cpu/pool.c). */
#include "ops/pool.h"
#include "engine/op.h"
#include "ops/families.h"

/* In the order of POOL_ARG_* (ops/pool.h). */
static const dpm_arg_def pool_args[] = {
    {"kernel", DPM_ARG_INT, NULL, NULL, 1, 1 << 10},
    {"stride", DPM_ARG_INT, "1", NULL, 1, 1 << 10},
    {"pad", DPM_ARG_INT, "0", NULL, 0, 1 << 10},
    {NULL},
};

/* AveragePool's: kernel becomes optional (0: not given), since
 * global_pooling takes the whole plane and refuses a kernel. */
static const dpm_arg_def avg_args[] = {
    {"kernel", DPM_ARG_INT, "0", NULL, 0, 1 << 10},
    {"stride", DPM_ARG_INT, "1", NULL, 1, 1 << 10},
    {"pad", DPM_ARG_INT, "0", NULL, 0, 1 << 10},
    {"global_pooling", DPM_ARG_BOOL, "false", NULL, 0, 0},
    {NULL},
};

static const char *const max_aux[] = {"_idx", NULL};

/* Checks X and returns the output shape (N, C, Ho, Wo) in *y. */
static dpm_status check_x(const dpm_node *nd, const dpm_shape *x, dpm_shape *y,
                          dpm_err *err) {
  if (dpm_expect_float(x, "input", err) || dpm_expect_ndim(x, 4, 4, "input", err))
    return err->code;
  pool_geom g = pool_geom_of(nd, x);
  if (g.global && (nd->arg[POOL_ARG_KERNEL].i || nd->arg[POOL_ARG_STRIDE].i != 1 ||
                   nd->arg[POOL_ARG_PAD].i))
    return dpm_errf(err, DPM_SPEC,
                    "kernel, stride and pad do not apply with global_pooling");
  if (!g.global && nd->arg[POOL_ARG_KERNEL].i < 1)
    return dpm_errf(err, DPM_SPEC,
                    "missing required argument 'kernel' (or global_pooling: true)");
  if (g.p >= g.k && !g.global)
    return dpm_errf(err, DPM_SHAPE, "pad %lld must be smaller than kernel %lld",
                    (long long)g.p, (long long)g.k);
  if (!g.global && (g.k > g.h + 2 * g.p || g.k > g.w + 2 * g.p))
    return dpm_errf(
        err, DPM_SHAPE, "kernel %lld is larger than the padded input %lldx%lld",
        (long long)g.k, (long long)(g.h + 2 * g.p), (long long)(g.w + 2 * g.p));
  if (g.h * g.w > INT32_MAX)
    return dpm_errf(err, DPM_SHAPE,
                    "input planes are too large for int32 argmax indices");
  *y = dpm_shape_make(x->dtype, 4, (int64_t[]){x->d[0], x->d[1], g.ho, g.wo});
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
    .args = avg_args,
    .infer = avg_infer,
    .grad = avg_grad,
};
const dpm_op_def DPM_OP_DEF(AVERAGE_POOL_GRADIENT) = {
    .id = DPM_OP_AVERAGE_POOL_GRADIENT,
    .name = "AveragePoolGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = avg_args,
    .infer = avg_grad_infer,
    .flags = DPM_OP_HIDDEN,
};
