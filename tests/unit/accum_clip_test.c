/* update.accumulate_steps, update.clip_grad_norm and precision.loss_scale
 * (train/update.c), through the trainer on CPU replicas: 4 micro-batches
 * of 16 train like one batch of 64 (1 and 2 replicas); the clipped update
 * and the norm match a hand computation from the gradients read back; a
 * power-of-two static loss scale trains bitwise like none; a dynamic one
 * skips exactly the update whose reduced gradients hold an inf (injected
 * on one replica before the reduction) on every replica, halves, grows
 * after growth_interval clean updates, and fails the model after
 * max_skipped skips in a row; bad keys name file:line. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

/* A one-FC net on synthetic data, for the spec checks: the keys under test
   follow it. */
#define TINY_NET                                                                         \
  "name: t\n"                                                                            \
  "input: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 4, 5],"        \
  " num_classes: 4}\n"                                                                   \
  "forward:\n"                                                                           \
  "  - {op: FC, in: [data], out: pred, dim_out: 4}\n"                                    \
  "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"                 \
  "losses: [loss]\n"

/* FC 12 -> Relu -> FC 4 on synthetic 1x4x5 examples in order (no
 * shuffle), `opt` ("momentum_sgd, momentum: 0.9" ...) at lr 0.1;
 * `update_extra` goes into update, `precision` (if any) is the precision
 * section. */
static Dpm__ModelSpec *spec_of(int batch, const char *opt, const char *update_extra,
                               const char *precision) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 2048, shape: [1, 4, "
           "5], num_classes: 4, seed: 7, shuffle: false}\n"
           "forward:\n"
           "  - {op: FC, in: [data], out: fc1, dim_out: 12}\n"
           "  - {op: Relu, in: [fc1], out: fc1}\n"
           "  - {op: FC, in: [fc1], out: pred, dim_out: 4}\n"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "losses: [loss]\n"
           "update: {optimizer: %s%s, lr: {base: 0.1}}\n"
           "%s%s%s",
           batch, opt, update_extra, precision ? "precision: {" : "",
           precision ? precision : "", precision ? "}\n" : "");
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

#define N_PARAMS 4
static const char *const PARAMS[N_PARAMS] = {"fc1_w", "fc1_b", "pred_w", "pred_b"};
#define MAX_VALS 256

typedef struct {
  float v[N_PARAMS][MAX_VALS];
  int n[N_PARAMS];
} values;

/* Reads each of PARAMS (suffix appended: "_grad", "_momentum" or "") of
 * replica `scope` ("" or "cpu_1/") into *out; 1 when all were read. */
static int read_all(dpm_trainer *t, const char *scope, const char *suffix, values *out) {
  int ok = 1;
  for (int p = 0; ok && p < N_PARAMS; p++) {
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", scope, PARAMS[p], suffix);
    dpm_tensor h = {0};
    dpm_err err = {0};
    ok = !dpm_trainer_read_blob(t, name, &h, &err) && dpm_tensor_numel(&h) <= MAX_VALS;
    if (ok) {
      out->n[p] = (int)dpm_tensor_numel(&h);
      memcpy(out->v[p], dpm_f32(&h), sizeof(float) * (size_t)out->n[p]);
    } else {
      printf("    read %s: %s\n", name, err.msg);
    }
    dpm_tensor_fini(&h);
  }
  return ok;
}

/* The kind of device trainer_of's replicas run on. */
static dpm_device_kind kind_now = DPM_DEVICE_CPU;

static dpm_trainer *trainer_of(const Dpm__ModelSpec *spec, int devices,
                               const dpm_trainer_options *extra) {
  dpm_trainer_options opt = extra ? *extra : (dpm_trainer_options){0};
  opt.devices = devices;
  opt.kind = kind_now;
  opt.net_type = -1;
  opt.comm_timeout_ms = 20000;
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (spec && dpm_trainer_create(spec, &opt, &t, &err))
    printf("    create: %s\n", err.msg);
  return t;
}

