/* parallel.mode bmuf (Caffe2's Parallelize_BMUF, parallel/bmuf.h): the
 * parameters after 3 blocks equal a reference written here (the block
 * update computed in double by the test from the replicas' own params,
 * with the local steps run by a trainer whose blocks never come); resume
 * in the middle of a block is bitwise exact, every replica's state
 * included; checkpoints of one mode are refused by the other; the spec's
 * bounds. On CPU devices and again on fenced ones (backend/fenced), so the
 * block update's bytes cross through the backend's copies only. */
#include <stdlib.h>
#include <unistd.h>

#include "common/spec.h"
#include "common/validate.h"
#include "engine/workspace.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

#define DROPOUT_FORWARD                                                                  \
  "  - {op: FC, in: [data], out: fc1, dim_out: 64}\n"                                    \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: Dropout, in: [fc1], out: drop1, ratio: 0.3}\n"                               \
  "  - {op: FC, in: [drop1], out: pred, dim_out: 10}\n"

/* A spec like tf_spec's (momentum SGD, synthetic data), with `parallel` as
 * given (a YAML flow mapping's inside). */
static Dpm__ModelSpec *bmuf_spec(const char *forward, int per_device,
                                 const char *parallel) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 2048,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05}}\n"
           "parallel: {%s}\n",
           per_device, forward, parallel);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

/* The params (kind PARAM) of a trainer's model. */
static int params_of(dpm_trainer *t, const char **names, int cap) {
  const dpm_model *m = dpm_trainer_model(t);
  int n = 0;
  for (int i = 0; i < m->shapes.n && n < cap; i++)
    if (m->shapes.v[i].kind == DPM_BLOB_PARAM) names[n++] = m->shapes.v[i].name;
  return n;
}

/* Replica d's blob `name` into out (resized); through the backend. */
static void read_param(dpm_trainer *t, int d, const char *name, dpm_tensor *out) {
  const dpm_blob *b = dpm_ws_find(dpm_trainer_workspace(t, d), name);
  dpm_tensor_resize(out, &b->t.shape);
  dpm_tensor_read(&b->t, out->data, dpm_shape_bytes(&b->t.shape));
}

static void write_param(dpm_trainer *t, int d, const char *name, const float *v) {
  dpm_blob *b = dpm_ws_find(dpm_trainer_workspace(t, d), name);
  dpm_tensor_write(&b->t, v, dpm_shape_bytes(&b->t.shape));
}

#define MAX_PARAMS 8

/* 3 blocks of 3 steps on 2 replicas against the reference: `ref` runs the
 * same spec with blocks that never come (local_steps 10^6), and after
 * every third step the test takes its replicas' params and applies the
 * block update itself, in double:
 *   avg = (p0 + p1) / 2; v = mu * v + lr * (avg - g);
 *   g' = g + v, and with Nesterov g' = g + v - mu * (v - v_prev);
 * then writes g' into both replicas. */
