/* Predictor extraction and runtime: a predictor reproduces the model's test
 * net on the same batch (test-mode SpatialBN and Dropout included), holds
 * only the forward ops its outputs need, refuses outputs it cannot compute,
 * and the runtime refuses bad files with clear errors and no crash. On a
 * device (fenced:N here) it gives the host's bits; cuda:0 without a driver
 * and bad device names are refused, leaving it usable. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/cuda_load.h"
#include "common/spec.h"
#include "dpm/predictor.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "predictor/predictor_extract.h"
#include "test.h"
#include "testfile.h"

static const int64_t CHW[3] = {1, 4, 5};
#define EX 20 /* floats per example */
#define BATCH 3

#define HEADER                                                                           \
  "name: pm\n"                                                                           \
  "input: {reader: synthetic, batch_size: 3, num_examples: 30, shape: [1,4,5],"          \
  " num_classes: 4, outputs: [data, label]}\n"

/* FC -> Relu -> FC pred -> Softmax prob, plus the training head. */
static const char *const MLP =
    HEADER "forward:\n"
           "  - {op: FC, in: [data], out: fc1, dim_out: 6}\n"
           "  - {op: Relu, in: [fc1], out: fc1}\n"
           "  - {op: FC, in: [fc1], out: pred, dim_out: 4}\n"
           "  - {op: Softmax, in: [pred], out: prob}\n"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, lr: {base: 0.1}}\n";

/* Conv -> SpatialBN -> Relu -> Dropout -> FC pred -> Softmax prob. */
static const char *const BN =
    HEADER "forward:\n"
           "  - {op: Conv, in: [data], out: c1, dim_out: 3, kernel: 3, pad: 1}\n"
           "  - {op: SpatialBN, in: [c1], out: bn1, momentum: 0.5}\n"
           "  - {op: Relu, in: [bn1], out: bn1}\n"
           "  - {op: Dropout, in: [bn1], out: d1, ratio: 0.5}\n"
           "  - {op: FC, in: [d1], out: pred, dim_out: 4}\n"
           "  - {op: Softmax, in: [pred], out: prob}\n"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "losses: [loss]\n"
           "update: {optimizer: sgd, lr: {base: 0.05}}\n";

/* A trained model and its master workspace. */
typedef struct fixture {
  dpm_model m;
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec init, train, update; /* update: empty when train holds the optimizers */
  char dir[64];                 /* a fresh directory for predictors */
} fixture;

static void example(float *x, int b, int seed) {
  for (int i = 0; i < b * EX; i++) x[i] = (float)(((i + seed) * 37 % 23) - 11) / 7.f;
}

/* Build the spec, initialise, train `steps` steps. 0 on success. */
static void teardown(fixture *f);

/* Builds and trains the fixture; on failure reports it and tears down. */
static int setup(fixture *f, const char *yaml, int steps) {
  memset(f, 0, sizeof *f);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "p.yaml", &spec, &err);
  if (!s) s = dpm_model_build(spec, CHW, BATCH, 1.0f, &f->m, &err);
  dpm_spec_free(spec);
  if (!s) s = dpm_exec_bind(&f->init, &f->m.init, &f->m.shapes, &f->ws, &f->ctx, &err);
  if (!s) dpm_exec_run(&f->init);
  if (!s) s = dpm_exec_bind(&f->train, &f->m.train, &f->m.shapes, &f->ws, &f->ctx, &err);
  if (!s)
    s = dpm_exec_bind(&f->update, &f->m.update, &f->m.shapes, &f->ws, &f->ctx, &err);
  for (int i = 0; i < steps && !s; i++) {
    example(dpm_f32(&dpm_ws_find(&f->ws, "data")->t), BATCH, 5 * i + 1);
    int32_t *y = dpm_i32(&dpm_ws_find(&f->ws, "label")->t);
    for (int k = 0; k < BATCH; k++) y[k] = (k + i) % 4;
    dpm_exec_run(&f->train);
    dpm_exec_run(&f->update);
  }
  snprintf(f->dir, sizeof f->dir, "/tmp/dpm_predictor_XXXXXX");
  if (!s && !mkdtemp(f->dir)) s = dpm_errf(&err, DPM_IO, "mkdtemp failed");
  if (s) {
    dpm_test_fail(__FILE__, __LINE__, "setup: %s", err.msg);
    teardown(f);
  }
  return s;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR)
      remove_dir(path);
    else
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static void teardown(fixture *f) {
  if (f->dir[0]) remove_dir(f->dir);
  dpm_exec_fini(&f->init);
  dpm_exec_fini(&f->train);
  dpm_exec_fini(&f->update);
  dpm_ws_fini(&f->ws);
  dpm_ctx_fini(&f->ctx);
  dpm_model_fini(&f->m);
}

/* The test net forward on x (b examples): blob `out` into y (n floats max).
 * Returns its element count, or -1. */
static int64_t test_forward(fixture *f, const float *x, int b, const char *out, float *y,
                            int64_t n) {
  dpm_shapes t = {0};
  dpm_workspace tws = {.parent = &f->ws};
  dpm_exec e = {0};
  dpm_ctx ctx = {0};
  dpm_err err = {0};
  int64_t got = -1;
  if (!dpm_model_test_shapes(&f->m, b, &t, &err) &&
      !dpm_exec_bind(&e, &f->m.test, &t, &tws, &ctx, &err)) {
    memcpy(dpm_ws_find(&tws, "data")->t.data, x, (size_t)b * EX * sizeof *x);
    int32_t *lab = dpm_i32(&dpm_ws_find(&tws, "label")->t);
    for (int k = 0; k < b; k++) lab[k] = k % 4;
    dpm_exec_run(&e);
    const dpm_tensor *o = &dpm_ws_find(&tws, out)->t;
    got = dpm_tensor_numel(o);
    if (got <= n) memcpy(y, o->data, (size_t)got * sizeof *y);
  } else {
    dpm_test_fail(__FILE__, __LINE__, "test net: %s", err.msg);
  }
  dpm_exec_fini(&e);
  dpm_ctx_fini(&ctx);
  dpm_ws_fini(&tws);
  dpm_shapes_fini(&t);
  return got;
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
  return worst;
}

