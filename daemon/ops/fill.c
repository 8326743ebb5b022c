/* Fill ops: ConstantFill, XavierFill, MSRAFill, GaussianFill, UniformFill.
 *
 * No inputs; one output of the shape given by the `shape` argument (empty: a
 * scalar). The engine emits them into the init net to create params; specs
 * may use them too. Each random fill draws from its own stream seeded by its
 * `seed` argument alone, so its values do not depend on which fills ran
 * before it. ConstantFill takes `seed` too (and ignores it), so the engine
 * can pass the same arguments to every fill.
 *
 * Fan-in and fan-out follow Caffe2, with missing dimensions counted as 1:
 * Xavier: uniform in +-sqrt(3 / fan_in), fan_in = numel / shape[0];
 * MSRA: gaussian with std sqrt(2 / fan_out), fan_out = numel / shape[1]. */
#include <math.h>

#include "engine/op.h"
#include "engine/rng.h"
#include "ops/families.h"

/* Arguments every fill has, first in each table. */
enum { A_SHAPE, A_SEED, A_FIRST_OWN };
#define FILL_COMMON_ARGS                                                                 \
  {"shape", DPM_ARG_INTS, "", NULL, 1, 1e12}, { "seed", DPM_ARG_INT, "0", NULL, 0, 0 }

/* ---- shape --------------------------------------------------------------- */

static dpm_status fill_shape(const dpm_node *n, dpm_dtype t, dpm_shape *out,
                             dpm_err *err) {
  const dpm_arg *s = &n->arg[A_SHAPE];
  if (s->n > DPM_MAX_DIMS)
    return dpm_errf(err, DPM_SHAPE, "shape has %d dimensions, at most %d allowed", s->n,
                    DPM_MAX_DIMS);
  *out = dpm_shape_make(t, s->n, s->v);
  return DPM_OK;
}

static dpm_status infer_f32(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  (void)in;
  return fill_shape(n, DPM_F32, out, err);
}

/* Dimension k of t, or 1 where t has no dimension k. */
static int64_t dim_or_1(const dpm_tensor *t, int k) {
  return k < t->shape.ndim ? t->shape.d[k] : 1;
}

/* ---- random fills -------------------------------------------------------- */

typedef enum { DIST_UNIFORM, DIST_GAUSSIAN } fill_dist;

/* Uniform in [a, b), or gaussian with mean a and std b. */
static void fill_random(const dpm_op *op, fill_dist dist, double a, double b) {
  uint64_t s[2];
  dpm_rng_seed(s, (uint64_t)op->node->arg[A_SEED].i);
  float *y = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->out[0]);
  if (dist == DIST_GAUSSIAN)
    for (int64_t i = 0; i < n; i++) y[i] = (float)(a + b * dpm_rng_normal(s));
  else
    for (int64_t i = 0; i < n; i++) y[i] = (float)(a + (b - a) * dpm_rng_uniform(s));
}

static void xavier_run(const dpm_op *op) {
  double fan_in = (double)(dpm_tensor_numel(op->out[0]) / dim_or_1(op->out[0], 0));
  double r = sqrt(3.0 / fan_in);
  fill_random(op, DIST_UNIFORM, -r, r);
}

static void msra_run(const dpm_op *op) {
  double fan_out = (double)(dpm_tensor_numel(op->out[0]) / dim_or_1(op->out[0], 1));
  fill_random(op, DIST_GAUSSIAN, 0.0, sqrt(2.0 / fan_out));
}

enum { G_MEAN = A_FIRST_OWN, G_STD };
static void gaussian_run(const dpm_op *op) {
  fill_random(op, DIST_GAUSSIAN, op->node->arg[G_MEAN].f, op->node->arg[G_STD].f);
}