static void matches_reference(int nesterov) {
  char par[256], ref_par[256];
  snprintf(par, sizeof par,
           "mode: bmuf, bmuf: {local_steps: 3, block_momentum: 0.6, "
           "block_learning_rate: 0.9, nesterov: %s}",
           nesterov ? "true" : "false");
  snprintf(ref_par, sizeof ref_par,
           "mode: bmuf, bmuf: {local_steps: 1000000, block_momentum: 0.6, "
           "block_learning_rate: 0.9, nesterov: %s}",
           nesterov ? "true" : "false");
  Dpm__ModelSpec *spec = bmuf_spec(MLP_FORWARD, 16, par),
                 *rspec = bmuf_spec(MLP_FORWARD, 16, ref_par);
  dpm_trainer *t = tf_trainer(spec, 2, NULL), *ref = tf_trainer(rspec, 2, NULL);
  CHECK(t && ref);
  const char *names[MAX_PARAMS];
  int np = params_of(t, names, MAX_PARAMS);
  CHECK(np == 6);
  double *g[MAX_PARAMS], *v[MAX_PARAMS], *prev[MAX_PARAMS];
  int64_t numel[MAX_PARAMS];
  dpm_tensor a = {0}, b = {0};
  for (int i = 0; i < np; i++) {
    read_param(ref, 0, names[i], &a);
    numel[i] = dpm_tensor_numel(&a);
    g[i] = calloc((size_t)numel[i], sizeof(double));
    v[i] = calloc((size_t)numel[i], sizeof(double));
    prev[i] = calloc((size_t)numel[i], sizeof(double));
    for (int64_t k = 0; k < numel[i]; k++) g[i][k] = dpm_f32(&a)[k];
  }
  const double mu = 0.6, lr = 0.9;
  int differed = 0;
  for (int block = 0; block < 3; block++) {
    CHECK(tf_steps(t, 3) && tf_steps(ref, 3));
    for (int i = 0; i < np; i++) {
      read_param(ref, 0, names[i], &a);
      read_param(ref, 1, names[i], &b);
      float *out = malloc((size_t)numel[i] * sizeof *out);
      for (int64_t k = 0; k < numel[i]; k++) {
        double p0 = dpm_f32(&a)[k], p1 = dpm_f32(&b)[k];
        differed |= p0 != p1;
        double avg = (p0 + p1) / 2, vn = mu * v[i][k] + lr * (avg - g[i][k]);
        double gn = g[i][k] + vn - (nesterov ? mu * (vn - prev[i][k]) : 0);
        prev[i][k] = v[i][k] = vn;
        g[i][k] = gn;
        out[k] = (float)gn;
      }
      write_param(ref, 0, names[i], out);
      write_param(ref, 1, names[i], out);
      free(out);
    }
  }
  CHECK(differed); /* the replicas stepped on their own inside each block */
  double diff = 0, mag = 0;
  for (int i = 0; i < np; i++)
    for (int d = 0; d < 2; d++) {
      read_param(t, d, names[i], &a);
      for (int64_t k = 0; k < numel[i]; k++) {
        diff = fmax(diff, fabs(dpm_f32(&a)[k] - g[i][k]));
        mag = fmax(mag, fabs(g[i][k]));
      }
    }
  printf("    %s, 3 blocks of 3 steps on 2 replicas: max |dpm - reference| = %.3g "
         "(max |param| %.3g)\n",
         nesterov ? "nesterov" : "plain", diff, mag);
  CHECK_WITHIN(diff, 1e-6);
  /* every replica ends the block with the same params, bitwise */
  for (int i = 0; i < np; i++) {
    read_param(t, 0, names[i], &a);
    read_param(t, 1, names[i], &b);
    CHECK(!memcmp(a.data, b.data, dpm_shape_bytes(&a.shape)));
  }
  for (int i = 0; i < np; i++) free(g[i]), free(v[i]), free(prev[i]);
  dpm_tensor_fini(&a);
  dpm_tensor_fini(&b);
  dpm_trainer_destroy(t);
  dpm_trainer_destroy(ref);
  dpm_spec_free(spec);
  dpm_spec_free(rspec);
}
static void plain_matches(void) { matches_reference(0); }
static void nesterov_matches(void) { matches_reference(1); }
TEST(bmuf_three_blocks_match_reference) { plain_matches(); }
TEST(bmuf_nesterov_three_blocks_match_reference) { nesterov_matches(); }

TEST(fenced_bmuf_three_blocks_match_reference) { tf_on_fenced(plain_matches); }


/* Whether every param of every replica of a and b is bitwise equal. */
static int same_params(dpm_trainer *x, dpm_trainer *y) {
  const char *names[MAX_PARAMS];
  int np = params_of(x, names, MAX_PARAMS), same = 1;
  dpm_tensor a = {0}, b = {0};
  for (int d = 0; d < dpm_trainer_devices(x) && same; d++)
    for (int i = 0; i < np && same; i++) {
      read_param(x, d, names[i], &a);
      read_param(y, d, names[i], &b);
      same = !memcmp(a.data, b.data, dpm_shape_bytes(&a.shape));
      if (!same) printf("    replica %d's %s differs\n", d, names[i]);
    }
  dpm_tensor_fini(&a);
  dpm_tensor_fini(&b);
  return same;
}

/* 7 steps (inside the third block: blocks end after steps 3, 6, 9, 12),
 * checkpoint, load into a fresh trainer, 5 more: bitwise the 12 steps of an
 * uninterrupted run (Dropout and momentum included), every replica. */