static const char *const DATA[] = {"data"};
static const char *const PROB[] = {"prob"};

/* Export [data] -> outputs from f into f->dir. */
static dpm_status export(fixture *f, const char *const *outs, int n_out, dpm_err *err) {
  return dpm_predictor_export(&f->m, &f->ws, DATA, 1, outs, n_out, NULL, f->dir, err);
}

/* Runs p on x (b examples) and compares output 0 with the test net's `out`. */
static double predictor_vs_test_net(fixture *f, dpm_predictor *p, const float *x, int b,
                                    const char *out) {
  float want[256];
  int64_t n = test_forward(f, x, b, out, want, 256);
  dpm_err err = {0};
  if (n < 0 || dpm_predictor_run(p, &x, b, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "run: %s", err.msg);
    return INFINITY;
  }
  int64_t dims[4];
  int ndim;
  const float *y = dpm_predictor_output(p, 0, dims, &ndim);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= dims[d];
  if (!y || numel != n || dims[0] != b) {
    dpm_test_fail(__FILE__, __LINE__, "output has %lld values, want %lld",
                  (long long)numel, (long long)n);
    return INFINITY;
  }
  return max_diff(y, want, n);
}

TEST(predictor_matches_test_net_mlp) {
  fixture f;
  if (setup(&f, MLP, 3)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  float x[BATCH * EX];
  example(x, BATCH, 99);
  if (export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err))
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  else {
    CHECK_INT(dpm_predictor_num_inputs(p), 1);
    CHECK_INT(dpm_predictor_num_outputs(p), 1);
    CHECK(!strcmp(dpm_predictor_input_name(p, 0), "data"));
    CHECK(!strcmp(dpm_predictor_output_name(p, 0), "prob"));
    CHECK(!strcmp(dpm_predictor_name(p), "pm"));
    int64_t d[3];
    CHECK_INT(dpm_predictor_input_shape(p, 0, d), 3);
    CHECK(d[0] == 1 && d[1] == 4 && d[2] == 5);
    CHECK_INT(dpm_predictor_input_size(p, 0), EX);
    CHECK(dpm_predictor_output(p, 0, NULL, NULL) == NULL); /* not run yet */
    CHECK_INT(dpm_predictor_num_ops(p), 3); /* FC+Relu fused again, FC, Softmax */
    double diff = predictor_vs_test_net(&f, p, x, BATCH, "prob");
    printf("    max |predictor - test net| = %.3g\n", diff);
    CHECK_WITHIN(diff, 1e-6);
    int64_t dims[4];
    int ndim;
    CHECK(dpm_predictor_output(p, 0, dims, &ndim) && ndim == 2 && dims[1] == 4);
  }
  dpm_predictor_free(p);
  teardown(&f);
}

