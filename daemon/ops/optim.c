/* Optimizer ops: SGD, MomentumSGD, Adam, LearningRate, Iter.
 *
 * The engine emits them after the gradients; none is allowed in a spec and
 * none has a gradient. Updates run in place: each output is named like the
 * input it replaces (param, then optimizer state). Kernels update the output
 * tensors, first copying the input there if the two are not one tensor (as
 * in a test), so each loop sees one pointer per blob. The learning rate is an
 * f32 scalar blob made by LearningRate from the iteration counter, an i64
 * scalar holding the number of completed steps that Iter increments once per
 * step.
 *
 * Weight decay is L2 added to the gradient: g' = g + weight_decay * p. */
#include <math.h>
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"

/* ---- shape checks -------------------------------------------------------- */

static dpm_status expect_scalar(const dpm_shape *s, dpm_dtype t, const char *what,
                                dpm_err *err) {
  if (s->dtype == t && dpm_shape_numel(s) == 1) return DPM_OK;
  char b[64];
  return dpm_errf(err, DPM_SHAPE, "%s must be an %s scalar, got %s", what,
                  dpm_dtype_name(t), dpm_shape_str(s, b, sizeof b));
}

/* Inputs (param, state[0..n_state), lr, ...) of an update: every state blob
 * (the gradient first) has the param's shape; every output gets it. */
static dpm_status infer_update(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                               const char *const *state, int n_state, dpm_err *err) {
  if (dpm_expect_dtype(&in[0], DPM_F32, "param", err)) return err->code;
  for (int k = 0; k < n_state; k++)
    if (!dpm_shape_equal(&in[1 + k], &in[0])) {
      char a[64], b[64];
      return dpm_errf(err, DPM_SHAPE, "%s must match param %s, got %s", state[k],
                      dpm_shape_str(&in[0], a, sizeof a),
                      dpm_shape_str(&in[1 + k], b, sizeof b));
    }
  if (expect_scalar(&in[1 + n_state], DPM_F32, "lr", err)) return err->code;
  for (int k = 0; k < n->n_out; k++) out[k] = in[0];
  return DPM_OK;
}

/* Output k holding the value of input `from`, to be updated in place. */
static float *updated(const dpm_op *op, int k, int from) {
  float *o = dpm_f32(op->out[k]);
  const float *i = dpm_f32(op->in[from]);
  if (o != i) memcpy(o, i, dpm_shape_bytes(&op->in[from]->shape));
  return o;
}

/* ---- SGD: (param, grad, lr) -> param ------------------------------------- */

enum { SGD_WD };

static dpm_status sgd_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  static const char *const state[] = {"grad"};
  return infer_update(n, in, out, state, 1, err);
}

static void sgd_run(const dpm_op *op) {
  float *restrict p = updated(op, 0, 0);
  const float *restrict g = dpm_f32(op->in[1]);
  const float lr = dpm_f32(op->in[2])[0], wd = (float)op->node->arg[SGD_WD].f;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
}

/* ---- MomentumSGD: (param, grad, momentum, lr) -> (param, momentum) -------- */

/* Caffe2's MomentumSGDUpdate: the buffer holds lr-scaled steps, m = mu*m + lr*g';
 * plain: p -= m; Nesterov: p -= (1 + mu) * m - mu * m_old. */
enum { MOM_MU, MOM_NESTEROV, MOM_WD };

static dpm_status momentum_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  static const char *const state[] = {"grad", "momentum"};
  return infer_update(n, in, out, state, 2, err);
}

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
  int64_t n = dpm_tensor_numel(op->in[0]);
  if (op->node->arg[MOM_NESTEROV].i)
    for (int64_t i = 0; i < n; i++) {
      float mi = m[i], mn = mu * mi + lr * (g[i] + wd * p[i]);
      m[i] = mn;
      p[i] -= (1.f + mu) * mn - mu * mi;
    }
  else
    for (int64_t i = 0; i < n; i++) {
      m[i] = mu * m[i] + lr * (g[i] + wd * p[i]);
      p[i] -= m[i];
    }
}

