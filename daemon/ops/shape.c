/* Shape ops: Flatten, Reshape, Concat and their gradients. Flatten and
 * Reshape copy the data under a new shape; Concat joins inputs along one
 * axis. Here: arguments, shape inference and the gradient makers; the
 * kernels are each backend's (CPU: backend/cpu/shape.c). */
#include "engine/op.h"
#include "ops/families.h"

/* <Op>Gradient(dY, X) -> dX: dY reshaped back to X's shape. X is read for its
 * shape only. */
static dpm_status infer_reshape_back(const dpm_node *n, const dpm_shape *in,
                                     dpm_shape *out, dpm_err *err) {
  (void)n;
  char a[64], b[64];
  if (dpm_shape_numel(&in[0]) != dpm_shape_numel(&in[1]))
    return dpm_errf(err, DPM_SHAPE, "gradient %s does not fit input %s",
                    dpm_shape_str(&in[0], a, sizeof a),
                    dpm_shape_str(&in[1], b, sizeof b));
  out[0] = in[1];
  out[0].dtype = in[0].dtype;
  return DPM_OK;
}

static dpm_status reshape_back_grad(dpm_grad *g, dpm_op_id op, dpm_err *err) {
  const char *in[] = {g->gout[0], g->fwd->in[0]};
  return dpm_grad_emit(g, op, 2, in, 1, &g->gin[0], err);
}

/* ---- Flatten --------------------------------------------------------------- */

static const dpm_arg_def flatten_args[] = {
    {"axis", DPM_ARG_INT, "1", NULL, 0, DPM_MAX_DIMS},
    {NULL},
};

/* [d0 .. d(axis-1), d(axis) ..] -> [prod of the first, prod of the rest]. */
static dpm_status flatten_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  int axis = (int)n->arg[0].i;
  char b[64];
  if (axis > in[0].ndim)
    return dpm_errf(err, DPM_SHAPE, "axis %d is beyond the %d dimensions of input %s",
                    axis, in[0].ndim, dpm_shape_str(&in[0], b, sizeof b));
  int64_t d[2] = {dpm_shape_span(&in[0], 0, axis),
                  dpm_shape_span(&in[0], axis, in[0].ndim)};
  out[0] = dpm_shape_make(in[0].dtype, 2, d);
  return DPM_OK;
}

static dpm_status flatten_grad(dpm_grad *g, dpm_err *err) {
  return reshape_back_grad(g, DPM_OP_FLATTEN_GRADIENT, err);
}

/* ---- Reshape --------------------------------------------------------------- */

static const dpm_arg_def reshape_args[] = {
    {"shape", DPM_ARG_INTS, NULL, NULL, -1, INT32_MAX},
    {NULL},
};

/* Caffe2 semantics: 0 keeps the input's dimension at that index, one -1 is
 * inferred from the element count, which must match. */
static dpm_status reshape_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  const dpm_arg *s = &n->arg[0];
  char b[64];
  if (s->n > DPM_MAX_DIMS)
    return dpm_errf(err, DPM_SHAPE, "shape has %d dimensions, at most %d allowed", s->n,
                    DPM_MAX_DIMS);
  int64_t d[DPM_MAX_DIMS], known = 1;
  int infer_at = -1;
  for (int k = 0; k < s->n; k++) {
    d[k] = s->v[k];
    if (d[k] == 0) {
      if (k >= in[0].ndim)
        return dpm_errf(err, DPM_SHAPE, "shape[%d] = 0 but input %s has no dimension %d",
                        k, dpm_shape_str(&in[0], b, sizeof b), k);
      d[k] = in[0].d[k];
    }
    if (d[k] == -1) {
      if (infer_at >= 0) return dpm_errf(err, DPM_SHAPE, "shape has more than one -1");
      infer_at = k;
    } else if (__builtin_mul_overflow(known, d[k], &known)) {
      known = -1; /* fits nothing */
    }
  }
  int64_t numel = dpm_shape_numel(&in[0]);
  if (infer_at >= 0 && known > 0 && numel % known == 0)
    d[infer_at] = numel / known;
  else if (infer_at >= 0 || known != numel)
    return dpm_errf(err, DPM_SHAPE, "shape does not fit the %lld elements of input %s",
                    (long long)numel, dpm_shape_str(&in[0], b, sizeof b));
  out[0] = dpm_shape_make(in[0].dtype, s->n, d);
  return DPM_OK;
}

static dpm_status reshape_grad(dpm_grad *g, dpm_err *err) {
  return reshape_back_grad(g, DPM_OP_RESHAPE_GRADIENT, err);
}

/* ---- Concat ---------------------------------------------------------------- */

static const dpm_arg_def concat_args[] = {
    {"axis", DPM_ARG_INT, "1", NULL, 0, DPM_MAX_DIMS - 1},
    {NULL},
};