TEST(predictor_file_holds_only_needed_forward_ops) {
  fixture f;
  if (setup(&f, MLP, 2)) return;
  dpm_err err = {0};
  char path[128];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/predictor.pb", f.dir);
  Dpm__PredictorDef *d = NULL;
  uint8_t *buf = NULL;
  if (export(&f, PROB, 1, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else if (!(buf = test_read_file(path, &len)) ||
             !(d = dpm__predictor_def__unpack(NULL, len, buf))) {
    dpm_test_fail(__FILE__, __LINE__, "cannot read back %s", path);
  } else {
    static const char *const ops[] = {"FC", "Relu", "FC", "Softmax"};
    CHECK_INT(d->version, DPM_PREDICTOR_VERSION);
    CHECK_INT(d->n_op, 4);
    for (int i = 0; i < 4; i++) {
      CHECK_HAS(d->op[i]->type, ops[i]);
      CHECK(!strcmp(d->op[i]->type, ops[i]));
      const dpm_op_def *def = dpm_op_find(d->op[i]->type);
      CHECK(def && !(def->flags & DPM_OP_HIDDEN));
    }
    /* The Relu is the fused one, written back in place on fc1. */
    CHECK(!strcmp(d->op[1]->input[0], "fc1") && !strcmp(d->op[1]->output[0], "fc1"));
    /* FC arguments are all explicit and typed. */
    int dim_out = -1;
    for (size_t a = 0; a < d->op[0]->n_arg; a++)
      if (!strcmp(d->op[0]->arg[a]->name, "dim_out") &&
          d->op[0]->arg[a]->value_case == DPM__ARGUMENT__VALUE_I)
        dim_out = (int)d->op[0]->arg[a]->i;
    CHECK_INT(dim_out, 6);
    CHECK_INT(d->op[0]->n_arg, dpm_op_nargs(dpm_op_find("FC")));
    CHECK(d->n_input == 1 && !strcmp(d->input[0], "data"));
    CHECK(d->n_output == 1 && !strcmp(d->output[0], "prob"));
    CHECK(d->n_input_shape == 1 && d->input_shape[0]->n_v == 3);
    CHECK(d->input_shape[0]->v[0] == 1 && d->input_shape[0]->v[1] == 4 &&
          d->input_shape[0]->v[2] == 5);
    static const char *const params[] = {"fc1_w", "fc1_b", "pred_w", "pred_b"};
    CHECK_INT(d->n_param, 4);
    for (int i = 0; i < 4; i++) {
      const Dpm__TensorProto *t = d->param[i];
      CHECK(!strcmp(t->name, params[i]));
      const dpm_tensor *w = &dpm_ws_find(&f.ws, params[i])->t;
      CHECK_INT(t->dtype, DPM_F32);
      CHECK_INT(t->n_dims, w->shape.ndim);
      CHECK(t->data.len == dpm_shape_bytes(&w->shape) &&
            !memcmp(t->data.data, w->data, t->data.len));
    }
    /* Nothing scoped, nothing of training. */
    for (size_t i = 0; i < d->n_op; i++) {
      for (size_t k = 0; k < d->op[i]->n_input; k++)
        CHECK(!strchr(d->op[i]->input[k], '/'));
      for (size_t k = 0; k < d->op[i]->n_output; k++) {
        CHECK(!strstr(d->op[i]->output[k], "_grad"));
        CHECK(strcmp(d->op[i]->output[k], "loss") &&
              strcmp(d->op[i]->output[k], "accuracy"));
      }
    }
  }
  dpm__predictor_def__free_unpacked(d, NULL);
  free(buf);
  teardown(&f);
}

TEST(predictor_uses_running_stats_and_no_dropout) {
  fixture f;
  if (setup(&f, BN, 4)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  float x[BATCH * EX];
  example(x, BATCH, 7);
  /* Training moved the running statistics away from their initial 0 / 1. */
  const float *rm = dpm_f32(&dpm_ws_find(&f.ws, "bn1_rm")->t);
  const float *riv = dpm_f32(&dpm_ws_find(&f.ws, "bn1_riv")->t);
  CHECK(fabs(rm[0]) > 1e-4 && fabs(riv[0] - 1) > 1e-4);
  uint8_t *buf = NULL;
  size_t len = 0;
  if (dpm_predictor_extract(&f.m, &f.ws, DATA, 1, PROB, 1, &buf, &len, &err) ||
      export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else {
    Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, buf);
    static const char *const ops[] = {"Conv",    "SpatialBN", "Relu",
                                      "Dropout", "FC",        "Softmax"};
    CHECK(d && d->n_op == 6);
    for (int i = 0; i < 6; i++) CHECK(!strcmp(d->op[i]->type, ops[i]));
    int has_rm = 0;
    for (size_t i = 0; i < d->n_param; i++)
      if (!strcmp(d->param[i]->name, "bn1_rm"))
        has_rm = !memcmp(d->param[i]->data.data, rm, 3 * sizeof *rm);
    CHECK(has_rm); /* the running mean travels with the predictor */
    dpm__predictor_def__free_unpacked(d, NULL);
    double diff = predictor_vs_test_net(&f, p, x, BATCH, "prob");
    printf("    max |predictor - test net| = %.3g\n", diff);
    CHECK_WITHIN(diff, 1e-6);
    /* Train mode (batch statistics, dropout) gives something else. */
    memcpy(dpm_ws_find(&f.ws, "data")->t.data, x, sizeof x);
    dpm_exec_run_range(&f.train, 0, f.m.n_forward);
    const float *y = dpm_predictor_output(p, 0, NULL, NULL);
    double train_diff = max_diff(y, dpm_f32(&dpm_ws_find(&f.ws, "prob")->t), BATCH * 4);
    printf("    max |predictor - train-mode forward| = %.3g\n", train_diff);
    CHECK(train_diff > 1e-3);
  }
  free(buf);
  dpm_predictor_free(p);
  teardown(&f);
}

/* BN with a bias-less Conv: the model has no c1_b and no gradient of one,
 * the predictor file none either, and the loaded predictor (whose Conv has
 * two inputs) matches the test net. */
TEST(predictor_conv_no_bias) {
  static const char *const NOBIAS =
      HEADER "forward:\n"
             "  - {op: Conv, in: [data], out: c1, dim_out: 3, kernel: 3, pad: 1,"
             " no_bias: true}\n"
             "  - {op: SpatialBN, in: [c1], out: bn1}\n"
             "  - {op: Relu, in: [bn1], out: bn1}\n"
             "  - {op: FC, in: [bn1], out: pred, dim_out: 4}\n"
             "  - {op: Softmax, in: [pred], out: prob}\n"
             "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
             "losses: [loss]\n"
             "update: {optimizer: sgd, lr: {base: 0.05}}\n";
  fixture f;
  if (setup(&f, NOBIAS, 3)) return;
  CHECK(dpm_shapes_get(&f.m.shapes, "c1_w") != NULL);
  CHECK(dpm_shapes_get(&f.m.shapes, "c1_b") == NULL);
  CHECK(dpm_shapes_get(&f.m.shapes, "c1_b_grad") == NULL);
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  uint8_t *buf = NULL;
  size_t len = 0;
  float x[BATCH * EX];
  example(x, BATCH, 11);
  if (dpm_predictor_extract(&f.m, &f.ws, DATA, 1, PROB, 1, &buf, &len, &err) ||
      export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else {
    Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, buf);
    CHECK(d && d->n_op >= 1 && !strcmp(d->op[0]->type, "Conv") && d->op[0]->n_input == 2);
    for (size_t i = 0; d && i < d->n_param; i++) CHECK(strcmp(d->param[i]->name, "c1_b"));
    dpm__predictor_def__free_unpacked(d, NULL);
    double diff = predictor_vs_test_net(&f, p, x, BATCH, "prob");
    CHECK_WITHIN(diff, 1e-6);
  }
  free(buf);
  dpm_predictor_free(p);
  teardown(&f);
}

static void expect_refused(fixture *f, const char *const *in, int n_in,
                           const char *const *out, int n_out, const char *msg) {
  dpm_err err = {0};
  dpm_status s =
      dpm_predictor_export(&f->m, &f->ws, in, n_in, out, n_out, NULL, f->dir, &err);
  char path[128];
  snprintf(path, sizeof path, "%s/predictor.pb", f->dir);
  if (s != DPM_INVALID)
    dpm_test_fail(__FILE__, __LINE__, "status %s (%s), want INVALID", dpm_status_name(s),
                  err.msg);
  else if (!strstr(err.msg, msg))
    dpm_test_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", err.msg, msg);
  else if (access(path, F_OK) == 0)
    dpm_test_fail(__FILE__, __LINE__, "a refused export left %s", path);
}

TEST(predictor_refuses_outputs_it_cannot_compute) {
  fixture f;
  if (setup(&f, MLP, 0)) return;
  const char *loss[] = {"loss"}, *acc[] = {"prob", "accuracy"};
  const char *nope[] = {"nope"}, *label[] = {"label"}, *w[] = {"fc1_w"},
             *dup[] = {"data", "data"};
  expect_refused(&f, DATA, 1, loss, 1,
                 "output 'loss' needs 'label', which is not an input");
  const char *softmax_loss[] = {"softmax", "loss"};
  expect_refused(&f, DATA, 1, softmax_loss, 2, "output 'softmax' needs 'label'");
  expect_refused(&f, DATA, 1, acc, 2, "output 'accuracy' needs 'label'");
  expect_refused(&f, DATA, 1, nope, 1, "output 'nope' is not a blob");
  expect_refused(&f, label, 1, PROB, 1, "input 'label' is i32");
  expect_refused(&f, w, 1, PROB, 1, "input 'fc1_w' is a parameter");
  expect_refused(&f, nope, 1, PROB, 1, "input 'nope' is not a blob");
  expect_refused(&f, dup, 2, PROB, 1, "input 'data' is listed twice");
  expect_refused(&f, DATA, 0, PROB, 1, "at least one input");
  expect_refused(&f, DATA, 1, PROB, 0, "at least one input and one output");
  /* With label given, the loss is computable. */
  const char *both[] = {"data", "label"};
  dpm_err err = {0};
  dpm_status s = dpm_predictor_export(&f.m, &f.ws, both, 2, loss, 1, NULL, f.dir, &err);
  CHECK_INT(s, DPM_INVALID); /* ...but label is i32, which predictor inputs are not */
  CHECK_HAS(err.msg, "input 'label' is i32");
  teardown(&f);
}

/* SoftmaxWithLoss's softmax output alone is computed by Softmax in the
 * predictor (no label needed), equal to the test net's. */
TEST(predictor_softmax_of_softmax_with_loss) {
  fixture f;
  if (setup(&f, MLP, 3)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  float x[BATCH * EX];
  example(x, BATCH, 5);
  const char *softmax[] = {"softmax"};
  if (export(&f, softmax, 1, &err) || dpm_predictor_load(f.dir, &p, &err))
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  else {
    double diff = predictor_vs_test_net(&f, p, x, BATCH, "softmax");
    printf("    max |predictor softmax - test net| = %.3g\n", diff);
    CHECK_WITHIN(diff, 1e-6);
  }
  dpm_predictor_free(p);
  teardown(&f);
}

/* An input in the middle: fc1 as FC left it, so the (fused) Relu stays. */
TEST(predictor_starts_at_a_middle_input) {
  fixture f;
  if (setup(&f, MLP, 2)) return;
  const char *in[] = {"fc1"};
  dpm_err err = {0};
  uint8_t *buf = NULL;
  size_t len = 0;
  dpm_predictor *p = NULL;
  if (dpm_predictor_extract(&f.m, &f.ws, in, 1, PROB, 1, &buf, &len, &err) ||
      dpm_predictor_load_buffer(buf, len, "mid", &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else {
    Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, buf);
    static const char *const ops[] = {"Relu", "FC", "Softmax"};
    CHECK(d && d->n_op == 3);
    for (int i = 0; i < 3; i++) CHECK(!strcmp(d->op[i]->type, ops[i]));
    CHECK(d->n_param == 2 && !strcmp(d->param[0]->name, "pred_w"));
    CHECK(d->input_shape[0]->n_v == 1 && d->input_shape[0]->v[0] == 6);
    dpm__predictor_def__free_unpacked(d, NULL);
    /* fc1 from the test net (after its Relu; Relu again changes nothing). */
    float x[BATCH * EX], fc1[BATCH * 6], want[BATCH * 4];
    example(x, BATCH, 3);
    CHECK(test_forward(&f, x, BATCH, "fc1", fc1, BATCH * 6) == BATCH * 6);
    CHECK(test_forward(&f, x, BATCH, "prob", want, BATCH * 4) == BATCH * 4);
    const float *pin = fc1;
    CHECK_INT(dpm_predictor_run(p, &pin, BATCH, &err), DPM_OK);
    CHECK_WITHIN(max_diff(dpm_predictor_output(p, 0, NULL, NULL), want, BATCH * 4), 1e-6);
  }
  dpm_predictor_free(p);
  free(buf);
  teardown(&f);
}

/* Load b[0..len) after edit(); returns the status, message in err. */
static dpm_status load_edited(const uint8_t *b, size_t len,
                              void (*edit)(Dpm__PredictorDef *), dpm_err *err) {
  Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, b);
  if (!d) return dpm_errf(err, DPM_INTERNAL, "test: cannot unpack");
  edit(d);
  size_t n = dpm__predictor_def__get_packed_size(d);
  uint8_t *buf = malloc(n + 1);
  dpm__predictor_def__pack(d, buf);
  dpm__predictor_def__free_unpacked(d, NULL);
  dpm_predictor *p = NULL;
  dpm_status s = dpm_predictor_load_buffer(buf, n, "edited", &p, err);
  dpm_predictor_free(p);
  free(buf);
  return s;
}

static void set_str(char **field, const char *v) {
  char *copy = strdup(v); /* v may be *field */
  free(*field);
  *field = copy;
}
static void e_version(Dpm__PredictorDef *d) { d->version = 2; }
static void e_no_scale(Dpm__PredictorDef *d) { d->has_input_scale = 0; }
static void e_bad_scale(Dpm__PredictorDef *d) { d->input_scale = -1; }
static void e_gradient_op(Dpm__PredictorDef *d) {
  set_str(&d->op[0]->type, "FCGradient");
}
static void e_fill_arity(Dpm__PredictorDef *d) {
  set_str(&d->op[3]->type, "ConstantFill");
}
static void e_unknown_op(Dpm__PredictorDef *d) { set_str(&d->op[3]->type, "Frobnicate"); }
static void
e_param_shape(Dpm__PredictorDef *d) { /* pred_w [4,6] -> [4,5], data to match */
  d->param[2]->dims[1] = 5;
  d->param[2]->data.len = 4 * 5 * sizeof(float);
}
static void e_param_bytes(Dpm__PredictorDef *d) { d->param[1]->data.len -= 4; }
static void e_dtype(Dpm__PredictorDef *d) { d->param[0]->dtype = 9; }
static void e_missing_param(Dpm__PredictorDef *d) {
  dpm__tensor_proto__free_unpacked(d->param[--d->n_param], NULL);
}
static void
e_unused_param(Dpm__PredictorDef *d) { /* stop at fc1: pred_w, pred_b unread */
  while (d->n_op > 2) dpm__operator__free_unpacked(d->op[--d->n_op], NULL);
  set_str(&d->output[0], "fc1");
}
static void e_arg_name(Dpm__PredictorDef *d) {
  set_str(&d->op[0]->arg[0]->name, "dimout");
}
static void e_arg_value(Dpm__PredictorDef *d) { d->op[0]->arg[0]->i = -1; }
static void e_arg_nan(Dpm__PredictorDef *d) {
  for (size_t a = 0; a < d->op[0]->n_arg; a++)
    if (d->op[0]->arg[a]->value_case == DPM__ARGUMENT__VALUE_F) d->op[0]->arg[a]->f = NAN;
}
static void e_shapes(Dpm__PredictorDef *d) {
  dpm__int_list__free_unpacked(d->input_shape[--d->n_input_shape], NULL);
}
static void e_undefined(Dpm__PredictorDef *d) { set_str(&d->op[2]->input[0], "fc0"); }
static void e_output(Dpm__PredictorDef *d) { set_str(&d->output[0], "prbo"); }
static void e_writes_param(Dpm__PredictorDef *d) {
  set_str(&d->op[1]->output[0], "fc1_w");
}
static void e_not_inplace(Dpm__PredictorDef *d) { set_str(&d->op[0]->output[0], "data"); }
static void e_resizes_input(Dpm__PredictorDef *d) { /* Softmax(pred) -> data */
  set_str(&d->op[3]->output[0], "data");
  set_str(&d->output[0], "data");
}
static void e_read_early(Dpm__PredictorDef *d) { /* reads what a later op writes */
  set_str(&d->op[1]->input[0], "prob");
}

TEST(predictor_refuses_corrupt_files) {
  fixture f;
  if (setup(&f, MLP, 1)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  char path[128];
  snprintf(path, sizeof path, "%s/predictor.pb", f.dir);
  CHECK_INT(dpm_predictor_load(f.dir, &p, &err), DPM_NOT_FOUND);
  CHECK_HAS(err.msg, "predictor.pb");
  if (export(&f, PROB, 1, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    {
      teardown(&f);
      return;
    }
  }
  size_t len = 0;
  uint8_t *good = test_read_file(path, &len);
  CHECK(good && len > 100);
  /* Garbage. */
  const char junk[] = "this is not a predictor at all";
  CHECK(!test_write_file(path, junk, sizeof junk));
  CHECK_INT(dpm_predictor_load(f.dir, &p, &err), DPM_CORRUPT);
  CHECK(p == NULL);
  CHECK_HAS(err.msg, "predictor.pb: not a predictor");
  /* Truncated on disk. */
  CHECK(!test_write_file(path, good, len / 2));
  CHECK_INT(dpm_predictor_load(f.dir, &p, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "predictor.pb");
  /* Every strict prefix is refused as corrupt. */
  int refused = 0;
  for (size_t n = 0; n < len; n++) {
    dpm_err e = {0};
    dpm_status s = dpm_predictor_load_buffer(good, n, "prefix", &p, &e);
    if (s == DPM_CORRUPT && e.msg[0] && !p)
      refused++;
    else
      dpm_test_fail(__FILE__, __LINE__, "prefix of %zu bytes: %s (%s)", n,
                    dpm_status_name(s), e.msg);
    dpm_predictor_free(p);
    p = NULL;
    if (s != DPM_CORRUPT) break;
  }
  CHECK_INT(refused, len);
  /* Inconsistent files that parse. */
  static const struct {
    void (*edit)(Dpm__PredictorDef *);
    dpm_status code;
    const char *msg;
  } cases[] = {
      {e_version, DPM_UNSUPPORTED, "predictor version 2"},
      {e_no_scale, DPM_CORRUPT, "no valid input_scale"},
      {e_bad_scale, DPM_CORRUPT, "no valid input_scale"},
      {e_gradient_op, DPM_CORRUPT, "op #1 (FCGradient) is a training op"},
      {e_fill_arity, DPM_CORRUPT, "op #4 (ConstantFill) takes 0..0 inputs"},
      {e_unknown_op, DPM_UNSUPPORTED, "op #4: unknown op 'Frobnicate'"},
      {e_param_shape, DPM_CORRUPT,
       "op #3 (FC): parameter 'pred_w' is f32[4,5]; the op expects f32[4,6]"},
      {e_param_bytes, DPM_CORRUPT,
       "parameter 'fc1_b' holds 20 bytes of data; f32[6] needs 24"},
      {e_dtype, DPM_CORRUPT, "parameter 'fc1_w' has unknown dtype 9"},
      {e_missing_param, DPM_CORRUPT, "op #3 (FC): input 'pred_b' must be a parameter"},
      {e_unused_param, DPM_CORRUPT, "parameter 'pred_w' is not read by any op"},
      {e_arg_name, DPM_CORRUPT, "op #1 (FC): unknown argument 'dimout'"},
      {e_arg_value, DPM_CORRUPT, "op #1 (FC): argument 'dim_out' = -1 is outside"},
      {e_arg_nan, DPM_CORRUPT, "is not finite"},
      {e_shapes, DPM_CORRUPT, "1 inputs but 0 input shapes"},
      {e_undefined, DPM_CORRUPT, "op #3 (FC): input 'fc0' is not an input"},
      {e_output, DPM_CORRUPT, "output 'prbo' is not an input, a parameter or the output"},
      {e_writes_param, DPM_CORRUPT, "op #2 (Relu) writes parameter 'fc1_w'"},
      {e_not_inplace, DPM_CORRUPT,
       "op #1 (FC) cannot run in place ('data' is input and output)"},
      {e_resizes_input, DPM_CORRUPT,
       "an op makes input 'data' f32[1,4]; it is f32[1,1,4,5]"},
      {e_read_early, DPM_CORRUPT, "op #2 (Relu): input 'prob' is not an input"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpm_err e = {0};
    dpm_status s = load_edited(good, len, cases[i].edit, &e);
    if (s != cases[i].code || !strstr(e.msg, cases[i].msg) || !strstr(e.msg, "edited: "))
      dpm_test_fail(__FILE__, __LINE__, "case %zu: %s \"%s\", want %s \"%s\"", i,
                    dpm_status_name(s), e.msg, dpm_status_name(cases[i].code),
                    cases[i].msg);
  }
  /* Byte flips anywhere: refused or loaded, never a crash; what loads runs. */
  uint8_t *bad = malloc(len);
  int loaded = 0, tried = 0;
  float x[2 * EX];
  example(x, 2, 1);
  const float *in = x;
  static const uint8_t flips[] = {0x01, 0x10, 0x80, 0xff};
  for (size_t i = 0; i < len; i++)
    for (size_t k = 0; k < sizeof flips; k++, tried++) {
      memcpy(bad, good, len);
      bad[i] ^= flips[k];
      dpm_err e = {0};
      if (dpm_predictor_load_buffer(bad, len, "flipped", &p, &e)) {
        CHECK(e.msg[0] && !p);
        continue;
      }
      loaded++;
      if (dpm_predictor_num_inputs(p) == 1 && dpm_predictor_input_size(p, 0) == EX)
        dpm_predictor_run(p, &in, 2, &e);
      dpm_predictor_free(p);
      p = NULL;
    }
  printf("    %d byte flips: %d refused, %d loaded (parameter values and the like)\n",
         tried, tried - loaded, loaded);
  free(bad);
  free(good);
  teardown(&f);
}

TEST(predictor_handles_batch_size_changes) {
  fixture f;
  if (setup(&f, MLP, 2)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  if (export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    {
      teardown(&f);
      return;
    }
  }
  static const int batches[] = {3, 1, 5, 5, 2, 8, 3};
  float x[8 * EX];
  for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
    example(x, batches[i], (int)i);
    double diff = predictor_vs_test_net(&f, p, x, batches[i], "prob");
    if (!(diff <= 1e-6))
      dpm_test_fail(__FILE__, __LINE__, "batch %d: max diff %g", batches[i], diff);
  }
  const float *in = x, *none = NULL;
  CHECK_INT(dpm_predictor_run(p, &in, 0, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "batch must be at least 1");
  CHECK_INT(dpm_predictor_run(p, &none, 2, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "input 'data' is NULL");
  CHECK_INT(dpm_predictor_run(p, &in, 2, &err), DPM_OK); /* still usable */
  dpm_predictor_free(p);
  teardown(&f);
}

TEST(predictor_export_is_atomic_and_replaces) {
  fixture f;
  if (setup(&f, MLP, 1)) return;
  char dir[128], path[160];
  snprintf(dir, sizeof dir, "%s/a/b", f.dir); /* parents are created */
  snprintf(path, sizeof path, "%s/predictor.pb", dir);
  dpm_err err = {0};
  const char *two[] = {"prob", "pred"};
  CHECK_INT(dpm_predictor_export(&f.m, &f.ws, DATA, 1, PROB, 1, NULL, dir, &err), DPM_OK);
  CHECK_INT(dpm_predictor_export(&f.m, &f.ws, DATA, 1, two, 2, NULL, dir, &err), DPM_OK);
  size_t len = 0;
  uint8_t *before = test_read_file(path, &len);
  /* A refused export leaves the file as it was. */
  const char *loss[] = {"loss"};
  CHECK_INT(dpm_predictor_export(&f.m, &f.ws, DATA, 1, loss, 1, NULL, dir, &err),
            DPM_INVALID);
  size_t len2 = 0;
  uint8_t *after = test_read_file(path, &len2);
  CHECK(before && after && len == len2 && !memcmp(before, after, len));
  free(before);
  free(after);
  /* Only predictor.pb in the directory: no temporary left behind. */
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      entries++;
      CHECK(!strcmp(e->d_name, "predictor.pb"));
    }
  if (d) closedir(d);
  CHECK_INT(entries, 1);
  dpm_predictor *p = NULL;
  CHECK_INT(dpm_predictor_load(dir, &p, &err), DPM_OK);
  CHECK_INT(dpm_predictor_num_outputs(p), 2);
  float x[BATCH * EX], prob[BATCH * 4], pred[BATCH * 4];
  example(x, BATCH, 4);
  const float *in = x;
  CHECK_INT(dpm_predictor_run(p, &in, BATCH, &err), DPM_OK);
  test_forward(&f, x, BATCH, "prob", prob, BATCH * 4);
  test_forward(&f, x, BATCH, "pred", pred, BATCH * 4);
  CHECK_WITHIN(max_diff(dpm_predictor_output(p, 0, NULL, NULL), prob, BATCH * 4), 1e-6);
  CHECK_WITHIN(max_diff(dpm_predictor_output(p, 1, NULL, NULL), pred, BATCH * 4), 1e-6);
  CHECK(dpm_predictor_output(p, 2, NULL, NULL) == NULL);
  dpm_predictor_free(p);
  /* A directory that cannot be made. */
  CHECK_INT(dpm_predictor_export(&f.m, &f.ws, DATA, 1, PROB, 1, NULL, path, &err),
            DPM_IO);
  teardown(&f);
}

TEST(predictor_strips_scopes) {
  CHECK(!strcmp(dpm_strip_scope("cpu_1/fc1_w"), "fc1_w"));
  CHECK(!strcmp(dpm_strip_scope("gpu_3/block/conv_w"), "conv_w"));
  CHECK(!strcmp(dpm_strip_scope("fc1_w"), "fc1_w"));
  CHECK(!strcmp(dpm_strip_scope("cpu_0/"), ""));
}

/* A file's typed Arguments reach the node as they are (dpm_node_set_argument):
 * doubles to the bit, lists element by element; one without a value is
 * refused. */
TEST(predictor_arguments_set_typed) {
  dpm_net net = {0};
  dpm_err err = {0};
  const char *io[] = {"iter"}, *lr[] = {"lr"};
  dpm_node *n = dpm_net_add(&net, dpm_op_get(DPM_OP_LEARNING_RATE), 1, io, 1, lr, &err);
  CHECK(n);
  int64_t steps[] = {2, 30, 400};
  double base = 0.1 + 0x1p-56, two[] = {2.0};
  Dpm__IntList il = DPM__INT_LIST__INIT;
  Dpm__FloatList fl = DPM__FLOAT_LIST__INIT;
  il.n_v = 3, il.v = steps;
  fl.n_v = 1, fl.v = two;
  Dpm__Argument a[5] = {DPM__ARGUMENT__INIT, DPM__ARGUMENT__INIT, DPM__ARGUMENT__INIT,
                        DPM__ARGUMENT__INIT, DPM__ARGUMENT__INIT};
  a[0].name = "base_lr", a[0].value_case = DPM__ARGUMENT__VALUE_F, a[0].f = base;
  a[1].name = "stepvalues", a[1].value_case = DPM__ARGUMENT__VALUE_INTS, a[1].ints = &il;
  a[2].name = "policy", a[2].value_case = DPM__ARGUMENT__VALUE_S, a[2].s = "multistep";
  a[3].name = "max_iter", a[3].value_case = DPM__ARGUMENT__VALUE_I, a[3].i = 9;
  a[4].name = "stepsize", a[4].value_case = DPM__ARGUMENT__VALUE_FLOATS,
  a[4].floats = &fl;
  for (int k = 0; k < 5; k++) CHECK_INT(dpm_node_set_argument(n, &a[k], &err), DPM_OK);
  const dpm_arg *arg = n->arg;
#define AT(name) arg[dpm_op_arg_index(n->def, name)]
  CHECK(memcmp(&AT("base_lr").f, &base, sizeof base) == 0);
  CHECK(AT("stepvalues").n == 3 && AT("stepvalues").v[2] == 400);
  CHECK_INT(AT("policy").i, 2);
  CHECK_INT(AT("max_iter").i, 9);
  CHECK_INT(AT("stepsize").i, 2);
#undef AT
  Dpm__Argument none = DPM__ARGUMENT__INIT;
  none.name = "gamma";
  CHECK_INT(dpm_node_set_argument(n, &none, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "argument 'gamma' has no value");
  a[0].f = 5e-324; /* as its text was: strtod calls it out of range */
  CHECK_INT(dpm_node_set_argument(n, &a[0], &err), DPM_SPEC);
  CHECK_HAS(err.msg,
            "argument 'base_lr' expects a number, got '4.9406564584124654e-324'");
  dpm_net_fini(&net);
}

/* A spec names blobs without a replica's scope: '/' separates the scope
 * (cpu_1/fc1_w) that checkpoints and predictors strip, so a spec's
 * "cpu_0/h" is refused, naming the blob, before any model is built. */
TEST(predictor_scoped_blob_names_refused_in_specs) {
  static const char *yaml =
      HEADER "forward:\n"
             "  - {op: FC, in: [data], out: cpu_0/h, dim_out: 6}\n"
             "  - {op: FC, in: [cpu_0/h], out: pred, dim_out: 4}\n"
             "  - {op: SoftmaxWithLoss, in: [pred, label], out: [sm, loss]}\n"
             "losses: [loss]\n";
  Dpm__ModelSpec *spec = NULL;
  dpm_model m = {0};
  dpm_err err = {0};
  dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "p.yaml", &spec, &err);
  if (!s) s = dpm_model_build(spec, CHW, BATCH, 1.0f, &m, &err);
  if (!s) dpm_model_fini(&m);
  dpm_spec_free(spec);
  CHECK(s != DPM_OK);
  CHECK_HAS(err.msg, "blob name 'cpu_0/h'");
  CHECK_HAS(err.msg, "'/' separates a replica's scope");
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Structural mutations (names rewired, op types swapped, arguments
 * changed): every file is refused or loads and runs; ASan watches the
 * kernels for out-of-bounds access. */
TEST(predictor_survives_mutated_files) {
  fixture f;
  if (setup(&f, BN, 1)) return;
  dpm_err err = {0};
  uint8_t *good = NULL;
  size_t len = 0;
  if (dpm_predictor_extract(&f.m, &f.ws, DATA, 1, PROB, 1, &good, &len, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    teardown(&f);
    return;
  }
  int n_defs;
  const dpm_op_def *const *defs = dpm_op_all(&n_defs);
  uint64_t seed = 12345;
  int loaded = 0, tries = 3000;
  float x[3 * EX];
  example(x, 3, 5);
  const float *in = x;
  for (int t = 0; t < tries; t++) {
    Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, good);
    CHECK(d);
    for (int m = 1 + (int)(lcg(&seed) % 3); m > 0; m--) {
      Dpm__Operator *o = d->op[lcg(&seed) % d->n_op];
      Dpm__Operator *other = d->op[lcg(&seed) % d->n_op];
      switch (lcg(&seed) % 4) {
      case 0: /* rewire an input to some output or input of another op */
        if (o->n_input && other->n_output)
          set_str(&o->input[lcg(&seed) % o->n_input],
                  lcg(&seed) % 2 ? other->output[lcg(&seed) % other->n_output]
                                 : other->input[lcg(&seed) % other->n_input]);
        break;
      case 1: /* rewire an output */
        if (o->n_output && other->n_input)
          set_str(&o->output[lcg(&seed) % o->n_output],
                  lcg(&seed) % 2 ? other->input[lcg(&seed) % other->n_input]
                                 : other->output[lcg(&seed) % other->n_output]);
        break;
      case 2: { /* another op type */
        const dpm_op_def *def = defs[lcg(&seed) % (unsigned)n_defs];
        set_str(&o->type, def->name);
        break;
      }
      case 3: /* an argument to a small value */
        if (o->n_arg) {
          Dpm__Argument *a = o->arg[lcg(&seed) % o->n_arg];
          if (a->value_case == DPM__ARGUMENT__VALUE_I)
            a->i = (int64_t)(lcg(&seed) % 12) - 2;
          if (a->value_case == DPM__ARGUMENT__VALUE_F)
            a->f = (double)(lcg(&seed) % 12) / 4 - 1;
        }
        break;
      }
    }
    size_t n = dpm__predictor_def__get_packed_size(d);
    uint8_t *buf = malloc(n + 1);
    dpm__predictor_def__pack(d, buf);
    dpm__predictor_def__free_unpacked(d, NULL);
    dpm_predictor *p = NULL;
    dpm_err e = {0};
    if (!dpm_predictor_load_buffer(buf, n, "mutant", &p, &e)) {
      loaded++;
      if (dpm_predictor_input_size(p, 0) == EX && dpm_predictor_num_inputs(p) == 1) {
        dpm_predictor_run(p, &in, 3, &e);
        dpm_predictor_run(p, &in, 1, &e);
      }
    } else if (!e.msg[0] || p) {
      dpm_test_fail(__FILE__, __LINE__, "refused without a message");
    }
    dpm_predictor_free(p);
    free(buf);
  }
  printf("    %d mutated files: %d refused, %d loaded and ran\n", tries, tries - loaded,
         loaded);
  free(good);
  teardown(&f);
}

/* ---- devices ------------------------------------------------------------ */

/* Output 0 of p after a run on x (b examples) into y (at most n floats);
 * its element count, or -1 (a test failure). */
static int64_t run_output(dpm_predictor *p, const float *x, int b, float *y, int64_t n) {
  dpm_err err = {0};
  if (dpm_predictor_run(p, &x, b, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "run: %s", err.msg);
    return -1;
  }
  int64_t dims[4], numel = 1;
  int ndim;
  const float *o = dpm_predictor_output(p, 0, dims, &ndim);
  for (int d = 0; d < ndim; d++) numel *= dims[d];
  if (!o || ndim < 1 || dims[0] != b || numel > n) {
    dpm_test_fail(__FILE__, __LINE__, "output 0 is missing or too large");
    return -1;
  }
  memcpy(y, o, (size_t)numel * sizeof *y); /* host memory: a fenced pointer would fault */
  return numel;
}

/* Host and device predictors of one file agree bit for bit on the same
 * batches (the fenced device runs the CPU kernels on its own memory). */
static void same_bits(dpm_predictor *host, dpm_predictor *dev, const char *what) {
  static const int batches[] = {3, 3, 5, 1};
  float x[5 * EX], want[5 * 8], got[5 * 8];
  for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
    int b = batches[i];
    example(x, b, 7 * (int)i + 2);
    int64_t n = run_output(host, x, b, want, 5 * 8);
    if (n < 0 || run_output(dev, x, b, got, 5 * 8) != n) return;
    if (memcmp(want, got, (size_t)n * sizeof *got))
      dpm_test_fail(__FILE__, __LINE__, "%s, batch %d (run %zu): outputs differ", what, b,
                    i + 1);
  }
}

TEST(predictor_on_a_fenced_device_matches_the_host_bitwise) {
  const char *const models[] = {MLP, BN};
  for (int m = 0; m < 2; m++) {
    fixture f;
    if (setup(&f, models[m], 2)) return;
    dpm_err err = {0};
    dpm_predictor *host = NULL, *dev = NULL;
    if (export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &host, &err) ||
        dpm_predictor_load(f.dir, &dev, &err)) {
      dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    } else {
      float x[BATCH * EX], y[BATCH * 8];
      example(x, BATCH, 1);
      CHECK(run_output(dev, x, BATCH, y, BATCH * 8) > 0); /* ran on the host first */
      CHECK_INT(dpm_predictor_set_device(dev, "fenced:0", &err), DPM_OK);
      CHECK(dpm_predictor_output(dev, 0, NULL, NULL) == NULL); /* gone until a run */
      CHECK_INT(dpm_predictor_set_device(dev, "fenced:0", &err), DPM_OK); /* no change */
      same_bits(host, dev, m ? "BN on fenced:0" : "MLP on fenced:0");
      /* to another device, and back to the host: the parameters follow */
      CHECK_INT(dpm_predictor_set_device(dev, "fenced:1", &err), DPM_OK);
      same_bits(host, dev, "on fenced:1");
      CHECK_INT(dpm_predictor_set_device(dev, "cpu", &err), DPM_OK);
      same_bits(host, dev, "back on the host");
    }
    dpm_predictor_free(dev); /* frees device memory: the devices stay open */
    dpm_predictor_free(host);
    teardown(&f);
  }
}

TEST(predictor_refuses_cuda_without_a_driver_and_keeps_running) {
  if (access("build/libdpm_cuda.so", R_OK)) {
    printf("  (skipped: build/libdpm_cuda.so not built)\n");
    return;
  }
  char line[640];
  if (dpm_cuda_load(line, sizeof line) > 0) {
    printf("  (skipped: %s: this host has a GPU)\n", line);
    return;
  }
  fixture f;
  if (setup(&f, MLP, 1)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  if (export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else {
    float x[BATCH * EX], before[BATCH * 4], after[BATCH * 4];
    example(x, BATCH, 3);
    int64_t n = run_output(p, x, BATCH, before, BATCH * 4);
    CHECK_INT(dpm_predictor_set_device(p, "cuda:0", &err), DPM_NOT_FOUND);
    CHECK_HAS(err.msg, "device cuda:0: no usable CUDA driver or device");
    printf("    %s\n", err.msg);
    /* as it was: the last run's outputs are still there, and it runs */
    const float *o = dpm_predictor_output(p, 0, NULL, NULL);
    CHECK(o && n > 0 && !memcmp(o, before, (size_t)n * sizeof *o));
    CHECK(run_output(p, x, BATCH, after, BATCH * 4) == n);
    CHECK(!memcmp(before, after, (size_t)n * sizeof *after));
  }
  dpm_predictor_free(p);
  teardown(&f);
}

TEST(predictor_refuses_bad_device_names) {
  fixture f;
  if (setup(&f, MLP, 1)) return;
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  if (export(&f, PROB, 1, &err) || dpm_predictor_load(f.dir, &p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  } else {
    static const char *const bad[] = {"",        "gpu", "cuda",   "cuda:", "cuda:01",
                                      "cuda:-1", "CPU", "cpu:0 ", "tpu:0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      err = (dpm_err){0};
      if (dpm_predictor_set_device(p, bad[i], &err) != DPM_INVALID)
        dpm_test_fail(__FILE__, __LINE__, "'%s': %s, want INVALID", bad[i],
                      dpm_status_name(err.code));
    }
    CHECK_HAS(err.msg, "'tpu:0' is not a device");
    CHECK_INT(dpm_predictor_set_device(NULL, "cpu", &err), DPM_INVALID);
    CHECK_INT(dpm_predictor_set_device(p, NULL, &err), DPM_OK); /* the host */
    CHECK_INT(dpm_predictor_set_device(p, "cpu:3", &err), DPM_OK);
    float x[BATCH * EX], y[BATCH * 4];
    example(x, BATCH, 4);
    CHECK(run_output(p, x, BATCH, y, BATCH * 4) > 0);
  }
  dpm_predictor_free(p);
  teardown(&f);
}