enum { U_MIN = A_FIRST_OWN, U_MAX };
static dpm_status uniform_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  if (n->arg[U_MIN].f > n->arg[U_MAX].f)
    return dpm_errf(err, DPM_SHAPE, "min %g is greater than max %g", n->arg[U_MIN].f,
                    n->arg[U_MAX].f);
  return infer_f32(n, in, out, err);
}

static void uniform_run(const dpm_op *op) {
  fill_random(op, DIST_UNIFORM, op->node->arg[U_MIN].f, op->node->arg[U_MAX].f);
}

/* ---- ConstantFill -------------------------------------------------------- */

enum { C_VALUE = A_FIRST_OWN, C_DTYPE };
/* By the index of the `dtype` choice. */
static const dpm_dtype const_dtypes[] = {DPM_F32, DPM_I32, DPM_I64};
static const double const_int_limit[] = {0, 2147483648.0, 9223372036854775808.0};

static dpm_status constant_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  int64_t t = n->arg[C_DTYPE].i;
  double v = n->arg[C_VALUE].f, lim = const_int_limit[t];
  if (lim && (v != floor(v) || v < -lim || v >= lim))
    return dpm_errf(err, DPM_SHAPE, "value %g is not representable as %s", v,
                    dpm_dtype_name(const_dtypes[t]));
  (void)in;
  return fill_shape(n, const_dtypes[t], out, err);
}

static void constant_run(const dpm_op *op) {
  double v = op->node->arg[C_VALUE].f;
  int64_t n = dpm_tensor_numel(op->out[0]);
  switch (op->out[0]->shape.dtype) {
  case DPM_F32:
    for (int64_t i = 0; i < n; i++) dpm_f32(op->out[0])[i] = (float)v;
    break;
  case DPM_I32:
    for (int64_t i = 0; i < n; i++) dpm_i32(op->out[0])[i] = (int32_t)v;
    break;
  default:
    for (int64_t i = 0; i < n; i++) dpm_i64(op->out[0])[i] = (int64_t)v;
    break;
  }
}

/* ---- table --------------------------------------------------------------- */

static const dpm_arg_def constant_args[] = {
    FILL_COMMON_ARGS,
    {"value", DPM_ARG_FLOAT, "0", NULL, 0, 0},
    {"dtype", DPM_ARG_STRING, "f32", "f32|i32|i64", 0, 0},
    {NULL},
};
static const dpm_arg_def random_args[] = {FILL_COMMON_ARGS, {NULL}};
static const dpm_arg_def gaussian_args[] = {
    FILL_COMMON_ARGS,
    {"mean", DPM_ARG_FLOAT, "0", NULL, 0, 0},
    {"std", DPM_ARG_FLOAT, "0.01", NULL, 0, 1e30},
    {NULL},
};
static const dpm_arg_def uniform_args[] = {
    FILL_COMMON_ARGS,
    {"min", DPM_ARG_FLOAT, "-1", NULL, 0, 0},
    {"max", DPM_ARG_FLOAT, "1", NULL, 0, 0},
    {NULL},
};

#define FILL_DEF(ID, op_name, arg_table, infer_fn, run_fn)                               \
  const dpm_op_def DPM_OP_DEF(ID) = {                                                    \
      .id = DPM_OP_##ID,                                                                 \
      .name = op_name,                                                                   \
      .min_out = 1,                                                                      \
      .max_out = 1,                                                                      \
      .args = arg_table,                                                                 \
      .infer = infer_fn,                                                                 \
      .run = run_fn,                                                                     \
  }
FILL_DEF(CONSTANT_FILL, "ConstantFill", constant_args, constant_infer, constant_run);
FILL_DEF(XAVIER_FILL, "XavierFill", random_args, infer_f32, xavier_run);
FILL_DEF(MSRA_FILL, "MSRAFill", random_args, infer_f32, msra_run);
FILL_DEF(GAUSSIAN_FILL, "GaussianFill", gaussian_args, infer_f32, gaussian_run);
FILL_DEF(UNIFORM_FILL, "UniformFill", uniform_args, uniform_infer, uniform_run);
