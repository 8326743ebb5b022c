/* The CPU kernels of the optimizer ops (ops/optim.c): SGD, MomentumSGD,
 * Adam, LearningRate, Iter. Updates write the output tensors, first copying
 * the input there if the two are not one tensor (as in a test), so each
 * loop sees one pointer per blob; the formulas are in ops/optim.h. With
 * DPM_FUSE_WORKING_COPY they also write the param's bf16 working copy. */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "engine/lowp.h"
#include "ops/optim.h"

/* Output k holding the value of input `from`, to be updated in place. */
static float *updated(const dpm_op *op, int k, int from) {
  float *o = dpm_f32(op->out[k]);
  const float *i = dpm_f32(op->in[from]);
  if (o != i) memcpy(o, i, dpm_shape_bytes(&op->in[from]->shape));
  return o;
}

/* The param's bf16 working copy, the op's last output, when the op writes
 * it (DPM_FUSE_WORKING_COPY), else NULL. Each update runs in chunks of
 * CHUNK values and rounds a chunk into it while the chunk is in L1: the
 * rounding of engine/lowp.h, the bits of the Cast it replaces. */
static uint16_t *working_copy(const dpm_op *op) {
  return (op->node->fuse & DPM_FUSE_WORKING_COPY) ? op->out[op->n_out - 1]->data : NULL;
}
#define CHUNK 2048

static void round_chunk(uint16_t *w, const float *p, int64_t lo, int64_t hi) {
  if (w) dpm_bf16_from_f32(w + lo, p + lo, (size_t)(hi - lo));
}

/* ---- SGD ----------------------------------------------------------------- */

static void sgd_run(const dpm_op *op) {
  float *restrict p = updated(op, 0, 0);
  const float *restrict g = dpm_f32(op->in[1]);
  const float lr = dpm_f32(op->in[2])[0], wd = (float)op->node->arg[SGD_WD].f;
  uint16_t *w = working_copy(op);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t lo = 0; lo < n; lo += CHUNK) {
    int64_t hi = n - lo < CHUNK ? n : lo + CHUNK;
    for (int64_t i = lo; i < hi; i++) p[i] -= lr * (g[i] + wd * p[i]);
    round_chunk(w, p, lo, hi);
  }
}

/* ---- MomentumSGD --------------------------------------------------------- */

/* An AVX-512 clone where the CPU has it. Not under ThreadSanitizer: the
 * clones' ifunc resolver runs before its runtime is up. */
#ifdef __SANITIZE_THREAD__
#define AVX512_CLONE
#else
#define AVX512_CLONE __attribute__((target_clones("avx512f", "default")))
#endif

AVX512_CLONE static void momentum_run(const dpm_op *op) {
  float *restrict p = updated(op, 0, 0), *restrict m = updated(op, 1, 2);
  const float *restrict g = dpm_f32(op->in[1]);
  const float lr = dpm_f32(op->in[3])[0], mu = (float)op->node->arg[MOM_MU].f,
              wd = (float)op->node->arg[MOM_WD].f;
  uint16_t *w = working_copy(op);
  const int nesterov = op->node->arg[MOM_NESTEROV].i != 0;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t lo = 0; lo < n; lo += CHUNK) {
    int64_t hi = n - lo < CHUNK ? n : lo + CHUNK;
    if (nesterov)
      for (int64_t i = lo; i < hi; i++) {
        float mi = m[i], mn = mu * mi + lr * (g[i] + wd * p[i]);
        m[i] = mn;
        p[i] -= (1.f + mu) * mn - mu * mi;
      }
    else
      for (int64_t i = lo; i < hi; i++) {
        m[i] = mu * m[i] + lr * (g[i] + wd * p[i]);
        p[i] -= m[i];
      }
    round_chunk(w, p, lo, hi);
  }
}

/* ---- Adam ---------------------------------------------------------------- */

