/* Model building: spec validation errors (naming op, type and line), blob
 * naming, autodiff over whole nets checked against finite differences. */
#include <stdlib.h>

#include "engine/exec.h"
#include "engine/model.h"
#include "common/spec.h"
#include "test.h"

static const int64_t CHW[3] = {1, 4, 5};

#define HEADER                                                                           \
  "name: t\n"                                                                            \
  "input: {reader: synthetic, batch_size: 3, num_examples: 30, shape: [1,4,5],"          \
  " num_classes: 4, outputs: [data, label]}\n"

/* Parse and build; returns the build status, message in err. */
static dpm_status build(const char *yaml, dpm_model *m, dpm_err *err) {
  Dpm__ModelSpec *spec = NULL;
  dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "m.yaml", &spec, err);
  if (!s) s = dpm_model_build(spec, CHW, 3, 1.0f, m, err);
  dpm_spec_free(spec);
  return s;
}

static void expect_error(const char *body, dpm_status code, const char *msg) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml, HEADER "%s", body);
  dpm_model m;
  dpm_err err = {0};
  dpm_status s = build(yaml, &m, &err);
  if (s != code)
    dpm_test_fail(__FILE__, __LINE__, "status %d (%s), want %d", s, err.msg, code);
  else if (!strstr(err.msg, msg))
    dpm_test_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", err.msg, msg);
}

#define MLP_TAIL                                                                         \
  "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"                 \
  "losses: [loss]\n"

TEST(model_rejects_unknown_op) {
  expect_error("forward:\n  - {op: FC, in: [data], out: h, dim_out: 4}\n"
               "  - {op: Frobnicate, in: [h], out: pred}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:5: op #2 (Frobnicate): unknown op 'Frobnicate'");
}

TEST(model_rejects_wrong_arity) {
  expect_error("forward:\n  - {op: Relu, in: [data, data], out: pred}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:4: op #1 (Relu): takes 1..1 inputs");
}

TEST(model_rejects_bad_argument) {
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dimout: 4}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:4: op #1 (FC): unknown argument 'dimout'");
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: many}\n" MLP_TAIL,
               DPM_SPEC, "op #1 (FC): argument 'dim_out' expects an integer");
}

TEST(model_rejects_missing_required_argument) {
  expect_error("forward:\n  - {op: FC, in: [data], out: pred}\n" MLP_TAIL, DPM_SPEC,
               "m.yaml:4: op #1 (FC): missing required argument 'dim_out'");
}

TEST(model_rejects_undefined_blob) {
  expect_error("forward:\n  - {op: FC, in: [dta], out: pred, dim_out: 4}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:4: op #1 (FC): input 'dta' is not defined");
}

TEST(model_rejects_shape_mismatch) {
  expect_error("forward:\n  - {op: FC, in: [data], out: a, dim_out: 4}\n"
               "  - {op: FC, in: [data], out: b, dim_out: 5}\n"
               "  - {op: Add, in: [a, b], out: pred}\n" MLP_TAIL,
               DPM_SHAPE, "m.yaml:6: op #3 (Add)");
}

TEST(model_rejects_unknown_loss) {
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n"
               "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
               "losses: [los]\n",
               DPM_SPEC, "loss 'los' is not computed");
}

TEST(model_rejects_duplicate_param) {
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n"
               "  - {op: FC, in: [data], out: pred, dim_out: 4}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:5: op #2 (FC): parameter 'pred_w' already exists");
}

TEST(model_rejects_inplace_on_op_without_support) {
  expect_error("forward:\n  - {op: FC, in: [data], out: h, dim_out: 4}\n"
               "  - {op: FC, in: [h], out: h, dim_out: 4}\n" MLP_TAIL,
               DPM_SPEC, "m.yaml:5: op #2 (FC): cannot run in place");
}

