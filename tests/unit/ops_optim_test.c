/* Optimizer ops: SGD, MomentumSGD, Adam, LearningRate, Iter. Updates run
 * several steps in place (outputs bound to the input tensors, as the engine
 * does) against reference values computed here in double; every learning
 * rate policy is checked at several iterations. */
#include <math.h>

#include "engine/op.h"
#include "optest.h"
#include "test.h"

#define NP 5 /* param elements: odd on purpose */

/* A tensor of shape s holding the n given values (as the shape's dtype). */
static dpm_tensor make(dpm_shape s, int n, const double *v) {
  dpm_tensor t = {0};
  dpm_tensor_resize(&t, &s);
  for (int i = 0; i < n; i++) {
    if (s.dtype == DPM_F32) dpm_f32(&t)[i] = (float)v[i];
    if (s.dtype == DPM_I64) dpm_i64(&t)[i] = (int64_t)v[i];
  }
  return t;
}

static dpm_tensor scalar_f32(double v) { return make(dpm_shape_scalar(DPM_F32), 1, &v); }
static dpm_tensor scalar_i64(double v) { return make(dpm_shape_scalar(DPM_I64), 1, &v); }
static dpm_tensor vec(const double *v) {
  return make(dpm_shape_make(DPM_F32, 1, (int64_t[]){NP}), NP, v);
}
static void set_vec(dpm_tensor *t, const double *v) {
  for (int i = 0; i < NP; i++) dpm_f32(t)[i] = (float)v[i];
}

/* Relative-or-absolute closeness for float results against double references. */
#define CHECK_VEC(t, ref)                                                                \
  for (int i_ = 0; i_ < NP; i_++)                                                        \
  CHECK_NEAR(dpm_f32(t)[i_], (ref)[i_], 1e-6 + 1e-5 * fabs((ref)[i_]))

static const double P0[NP] = {1.0, -2.0, 0.5, 3.0, -0.25};
static const double G[3][NP] = {
    {0.5, -1.0, 0.25, 2.0, -0.1},
    {-0.3, 0.7, 1.5, -2.0, 0.2},
    {1.1, 0.05, -0.6, 0.4, -0.9},
};

/* ---- SGD ----------------------------------------------------------------- */

static void sgd_steps(double wd, const char *args) {
  const double lr[3] = {0.1, 0.05, 0.2};
  double p[NP];
  memcpy(p, P0, sizeof p);
  dpm_tensor tp = vec(P0), tg = vec(G[0]), tlr = scalar_f32(0);
  dpm_err err = {0};
  for (int s = 0; s < 3; s++) {
    set_vec(&tg, G[s]);
    dpm_f32(&tlr)[0] = (float)lr[s];
    CHECK(!ot_run_op("SGD", args, 0, 3, (dpm_tensor *[]){&tp, &tg, &tlr}, 1,
                     (dpm_tensor *[]){&tp}, &err));
    for (int i = 0; i < NP; i++) p[i] -= lr[s] * (G[s][i] + wd * p[i]);
    CHECK_VEC(&tp, p);
  }
  dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tlr);
}

TEST(optim_sgd_steps) { sgd_steps(0.0, ""); }
TEST(optim_sgd_weight_decay) { sgd_steps(0.01, "weight_decay=0.01"); }

TEST(optim_sgd_first_step_by_hand) {
  /* p = 1 - 0.1 * (0.5 + 0.1 * 1) = 0.94 */
  dpm_tensor tp = scalar_f32(1.0), tg = scalar_f32(0.5), tlr = scalar_f32(0.1);
  dpm_err err = {0};
  CHECK(!ot_run_op("SGD", "weight_decay=0.1", 0, 3, (dpm_tensor *[]){&tp, &tg, &tlr}, 1,
                   (dpm_tensor *[]){&tp}, &err));
  CHECK_NEAR(dpm_f32(&tp)[0], 0.94, 1e-7);
  dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tlr);
}