/* ---- Adam: (param, grad, m1, m2, lr, iter) -> (param, m1, m2) ------------- */

/* Caffe2's form: with t = iter + 1,
 * p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m1 / (sqrt(m2) + epsilon). */
enum { ADAM_B1, ADAM_B2, ADAM_EPS, ADAM_WD };

static dpm_status adam_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  static const char *const state[] = {"grad", "m1", "m2"};
  static const char *const beta[] = {"beta1", "beta2"};
  for (int k = ADAM_B1; k <= ADAM_B2; k++)
    if (n->arg[k].f >= 1.0)
      return dpm_errf(err, DPM_SHAPE, "%s = %g must be below 1", beta[k], n->arg[k].f);
  if (expect_scalar(&in[5], DPM_I64, "iter", err)) return err->code;
  return infer_update(n, in, out, state, 3, err);
}

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
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] + wd * p[i];
    m1[i] = fb1 * m1[i] + (1.f - fb1) * gi;
    m2[i] = fb2 * m2[i] + (1.f - fb2) * gi * gi;
    p[i] -= step * m1[i] / (sqrtf(m2[i]) + eps);
  }
}

/* ---- LearningRate: iter -> lr --------------------------------------------- */

/* Caffe's policies, as a factor of base_lr at iteration `it` (completed
 * steps), then a linear warm-up (Goyal et al.): for it < warmup_iters the
 * rate is further scaled by warmup_start + (1 - warmup_start) * it / warmup_iters. */
enum {
  LR_BASE,
  LR_POLICY,
  LR_STEPSIZE,
  LR_GAMMA,
  LR_POWER,
  LR_STEPVALUES,
  LR_MAX_ITER,
  LR_WARMUP_ITERS,
  LR_WARMUP_START,
};
#define LR_POLICIES "fixed|step|multistep|exp|inv|poly"
enum { POL_FIXED, POL_STEP, POL_MULTISTEP, POL_EXP, POL_INV, POL_POLY, POL_COUNT };

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

static const lr_policy lr_policies[] = {
    [POL_FIXED] = lr_fixed, [POL_STEP] = lr_step, [POL_MULTISTEP] = lr_multistep,
    [POL_EXP] = lr_exp,     [POL_INV] = lr_inv,   [POL_POLY] = lr_poly,
};
_Static_assert(sizeof lr_policies / sizeof *lr_policies == POL_COUNT, "lr policies");

static dpm_status lr_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  const dpm_arg *a = n->arg;
  if (expect_scalar(&in[0], DPM_I64, "iter", err)) return err->code;
  if (a[LR_POLICY].i == POL_POLY && a[LR_MAX_ITER].i < 1)
    return dpm_errf(err, DPM_SHAPE, "policy poly needs max_iter >= 1");
  if (a[LR_POLICY].i == POL_MULTISTEP && a[LR_STEPVALUES].n == 0)
    return dpm_errf(err, DPM_SHAPE, "policy multistep needs stepvalues");
  for (int k = 1; k < a[LR_STEPVALUES].n; k++)
    if (a[LR_STEPVALUES].v[k] <= a[LR_STEPVALUES].v[k - 1])
      return dpm_errf(err, DPM_SHAPE, "stepvalues must increase");
  out[0] = dpm_shape_scalar(DPM_F32);
  return DPM_OK;
}

static void lr_run(const dpm_op *op) {
  const dpm_arg *a = op->node->arg;
  double it = (double)dpm_i64(op->in[0])[0];
  double rate = a[LR_BASE].f * lr_policies[a[LR_POLICY].i](a, it);
  if (it < (double)a[LR_WARMUP_ITERS].i) {
    double ws = a[LR_WARMUP_START].f;
    rate *= ws + (1.0 - ws) * it / (double)a[LR_WARMUP_ITERS].i;
  }
  dpm_f32(op->out[0])[0] = (float)rate;
}

/* ---- Iter: iter -> iter + 1 ----------------------------------------------- */