/* `updates` updates of spec on `devices` replicas; the master's params
 * into *out; 1 when all ran. */
static int train(const Dpm__ModelSpec *spec, int devices, int updates, values *out) {
  dpm_trainer *t = trainer_of(spec, devices, NULL);
  dpm_err err = {0};
  dpm_step_stats st;
  int ok = t && !dpm_trainer_step(t, updates, &st, &err);
  if (t && !ok) printf("    step: %s\n", err.msg);
  ok = ok && (uint64_t)updates == dpm_trainer_iter(t) && read_all(t, "", "", out);
  dpm_trainer_destroy(t);
  return ok;
}

/* max over params of max_k |a - b| / max_k |b|. */
static double rel_diff(const values *a, const values *b) {
  double worst = 0;
  for (int p = 0; p < N_PARAMS; p++) {
    double d = 0, m = 0;
    if (a->n[p] != b->n[p]) return -1;
    for (int k = 0; k < a->n[p]; k++) {
      d = fmax(d, fabs((double)a->v[p][k] - b->v[p][k]));
      m = fmax(m, fabs((double)b->v[p][k]));
    }
    worst = fmax(worst, m > 0 ? d / m : d);
  }
  return worst;
}

static int moved(const values *a, const values *b) {
  for (int p = 0; p < N_PARAMS; p++)
    if (memcmp(a->v[p], b->v[p], sizeof(float) * (size_t)a->n[p])) return 1;
  return 0;
}

/* 4 x 16 against 1 x 64 (global batches), momentum SGD, 20 updates. */
static void accumulate_like_big_batch(int devices) {
  Dpm__ModelSpec *big = spec_of(64 / devices, "momentum_sgd, momentum: 0.9", "", NULL),
                 *acc = spec_of(16 / devices, "momentum_sgd, momentum: 0.9",
                                ", accumulate_steps: 4", NULL),
                 *small = spec_of(16 / devices, "momentum_sgd, momentum: 0.9", "", NULL);
  values *v = calloc(4, sizeof *v);
  int ok = v && train(big, devices, 20, &v[0]) && train(acc, devices, 20, &v[1]) &&
           train(small, devices, 20, &v[2]);
  /* one update of four micro-batches takes four batches of the reader */
  dpm_trainer *t = ok ? trainer_of(acc, devices, NULL) : NULL;
  ok = ok && t && dpm_trainer_steps_per_epoch(t) == 2048 / 64;
  dpm_trainer_destroy(t);
  dpm_spec_free(big);
  dpm_spec_free(acc);
  dpm_spec_free(small);
  if (!ok) free(v);
  CHECK(ok);
  double d = rel_diff(&v[1], &v[0]);
  printf("    %d replica(s): 4x16 against 1x64 after 20 updates: %.3g relative\n",
         devices, d);
  /* fp32 summation order (one 64-row product against four 16-row ones)
     gives 9.3e-7 (1 replica) and 3.9e-7 (2) with OpenBLAS's Zen and
     Haswell kernels and 1.03e-6 and 6.2e-7 with its Sandybridge ones; 4e-6
     keeps 3.9x over the worst, and a broken accumulation ends 1e-3 away
     (below) */
  CHECK_WITHIN(d, 4e-6);
  /* the test can tell: 20 updates of 16 end elsewhere */
  CHECK(rel_diff(&v[2], &v[0]) > 1e-3);
  free(v);
}

TEST(accumulate_4x16_like_1x64_one_replica) { accumulate_like_big_batch(1); }
TEST(accumulate_4x16_like_1x64_two_replicas) { accumulate_like_big_batch(2); }
/* on fenced devices, which catch any host access to device memory: the
   host pass crosses through the backend's copies */
TEST(fenced_accumulate_4x16_like_1x64_two_replicas) {
  kind_now = DPM_DEVICE_FENCED;
  accumulate_like_big_batch(2);
  kind_now = DPM_DEVICE_CPU;
}