TEST(optim_sgd_rejects_bad_shapes) {
  ot_case c = {.op = "SGD",
               .n_in = 3,
               .n_out = 1,
               .in = {{ot_f32(2, 3, 4)}, {ot_f32(2, 4, 3)}, {ot_f32(0)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "grad must match param"));
  c.in[1].shape = ot_f32(2, 3, 4);
  c.in[2].shape = ot_f32(1, 2);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "lr must be an f32 scalar"));
  c.in[2].shape = ot_f32(0);
  c.args = "weight_decay=-1";
  CHECK(ot_rejects(&c, "weight_decay"));
}

/* ---- MomentumSGD --------------------------------------------------------- */

static void momentum_steps(double mu, int nesterov, double wd, const char *args) {
  const double lr[3] = {0.1, 0.1, 0.05};
  double p[NP], m[NP] = {0};
  memcpy(p, P0, sizeof p);
  dpm_tensor tp = vec(P0), tg = vec(G[0]), tm = vec(m), tlr = scalar_f32(0);
  dpm_err err = {0};
  for (int s = 0; s < 3; s++) {
    set_vec(&tg, G[s]);
    dpm_f32(&tlr)[0] = (float)lr[s];
    CHECK(!ot_run_op("MomentumSGD", args, 0, 4, (dpm_tensor *[]){&tp, &tg, &tm, &tlr}, 2,
                     (dpm_tensor *[]){&tp, &tm}, &err));
    for (int i = 0; i < NP; i++) {
      double old = m[i];
      m[i] = mu * m[i] + lr[s] * (G[s][i] + wd * p[i]);
      p[i] -= nesterov ? (1 + mu) * m[i] - mu * old : m[i];
    }
    CHECK_VEC(&tp, p);
    CHECK_VEC(&tm, m);
  }
  dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tm);
  dpm_tensor_fini(&tlr);
}

TEST(optim_momentum_steps) { momentum_steps(0.9, 0, 0, ""); }
TEST(optim_momentum_nesterov) { momentum_steps(0.9, 1, 0, "nesterov=true"); }
TEST(optim_momentum_nesterov_weight_decay) {
  momentum_steps(0.5, 1, 0.01, "momentum=0.5 nesterov=true weight_decay=0.01");
}
TEST(optim_momentum_weight_decay) {
  momentum_steps(0.8, 0, 0.1, "momentum=0.8 weight_decay=0.1");
}

TEST(optim_momentum_two_steps_by_hand) {
  /* mu 0.9, lr 0.1, g 1 twice: m = 0.1, p = 0.9; m = 0.19, p = 0.71.
   * Nesterov: m = 0.1, p = 1 - 1.9*0.1 = 0.81; m = 0.19,
   * p = 0.81 - (1.9*0.19 - 0.9*0.1) = 0.81 - 0.271 = 0.539. */
  static const struct {
    const char *args;
    double p[2];
  } cases[] = {{"", {0.9, 0.71}}, {"nesterov=1", {0.81, 0.539}}};
  for (int c = 0; c < 2; c++) {
    dpm_tensor tp = scalar_f32(1), tg = scalar_f32(1), tm = scalar_f32(0),
               tlr = scalar_f32(0.1);
    dpm_err err = {0};
    for (int s = 0; s < 2; s++) {
      CHECK(!ot_run_op("MomentumSGD", cases[c].args, 0, 4,
                       (dpm_tensor *[]){&tp, &tg, &tm, &tlr}, 2,
                       (dpm_tensor *[]){&tp, &tm}, &err));
      CHECK_NEAR(dpm_f32(&tm)[0], s ? 0.19 : 0.1, 1e-7);
      CHECK_NEAR(dpm_f32(&tp)[0], cases[c].p[s], 1e-6);
    }
    dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tm);
    dpm_tensor_fini(&tlr);
  }
}

