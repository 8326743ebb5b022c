/* Weight decay and warm-up as users expect them: weight_decay reaches the
 * weights (FC's and Conv's _w) and leaves biases and SpatialBN's scale and
 * shift alone unless update.weight_decay_bias, in the update net and in
 * training on CPU and fenced devices; the warm-up starts at
 * start_multiplier (0.1 unless given, alias warmup_start), so step 1 does not
 * run at lr 0; spec mistakes name file:line:column; the spec hash of a spec
 * that does not use the new keys is what it was, so its checkpoints load;
 * the cosine policy follows its formula in training and resumes from a
 * checkpoint. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/spec.h"
#include "engine/model.h"
#include "ops/optim.h"
#include "test.h"
#include "train/trainer.h"

/* FC (bias 0.5) -> SpatialBN -> Relu -> FC (bias 0.25) on synthetic 1x4x5
 * examples, plain SGD at lr 0.1 with weight_decay `wd`; `extra` goes into
 * the update section, `lr_extra` into its lr section. */
static Dpm__ModelSpec *spec_of(double wd, const char *extra, const char *lr_extra) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 4, 5],"
           " num_classes: 4, seed: 3}\n"
           "forward:\n"
           "  - {op: FC, in: [data], out: fc1, dim_out: 6, bias_value: 0.5}\n"
           "  - {op: SpatialBN, in: [fc1], out: bn}\n"
           "  - {op: Relu, in: [bn], out: bn}\n"
           "  - {op: FC, in: [bn], out: pred, dim_out: 4, bias_value: 0.25}\n"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "losses: [loss]\n"
           "update: {optimizer: sgd, weight_decay: %g%s, lr: {base: 0.1%s}}\n",
           wd, extra, lr_extra);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

static const char *const PARAMS[] = {"fc1_w", "fc1_b",  "bn_s",
                                     "bn_b",  "pred_w", "pred_b"};
static const int IS_WEIGHT[] = {1, 0, 0, 0, 1, 0};
#define N_PARAMS 6

/* The weight_decay argument of param's optimizer op in m's update net; -1
 * if it has none. */
static double decay_of(const dpm_model *m, const char *param) {
  for (int i = 0; i < m->update.n; i++) {
    const dpm_node *n = &m->update.nodes[i];
    if (n->def->id == DPM_OP_SGD && !strcmp(n->in[0], param)) return n->arg[SGD_WD].f;
  }
  return -1;
}

static const int64_t CHW[3] = {1, 4, 5};

TEST(update_net_decays_weights_only) {
  for (int bias = 0; bias <= 1; bias++) {
    Dpm__ModelSpec *spec = spec_of(0.125, bias ? ", weight_decay_bias: true" : "", "");
    CHECK(spec);
    dpm_model m;
    dpm_err err = {0};
    CHECK_INT(dpm_model_build(spec, CHW, 4, 1.0f, &m, &err), DPM_OK);
    for (int p = 0; p < N_PARAMS; p++) {
      double want = bias || IS_WEIGHT[p] ? 0.125 : 0;
      if (decay_of(&m, PARAMS[p]) != want)
        dpm_test_fail(__FILE__, __LINE__,
                      "weight_decay_bias %d: %s decays by %g, want %g", bias, PARAMS[p],
                      decay_of(&m, PARAMS[p]), want);
    }
    dpm_model_fini(&m);
    dpm_spec_free(spec);
  }
}

/* What train() reads back: each of PARAMS (n[p] floats), and the rate the
 * first steps ran at. */
typedef struct {
  float v[N_PARAMS][256];
  int n[N_PARAMS];
  float lr[6]; /* the rate steps 1 to 6 ran at */
} after;

/* `steps` steps of spec on one device of `kind`, into *out; 1 when all ran. */
static int train(const Dpm__ModelSpec *spec, dpm_device_kind kind, int steps,
                 after *out) {
  dpm_trainer_options opt = {
      .devices = 1, .kind = kind, .net_type = -1, .comm_timeout_ms = 20000};
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  dpm_step_stats st;
  int ok = spec && !dpm_trainer_create(spec, &opt, &t, &err);
  for (int s = 0; ok && s < steps; s++) {
    ok = !dpm_trainer_step(t, 1, &st, &err);
    dpm_tensor lr = {0};
    ok = ok && !dpm_trainer_read_blob(t, "lr", &lr, &err);
    if (ok && s < 6) out->lr[s] = dpm_f32(&lr)[0];
    dpm_tensor_fini(&lr);
  }
  for (int p = 0; ok && p < N_PARAMS; p++) {
    dpm_tensor h = {0};
    ok = !dpm_trainer_read_blob(t, PARAMS[p], &h, &err) && dpm_tensor_numel(&h) <= 256;
    if (ok) {
      out->n[p] = (int)dpm_tensor_numel(&h);
      memcpy(out->v[p], dpm_f32(&h), sizeof(float) * (size_t)out->n[p]);
    }
    dpm_tensor_fini(&h);
  }
  if (!ok) printf("    train: %s\n", err.msg);
  dpm_trainer_destroy(t);
  return ok;
}