/* One plain SGD update with clip_grad_norm `limit` against the unclipped
 * update's gradients g read back: norm = sqrt(sum g^2), p1 = p0 - lr *
 * min(1, limit / (norm + 1e-6)) * g. */
static void clip_by_hand(int devices, double limit) {
  Dpm__ModelSpec *plain = spec_of(8, "sgd", "", NULL);
  char extra[64];
  snprintf(extra, sizeof extra, ", clip_grad_norm: %g", limit);
  Dpm__ModelSpec *clip = spec_of(8, "sgd", extra, NULL);
  dpm_trainer *a = trainer_of(plain, devices, NULL), *b = trainer_of(clip, devices, NULL);
  values *v = calloc(4, sizeof *v); /* p0, g, p1 (clipped run), p1 (plain run) */
  dpm_step_stats sa, sb;
  dpm_err err = {0};
  int ok = a && b && v && read_all(a, "", "", &v[0]) &&
           !dpm_trainer_step(a, 1, &sa, &err) && read_all(a, "", "_grad", &v[1]) &&
           read_all(a, "", "", &v[3]) && !dpm_trainer_step(b, 1, &sb, &err) &&
           read_all(b, "", "", &v[2]);
  if (!ok) printf("    %s\n", err.msg);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(plain);
  dpm_spec_free(clip);
  if (!ok) free(v);
  CHECK(ok);
  double ss = 0;
  for (int p = 0; p < N_PARAMS; p++)
    for (int k = 0; k < v[1].n[p]; k++) ss += (double)v[1].v[p][k] * v[1].v[p][k];
  double norm = sqrt(ss), coef = fmin(1, limit / (norm + 1e-6));
  values want;
  for (int p = 0; p < N_PARAMS; p++) {
    want.n[p] = v[0].n[p];
    for (int k = 0; k < v[0].n[p]; k++)
      want.v[p][k] = (float)(v[0].v[p][k] - 0.1 * coef * v[1].v[p][k]);
  }
  printf("    %d replica(s), limit %g: norm %.9g (hand %.9g), coef %.6g\n", devices,
         limit, sb.grad_norm, norm, coef);
  CHECK_WITHIN(fabs(sb.grad_norm - norm) / norm, 1e-6);
  CHECK(isnan(sa.grad_norm)); /* no clipping: no norm */
  CHECK_WITHIN(rel_diff(&v[2], &want), 1e-6);
  /* the clip took effect where it should (and only there) */
  if (coef < 0.5)
    CHECK(rel_diff(&v[2], &v[3]) > 1e-3);
  else
    CHECK_WITHIN(rel_diff(&v[2], &v[3]), 1e-6);
  free(v);
}

TEST(clip_grad_norm_by_hand_one_replica) {
  clip_by_hand(1, 0.01);
  clip_by_hand(1, 1e6);
}
TEST(clip_grad_norm_by_hand_two_replicas) { clip_by_hand(2, 0.01); }

/* A static loss scale of 2^10 trains bitwise like none (1 and 2
 * replicas): the seed's 2^10 and the unscale's 2^-10 are exact. */
TEST(loss_scale_static_power_of_two_bitwise) {
  for (int devices = 1; devices <= 2; devices++) {
    Dpm__ModelSpec *none = spec_of(8, "momentum_sgd, momentum: 0.9", "", NULL),
                   *scaled =
                       spec_of(8, "momentum_sgd, momentum: 0.9", "", "loss_scale: 1024");
    values *v = calloc(2, sizeof *v);
    int ok = v && train(none, devices, 10, &v[0]) && train(scaled, devices, 10, &v[1]);
    dpm_spec_free(none);
    dpm_spec_free(scaled);
    if (!ok) free(v);
    CHECK(ok);
    if (moved(&v[0], &v[1]))
      dpm_test_fail(__FILE__, __LINE__,
                    "%d replica(s): loss_scale 1024 differs from none by %.3g relative",
                    devices, rel_diff(&v[1], &v[0]));
    free(v);
  }
}