TEST(model_rejects_inplace_conflict) {
  /* Sigmoid's gradient needs its output h, which the in-place Scale
     overwrites afterwards. */
  expect_error("forward:\n  - {op: FC, in: [data], out: a, dim_out: 4}\n"
               "  - {op: Sigmoid, in: [a], out: h}\n"
               "  - {op: Scale, in: [h], out: h, scale: 2.0}\n"
               "  - {op: FC, in: [h], out: pred, dim_out: 4}\n" MLP_TAIL,
               DPM_SPEC,
               "op #3 (Scale) writes 'h' in place, but the gradient of "
               "m.yaml:5: op #2 (Sigmoid) needs its earlier value");
}

TEST(model_names_params_caffe2_style) {
  const char *yaml = HEADER "forward:\n  - {op: FC, in: [data], out: fc1, dim_out: 6}\n"
                            "  - {op: Relu, in: [fc1], out: fc1}\n"
                            "  - {op: FC, in: [fc1], out: pred, dim_out: 4}\n" MLP_TAIL
                            "update: {optimizer: momentum_sgd}\n";
  dpm_model m;
  dpm_err err = {0};
  CHECK_INT(build(yaml, &m, &err), DPM_OK);
  const char *params[] = {"fc1_w", "fc1_b", "pred_w", "pred_b"};
  for (int i = 0; i < 4; i++) {
    const dpm_blobinfo *b = dpm_shapes_get(&m.shapes, params[i]);
    CHECK(b && b->kind == DPM_BLOB_PARAM);
    char g[64], mo[64];
    snprintf(g, sizeof g, "%s_grad", params[i]);
    snprintf(mo, sizeof mo, "%s_momentum", params[i]);
    CHECK(dpm_shapes_get(&m.shapes, g) &&
          dpm_shapes_get(&m.shapes, g)->kind == DPM_BLOB_GRAD);
    CHECK(dpm_shapes_get(&m.shapes, mo)->kind == DPM_BLOB_OPTIM);
  }
  CHECK_INT(dpm_shapes_get(&m.shapes, "fc1_w")->shape.d[0], 6);
  CHECK_INT(dpm_shapes_get(&m.shapes, "fc1_w")->shape.d[1], 20);
  CHECK(dpm_shapes_get(&m.shapes, "data_grad") == NULL); /* no gradient for data */
  CHECK(dpm_shapes_get(&m.shapes, "iter")->kind == DPM_BLOB_COUNTER);
  dpm_model_fini(&m);
}

/* Two Accuracy ops, top-5 first: the model reports the top-1 one; with
 * top-k ones only, the first. */
TEST(model_picks_the_top1_accuracy) {
  const char *yaml = HEADER "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 6}\n"
                            "  - {op: Accuracy, in: [pred, label], out: acc5, top_k: 5}\n"
                            "  - {op: Accuracy, in: [pred, label], out: acc1}\n" MLP_TAIL;
  dpm_model m;
  dpm_err err = {0};
  CHECK_INT(build(yaml, &m, &err), DPM_OK);
  CHECK(m.accuracy && !strcmp(m.accuracy, "acc1"));
  dpm_model_fini(&m);
  const char *only5 =
      HEADER "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 6}\n"
             "  - {op: Accuracy, in: [pred, label], out: acc5, top_k: 5}\n"
             "  - {op: Accuracy, in: [pred, label], out: acc3, top_k: 3}\n" MLP_TAIL;
  CHECK_INT(build(only5, &m, &err), DPM_OK);
  CHECK(m.accuracy && !strcmp(m.accuracy, "acc5"));
  dpm_model_fini(&m);
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n"
               "  - {op: Accuracy, in: [pred, label], out: acc, top_k: 5}\n" MLP_TAIL,
               DPM_SPEC,
               "m.yaml:5: op #2 (Accuracy): top_k 5 is more than the 4 classes");
}

/* An in-place Relu after FC is fused into it (train and test nets), and the
 * nets still compute what the unfused ops would: the Relu's gradient reads
 * the fused output. */