TEST(optim_momentum_rejects_bad_shapes) {
  ot_case c = {.op = "MomentumSGD",
               .n_in = 4,
               .n_out = 2,
               .in = {{ot_f32(1, 7)}, {ot_f32(1, 7)}, {ot_f32(1, 6)}, {ot_f32(0)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "momentum must match param"));
  c.in[2].shape = ot_f32(1, 7);
  c.args = "momentum=1.5";
  CHECK(ot_rejects(&c, "momentum"));
}

/* ---- Adam ---------------------------------------------------------------- */

static void adam_steps(double b1, double b2, double eps, double wd, const char *args) {
  const double lr[3] = {0.01, 0.01, 0.005};
  double p[NP], m1[NP] = {0}, m2[NP] = {0};
  memcpy(p, P0, sizeof p);
  dpm_tensor tp = vec(P0), tg = vec(G[0]), tm1 = vec(m1), tm2 = vec(m2),
             tlr = scalar_f32(0), tit = scalar_i64(0);
  dpm_err err = {0};
  for (int s = 0; s < 3; s++) {
    set_vec(&tg, G[s]);
    dpm_f32(&tlr)[0] = (float)lr[s];
    dpm_i64(&tit)[0] = s;
    CHECK(!ot_run_op("Adam", args, 0, 6,
                     (dpm_tensor *[]){&tp, &tg, &tm1, &tm2, &tlr, &tit}, 3,
                     (dpm_tensor *[]){&tp, &tm1, &tm2}, &err));
    double t = s + 1;
    for (int i = 0; i < NP; i++) {
      double g = G[s][i] + wd * p[i];
      m1[i] = b1 * m1[i] + (1 - b1) * g;
      m2[i] = b2 * m2[i] + (1 - b2) * g * g;
      p[i] -=
          lr[s] * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t)) * m1[i] / (sqrt(m2[i]) + eps);
    }
    CHECK_VEC(&tp, p);
    CHECK_VEC(&tm1, m1);
    CHECK_VEC(&tm2, m2);
  }
  dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tm1);
  dpm_tensor_fini(&tm2), dpm_tensor_fini(&tlr), dpm_tensor_fini(&tit);
}

TEST(optim_adam_steps) { adam_steps(0.9, 0.999, 1e-8, 0, ""); }
TEST(optim_adam_args_weight_decay) {
  adam_steps(0.8, 0.99, 1e-3, 0.05,
             "beta1=0.8 beta2=0.99 epsilon=1e-3 weight_decay=0.05");
}

TEST(optim_adam_first_step_is_lr_times_sign) {
  /* t = 1: m1 = (1-b1) g, m2 = (1-b2) g^2, so the step is lr * sign(g)
   * (up to epsilon). */
  double z[NP] = {0};
  dpm_tensor tp = vec(P0), tg = vec(G[0]), tm1 = vec(z), tm2 = vec(z),
             tlr = scalar_f32(0.01), tit = scalar_i64(0);
  dpm_err err = {0};
  CHECK(!ot_run_op("Adam", "", 0, 6, (dpm_tensor *[]){&tp, &tg, &tm1, &tm2, &tlr, &tit},
                   3, (dpm_tensor *[]){&tp, &tm1, &tm2}, &err));
  for (int i = 0; i < NP; i++)
    CHECK_NEAR(dpm_f32(&tp)[i], P0[i] - 0.01 * (G[0][i] > 0 ? 1 : -1), 1e-6);
  dpm_tensor_fini(&tp), dpm_tensor_fini(&tg), dpm_tensor_fini(&tm1);
  dpm_tensor_fini(&tm2), dpm_tensor_fini(&tlr), dpm_tensor_fini(&tit);
}

TEST(optim_adam_rejects_bad_inputs) {
  ot_case c = {.op = "Adam",
               .n_in = 6,
               .n_out = 3,
               .in = {{ot_f32(2, 2, 3)},
                      {ot_f32(2, 2, 3)},
                      {ot_f32(2, 2, 3)},
                      {ot_f32(2, 3, 2)},
                      {ot_f32(0)},
                      {dpm_shape_scalar(DPM_I64)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "m2 must match param"));
  c.in[3].shape = ot_f32(2, 2, 3);
  c.in[5].shape = dpm_shape_scalar(DPM_I32);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "iter must be an i64 scalar"));
  c.in[5].shape = dpm_shape_scalar(DPM_I64);
  c.args = "beta2=1";
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "beta2 = 1 must be below 1"));
}

/* ---- LearningRate -------------------------------------------------------- */