/* Dynamic, growth_interval 3, 2 replicas, an inf injected on replica 1 at
 * update 2: update 2 is skipped on both replicas (params and momentum
 * bitwise as before it), the scale halves; 3 clean updates double it. */
static void dynamic_skips_halves_grows(void);
TEST(loss_scale_dynamic_skips_halves_grows) { dynamic_skips_halves_grows(); }
TEST(fenced_loss_scale_dynamic_skips_halves_grows) {
  kind_now = DPM_DEVICE_FENCED;
  dynamic_skips_halves_grows();
  kind_now = DPM_DEVICE_CPU;
}
static void dynamic_skips_halves_grows(void) {
  Dpm__ModelSpec *spec = spec_of(8, "momentum_sgd, momentum: 0.9", "",
                                 "loss_scale: dynamic, growth_interval: 3");
  dpm_trainer_options o = {.test_inf_first = 2, .test_inf_count = 1, .test_inf_rank = 1};
  dpm_trainer *t = trainer_of(spec, 2, &o);
  dpm_spec_free(spec);
  CHECK(t);
  values *v = calloc(4, sizeof *v); /* before/after update 2: params, momentum */
  dpm_step_stats st;
  dpm_err err = {0};
  static const double want_scale[] = {65536, 32768, 32768, 32768, 65536, 65536};
  static const int want_skipped[] = {0, 1, 0, 0, 0, 0};
  int ok = v != NULL;
  for (int u = 1; ok && u <= 6; u++) {
    for (int d = 0; ok && u == 2 && d < 2; d++) {
      char scope[32];
      snprintf(scope, sizeof scope, "%s_%d/", dpm_device_kind_name(kind_now), d);
      ok = read_all(t, scope, "", &v[0]) && read_all(t, scope, "_momentum", &v[1]);
      if (d == 0) memcpy(&v[2], &v[0], 2 * sizeof *v);
    }
    if (ok && (ok = !dpm_trainer_step(t, 1, &st, &err)) == 0) printf("    %s\n", err.msg);
    if (ok && (st.loss_scale != want_scale[u - 1] || st.skipped != want_skipped[u - 1])) {
      dpm_test_fail(__FILE__, __LINE__, "update %d: scale %g skipped %d, want %g %d", u,
                    st.loss_scale, st.skipped, want_scale[u - 1], want_skipped[u - 1]);
      ok = 0;
    }
    for (int d = 0; ok && u == 2 && d < 2; d++) {
      char scope[32];
      snprintf(scope, sizeof scope, "%s_%d/", dpm_device_kind_name(kind_now), d);
      values p, m;
      ok = read_all(t, scope, "", &p) && read_all(t, scope, "_momentum", &m);
      if (ok && (moved(&p, &v[2]) || moved(&m, &v[3]))) {
        dpm_test_fail(__FILE__, __LINE__, "replica %d updated in the skipped update", d);
        ok = 0;
      }
    }
  }
  CHECK(ok);
  CHECK_INT(st.skipped_total, 1);
  CHECK_INT(dpm_trainer_iter(t), 6); /* a skipped update counts as an iteration */
  /* the clean updates moved the params */
  values after;
  CHECK(read_all(t, "", "", &after) && moved(&after, &v[2]));
  dpm_trainer_destroy(t);
  free(v);
}

/* max_skipped 6 with every update's gradients inf: updates 1-5 are
 * skipped and the 6th fails the model, naming why. */
