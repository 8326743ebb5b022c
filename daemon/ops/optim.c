/* Optimizer ops: SGD, MomentumSGD, Adam, LearningRate, Iter.
 *
 * The engine emits them after the gradients; none is allowed in a spec and
 * none has a gradient. Updates run in place: each output is named like the
 * input it replaces (param, then optimizer state). The learning rate is an
 * f32 scalar blob made by LearningRate from the iteration counter, an i64
 * scalar holding the number of completed steps that Iter increments once per
 * step.
 *
 * Weight decay is L2 added to the gradient: g' = g + weight_decay * p; the
 * update formulas are in ops/optim.h.
 *
 * Here: argument tables and shape inference; the kernels are each
 * backend's (CPU: backend/cpu/optim.c). */
#include "ops/optim.h"
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
  if (n->fuse & DPM_FUSE_WORKING_COPY) out[n->n_out - 1].dtype = DPM_BF16;
  return DPM_OK;
}

/* ---- SGD: (param, grad, lr) -> param ------------------------------------- */

static dpm_status sgd_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  static const char *const state[] = {"grad"};
  return infer_update(n, in, out, state, 1, err);
}

/* ---- MomentumSGD: (param, grad, momentum, lr) -> (param, momentum) -------- */

static dpm_status momentum_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  static const char *const state[] = {"grad", "momentum"};
  return infer_update(n, in, out, state, 2, err);
}

/* ---- Adam: (param, grad, m1, m2, lr, iter) -> (param, m1, m2) ------------- */

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

/* ---- LearningRate: iter -> lr --------------------------------------------- */

static dpm_status lr_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  const dpm_arg *a = n->arg;
  if (expect_scalar(&in[0], DPM_I64, "iter", err)) return err->code;
  if ((a[LR_POLICY].i == POL_POLY || a[LR_POLICY].i == POL_COSINE) &&
      a[LR_MAX_ITER].i < 1)
    return dpm_errf(err, DPM_SHAPE, "policy %s needs max_iter >= 1",
                    a[LR_POLICY].i == POL_POLY ? "poly" : "cosine");
  if (a[LR_POLICY].i == POL_MULTISTEP && a[LR_STEPVALUES].n == 0)
    return dpm_errf(err, DPM_SHAPE, "policy multistep needs stepvalues");
  for (int k = 1; k < a[LR_STEPVALUES].n; k++)
    if (a[LR_STEPVALUES].v[k] <= a[LR_STEPVALUES].v[k - 1])
      return dpm_errf(err, DPM_SHAPE, "stepvalues must increase");
  out[0] = dpm_shape_scalar(DPM_F32);
  return DPM_OK;
}

/* ---- Iter: iter -> iter + 1 ----------------------------------------------- */

static dpm_status iter_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)n;
  if (expect_scalar(&in[0], DPM_I64, "iter", err)) return err->code;
  out[0] = in[0];
  return DPM_OK;
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
    [LR_START_MULTIPLIER] = {"start_multiplier", DPM_ARG_FLOAT, "0", NULL, 0, 1},
    [LR_FINAL_MULTIPLIER] = {"final_multiplier", DPM_ARG_FLOAT, "0", NULL, 0, 1},
    {NULL},
};

const dpm_op_def DPM_OP_DEF(SGD) = {
    .id = DPM_OP_SGD,
    .name = "SGD",
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 2, /* and the working copy (DPM_FUSE_WORKING_COPY) */
    .args = sgd_args,
    .infer = sgd_infer,
    .fusable = DPM_FUSE_WORKING_COPY,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(MOMENTUM_SGD) = {
    .id = DPM_OP_MOMENTUM_SGD,
    .name = "MomentumSGD",
    .min_in = 4,
    .max_in = 4,
    .min_out = 2,
    .max_out = 3, /* and the working copy (DPM_FUSE_WORKING_COPY) */
    .args = momentum_args,
    .infer = momentum_infer,
    .fusable = DPM_FUSE_WORKING_COPY,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(ADAM) = {
    .id = DPM_OP_ADAM,
    .name = "Adam",
    .min_in = 6,
    .max_in = 6,
    .min_out = 3,
    .max_out = 4, /* and the working copy (DPM_FUSE_WORKING_COPY) */
    .args = adam_args,
    .infer = adam_infer,
    .fusable = DPM_FUSE_WORKING_COPY,
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
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