TEST(model_fuses_relu_into_fc) {
  const char *yaml = HEADER "forward:\n  - {op: FC, in: [data], out: fc1, dim_out: 6}\n"
                            "  - {op: Relu, in: [fc1], out: fc1}\n"
                            "  - {op: FC, in: [fc1], out: pred, dim_out: 4}\n" MLP_TAIL;
  dpm_model m;
  dpm_err err = {0};
  CHECK_INT(build(yaml, &m, &err), DPM_OK);
  CHECK_INT(m.n_forward, 3); /* FC(+Relu), FC, SoftmaxWithLoss */
  CHECK(m.train.nodes[0].fuse & DPM_FUSE_RELU);
  CHECK(m.test.nodes[0].fuse & DPM_FUSE_RELU);
  int relu_grads = 0;
  for (int i = 0; i < m.train.n; i++) {
    CHECK(strcmp(m.train.nodes[i].def->name, "Relu"));
    relu_grads += !strcmp(m.train.nodes[i].def->name, "ReluGradient");
  }
  CHECK_INT(relu_grads, 1);
  dpm_model_fini(&m);
}

/* Net-level gradient check: the gradient of the summed loss w.r.t. every
 * parameter, through in-place ops, a blob read by two ops (summed
 * gradients), Concat and the loss, against central differences. */