TEST(loss_scale_max_skipped_fails) {
  Dpm__ModelSpec *spec =
      spec_of(8, "sgd", "", "loss_scale: dynamic, growth_interval: 3, max_skipped: 6");
  dpm_trainer_options o = {
      .test_inf_first = 1, .test_inf_count = 1000, .test_inf_rank = 0};
  dpm_trainer *t = trainer_of(spec, 1, &o);
  dpm_spec_free(spec);
  CHECK(t);
  dpm_step_stats st;
  dpm_err err = {0};
  int ok = !dpm_trainer_step(t, 5, &st, &err);
  if (!ok) printf("    %s\n", err.msg);
  CHECK(ok);
  CHECK_INT(st.skipped_total, 5);
  CHECK(st.loss_scale == 65536.0 / 32);
  CHECK_INT(dpm_trainer_step(t, 1, &st, &err), DPM_NUMERIC);
  CHECK_HAS(err.msg, "6 updates in a row skipped");
  CHECK_HAS(err.msg, "precision.max_skipped 6");
  dpm_trainer_destroy(t);
}

/* Bad values name the file and line. */
TEST(accum_clip_loss_scale_spec_errors) {
  static const struct {
    const char *yaml, *want;
  } cases[] = {
      {"update: {accumulate_steps: 0}\n", "t.yaml:7"},
      {"update: {accumulate_steps: 70000}\n", "'accumulate_steps' must be 1..65536"},
      {"update: {clip_grad_norm: -1}\n", "t.yaml:7"},
      {"precision: {loss_scale: lots}\n", "'loss_scale' must be none, dynamic or a"},
      {"precision: {loss_scale: 0}\n", "t.yaml:7"},
      {"precision: {growth_interval: 0}\n", "t.yaml:7"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml, TINY_NET "%s", cases[c].yaml);
    Dpm__ModelSpec *spec = NULL;
    dpm_err err = {0};
    CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err), DPM_SPEC);
    CHECK_HAS(err.msg, cases[c].want);
  }
  double s;
  CHECK_INT(dpm_spec_loss_scale("dynamic", &s), DPM_LOSS_SCALE_DYNAMIC);
  CHECK(s == 65536);
  CHECK_INT(dpm_spec_loss_scale("0.5", &s), DPM_LOSS_SCALE_STATIC);
  CHECK(s == 0.5);
  CHECK_INT(dpm_spec_loss_scale(NULL, &s), DPM_LOSS_SCALE_NONE);
}

/* A checkpoint between updates resumes exactly: accumulation (2
 * micro-batches), clipping and a dynamic loss scale whose state is not
 * its initial one (an inf at update 2, growth_interval 2): 3 + 3 updates
 * through a checkpoint end bitwise where 6 do, with the same scale; a
 * model without a loss scale refuses the file. */
TEST(accum_loss_scale_resume_exact) {
  const char *opt = "momentum_sgd, momentum: 0.9";
  Dpm__ModelSpec *spec = spec_of(8, opt, ", accumulate_steps: 2, clip_grad_norm: 5",
                                 "loss_scale: dynamic, growth_interval: 2");
  Dpm__ModelSpec *other =
      spec_of(8, opt, ", accumulate_steps: 2, clip_grad_norm: 5", NULL);
  dpm_trainer_options o = {.test_inf_first = 2, .test_inf_count = 1, .test_inf_rank = 1};
  char *path = tf_temp_path("accum_resume.ckpt");
  dpm_trainer *a = trainer_of(spec, 2, &o), *b = trainer_of(spec, 2, &o), *c = NULL,
              *d = trainer_of(other, 2, NULL);
  values *v = calloc(2, sizeof *v);
  dpm_step_stats sa, sb;
  double scale_a[6] = {0}, scale_c[6] = {0}; /* after each update */
  dpm_err err = {0};
  int ok = path && a && b && d && v;
  for (int u = 0; ok && u < 6; u++)
    if ((ok = !dpm_trainer_step(a, 1, &sa, &err))) scale_a[u] = sa.loss_scale;
  ok = ok && !dpm_trainer_step(b, 3, &sb, &err) &&
       !dpm_trainer_checkpoint(b, NULL, path, &err);
  if (ok) c = trainer_of(spec, 2, NULL);
  ok = ok && c && !dpm_trainer_load(c, NULL, path, &err);
  for (int u = 3; ok && u < 6; u++)
    if ((ok = !dpm_trainer_step(c, 1, &sb, &err))) scale_c[u] = sb.loss_scale;
  ok = ok && read_all(a, "cpu_1/", "", &v[0]) && read_all(c, "cpu_1/", "", &v[1]);
  if (!ok) printf("    %s\n", err.msg);
  dpm_status refused = ok ? dpm_trainer_load(d, NULL, path, &err) : DPM_OK;
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_trainer_destroy(c);
  dpm_trainer_destroy(d);
  dpm_spec_free(spec);
  dpm_spec_free(other);
  free(path);
  int same = ok && !moved(&v[0], &v[1]);
  free(v);
  CHECK(ok);
  CHECK_INT(sa.skipped_total, 1);
  /* 65536, halved at 2, doubled after 3-4 and 5-6; the resumed run's
     counter carries on (from 0 it would double after 4-5) */
  CHECK(sa.loss_scale == 131072);
  for (int u = 3; u < 6; u++) CHECK(scale_c[u] == scale_a[u]);
  CHECK(same);
  CHECK_INT(refused, DPM_SPEC); /* another spec: its hash differs */
}