static void adam_run(const dpm_op *op) {
  float *restrict p = updated(op, 0, 0), *restrict m1 = updated(op, 1, 2),
                  *restrict m2 = updated(op, 2, 3);
  const float *restrict g = dpm_f32(op->in[1]);
  const dpm_arg *a = op->node->arg;
  const double b1 = a[ADAM_B1].f, b2 = a[ADAM_B2].f;
  const double t = (double)dpm_i64(op->in[5])[0] + 1.0;
  const float step =
      (float)(dpm_f32(op->in[4])[0] * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t)));
  const float fb1 = (float)b1, fb2 = (float)b2, eps = (float)a[ADAM_EPS].f,
              wd = (float)a[ADAM_WD].f;
  uint16_t *w = working_copy(op);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t lo = 0; lo < n; lo += CHUNK) {
    int64_t hi = n - lo < CHUNK ? n : lo + CHUNK;
    for (int64_t i = lo; i < hi; i++) {
      float gi = g[i] + wd * p[i];
      m1[i] = fb1 * m1[i] + (1.f - fb1) * gi;
      m2[i] = fb2 * m2[i] + (1.f - fb2) * gi * gi;
      p[i] -= step * m1[i] / (sqrtf(m2[i]) + eps);
    }
    round_chunk(w, p, lo, hi);
  }
}

/* ---- LearningRate -------------------------------------------------------- */

typedef double (*lr_policy)(const dpm_arg *a, double it);

static double lr_fixed(const dpm_arg *a, double it) {
  (void)a, (void)it;
  return 1.0;
}
static double lr_step(const dpm_arg *a, double it) {
  return pow(a[LR_GAMMA].f, floor(it / a[LR_STEPSIZE].f));
}
static double lr_multistep(const dpm_arg *a, double it) {
  int passed = 0;
  for (int k = 0; k < a[LR_STEPVALUES].n; k++) passed += a[LR_STEPVALUES].fv[k] <= it;
  return pow(a[LR_GAMMA].f, passed);
}
static double lr_exp(const dpm_arg *a, double it) { return pow(a[LR_GAMMA].f, it); }
static double lr_inv(const dpm_arg *a, double it) {
  return pow(1.0 + a[LR_GAMMA].f * it, -a[LR_POWER].f);
}
static double lr_poly(const dpm_arg *a, double it) {
  double left = 1.0 - it / a[LR_MAX_ITER].f;
  return left > 0 ? pow(left, a[LR_POWER].f) : 0.0;
}

/* final + (1 - final) * (1 + cos(pi * t / max_iter)) / 2, t = it clamped to
 * max_iter: from 1 at iteration 0 to final_multiplier at max_iter, then
 * flat. */
static double lr_cosine(const dpm_arg *a, double it) {
  double t = it < a[LR_MAX_ITER].f ? it : a[LR_MAX_ITER].f;
  double fin = a[LR_FINAL_MULTIPLIER].f;
  return fin + (1.0 - fin) * 0.5 * (1.0 + cos(M_PI * t / a[LR_MAX_ITER].f));
}

static const lr_policy lr_policies[] = {
    [POL_FIXED] = lr_fixed,   [POL_STEP] = lr_step, [POL_MULTISTEP] = lr_multistep,
    [POL_EXP] = lr_exp,       [POL_INV] = lr_inv,   [POL_POLY] = lr_poly,
    [POL_COSINE] = lr_cosine,
};
_Static_assert(sizeof lr_policies / sizeof *lr_policies == POL_COUNT, "lr policies");

static void lr_run(const dpm_op *op) {
  const dpm_arg *a = op->node->arg;
  double it = (double)dpm_i64(op->in[0])[0];
  double rate = a[LR_BASE].f * lr_policies[a[LR_POLICY].i](a, it);
  if (it < (double)a[LR_WARMUP_ITERS].i) {
    double ws = a[LR_START_MULTIPLIER].f;
    rate *= ws + (1.0 - ws) * it / (double)a[LR_WARMUP_ITERS].i;
  }
  dpm_f32(op->out[0])[0] = (float)rate;
}

/* ---- Iter ---------------------------------------------------------------- */

static void iter_run(const dpm_op *op) {
  dpm_i64(op->out[0])[0] = dpm_i64(op->in[0])[0] + 1;
}

/* ---- table --------------------------------------------------------------- */

const dpm_kernel_def DPM_CPU_KERNEL(SGD) = {.run = sgd_run};
const dpm_kernel_def DPM_CPU_KERNEL(MOMENTUM_SGD) = {.run = momentum_run};
const dpm_kernel_def DPM_CPU_KERNEL(ADAM) = {.run = adam_run};
const dpm_kernel_def DPM_CPU_KERNEL(LEARNING_RATE) = {.run = lr_run};
const dpm_kernel_def DPM_CPU_KERNEL(ITER) = {.run = iter_run};