static void resume_mid_block(void) {
  const char *par = "mode: bmuf, bmuf: {local_steps: 3, nesterov: true}";
  Dpm__ModelSpec *spec = bmuf_spec(DROPOUT_FORWARD, 16, par);
  char *path = tf_temp_path("mid-block.ckpt");
  dpm_err err = {0};
  dpm_trainer *straight = tf_trainer(spec, 2, NULL), *first = tf_trainer(spec, 2, NULL);
  CHECK(straight && first && tf_steps(straight, 12) && tf_steps(first, 7));
  CHECK_INT(dpm_trainer_checkpoint(first, NULL, path, &err), DPM_OK);
  dpm_trainer *resumed = tf_trainer(spec, 2, NULL);
  CHECK_INT(dpm_trainer_load(resumed, NULL, path, &err), DPM_OK);
  CHECK_INT(dpm_trainer_iter(resumed), 7);
  CHECK(same_params(first, resumed)); /* replica 1's own params came back too */
  CHECK(tf_steps(resumed, 5));
  CHECK(same_params(straight, resumed));
  dpm_trainer_destroy(straight);
  dpm_trainer_destroy(first);
  dpm_trainer_destroy(resumed);
  dpm_spec_free(spec);
  unlink(path);
  free(path);
}
TEST(bmuf_resume_mid_block_is_exact) { resume_mid_block(); }
TEST(fenced_bmuf_resume_mid_block_is_exact) { tf_on_fenced(resume_mid_block); }

/* A bmuf checkpoint into a sync model and back: refused, naming the modes;
 * into a bmuf model on other devices: refused. */
TEST(bmuf_checkpoint_refused_by_the_other_mode) {
  Dpm__ModelSpec *bs = bmuf_spec(MLP_FORWARD, 8, "mode: bmuf, bmuf: {local_steps: 2}"),
                 *ss = bmuf_spec(MLP_FORWARD, 8, "mode: sync");
  char *bp = tf_temp_path("bmuf.ckpt"), *sp = tf_temp_path("sync.ckpt");
  dpm_err err = {0};
  dpm_trainer *b = tf_trainer(bs, 2, NULL), *s = tf_trainer(ss, 2, NULL),
              *b4 = tf_trainer(bs, 4, NULL);
  CHECK(b && s && b4 && tf_steps(b, 3) && tf_steps(s, 1));
  CHECK_INT(dpm_trainer_checkpoint(b, NULL, bp, &err), DPM_OK);
  CHECK_INT(dpm_trainer_checkpoint(s, NULL, sp, &err), DPM_OK);
  CHECK_INT(dpm_trainer_load(s, NULL, bp, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "written by a model in parallel.mode bmuf");
  CHECK_INT(dpm_trainer_load(b, NULL, sp, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "parallel.mode sync");
  CHECK_INT(dpm_trainer_load(b4, NULL, bp, &err), DPM_SHAPE);
  CHECK_HAS(err.msg, "written on 2 devices");
  CHECK_INT(dpm_trainer_iter(s), 1); /* untouched */
  CHECK_INT(dpm_trainer_load(b, NULL, bp, &err), DPM_OK);
  dpm_trainer_destroy(b);
  dpm_trainer_destroy(s);
  dpm_trainer_destroy(b4);
  dpm_spec_free(bs);
  dpm_spec_free(ss);
  unlink(bp);
  unlink(sp);
  free(bp);
  free(sp);
}

/* The spec's bounds, each with the file and line. */
TEST(bmuf_spec_bounds) {
  static const struct {
    const char *parallel, *says;
  } bad[] = {
      {"mode: bmuf, bmuf: {local_steps: 0}", "local_steps"},
      {"mode: bmuf, bmuf: {block_momentum: 1}", "block_momentum"},
      {"mode: bmuf, bmuf: {block_learning_rate: 0}", "block_learning_rate"},
      {"bmuf: {local_steps: 4}", "parallel.mode is not bmuf"},
      {"mode: blocks", "mode"},
      {"mode: bmuf, combine_spatial_bn: true", "choose one"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "name: t\ninput: {reader: synthetic, batch_size: 8}\n"
             "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 10}\n"
             "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
             "losses: [loss]\nparallel: {%s}\n",
             bad[i].parallel);
    Dpm__ModelSpec *spec = NULL;
    dpm_err err = {0};
    dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "b.yaml", &spec, &err);
    if (!s) {
      s = dpm_spec_validate(spec, &err);
      dpm_spec_free(spec);
    }
    CHECK(s != DPM_OK);
    CHECK_HAS(err.msg, bad[i].says);
    CHECK_HAS(err.msg, "b.yaml");
  }
}