/* After one step from the same initial values (so the same gradients), a
 * decayed param p ends at p_plain - lr * wd * p0 (SGD: p -= lr * (g + wd * p));
 * one that is not decayed ends bitwise where it does without weight decay. */
static void decay_in_training(dpm_device_kind kind) {
  static const float p0[N_PARAMS] = {0, 0.5f, 1, 0, 0, 0.25f}; /* constant inits */
  Dpm__ModelSpec *plain = spec_of(0, "", ""), *wd = spec_of(0.5, "", ""),
                 *all = spec_of(0.5, ", weight_decay_bias: true", "");
  after *a = calloc(3, sizeof *a);
  int ok = a && train(plain, kind, 1, &a[0]) && train(wd, kind, 1, &a[1]) &&
           train(all, kind, 1, &a[2]);
  dpm_spec_free(plain);
  dpm_spec_free(wd);
  dpm_spec_free(all);
  if (!ok) free(a);
  CHECK(ok);
  for (int run = 1; run <= 2; run++)
    for (int p = 0; p < N_PARAMS; p++) {
      int decayed = run == 2 || IS_WEIGHT[p], moved = 0, exact = 1;
      for (int k = 0; k < a[0].n[p]; k++) {
        float x = a[0].v[p][k], y = a[run].v[p][k];
        moved |= x != y;
        if (!decayed)
          exact &= x == y;
        else if (!IS_WEIGHT[p])
          exact &= fabsf(y - (x - 0.1f * 0.5f * p0[p])) <= 1e-6f;
      }
      /* weights start random and nonzero: decay moves them; constant
       * non-weights move by the formula (bn_b starts at 0: nothing to decay) */
      if (!exact || (IS_WEIGHT[p] && !moved) || (!decayed && moved))
        dpm_test_fail(__FILE__, __LINE__, "%s, weight_decay_bias %d: %s %s (moved %d)",
                      dpm_device_kind_name(kind), run == 2, PARAMS[p],
                      decayed ? "not decayed as expected" : "decayed", moved);
    }
  free(a);
}

TEST(weight_decay_reaches_weights_not_biases_cpu) { decay_in_training(DPM_DEVICE_CPU); }
TEST(fenced_weight_decay_reaches_weights_not_biases) {
  decay_in_training(DPM_DEVICE_FENCED);
}

/* The rate steps 1, 2, 3 run at with warmup_iters 4: base * (s + (1 - s) *
 * it / 4) at it = 0, 1, 2, with s = 0.1 unless given. */