static dpm_status iter_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)n;
  if (expect_scalar(&in[0], DPM_I64, "iter", err)) return err->code;
  out[0] = in[0];
  return DPM_OK;
}

static void iter_run(const dpm_op *op) {
  dpm_i64(op->out[0])[0] = dpm_i64(op->in[0])[0] + 1;
}

/* ---- table --------------------------------------------------------------- */

#define UNBOUNDED 0, 0
#define NONNEG 0, 1e30
static const dpm_arg_def sgd_args[] = {
    [SGD_WD] = {"weight_decay", DPM_ARG_FLOAT, "0", NULL, NONNEG},
    {NULL},
};
static const dpm_arg_def momentum_args[] = {
    [MOM_MU] = {"momentum", DPM_ARG_FLOAT, "0.9", NULL, 0, 1},
    [MOM_NESTEROV] = {"nesterov", DPM_ARG_BOOL, "false", NULL, UNBOUNDED},
    [MOM_WD] = {"weight_decay", DPM_ARG_FLOAT, "0", NULL, NONNEG},
    {NULL},
};
static const dpm_arg_def adam_args[] = {
    [ADAM_B1] = {"beta1", DPM_ARG_FLOAT, "0.9", NULL, NONNEG},
    [ADAM_B2] = {"beta2", DPM_ARG_FLOAT, "0.999", NULL, NONNEG},
    [ADAM_EPS] = {"epsilon", DPM_ARG_FLOAT, "1e-8", NULL, 1e-30, 1e30},
    [ADAM_WD] = {"weight_decay", DPM_ARG_FLOAT, "0", NULL, NONNEG},
    {NULL},
};
static const dpm_arg_def lr_args[] = {
    [LR_BASE] = {"base_lr", DPM_ARG_FLOAT, NULL, NULL, NONNEG},
    [LR_POLICY] = {"policy", DPM_ARG_STRING, "fixed", LR_POLICIES, UNBOUNDED},
    [LR_STEPSIZE] = {"stepsize", DPM_ARG_INT, "1", NULL, 1, 1e18},
    [LR_GAMMA] = {"gamma", DPM_ARG_FLOAT, "1", NULL, UNBOUNDED},
    [LR_POWER] = {"power", DPM_ARG_FLOAT, "1", NULL, UNBOUNDED},
    [LR_STEPVALUES] = {"stepvalues", DPM_ARG_INTS, "", NULL, NONNEG},
    [LR_MAX_ITER] = {"max_iter", DPM_ARG_INT, "0", NULL, NONNEG},
    [LR_WARMUP_ITERS] = {"warmup_iters", DPM_ARG_INT, "0", NULL, NONNEG},
    [LR_WARMUP_START] = {"warmup_start", DPM_ARG_FLOAT, "0", NULL, 0, 1},
    {NULL},
};

const dpm_op_def DPM_OP_DEF(SGD) = {
    .id = DPM_OP_SGD,
    .name = "SGD",
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 1,
    .args = sgd_args,
    .infer = sgd_infer,
    .run = sgd_run,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(MOMENTUM_SGD) = {
    .id = DPM_OP_MOMENTUM_SGD,
    .name = "MomentumSGD",
    .min_in = 4,
    .max_in = 4,
    .min_out = 2,
    .max_out = 2,
    .args = momentum_args,
    .infer = momentum_infer,
    .run = momentum_run,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(ADAM) = {
    .id = DPM_OP_ADAM,
    .name = "Adam",
    .min_in = 6,
    .max_in = 6,
    .min_out = 3,
    .max_out = 3,
    .args = adam_args,
    .infer = adam_infer,
    .run = adam_run,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(LEARNING_RATE) = {
    .id = DPM_OP_LEARNING_RATE,
    .name = "LearningRate",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = lr_args,
    .infer = lr_infer,
    .run = lr_run,
    .flags = DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(ITER) = {
    .id = DPM_OP_ITER,
    .name = "Iter",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .infer = iter_infer,
    .run = iter_run,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
