/* The CPU kernels of the fill ops (ops/fill.c): ConstantFill, XavierFill,
 * MSRAFill, GaussianFill, UniformFill. Each random fill draws from a stream
 * of its own seeded by its `seed` argument alone, one draw per element in
 * order, so its values do not depend on which fills ran before it. */
#include <math.h>

#include "backend/cpu/kernels.h"
#include "engine/rng.h"
#include "ops/fill.h"

/* Dimension k of t, or 1 where t has no dimension k. */
static int64_t dim_or_1(const dpm_tensor *t, int k) {
  return k < t->shape.ndim ? t->shape.d[k] : 1;
}

/* ---- random fills -------------------------------------------------------- */

typedef enum { DIST_UNIFORM, DIST_GAUSSIAN } fill_dist;

/* Uniform in [a, b), or gaussian with mean a and std b. */
static void fill_random(const dpm_op *op, fill_dist dist, double a, double b) {
  uint64_t s[2];
  dpm_rng_seed(s, (uint64_t)op->node->arg[FILL_ARG_SEED].i);
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

static void gaussian_run(const dpm_op *op) {
  fill_random(op, DIST_GAUSSIAN, op->node->arg[G_MEAN].f, op->node->arg[G_STD].f);
}

static void uniform_run(const dpm_op *op) {
  fill_random(op, DIST_UNIFORM, op->node->arg[U_MIN].f, op->node->arg[U_MAX].f);
}

/* ---- ConstantFill -------------------------------------------------------- */

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

const dpm_kernel_def DPM_CPU_KERNEL(CONSTANT_FILL) = {.run = constant_run};
const dpm_kernel_def DPM_CPU_KERNEL(XAVIER_FILL) = {.run = xavier_run};
const dpm_kernel_def DPM_CPU_KERNEL(MSRA_FILL) = {.run = msra_run};
const dpm_kernel_def DPM_CPU_KERNEL(GAUSSIAN_FILL) = {.run = gaussian_run};
const dpm_kernel_def DPM_CPU_KERNEL(UNIFORM_FILL) = {.run = uniform_run};