static void warmup_in_training(dpm_device_kind kind) {
  static const struct {
    const char *lr_extra;
    double s;
  } cases[] = {
      {", warmup_iters: 4", 0.1},
      {", warmup_iters: 4, start_multiplier: 0.25", 0.25},
      {", warmup_iters: 4, start_multiplier: 1", 1},
      {", warmup_iters: 4, warmup_start: 0.25", 0.25},
      {", warmup_iters: 4, start_multiplier: 0", 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    Dpm__ModelSpec *spec = spec_of(0, "", cases[c].lr_extra);
    after a = {0};
    int ok = train(spec, kind, 3, &a);
    dpm_spec_free(spec);
    CHECK(ok);
    for (int it = 0; it < 3; it++) {
      float want = (float)(0.1 * (cases[c].s + (1 - cases[c].s) * it / 4.0));
      if (a.lr[it] != want)
        dpm_test_fail(__FILE__, __LINE__, "%s, lr {%s}: step %d ran at %.9g, want %.9g",
                      dpm_device_kind_name(kind), cases[c].lr_extra + 2, it + 1, a.lr[it],
                      want);
    }
    CHECK(cases[c].s == 0 || a.lr[0] > 0);
  }
}

TEST(warmup_starts_at_start_multiplier_cpu) { warmup_in_training(DPM_DEVICE_CPU); }
TEST(fenced_warmup_starts_at_start_multiplier) { warmup_in_training(DPM_DEVICE_FENCED); }

/* The cosine policy from a spec, with its warm-up inside max_iter: step
 * it + 1 runs at 0.1 * (f + (1 - f) (1 + cos(pi min(it, T) / T)) / 2),
 * times the warm-up's factor for it < warmup_iters; past T it stays at
 * 0.1 f. Computed as the kernels do, in double, then rounded to float. */
static void cosine_in_training(dpm_device_kind kind) {
  Dpm__ModelSpec *spec = spec_of(0, "",
                                 ", policy: cosine, max_iter: 4, final_multiplier: 0.2,"
                                 " warmup_iters: 2, start_multiplier: 0.5");
  after a = {0};
  int ok = spec && train(spec, kind, 6, &a);
  dpm_spec_free(spec);
  CHECK(ok);
  for (int it = 0; it < 6; it++) {
    double t = it < 4 ? it : 4, f = 0.2;
    double rate = 0.1 * (f + (1.0 - f) * 0.5 * (1.0 + cos(M_PI * t / 4.0)));
    if (it < 2) rate *= 0.5 + (1.0 - 0.5) * it / 2.0;
    if (a.lr[it] != (float)rate)
      dpm_test_fail(__FILE__, __LINE__, "%s: step %d ran at %.9g, want %.9g",
                    dpm_device_kind_name(kind), it + 1, a.lr[it], (float)rate);
  }
  CHECK(a.lr[5] == (float)(0.1 * 0.2));
}

TEST(cosine_lr_in_training_cpu) { cosine_in_training(DPM_DEVICE_CPU); }

/* A checkpoint in the middle of the warm-up and the cosine resumes the
 * schedule: 3 steps, checkpoint, a new trainer loads it and runs 3 more at
 * the rates of one run of 6. */
TEST(cosine_lr_resumes_from_a_checkpoint) {
  const char *lr =
      ", policy: cosine, max_iter: 5, final_multiplier: 0.1, warmup_iters: 4";
  Dpm__ModelSpec *spec = spec_of(0, "", lr);
  after whole = {0};
  int ok = spec && train(spec, DPM_DEVICE_CPU, 6, &whole);
  char path[] = "/tmp/dpm_cosine_ckpt_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  float got[6] = {0};
  dpm_trainer_options opt = {.devices = 1, .kind = DPM_DEVICE_CPU, .net_type = -1};
  dpm_err err = {0};
  dpm_step_stats st;
  for (int part = 0; ok && part < 2; part++) {
    dpm_trainer *t = NULL;
    ok = fd >= 0 && !dpm_trainer_create(spec, &opt, &t, &err) &&
         (part == 0 || !dpm_trainer_load(t, NULL, path, &err));
    for (int s = 0; ok && s < 3; s++) {
      dpm_tensor r = {0};
      ok =
          !dpm_trainer_step(t, 1, &st, &err) && !dpm_trainer_read_blob(t, "lr", &r, &err);
      if (ok) got[3 * part + s] = dpm_f32(&r)[0];
      dpm_tensor_fini(&r);
    }
    if (ok && part == 0) ok = !dpm_trainer_checkpoint(t, NULL, path, &err);
    dpm_trainer_destroy(t);
  }
  if (fd >= 0) unlink(path);
  dpm_spec_free(spec);
  if (!ok) printf("    %s\n", err.msg);
  CHECK(ok);
  for (int s = 0; ok && s < 6; s++)
    if (got[s] != whole.lr[s])
      dpm_test_fail(__FILE__, __LINE__, "step %d: %.9g resumed, %.9g in one run", s + 1,
                    got[s], whole.lr[s]);
  CHECK(whole.lr[3] != whole.lr[4] && whole.lr[4] != whole.lr[5]); /* still moving */
}
TEST(fenced_cosine_lr_in_training) { cosine_in_training(DPM_DEVICE_FENCED); }

/* The spec's default reaches LearningRate: 0.1, the given value otherwise. */
TEST(warmup_default_start_multiplier) {
  static const struct {
    const char *lr_extra;
    double s;
  } cases[] = {{", warmup_iters: 100", 0.1},
               {", warmup_iters: 100, start_multiplier: 0.5", 0.5},
               {", warmup_iters: 100, warmup_start: 0", 0}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    Dpm__ModelSpec *spec = spec_of(0, "", cases[c].lr_extra);
    CHECK(spec);
    CHECK(spec->update->lr->start_multiplier == cases[c].s);
    dpm_model m;
    dpm_err err = {0};
    CHECK_INT(dpm_model_build(spec, CHW, 4, 1.0f, &m, &err), DPM_OK);
    const dpm_node *lr = NULL;
    for (int i = 0; i < m.update.n && !lr; i++)
      if (m.update.nodes[i].def->id == DPM_OP_LEARNING_RATE) lr = &m.update.nodes[i];
    CHECK(lr && lr->arg[LR_START_MULTIPLIER].f == cases[c].s);
    dpm_model_fini(&m);
    dpm_spec_free(spec);
  }
}

/* Parses text as "t.yaml" and expects DPM_SPEC with a message that starts
 * with prefix and contains sub. */
static void expect_error(int line, const char *text, const char *prefix,
                         const char *sub) {
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  dpm_status st = dpm_spec_parse(text, strlen(text), "t.yaml", &s, &err);
  if (st != DPM_SPEC || s || strncmp(err.msg, prefix, strlen(prefix)) ||
      !strstr(err.msg, sub))
    dpm_test_fail(__FILE__, line, "status %s, message \"%s\", want \"%s...%s\"",
                  dpm_status_name(st), err.msg, prefix, sub);
  dpm_spec_free(s);
}

#define MINI                                                                             \
  "name: m\n"                                                                            \
  "forward:\n"                                                                           \
  "  - {op: FC, in: data, out: pred, dim_out: 10}\n"                                     \
  "losses: [loss]\n"

TEST(decay_warmup_spec_errors) {
  expect_error(__LINE__, MINI "update: {lr: {start_multiplier: 1.5}}\n",
               "t.yaml:5:33: ", "'start_multiplier' must be in [0, 1], got '1.5'");
  expect_error(__LINE__, MINI "update: {lr: {start_multiplier: -0.1}}\n",
               "t.yaml:5:33: ", "'start_multiplier' must be in [0, 1]");
  expect_error(__LINE__, MINI "update: {lr: {warmup_start: 2}}\n",
               "t.yaml:5:29: ", "'warmup_start' must be in [0, 1], got '2'");
  expect_error(__LINE__, MINI "update: {lr: {start_multiplier: x}}\n",
               "t.yaml:5:33: ", "'start_multiplier' must be a number, got 'x'");
  expect_error(__LINE__,
               MINI "update:\n  lr:\n    start_multiplier: 0.1\n    warmup_start: 0.1\n",
               "t.yaml:8:19: ", "'warmup_start' is another name for 'start_multiplier'");
  expect_error(__LINE__, MINI "update: {weight_decay_bias: yes}\n",
               "t.yaml:5:29: ", "'weight_decay_bias' must be true or false, got 'yes'");
  expect_error(__LINE__, MINI "update: {weight_decay_bias: [true]}\n",
               "t.yaml:5:29: ", "'weight_decay_bias'");
}

#define IN "input: {images: i, labels: l}\n"

/* dpm_spec_hash of the examples before weight_decay_bias and
 * start_multiplier existed: their checkpoints must keep loading. */
TEST(spec_hash_unchanged_by_new_keys) {
  static const struct {
    const char *path;
    uint64_t hash;
  } examples[] = {{"examples/fmnist_mlp.yaml", 0xb717f6a64f7f73b5ull},
                  {"examples/fmnist_cnn.yaml", 0x5f3396b6244f597bull}};
  for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
    Dpm__ModelSpec *s = NULL;
    dpm_err err = {0};
    CHECK_INT(dpm_spec_load(examples[i].path, &s, &err), DPM_OK);
    if (dpm_spec_hash(s) != examples[i].hash)
      dpm_test_fail(__FILE__, __LINE__,
                    "%s hashes to 0x%016" PRIx64 ", was 0x%016" PRIx64, examples[i].path,
                    dpm_spec_hash(s), examples[i].hash);
    dpm_spec_free(s);
  }
  /* Writing a new key, even at its default, is a change of the spec; the
   * alias is the same field. */
  static const char *const variants[] = {
      "",
      ", weight_decay_bias: false",
      ", weight_decay_bias: true",
      ", lr: {base: 0.1, warmup_iters: 4, start_multiplier: 0.25}",
      ", lr: {base: 0.1, warmup_iters: 4}",
  };
  uint64_t h[5];
  for (int v = 0; v < 5; v++) {
    char yaml[512];
    snprintf(yaml, sizeof yaml, MINI IN "update: {weight_decay: 0.1%s}\n", variants[v]);
    Dpm__ModelSpec *s = NULL;
    dpm_err err = {0};
    if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &s, &err))
      return dpm_test_fail(__FILE__, __LINE__, "variant %d: %s", v, err.msg);
    h[v] = dpm_spec_hash(s);
    dpm_spec_free(s);
  }
  for (int v = 0; v < 5; v++)
    for (int w = v + 1; w < 5; w++)
      if (h[v] == h[w])
        dpm_test_fail(__FILE__, __LINE__, "variants %d and %d hash the same", v, w);
  const char *a = MINI IN "update: {lr: {warmup_iters: 4, start_multiplier: 0.25}}\n",
             *b = MINI IN "update: {lr: {warmup_iters: 4, warmup_start: 0.25}}\n";
  Dpm__ModelSpec *sa = NULL, *sb = NULL;
  CHECK_INT(dpm_spec_parse(a, strlen(a), "a.yaml", &sa, NULL), DPM_OK);
  CHECK_INT(dpm_spec_parse(b, strlen(b), "b.yaml", &sb, NULL), DPM_OK);
  CHECK(dpm_spec_hash(sa) == dpm_spec_hash(sb));
  dpm_spec_free(sa);
  dpm_spec_free(sb);
}
