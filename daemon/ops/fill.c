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
 * MSRA: gaussian with std sqrt(2 / fan_out), fan_out = numel / shape[1].
 *
 * Here: argument tables and shape inference; the kernels are each
 * backend's (CPU: backend/cpu/fill.c). */
#include <math.h>

#include "engine/op.h"
#include "ops/families.h"
#include "ops/fill.h"

/* The arguments every fill has, first in each table (FILL_ARG_*, ops/fill.h). */
#define FILL_COMMON_ARGS                                                                 \
  {"shape", DPM_ARG_INTS, "", NULL, 1, 1e12}, { "seed", DPM_ARG_INT, "0", NULL, 0, 0 }

/* ---- shape --------------------------------------------------------------- */

static dpm_status fill_shape(const dpm_node *n, dpm_dtype t, dpm_shape *out,
                             dpm_err *err) {
  const dpm_arg *s = &n->arg[FILL_ARG_SHAPE];
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

/* UniformFill: min <= max. */
static dpm_status uniform_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  if (n->arg[U_MIN].f > n->arg[U_MAX].f)
    return dpm_errf(err, DPM_SHAPE, "min %g is greater than max %g", n->arg[U_MIN].f,
                    n->arg[U_MAX].f);
  return infer_f32(n, in, out, err);
}

/* ---- ConstantFill -------------------------------------------------------- */

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

#define FILL_DEF(ID, op_name, arg_table, infer_fn)                                       \
  const dpm_op_def DPM_OP_DEF(ID) = {                                                    \
      .id = DPM_OP_##ID,                                                                 \
      .name = op_name,                                                                   \
      .min_out = 1,                                                                      \
      .max_out = 1,                                                                      \
      .args = arg_table,                                                                 \
      .infer = infer_fn,                                                                 \
  }
FILL_DEF(CONSTANT_FILL, "ConstantFill", constant_args, constant_infer);
FILL_DEF(XAVIER_FILL, "XavierFill", random_args, infer_f32);
FILL_DEF(MSRA_FILL, "MSRAFill", random_args, infer_f32);
FILL_DEF(GAUSSIAN_FILL, "GaussianFill", gaussian_args, infer_f32);
FILL_DEF(UNIFORM_FILL, "UniformFill", uniform_args, uniform_infer);