TEST(model_autodiff_matches_finite_differences) {
  const char *yaml = HEADER
      "forward:\n  - {op: FC, in: [data], out: h, dim_out: 6, weight_init: gaussian, "
      "weight_std: 0.5}\n"
      "  - {op: Tanh, in: [h], out: h}\n"
      "  - {op: FC, in: [h], out: a, dim_out: 5, weight_init: gaussian, weight_std: "
      "0.5}\n"
      "  - {op: FC, in: [h], out: b, dim_out: 5, weight_init: gaussian, weight_std: "
      "0.5}\n"
      "  - {op: Sigmoid, in: [b], out: b}\n"
      "  - {op: Add, in: [a, b], out: c}\n"
      "  - {op: Concat, in: [c, h], out: d}\n"
      "  - {op: FC, in: [d], out: pred, dim_out: 4, weight_init: gaussian, weight_std: "
      "0.5}\n" MLP_TAIL "update: {optimizer: sgd, lr: {base: 0}}\n"; /* params stay put */
  dpm_model m;
  dpm_err err = {0};
  if (build(yaml, &m, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return;
  }
  dpm_workspace ws = {0};
  dpm_ctx ctx = {0};
  dpm_exec init = {0}, train = {0}, fwd = {0};
  CHECK_INT(dpm_exec_bind(&init, &m.init, &m.shapes, &ws, &ctx, &err), DPM_OK);
  dpm_exec_run(&init);
  CHECK_INT(dpm_exec_bind(&train, &m.train, &m.shapes, &ws, &ctx, &err), DPM_OK);
  float *x = dpm_f32(&dpm_ws_find(&ws, "data")->t);
  int32_t *y = dpm_i32(&dpm_ws_find(&ws, "label")->t);
  for (int i = 0; i < 60; i++) x[i] = (float)((i * 37 % 23) - 11) / 11.f;
  for (int i = 0; i < 3; i++) y[i] = (i * 3 + 1) % 4;
  dpm_exec_run(&train);
  float *loss = dpm_f32(&dpm_ws_find(&ws, "loss")->t);
  double worst = 0;
  int checked = 0;
  for (int p = 0; p < m.n_param_grad; p++) {
    if (!m.param_grad[p]) continue;
    dpm_tensor *w = &dpm_ws_find(&ws, m.shapes.v[p].name)->t;
    dpm_tensor *g = &dpm_ws_find(&ws, m.param_grad[p])->t;
    float *gcopy = malloc(dpm_shape_bytes(&g->shape));
    memcpy(gcopy, g->data, dpm_shape_bytes(&g->shape));
    for (int64_t i = 0; i < dpm_tensor_numel(w); i += 3, checked++) {
      /* the five-point central difference: its truncation error goes as
       * h^4, so the step can be large; the float loss's rounding (2^-24 |L|
       * each) enters as 18 / 12h of it: ~1e-6 here, 1e-4 of the 1e-2
       * floor of the relative error (three-point at h = 1e-2: 48% of the
       * tolerance used, now 10%) */
      const float h = 0.1f;
      float keep = dpm_f32(w)[i];
      double l[4]; /* the loss at keep + (-2, -1, 1, 2) h */
      for (int k = 0; k < 4; k++) {
        dpm_f32(w)[i] = keep + (float)(k < 2 ? k - 2 : k - 1) * h;
        dpm_exec_run_range(&train, 0, m.n_forward);
        l[k] = *loss;
      }
      dpm_f32(w)[i] = keep;
      double num = (8 * (l[2] - l[1]) - (l[3] - l[0])) / (12 * (double)h), ana = gcopy[i];
      double rel = fabs(num - ana) / fmax(fmax(fabs(num), fabs(ana)), 1e-2);
      if (rel > worst) worst = rel;
    }
    free(gcopy);
  }
  printf("    %d parameter elements checked, worst relative error %.2g\n", checked,
         worst);
  CHECK(checked > 50);
  CHECK_WITHIN(worst, 2e-3);
  dpm_exec_fini(&init);
  dpm_exec_fini(&train);
  dpm_exec_fini(&fwd);
  dpm_ws_fini(&ws);
  dpm_ctx_fini(&ctx);
  dpm_model_fini(&m);
}

/* Shapes from a spec are products of dims a client chose: a ConstantFill
 * of [2^31, 2^31] floats wrapped to 0 bytes and then wrote past a tiny
 * buffer. Every inferred shape is checked with overflow-safe arithmetic. */
TEST(model_rejects_shapes_that_overflow) {
  expect_error("forward:\n  - {op: ConstantFill, in: [], out: k, shape: [2147483648, "
               "2147483648]}\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n" MLP_TAIL,
               DPM_SHAPE, "op #1 (ConstantFill): output 'k': shape [2147483648,2147483648] "
                          "is larger than");
  expect_error("forward:\n  - {op: ConstantFill, in: [], out: k, shape: [1000000000000, "
               "1000000000000, 1000000000000, 1000000000000]}\n"
               "  - {op: FC, in: [data], out: pred, dim_out: 4}\n" MLP_TAIL,
               DPM_SHAPE, "is larger than 1099511627776 bytes");
  /* a parameter: FC's weight [dim_out, K] over the limit */
  expect_error("forward:\n  - {op: FC, in: [data], out: h, dim_out: 2147483647}\n"
               "  - {op: FC, in: [h], out: pred, dim_out: 2147483647}\n" MLP_TAIL,
               DPM_SHAPE, "parameter 'pred_w'");
}

TEST(shape_check_arithmetic) {
  dpm_err err = {0};
  uint64_t b = 0;
  dpm_shape s = dpm_shape_make(DPM_F32, 2, (int64_t[]){1 << 19, 1 << 19});
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_OK);
  CHECK(b == (uint64_t)1 << 40); /* exactly the limit */
  s.d[1]++;
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_SHAPE);
  s = dpm_shape_make(DPM_I64, 4, (int64_t[]){INT64_MAX, INT64_MAX, 2, 2});
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_SHAPE);
  s = dpm_shape_make(DPM_F32, 1, (int64_t[]){-1});
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_SHAPE);
  s = dpm_shape_make(DPM_F32, 3, (int64_t[]){4, 0, 1LL << 62}); /* zero elements */
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_OK);
  CHECK(b == 0);
  s.ndim = 5;
  CHECK_INT(dpm_shape_check(&s, &b, &err), DPM_SHAPE);
  /* a zero-sized tensor owns the block dpm_alloc gives it (ASan: no leak) */
  dpm_tensor t = {0};
  s = dpm_shape_make(DPM_F32, 1, (int64_t[]){0});
  CHECK_INT(dpm_tensor_resize(&t, &s), DPM_OK);
  CHECK(t.capacity > 0);
  dpm_tensor_fini(&t);
}