/* The rate LearningRate gives at iteration `it`, or NAN on error. */
static double lr_at(const char *args, int64_t it) {
  dpm_tensor ti = scalar_i64((double)it), lr = {0};
  dpm_err err = {0};
  dpm_status s = ot_run_op("LearningRate", args, 0, 1, (dpm_tensor *[]){&ti}, 1,
                           (dpm_tensor *[]){&lr}, &err);
  if (s) printf("    %s\n", err.msg);
  double v = s || lr.shape.ndim != 0 || lr.shape.dtype != DPM_F32 ? NAN : dpm_f32(&lr)[0];
  dpm_tensor_fini(&ti), dpm_tensor_fini(&lr);
  return v;
}

static const struct {
  const char *args;
  int64_t it;
  double lr;
} lr_cases[] = {
    {"base_lr=0.1", 0, 0.1},
    {"base_lr=0.1", 1000, 0.1},
    {"base_lr=0.1 policy=step stepsize=3 gamma=0.5", 0, 0.1},
    {"base_lr=0.1 policy=step stepsize=3 gamma=0.5", 2, 0.1},
    {"base_lr=0.1 policy=step stepsize=3 gamma=0.5", 3, 0.05},
    {"base_lr=0.1 policy=step stepsize=3 gamma=0.5", 7, 0.025},
    {"base_lr=0.1 policy=multistep stepvalues=2,5 gamma=0.1", 0, 0.1},
    {"base_lr=0.1 policy=multistep stepvalues=2,5 gamma=0.1", 2, 0.01},
    {"base_lr=0.1 policy=multistep stepvalues=2,5 gamma=0.1", 4, 0.01},
    {"base_lr=0.1 policy=multistep stepvalues=2,5 gamma=0.1", 5, 0.001},
    {"base_lr=0.1 policy=multistep stepvalues=2,5 gamma=0.1", 100, 0.001},
    {"base_lr=0.1 policy=exp gamma=0.9", 0, 0.1},
    {"base_lr=0.1 policy=exp gamma=0.9", 1, 0.09},
    {"base_lr=0.1 policy=exp gamma=0.9", 3, 0.0729},
    {"base_lr=0.1 policy=inv gamma=0.1 power=0.5", 0, 0.1},
    {"base_lr=0.1 policy=inv gamma=0.1 power=0.5", 10, 0.070710678118654752},
    {"base_lr=0.1 policy=inv gamma=0.1 power=0.5", 30, 0.05},
    {"base_lr=0.1 policy=poly max_iter=10 power=2", 0, 0.1},
    {"base_lr=0.1 policy=poly max_iter=10 power=2", 5, 0.025},
    {"base_lr=0.1 policy=poly max_iter=10 power=2", 9, 0.001},
    {"base_lr=0.1 policy=poly max_iter=10 power=2", 10, 0.0},
    {"base_lr=0.1 policy=poly max_iter=10 power=2", 12, 0.0},
    /* cosine: base * (f + (1 - f) * (1 + cos(pi * min(it, T) / T)) / 2) */
    {"base_lr=0.1 policy=cosine max_iter=10", 0, 0.1},
    {"base_lr=0.1 policy=cosine max_iter=10", 2, 0.1 * 0.5 * (1 + 0.80901699437494742)},
    {"base_lr=0.1 policy=cosine max_iter=10", 5, 0.05},
    {"base_lr=0.1 policy=cosine max_iter=10", 10, 0.0},
    {"base_lr=0.1 policy=cosine max_iter=10", 12, 0.0},
    {"base_lr=0.1 policy=cosine max_iter=10 final_multiplier=0.1", 5, 0.055},
    {"base_lr=0.1 policy=cosine max_iter=10 final_multiplier=0.1", 10, 0.01},
    {"base_lr=0.1 policy=cosine max_iter=10 final_multiplier=0.1", 1000, 0.01},
    /* its warm-up counts inside max_iter and multiplies the cosine's rate */
    {"base_lr=0.1 policy=cosine max_iter=10 warmup_iters=4 start_multiplier=0.25", 2,
     0.1 * 0.5 * (1 + 0.80901699437494742) * 0.625},
    {"base_lr=0.1 policy=cosine max_iter=10 warmup_iters=4 start_multiplier=0.25", 5,
     0.05},
    /* warm-up from 0.25 of the rate over 4 iterations */
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.25", 0, 0.025},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.25", 1, 0.04375},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.25", 2, 0.0625},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.25", 3, 0.08125},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.25", 4, 0.1},
    /* the op's default start_multiplier is Caffe2's, 0 (the spec's is 0.1) */
    {"base_lr=0.1 warmup_iters=4", 0, 0.0},
    {"base_lr=0.1 warmup_iters=4", 1, 0.025},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.1", 0, 0.01},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.1", 1, 0.0325},
    {"base_lr=0.1 warmup_iters=4 start_multiplier=0.1", 4, 0.1},
    /* warm-up multiplies the policy's rate */
    {"base_lr=0.4 policy=step stepsize=2 gamma=0.5 warmup_iters=5", 3, 0.4 * 0.5 * 0.6},
    {"base_lr=0.4 policy=step stepsize=2 gamma=0.5 warmup_iters=5", 5, 0.4 * 0.25},
};