/* Where the gathered step cannot run, the trainer refuses the spec,
 * naming why: parallel.mode bmuf (cuda, refused too, needs a GPU to
 * reach the check). */
TEST(accum_refused_where_it_cannot_run) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           TINY_NET "update: {accumulate_steps: 2}\n"
                    "parallel: {mode: bmuf, bmuf: {local_steps: 2}}\n");
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err), DPM_OK);
  dpm_trainer_options o = {.devices = 2, .net_type = -1, .comm_timeout_ms = 20000};
  dpm_trainer *t = NULL;
  dpm_status s = dpm_trainer_create(spec, &o, &t, &err);
  dpm_spec_free(spec);
  dpm_trainer_destroy(t);
  CHECK_INT(s, DPM_SPEC);
  CHECK_HAS(err.msg, "t.yaml:7: ");
  CHECK_HAS(err.msg, "parallel.mode bmuf");
}

/* An update's loss is the mean of its micro-batches' losses: 2 x 8 with
 * plain SGD at lr 0 (nothing moves) reports the mean of two steps of 8. */
TEST(accum_loss_is_micro_batch_mean) {
  Dpm__ModelSpec *acc = spec_of(8, "sgd", ", accumulate_steps: 2", NULL),
                 *one = spec_of(8, "sgd", "", NULL);
  CHECK(acc && one);
  acc->update->lr->base_lr = one->update->lr->base_lr = 0;
  dpm_trainer *a = trainer_of(acc, 1, NULL), *b = trainer_of(one, 1, NULL);
  dpm_step_stats sa, s1, s2;
  dpm_err err = {0};
  int ok = a && b && !dpm_trainer_step(a, 1, &sa, &err) &&
           !dpm_trainer_step(b, 1, &s1, &err) && !dpm_trainer_step(b, 1, &s2, &err);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(acc);
  dpm_spec_free(one);
  CHECK(ok);
  CHECK(s1.loss != s2.loss);
  CHECK_WITHIN(fabs(sa.loss - (s1.loss + s2.loss) / 2), 1e-6);
}

/* The gathered step's host buffers are counted against the model's
 * memory: a copy of the gradients (304 values here) per replica, and with
 * accumulation their sum. */
TEST(accum_buffer_counted) {
  Dpm__ModelSpec *acc = spec_of(8, "sgd", ", accumulate_steps: 2", NULL),
                 *one = spec_of(8, "sgd", "", NULL);
  dpm_trainer *a = trainer_of(acc, 2, NULL), *b = trainer_of(one, 2, NULL);
  uint64_t ta = a ? dpm_trainer_memory_of(a)->tensors : 0,
           tb = b ? dpm_trainer_memory_of(b)->tensors : 0;
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(acc);
  dpm_spec_free(one);
  CHECK(ta && tb);
  CHECK_INT(ta - tb, 2 * 2 * 304 * sizeof(float));
}