/* A loss is a scalar the gradient is seeded with, listed once. */
TEST(model_rejects_non_scalar_or_repeated_losses) {
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n"
               "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
               "losses: [pred]\n",
               DPM_SPEC, "loss 'pred' must be a f32 scalar, got f32[3,4]");
  /* the YAML front end's validation already refuses a loss listed twice */
  expect_error("forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n"
               "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
               "losses: [loss, loss]\n",
               DPM_SPEC, "losses: 'loss' is listed twice");
}

/* The node of net that writes blob (its last writer), or NULL. */
static const dpm_node *writer(const dpm_net *net, const char *blob) {
  const dpm_node *w = NULL;
  for (int i = 0; i < net->n; i++)
    for (int k = 0; k < net->nodes[i].n_out; k++)
      if (net->nodes[i].out[k] && !strcmp(net->nodes[i].out[k], blob)) w = &net->nodes[i];
  return w;
}

static double arg_f(const dpm_node *n, const char *name) {
  return n->arg[dpm_op_arg_index(n->def, name)].f;
}

static int same_double(double a, double b) { return !memcmp(&a, &b, sizeof a); }

/* The spec's numbers reach the nets as typed values, doubles to the bit: an
 * op's arguments, the param fills they choose (a gaussian's std, a uniform's
 * -v and v), the update's arguments; the engine's own ops are the ones the
 * op list names. A quoted number is still read as its text. */
TEST(model_sets_spec_arguments_typed) {
  const char *yaml =
      HEADER "forward:\n"
             "  - {op: FC, in: [data], out: fc1, dim_out: 6, weight_init: gaussian,"
             " weight_std: 0.012345678901234567, bias_init: uniform,"
             " bias_value: 0.33333333333333331}\n"
             "  - {op: FC, in: [fc1], out: pred, dim_out: \"4\"}\n" MLP_TAIL
             "update: {optimizer: momentum_sgd, momentum: 0.91234567890123456,"
             " lr: {base: 0.012345678901234567, policy: multistep,"
             " stepvalues: [10, 20]}}\n";
  dpm_model m;
  dpm_err err = {0};
  CHECK_INT(build(yaml, &m, &err), DPM_OK);
  const dpm_node *w = writer(&m.init, "fc1_w"), *b = writer(&m.init, "fc1_b");
  CHECK(w && w->def->id == DPM_OP_GAUSSIAN_FILL);
  CHECK(same_double(arg_f(w, "std"), strtod("0.012345678901234567", NULL)));
  CHECK(b && b->def->id == DPM_OP_UNIFORM_FILL);
  CHECK(same_double(arg_f(b, "max"), strtod("0.33333333333333331", NULL)));
  CHECK(same_double(arg_f(b, "min"), -strtod("0.33333333333333331", NULL)));
  CHECK(writer(&m.init, "iter")->def->id == DPM_OP_CONSTANT_FILL);
  CHECK_INT(writer(&m.train, "pred")->arg[0].i, 4);
  const dpm_node *lr = writer(&m.update, "lr");
  CHECK(lr && lr->def == dpm_op_get(DPM_OP_LEARNING_RATE));
  CHECK(same_double(arg_f(lr, "base_lr"), strtod("0.012345678901234567", NULL)));
  const dpm_arg *steps = &lr->arg[dpm_op_arg_index(lr->def, "stepvalues")];
  CHECK(steps->n == 2 && steps->v[0] == 10 && steps->v[1] == 20);
  const dpm_node *opt = writer(&m.update, "pred_w");
  CHECK(opt && opt->def->id == DPM_OP_MOMENTUM_SGD);
  CHECK(same_double(arg_f(opt, "momentum"), strtod("0.91234567890123456", NULL)));
  const dpm_node *seed = writer(&m.train, "loss_grad");
  CHECK(seed && seed->def->id == DPM_OP_CONSTANT_FILL && arg_f(seed, "value") == 1.0);
  dpm_model_fini(&m);
}