TEST(optim_lr_policies) {
  for (size_t k = 0; k < sizeof lr_cases / sizeof *lr_cases; k++) {
    double v = lr_at(lr_cases[k].args, lr_cases[k].it);
    if (!(fabs(v - lr_cases[k].lr) <= 1e-8 + 1e-6 * lr_cases[k].lr))
      printf("    case %zu: '%s' at %lld\n", k, lr_cases[k].args,
             (long long)lr_cases[k].it);
    CHECK_NEAR(v, lr_cases[k].lr, 1e-8 + 1e-6 * lr_cases[k].lr);
  }
}

TEST(optim_lr_rejects_inconsistent_args) {
  static const struct {
    const char *args, *msg;
  } bad[] = {
      {"base_lr=0.1 policy=poly", "poly needs max_iter"},
      {"base_lr=0.1 policy=step stepsize=0", "stepsize"},
      {"base_lr=0.1 policy=multistep", "multistep needs stepvalues"},
      {"base_lr=0.1 policy=multistep stepvalues=5,2", "stepvalues must increase"},
      {"base_lr=0.1 policy=cosine", "cosine needs max_iter"},
      {"base_lr=0.1 policy=linear", "policy"},
      {"base_lr=0.1 policy=cosine max_iter=5 final_multiplier=1.5", "final_multiplier"},
      {"base_lr=0.1 start_multiplier=2", "start_multiplier"},
      {"base_lr=-1", "base_lr"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    ot_case c = {.op = "LearningRate",
                 .args = bad[k].args,
                 .n_in = 1,
                 .n_out = 1,
                 .in = {{dpm_shape_scalar(DPM_I64)}}};
    CHECK(ot_rejects(&c, bad[k].msg));
  }
  ot_case c = {.op = "LearningRate",
               .args = "base_lr=1",
               .n_in = 1,
               .n_out = 1,
               .in = {{ot_f32(0)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "iter must be an i64 scalar"));
}

/* ---- Iter ---------------------------------------------------------------- */

TEST(optim_iter_increments_in_place) {
  dpm_tensor it = scalar_i64(41);
  dpm_err err = {0};
  for (int s = 0; s < 3; s++)
    CHECK(!ot_run_op("Iter", "", 0, 1, (dpm_tensor *[]){&it}, 1, (dpm_tensor *[]){&it},
                     &err));
  CHECK_INT(dpm_i64(&it)[0], 44);
  dpm_tensor_fini(&it);
}

TEST(optim_iter_rejects_float) {
  ot_case c = {.op = "Iter", .n_in = 1, .n_out = 1, .in = {{ot_f32(0)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "iter must be an i64 scalar"));
}

TEST(optim_ops_are_hidden_without_gradients) {
  static const char *const names[] = {"SGD", "MomentumSGD", "Adam", "LearningRate",
                                      "Iter"};
  for (int k = 0; k < 5; k++) {
    const dpm_op_def *d = dpm_op_find(names[k]);
    CHECK(d && (d->flags & DPM_OP_HIDDEN) && !d->grad);
  }
}