/* Inputs agree on every dimension but `axis`; the output sums that one. */
static dpm_status concat_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                               dpm_err *err) {
  int axis = (int)n->arg[0].i;
  char a[64], b[64];
  if (dpm_expect_float(&in[0], "input 0", err)) return err->code;
  if (axis >= in[0].ndim)
    return dpm_errf(err, DPM_SHAPE, "axis %d is beyond the %d dimensions of input 0 %s",
                    axis, in[0].ndim, dpm_shape_str(&in[0], a, sizeof a));
  out[0] = in[0];
  for (int k = 1; k < n->n_in; k++) {
    dpm_shape s = in[k];
    if (s.dtype != in[0].dtype)
      return dpm_errf(err, DPM_SHAPE, "every input must be %s like input 0, got %s",
                      dpm_dtype_name(in[0].dtype), dpm_dtype_name(s.dtype));
    s.d[axis] = in[0].d[axis];
    if (!dpm_shape_equal(&s, &in[0]))
      return dpm_errf(err, DPM_SHAPE, "input %d %s does not match input 0 %s off axis %d",
                      k, dpm_shape_str(&in[k], a, sizeof a),
                      dpm_shape_str(&in[0], b, sizeof b), axis);
    out[0].d[axis] += in[k].d[axis];
  }
  return DPM_OK;
}

/* ConcatGradient(dY, X0 .. X(n-2)) -> dX0 .. dX(n-1). The last part's size
 * along the axis is what the others leave of dY, so its X is not needed
 * (which also keeps 16 parts within DPM_OP_MAX_IO inputs). */
static dpm_status concat_grad_infer(const dpm_node *n, const dpm_shape *in,
                                    dpm_shape *out, dpm_err *err) {
  int axis = (int)n->arg[0].i;
  char a[64];
  if (n->n_in != n->n_out || axis >= in[0].ndim)
    return dpm_errf(err, DPM_SHAPE, "gradient %s does not fit %d parts along axis %d",
                    dpm_shape_str(&in[0], a, sizeof a), n->n_out, axis);
  dpm_shape *last = &out[n->n_out - 1];
  *last = in[0];
  for (int k = 0; k + 1 < n->n_out; k++) {
    out[k] = in[k + 1];
    last->d[axis] -= in[k + 1].d[axis];
  }
  if (last->d[axis] < 0)
    return dpm_errf(err, DPM_SHAPE, "gradient %s is smaller than the parts along axis %d",
                    dpm_shape_str(&in[0], a, sizeof a), axis);
  return DPM_OK;
}

static dpm_status concat_grad(dpm_grad *g, dpm_err *err) {
  const dpm_node *f = g->fwd;
  const char *in[DPM_OP_MAX_IO] = {g->gout[0]};
  for (int k = 0; k + 1 < f->n_in; k++) in[k + 1] = f->in[k];
  return dpm_grad_emit(g, DPM_OP_CONCAT_GRADIENT, f->n_in, in, f->n_in, g->gin, err);
}

/* ---- defs ------------------------------------------------------------------ */

const dpm_op_def DPM_OP_DEF(FLATTEN) = {
    .id = DPM_OP_FLATTEN,
    .name = "Flatten",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = flatten_args,
    .infer = flatten_infer,
    .grad = flatten_grad,
};
const dpm_op_def DPM_OP_DEF(FLATTEN_GRADIENT) = {
    .id = DPM_OP_FLATTEN_GRADIENT,
    .name = "FlattenGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = flatten_args,
    .infer = infer_reshape_back,
    .flags = DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(RESHAPE) = {
    .id = DPM_OP_RESHAPE,
    .name = "Reshape",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = reshape_args,
    .infer = reshape_infer,
    .grad = reshape_grad,
};
const dpm_op_def DPM_OP_DEF(RESHAPE_GRADIENT) = {
    .id = DPM_OP_RESHAPE_GRADIENT,
    .name = "ReshapeGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = reshape_args,
    .infer = infer_reshape_back,
    .flags = DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(CONCAT) = {
    .id = DPM_OP_CONCAT,
    .name = "Concat",
    .min_in = 1,
    .max_in = DPM_OP_MAX_IO,
    .min_out = 1,
    .max_out = 1,
    .args = concat_args,
    .infer = concat_infer,
    .grad = concat_grad,
};
const dpm_op_def DPM_OP_DEF(CONCAT_GRADIENT) = {
    .id = DPM_OP_CONCAT_GRADIENT,
    .name = "ConcatGradient",
    .min_in = 1,
    .max_in = DPM_OP_MAX_IO,
    .min_out = 1,
    .max_out = DPM_OP_MAX_IO,
    .args = concat_args,
    .infer = concat_grad_infer,
    .flags = DPM_OP_HIDDEN,
};
