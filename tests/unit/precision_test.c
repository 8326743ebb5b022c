/* Mixed precision (precision.compute bf16/fp16): the policy table, Cast and
 * its gradient, FC and Conv on 16-bit tensors against f32 within a derived
 * bound, the precision rewrite, training against f32, checkpoints between
 * the precisions, exact resume, spec errors and the devices that refuse it.
 *
 * The bound for an FC or Conv output (K products summed, plus a bias) run
 * in a 16-bit type of unit roundoff u (bf16: 8 significant bits, u = 2^-8;
 * f16: 11, u = 2^-11) against f32 on the unrounded inputs:
 *   - each input is rounded once: x~ = x(1+d), |d| <= u (f16: plus an
 *     absolute 2^-25 for a value in f16's subnormal range);
 *   - so each product is off by at most (2u + u^2)|x w|, and the bias by u|b|;
 *   - both sums accumulate K terms in f32: each is within K 2^-24 S of its
 *     exact value (S = sum |x w|), so the two differ by 2 K 2^-24 S more;
 *   - the 16-bit output is rounded once more: u |y~|, |y~| <= |y| + e.
 * e = (2u + u^2 + 2 K 2^-24 (1 + 2u)) S + u |b| + a, with a the absolute
 * terms, and the bound is e + u (|y| + e). Every element must be within its
 * own bound (the check below is the largest ratio, at most 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/spec.h"
#include "engine/autodiff.h"
#include "engine/lowp.h"
#include "engine/workspace.h"
#include "ops/cast.h"
#include "ops/precision.h"
#include "parallel/plan.h"
#include "optest.h"
#include "predictor/predictor_extract.h"
#include "test.h"
#include "trainer_fixture.h"

/* Uniform values in [-1, 1) from a fixed LCG. */
static void fill_uniform(float *v, int n, uint32_t seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)((double)(seed >> 8) / (double)(1u << 23) - 1.0);
  }
}

static float widen1(dpm_dtype t, uint16_t h) {
  return t == DPM_BF16 ? dpm_f32_from_bf16_1(h) : dpm_f32_from_f16_1(h);
}

/* ---- the policy ------------------------------------------------------------ */

TEST(precision_policy_covers_every_op) {
  int n;
  const dpm_op_def *const *all = dpm_op_all(&n);
  for (int i = 0; i < n; i++)
    if (dpm_op_precision(all[i]->id) == DPM_PREC_NONE)
      dpm_test_fail(__FILE__, __LINE__, "op %s has no precision row", all[i]->name);
  CHECK_INT(dpm_op_precision(DPM_OP_FC), DPM_PREC_LOW);
  CHECK_INT(dpm_op_precision(DPM_OP_CONV), DPM_PREC_LOW);
  CHECK_INT(dpm_op_precision(DPM_OP_SOFTMAX_WITH_LOSS), DPM_PREC_FP32);
  CHECK_INT(dpm_op_precision(DPM_OP_SPATIAL_BN), DPM_PREC_FP32);
  CHECK_INT(dpm_op_precision(DPM_OP_ACCURACY), DPM_PREC_FP32);
  CHECK_INT(dpm_op_precision(DPM_OP_MOMENTUM_SGD), DPM_PREC_FP32);
  CHECK_INT(dpm_op_precision(DPM_OP_RELU), DPM_PREC_PASS);
  CHECK_INT(dpm_op_precision(DPM_OP_MAX_POOL), DPM_PREC_PASS);
  CHECK_INT(dpm_op_precision(DPM_OP_CAST), DPM_PREC_CAST);
}

/* ---- Cast ---------------------------------------------------------------- */

/* Cast of f32 values to type t and back: the bits lowp.h gives, and a
 * 16-bit value survives the round trip unchanged. */
static int cast_round_trip(dpm_dtype t) {
  const char *name = dpm_dtype_name(t);
  float v[] = {0.f,     -0.f,  1.f / 3,  -2.5f, 1e-3f, 3.0e38f,
               65520.f, 1e-8f, INFINITY, NAN,   0.1f,  -7.75f};
  int n = (int)(sizeof v / sizeof *v), ok = 1;
  dpm_tensor x = ot_tensor(ot_f32(1, n), v), y = {0}, back = {0}, again = {0};
  char args[64];
  snprintf(args, sizeof args, "from=f32 to=%s", name);
  dpm_tensor *in[] = {&x}, *out[] = {&y};
  ok = !ot_run_op("Cast", args, 0, 1, in, 1, out, NULL) && y.shape.dtype == t;
  for (int i = 0; ok && i < n; i++) {
    uint16_t want = t == DPM_BF16 ? dpm_bf16_from_f32_1(v[i]) : dpm_f16_from_f32_1(v[i]);
    if (dpm_u16(&y)[i] != want) {
      printf("    %s of %g: %04x, expected %04x\n", name, v[i], dpm_u16(&y)[i], want);
      ok = 0;
    }
  }
  snprintf(args, sizeof args, "from=%s to=f32", name);
  in[0] = &y;
  out[0] = &back;
  ok = ok && !ot_run_op("Cast", args, 0, 1, in, 1, out, NULL);
  for (int i = 0; ok && i < n; i++) {
    float w = widen1(t, dpm_u16(&y)[i]), got = dpm_f32(&back)[i];
    ok = memcmp(&w, &got, sizeof w) == 0;
    if (!ok)
      printf("    f32 of %s %04x: %g, expected %g\n", name, dpm_u16(&y)[i], got, w);
  }
  snprintf(args, sizeof args, "from=f32 to=%s", name);
  in[0] = &back;
  out[0] = &again;
  ok = ok && !ot_run_op("Cast", args, 0, 1, in, 1, out, NULL) &&
       !memcmp(again.data, y.data, (size_t)n * 2);
  dpm_tensor_fini(&x);
  dpm_tensor_fini(&y);
  dpm_tensor_fini(&back);
  dpm_tensor_fini(&again);
  return ok;
}

TEST(cast_round_trip_bf16) { CHECK(cast_round_trip(DPM_BF16)); }
TEST(cast_round_trip_f16) { CHECK(cast_round_trip(DPM_F16)); }

/* bf16 -> f16 rounds once, through the exact f32; `from` must be the
 * input's type. */
TEST(cast_between_16_bit_types) {
  float v[] = {1.f / 3, 70000.f, -1e-6f, 2.f};
  dpm_tensor x = ot_tensor(dpm_shape_make(DPM_BF16, 1, (int64_t[]){4}), v), y = {0};
  dpm_tensor *in[] = {&x}, *out[] = {&y};
  dpm_err err = {0};
  CHECK_INT(ot_run_op("Cast", "from=bf16 to=f16", 0, 1, in, 1, out, &err), DPM_OK);
  for (int i = 0; i < 4; i++)
    CHECK_INT(dpm_u16(&y)[i], dpm_f16_from_f32_1(dpm_f32_from_bf16_1(dpm_u16(&x)[i])));
  CHECK_INT(ot_run_op("Cast", "from=f32 to=bf16", 0, 1, in, 1, out, &err), DPM_SHAPE);
  CHECK_HAS(err.msg, "input must be f32, got bf16");
  dpm_tensor_fini(&x);
  dpm_tensor_fini(&y);
}

/* ReluGradient over bf16, which runs on the bits (lowp_run.h), gives the
 * f32 kernel's result rounded, for every bf16 pattern of Y (NaNs, infinities,
 * zeros and subnormals among them) against a permutation of them as dY. */
TEST(relu_grad_bf16_every_pattern_is_the_f32_kernels) {
  enum { N = 65536 };
  float *y = malloc(N * sizeof *y), *dy = malloc(N * sizeof *dy);
  for (uint32_t h = 0; h < N; h++) {
    y[h] = dpm_f32_from_bf16_1((uint16_t)h);
    dy[h] = dpm_f32_from_bf16_1((uint16_t)((h * 40503u + 7u) & 0xffffu));
  }
  dpm_shape s16 = dpm_shape_make(DPM_BF16, 1, (int64_t[]){N}),
            s32 = dpm_shape_make(DPM_F32, 1, (int64_t[]){N});
  dpm_tensor y16 = ot_tensor(s16, NULL), dy16 = ot_tensor(s16, NULL),
             y32 = ot_tensor(s32, y), dy32 = ot_tensor(s32, dy), dx16 = {0}, dx32 = {0};
  for (uint32_t h = 0; h < N; h++) { /* the patterns themselves: signalling NaNs too */
    dpm_u16(&y16)[h] = (uint16_t)h;
    dpm_u16(&dy16)[h] = (uint16_t)((h * 40503u + 7u) & 0xffffu);
  }
  CHECK_INT(ot_run_op("ReluGradient", "", 0, 2, (dpm_tensor *[]){&y16, &dy16}, 1,
                      (dpm_tensor *[]){&dx16}, NULL),
            DPM_OK);
  CHECK_INT(ot_run_op("ReluGradient", "", 0, 2, (dpm_tensor *[]){&y32, &dy32}, 1,
                      (dpm_tensor *[]){&dx32}, NULL),
            DPM_OK);
  int bad = 0;
  for (int i = 0; i < N && dx16.data && dx32.data; i++)
    if (dpm_u16(&dx16)[i] != dpm_bf16_from_f32_1(dpm_f32(&dx32)[i]) && bad++ < 3)
      printf("    y 0x%04x dy 0x%04x: 0x%04x\n", i, dpm_u16(&dy16)[i], dpm_u16(&dx16)[i]);
  CHECK_INT(bad, 0);
  dpm_tensor *all[] = {&y16, &dy16, &y32, &dy32, &dx16, &dx32};
  for (int i = 0; i < 6; i++) dpm_tensor_fini(all[i]);
  free(y);
  free(dy);
}

/* The gradient of Cast f32 -> bf16 is Cast bf16 -> f32 of dY. */
TEST(cast_gradient_casts_back) {
  dpm_node fwd = {.def = dpm_op_get(DPM_OP_CAST), .index = -1, .n_in = 1, .n_out = 1};
  char x[] = "x", y[] = "y";
  fwd.in[0] = x;
  fwd.out[0] = y;
  dpm_err err = {0};
  CHECK_INT(dpm_node_set_defaults(&fwd, &err), DPM_OK);
  CHECK_INT(dpm_node_set_args(&fwd, "from=f32 to=bf16", &err), DPM_OK);
  const char *gout[] = {"y_grad"}, *gin[] = {"x_grad"};
  dpm_net g = {0};
  CHECK_INT(dpm_autodiff_node(&fwd, gout, gin, &g, &err), DPM_OK);
  CHECK_INT(g.n, 1);
  CHECK_INT(g.nodes[0].def->id, DPM_OP_CAST);
  CHECK(!strcmp(g.nodes[0].in[0], "y_grad") && !strcmp(g.nodes[0].out[0], "x_grad"));
  CHECK_INT(dpm_cast_type(&g.nodes[0], CAST_ARG_FROM), DPM_BF16);
  CHECK_INT(dpm_cast_type(&g.nodes[0], CAST_ARG_TO), DPM_F32);
  dpm_net_fini(&g);
  /* and it runs: dX is dY widened, exactly */
  float v[] = {0.3f, -1.5f, 1e-20f};
  dpm_tensor dy = ot_tensor(dpm_shape_make(DPM_BF16, 1, (int64_t[]){3}), v), dx = {0};
  dpm_tensor *in[] = {&dy}, *out[] = {&dx};
  CHECK_INT(ot_run_op("Cast", "from=bf16 to=f32", 0, 1, in, 1, out, &err), DPM_OK);
  for (int i = 0; i < 3; i++)
    CHECK(dpm_f32(&dx)[i] == dpm_f32_from_bf16_1(dpm_bf16_from_f32_1(v[i])));
  dpm_tensor_fini(&dy);
  dpm_tensor_fini(&dx);
}

/* ---- FC and Conv in 16 bits ----------------------------------------------- */

/* The largest |low - ref| / bound over the outputs (see the top), given per
 * output its S = sum |x w|, |b|, the absolute term and K. */
typedef struct {
  double worst, max_diff;
} bound_check;

static void bound_add(bound_check *c, double low, double ref, double s, double b,
                      double abs_term, int k, double u) {
  double e = (2 * u + u * u + 2.0 * k * 0x1p-24 * (1 + 2 * u)) * s + u * b + abs_term;
  double bound = e + u * (fabs(ref) + e), diff = fabs(low - ref);
  if (diff / bound > c->worst) c->worst = diff / bound;
  if (diff > c->max_diff) c->max_diff = diff;
}

/* FC over N x K inputs to M outputs in type t against f32. */
static double fc_low_vs_f32(dpm_dtype t, double *max_diff) {
  enum { N = 8, K = 96, M = 24 };
  static float xv[N * K], wv[M * K], bv[M];
  fill_uniform(xv, N * K, 1);
  fill_uniform(wv, M * K, 2);
  fill_uniform(bv, M, 3);
  dpm_tensor x = ot_tensor(ot_f32(2, N, K), xv), w = ot_tensor(ot_f32(2, M, K), wv),
             b = ot_tensor(ot_f32(1, M), bv), y = {0};
  dpm_tensor xl = ot_tensor(dpm_shape_make(t, 2, (int64_t[]){N, K}), xv),
             wl = ot_tensor(dpm_shape_make(t, 2, (int64_t[]){M, K}), wv),
             bl = ot_tensor(dpm_shape_make(t, 1, (int64_t[]){M}), bv), yl = {0};
  dpm_tensor *in[] = {&x, &w, &b}, *out[] = {&y}, *inl[] = {&xl, &wl, &bl},
             *outl[] = {&yl};
  dpm_err err = {0};
  double worst = -1;
  if (ot_run_op("FC", "dim_out=24", 0, 3, in, 1, out, &err) ||
      ot_run_op("FC", "dim_out=24", 0, 3, inl, 1, outl, &err) || yl.shape.dtype != t) {
    printf("    FC: %s\n", err.msg);
    goto out;
  }
  double u = t == DPM_BF16 ? 0x1p-8 : 0x1p-11, sub = t == DPM_BF16 ? 0 : 0x1p-25;
  bound_check c = {0};
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++) {
      double s = 0, a = 0;
      for (int k = 0; k < K; k++) {
        s += fabs((double)xv[i * K + k] * wv[j * K + k]);
        a += sub * (fabs(xv[i * K + k]) + fabs(wv[j * K + k]) + sub);
      }
      bound_add(&c, widen1(t, dpm_u16(&yl)[i * M + j]), dpm_f32(&y)[i * M + j], s,
                fabs(bv[j]), a + sub, K, u);
    }
  worst = c.worst;
  *max_diff = c.max_diff;
out:
  dpm_tensor *all[] = {&x, &w, &b, &y, &xl, &wl, &bl, &yl};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dpm_tensor_fini(all[i]);
  return worst;
}

TEST(fc_bf16_within_derived_bound) {
  double diff = 0, worst = fc_low_vs_f32(DPM_BF16, &diff);
  CHECK_WITHIN(worst, 1.0);
  CHECK(diff > 0); /* it did round: not an f32 run in disguise */
}

TEST(fc_f16_within_derived_bound) {
  double diff = 0, worst = fc_low_vs_f32(DPM_F16, &diff);
  CHECK_WITHIN(worst, 1.0);
  CHECK(diff > 0);
}

/* Conv 3x3, pad 1, over 2 x 3 x 6 x 6 to 4 channels, bf16 against f32. */
TEST(conv_bf16_within_derived_bound) {
  enum { N = 2, C = 3, H = 6, M = 4, KK = 3 };
  static float xv[N * C * H * H], wv[M * C * KK * KK], bv[M];
  fill_uniform(xv, N * C * H * H, 4);
  fill_uniform(wv, M * C * KK * KK, 5);
  fill_uniform(bv, M, 6);
  dpm_shape xs = ot_f32(4, N, C, H, H), ws = ot_f32(4, M, C, KK, KK), bs = ot_f32(1, M);
  dpm_shape xls = xs, wls = ws, bls = bs;
  xls.dtype = wls.dtype = bls.dtype = DPM_BF16;
  dpm_tensor x = ot_tensor(xs, xv), w = ot_tensor(ws, wv), b = ot_tensor(bs, bv), y = {0};
  dpm_tensor xl = ot_tensor(xls, xv), wl = ot_tensor(wls, wv), bl = ot_tensor(bls, bv),
             yl = {0};
  dpm_tensor *in[] = {&x, &w, &b}, *out[] = {&y}, *inl[] = {&xl, &wl, &bl},
             *outl[] = {&yl};
  dpm_err err = {0};
  const char *args = "dim_out=4 kernel=3 pad=1";
  CHECK_INT(ot_run_op("Conv", args, 0, 3, in, 1, out, &err), DPM_OK);
  CHECK_INT(ot_run_op("Conv", args, 0, 3, inl, 1, outl, &err), DPM_OK);
  CHECK_INT(yl.shape.dtype, DPM_BF16);
  bound_check c = {0};
  for (int n = 0; n < N; n++)
    for (int m = 0; m < M; m++)
      for (int i = 0; i < H; i++)
        for (int j = 0; j < H; j++) {
          double s = 0;
          for (int ch = 0; ch < C; ch++)
            for (int p = 0; p < KK; p++)
              for (int q = 0; q < KK; q++) {
                int r = i + p - 1, cc = j + q - 1;
                if (r < 0 || r >= H || cc < 0 || cc >= H) continue;
                s += fabs((double)xv[((n * C + ch) * H + r) * H + cc] *
                          wv[((m * C + ch) * KK + p) * KK + q]);
              }
          int o = ((n * M + m) * H + i) * H + j;
          bound_add(&c, dpm_f32_from_bf16_1(dpm_u16(&yl)[o]), dpm_f32(&y)[o], s,
                    fabs(bv[m]), 0, C * KK * KK, 0x1p-8);
        }
  CHECK_WITHIN(c.worst, 1.0);
  CHECK(c.max_diff > 0);
  dpm_tensor *all[] = {&x, &w, &b, &y, &xl, &wl, &bl, &yl};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dpm_tensor_fini(all[i]);
}

/* ---- the rewrite and training --------------------------------------------- */

/* tf_spec's model at learning rate lr with `precision` (a flow mapping's
 * body, "" for none). */
static Dpm__ModelSpec *prec_spec_lr(const char *forward, int batch, double lr,
                                    const char *precision) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 2048,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 3,"
           " shuffle: true}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, weight_decay: 0.0001,"
           " lr: {base: %g}}\n"
           "%s%s%s",
           batch, forward, lr, *precision ? "precision: {" : "", precision,
           *precision ? "}\n" : "");
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

static Dpm__ModelSpec *prec_spec(const char *forward, int batch, const char *precision) {
  return prec_spec_lr(forward, batch, 0.05, precision);
}

/* The node of net writing blob `out`, or NULL. */
static const dpm_node *writer(const dpm_net *net, int n, const char *out) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < net->nodes[i].n_out; k++)
      if (net->nodes[i].out[k] && !strcmp(net->nodes[i].out[k], out))
        return &net->nodes[i];
  return NULL;
}

static int count_casts(const dpm_net *net) {
  int c = 0;
  for (int i = 0; i < net->n; i++) c += net->nodes[i].def->id == DPM_OP_CAST;
  return c;
}

/* bf16: FC reads working copies of the f32 masters, which the optimizer
 * writes (their Casts only in the model's refresh net), its output is bf16,
 * the loss reads an f32 cast; gradients of params arrive in f32, written so
 * by FCGradient (engine/fuse.h). fp16 keeps the gradients' Casts. fp32
 * (the default): no Cast anywhere. */
TEST(precision_rewrite_inserts_casts) {
  Dpm__ModelSpec *spec = prec_spec(MLP_FORWARD, 8, "compute: bf16"),
                 *plain = prec_spec(MLP_FORWARD, 8, "");
  dpm_trainer *t = tf_trainer(spec, 1, NULL), *p = tf_trainer(plain, 1, NULL);
  CHECK(t && p);
  const dpm_model *m = dpm_trainer_model(t);
  CHECK_INT(m->compute, DPM_BF16);
  const dpm_node *fc1 = writer(&m->train, m->n_forward, "fc1");
  CHECK(fc1 && fc1->def->id == DPM_OP_FC);
  CHECK(!strcmp(fc1->in[0], "data_bf16") && !strcmp(fc1->in[1], "fc1_w_bf16") &&
        !strcmp(fc1->in[2], "fc1_b_bf16"));
  /* the working copy: made by a Cast in refresh, then by the update */
  const dpm_node *c = writer(&m->refresh, m->refresh.n, "fc1_w_bf16");
  CHECK(c && c->def->id == DPM_OP_CAST && !strcmp(c->in[0], "fc1_w"));
  CHECK(!writer(&m->train, m->train.n, "fc1_w_bf16"));
  const dpm_node *up = writer(&m->update, m->update.n, "fc1_w_bf16");
  CHECK(up && up->def->id == DPM_OP_MOMENTUM_SGD && (up->fuse & DPM_FUSE_WORKING_COPY) &&
        !strcmp(up->out[0], "fc1_w"));
  CHECK_INT(count_casts(&m->refresh), 6); /* 3 x (w, b) */
  CHECK_INT(dpm_shapes_get(&m->shapes, "fc1_w")->shape.dtype, DPM_F32);
  CHECK_INT(dpm_shapes_get(&m->shapes, "fc1_w")->kind, DPM_BLOB_PARAM);
  CHECK_INT(dpm_shapes_get(&m->shapes, "fc1_w_bf16")->shape.dtype, DPM_BF16);
  CHECK_INT(dpm_shapes_get(&m->shapes, "fc1_w_bf16")->kind, DPM_BLOB_ACT);
  CHECK_INT(dpm_shapes_get(&m->shapes, "fc2")->shape.dtype, DPM_BF16);
  CHECK_INT(dpm_shapes_get(&m->shapes, "pred_f32")->shape.dtype, DPM_F32);
  const dpm_node *loss = writer(&m->train, m->n_forward, "loss");
  CHECK(loss && !strcmp(loss->in[0], "pred_f32"));
  for (int i = 0; i < m->n_param_grad; i++)
    if (m->param_grad[i])
      CHECK_INT(dpm_shapes_get(&m->shapes, m->param_grad[i])->shape.dtype, DPM_F32);
  /* the weight gradients' Casts are fused: FCGradient writes them in f32 */
  const dpm_node *g1 = writer(&m->train, m->train.n, "fc1_w_grad");
  CHECK(g1 && g1->def->id == DPM_OP_FC_GRADIENT && (g1->fuse & DPM_FUSE_GRAD_F32) &&
        !strcmp(g1->out[1], "fc1_b_grad"));
  CHECK(!dpm_shapes_get(&m->shapes, "fc1_w_bf16_grad"));
  /* train: forward's data and pred, and backward's loss gradient to bf16 */
  CHECK_INT(count_casts(&m->train), 3);
  CHECK_INT(count_casts(&m->test), 8); /* data, 3 x (w, b), pred */
  CHECK_INT(count_casts(&dpm_trainer_model(p)->train), 0);
  CHECK_INT(dpm_trainer_model(p)->compute, DPM_F32);
  Dpm__ModelSpec *half = prec_spec(MLP_FORWARD, 8, "compute: fp16");
  dpm_trainer *h = tf_trainer(half, 1, NULL);
  CHECK(h);
  const dpm_model *hm = h ? dpm_trainer_model(h) : NULL;
  const dpm_node *hc = hm ? writer(&hm->train, hm->train.n, "fc1_w_grad") : NULL;
  CHECK(hc && hc->def->id == DPM_OP_CAST && !strcmp(hc->in[0], "fc1_w_f16_grad"));
  dpm_trainer_destroy(h);
  dpm_spec_free(half);
  dpm_trainer_destroy(t);
  dpm_trainer_destroy(p);
  dpm_spec_free(spec);
  dpm_spec_free(plain);
}

/* Add in place on a bf16 blob with an f32 one: both are cast to f32, the
 * Add writes a fresh f32 blob and a Cast writes it back into the bf16 one;
 * the model trains. */
TEST(precision_rewrite_keeps_in_place_types) {
  Dpm__ModelSpec *spec = prec_spec("  - {op: FC, in: [data], out: a, dim_out: 16}\n"
                                   "  - {op: Softmax, in: [a], out: s}\n"
                                   "  - {op: Add, in: [a, s], out: a}\n"
                                   "  - {op: FC, in: [a], out: pred, dim_out: 10}\n",
                                   8, "compute: bf16");
  dpm_trainer *t = tf_trainer(spec, 1, NULL);
  CHECK(t);
  const dpm_model *m = dpm_trainer_model(t);
  const dpm_node *add = writer(&m->train, m->n_forward, "a_f32_2");
  CHECK(add && add->def->id == DPM_OP_ADD);
  CHECK(!strcmp(add->in[0], "a_f32") && !strcmp(add->in[1], "s"));
  const dpm_node *back = add + 1;
  CHECK(back->def->id == DPM_OP_CAST && !strcmp(back->in[0], "a_f32_2") &&
        !strcmp(back->out[0], "a"));
  CHECK_INT(dpm_shapes_get(&m->shapes, "a")->shape.dtype, DPM_BF16);
  CHECK_INT(dpm_shapes_get(&m->shapes, "a_f32_2")->shape.dtype, DPM_F32);
  CHECK(tf_steps(t, 2));
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}

#define TRACK_LR 0.01

/* n steps of `forward` in `precision` against f32 from the same initial
 * parameters and batches: the loss within 2e-2 relative at every step. */
static double track_f32(const char *forward, int batch, const char *precision, int n) {
  Dpm__ModelSpec *ls = prec_spec_lr(forward, batch, TRACK_LR, precision),
                 *fs = prec_spec_lr(forward, batch, TRACK_LR, "");
  dpm_trainer *lt = tf_trainer(ls, 1, NULL), *ft = tf_trainer(fs, 1, NULL);
  double worst = -1;
  dpm_err err = {0};
  dpm_step_stats a, b;
  for (int i = 0; lt && ft && i < n; i++) {
    if (dpm_trainer_step(lt, 1, &a, &err) || dpm_trainer_step(ft, 1, &b, &err)) {
      printf("    step: %s\n", err.msg);
      worst = -1;
      break;
    }
    double rel = fabs(a.loss - b.loss) / fabs(b.loss);
    if (rel > worst) worst = rel;
    if (getenv("PREC_VERBOSE") || i == n - 1)
      printf("    step %d: loss %.5f (%s) %.5f (f32)\n", i + 1, a.loss, precision,
             b.loss);
  }
  dpm_trainer_destroy(lt);
  dpm_trainer_destroy(ft);
  dpm_spec_free(ls);
  dpm_spec_free(fs);
  return worst;
}

TEST(mlp_bf16_tracks_f32) {
  CHECK_WITHIN(track_f32(MLP_FORWARD, 16, "compute: bf16", 30), 2e-2);
}
TEST(mlp_f16_tracks_f32) {
  CHECK_WITHIN(track_f32(MLP_FORWARD, 16, "compute: fp16", 30), 2e-2);
}
TEST(cnn_bf16_tracks_f32) {
  CHECK_WITHIN(track_f32(CNN_FORWARD, 8, "compute: bf16", 8), 2e-2);
}

/* SpatialBN computes in f32 between a bf16 Conv and a bf16 FC. */
#define BN_FORWARD                                                                       \
  "  - {op: Conv, in: [data], out: c1, dim_out: 4, kernel: 3, pad: 1}\n"                 \
  "  - {op: SpatialBN, in: [c1], out: b1}\n"                                             \
  "  - {op: Relu, in: [b1], out: b1}\n"                                                  \
  "  - {op: MaxPool, in: [b1], out: p1, kernel: 2, stride: 2}\n"                         \
  "  - {op: FC, in: [p1], out: pred, dim_out: 10}\n"

TEST(cnn_bn_bf16_tracks_f32) {
  CHECK_WITHIN(track_f32(BN_FORWARD, 8, "compute: bf16", 8), 2e-2);
}

/* ---- checkpoints ----------------------------------------------------------- */

static int same_blob(dpm_trainer *x, dpm_trainer *y, const char *name) {
  dpm_tensor a = {0}, b = {0};
  dpm_err err = {0};
  int same = !dpm_trainer_read_blob(x, name, &a, &err) &&
             !dpm_trainer_read_blob(y, name, &b, &err) &&
             dpm_shape_equal(&a.shape, &b.shape) &&
             !memcmp(a.data, b.data, dpm_shape_bytes(&a.shape));
  if (!same) printf("    %s differs (%s)\n", name, err.msg);
  dpm_tensor_fini(&a);
  dpm_tensor_fini(&b);
  return same;
}

/* The masters and optimizer state of the MLP. */
static const char *const mlp_blobs[] = {"fc1_w",          "fc1_b",           "fc2_w",
                                        "fc2_b",          "pred_w",          "pred_b",
                                        "fc1_w_momentum", "pred_b_momentum", "iter"};
#define N_MLP_BLOBS (int)(sizeof mlp_blobs / sizeof *mlp_blobs)

/* A checkpoint of a model in precision `from` loads into one in `to`:
 * the f32 masters and state, bit for bit; the loaded one then trains. */
static int cross_load(const char *from, const char *to, const char *file) {
  Dpm__ModelSpec *fs = prec_spec(MLP_FORWARD, 8, from),
                 *ts = prec_spec(MLP_FORWARD, 8, to);
  char *path = tf_temp_path(file);
  dpm_trainer *a = tf_trainer(fs, 1, NULL), *b = tf_trainer(ts, 1, NULL);
  dpm_err err = {0};
  int ok = a && b && path && tf_steps(a, 3);
  if (ok && (dpm_trainer_checkpoint(a, NULL, path, &err) ||
             dpm_trainer_load(b, NULL, path, &err))) {
    printf("    %s -> %s: %s\n", from, to, err.msg);
    ok = 0;
  }
  for (int i = 0; ok && i < N_MLP_BLOBS; i++) ok = same_blob(a, b, mlp_blobs[i]);
  ok = ok && tf_steps(b, 1);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(fs);
  dpm_spec_free(ts);
  if (path) unlink(path);
  free(path);
  return ok;
}

TEST(checkpoint_bf16_loads_into_f32) {
  CHECK(cross_load("compute: bf16", "", "bf16-to-f32.ckpt"));
}
TEST(checkpoint_f32_loads_into_bf16) {
  CHECK(cross_load("", "compute: bf16", "f32-to-bf16.ckpt"));
}

/* The predictor of a bf16 model is its f32 model (no Casts, the f32
 * masters): byte for byte the predictor of the f32 model that loaded its
 * checkpoint. */
TEST(bf16_predictor_is_the_f32_model) {
  Dpm__ModelSpec *ls = prec_spec(MLP_FORWARD, 8, "compute: bf16"),
                 *fs = prec_spec(MLP_FORWARD, 8, "");
  char *path = tf_temp_path("bf16-predictor.ckpt");
  dpm_trainer *lt = tf_trainer(ls, 1, NULL), *ft = tf_trainer(fs, 1, NULL);
  dpm_err err = {0};
  const char *in[] = {"data"}, *out[] = {"softmax"};
  uint8_t *lb = NULL, *fb = NULL;
  size_t ll = 0, fl = 0;
  dpm_status s = lt && ft && path && tf_steps(lt, 2) ? DPM_OK : DPM_INTERNAL;
  if (!s) s = dpm_trainer_checkpoint(lt, NULL, path, &err);
  if (!s) s = dpm_trainer_load(ft, NULL, path, &err);
  if (!s)
    s = dpm_predictor_extract(dpm_trainer_model(lt), dpm_trainer_workspace(lt, 0), in, 1,
                              out, 1, &lb, &ll, &err);
  if (!s)
    s = dpm_predictor_extract(dpm_trainer_model(ft), dpm_trainer_workspace(ft, 0), in, 1,
                              out, 1, &fb, &fl, &err);
  int same = !s && ll == fl && !memcmp(lb, fb, ll);
  if (s) printf("    %s\n", err.msg);
  free(lb);
  free(fb);
  dpm_trainer_destroy(lt);
  dpm_trainer_destroy(ft);
  dpm_spec_free(ls);
  dpm_spec_free(fs);
  if (path) unlink(path);
  free(path);
  CHECK_INT(s, DPM_OK);
  CHECK(same);
}

/* 3 steps, checkpoint, load into a fresh bf16 trainer, 3 more: bit for bit
 * the 6 steps of an uninterrupted bf16 run. */
TEST(bf16_resume_is_exact) {
  Dpm__ModelSpec *spec = prec_spec(MLP_FORWARD, 8, "compute: bf16");
  char *path = tf_temp_path("bf16-resume.ckpt");
  dpm_err err = {0};
  dpm_trainer *straight = tf_trainer(spec, 1, NULL), *first = tf_trainer(spec, 1, NULL);
  CHECK(straight && first && path && tf_steps(straight, 6) && tf_steps(first, 3));
  CHECK_INT(dpm_trainer_checkpoint(first, NULL, path, &err), DPM_OK);
  dpm_trainer *resumed = tf_trainer(spec, 1, NULL);
  CHECK_INT(dpm_trainer_load(resumed, NULL, path, &err), DPM_OK);
  CHECK(tf_steps(resumed, 3));
  for (int i = 0; i < N_MLP_BLOBS; i++) CHECK(same_blob(straight, resumed, mlp_blobs[i]));
  CHECK(!same_blob(straight, first, "fc1_w")); /* the steps after did change it */
  dpm_trainer_destroy(straight);
  dpm_trainer_destroy(first);
  dpm_trainer_destroy(resumed);
  dpm_spec_free(spec);
  unlink(path);
  free(path);
}

/* The optimizer writes the working copies (engine/fuse.h): after steps,
 * each is its master rounded, bit for bit, on every replica. A master
 * written otherwise must be cast again before the next step reads its copy:
 * every param zeroed through replica 0's workspace and synced to replica 1,
 * or through both workspaces without a sync, and the next step's logits are
 * 0, its loss ln 10 exactly (the f32 log-sum-exp of ten zeros). A stale
 * copy would give the trained model's loss. */
static int copies_are_rounded_masters(dpm_trainer *t, int replicas) {
  const dpm_net *refresh = &dpm_trainer_model(t)->refresh;
  int ok = refresh->n == 6; /* 3 x (w, b) */
  for (int d = 0; d < replicas; d++)
    for (int i = 0; ok && i < refresh->n; i++) {
      dpm_workspace *ws = dpm_trainer_workspace(t, d);
      const dpm_blob *m = dpm_ws_find(ws, refresh->nodes[i].in[0]),
                     *c = dpm_ws_find(ws, refresh->nodes[i].out[0]);
      int64_t n = m && c ? dpm_tensor_numel(&m->t) : 0;
      ok = n > 0 && dpm_tensor_numel(&c->t) == n;
      for (int64_t j = 0; ok && j < n; j++)
        ok = dpm_u16(&c->t)[j] == dpm_bf16_from_f32_1(dpm_f32(&m->t)[j]);
    }
  return ok;
}

static int zero_params(dpm_trainer *t, int replicas) {
  const dpm_model *m = dpm_trainer_model(t);
  for (int d = 0; d < replicas; d++)
    for (int i = 0; i < m->shapes.n; i++) {
      const dpm_blobinfo *b = &m->shapes.v[i];
      if (b->kind != DPM_BLOB_PARAM) continue;
      dpm_blob *x = dpm_ws_find(dpm_trainer_workspace(t, d), b->name);
      if (!x) return 0;
      memset(x->t.data, 0, dpm_shape_bytes(&x->t.shape));
    }
  return 1;
}

TEST(bf16_working_copies_follow_written_masters) {
  Dpm__ModelSpec *spec = prec_spec(MLP_FORWARD, 8, "compute: bf16");
  dpm_err err = {0};
  dpm_step_stats st;
  for (int sync = 0; sync < 2; sync++) {
    dpm_trainer *t = tf_trainer(spec, 2, NULL);
    CHECK(t && tf_steps(t, 3));
    CHECK(copies_are_rounded_masters(t, 2));
    CHECK(zero_params(t, sync ? 1 : 2));
    if (sync) CHECK_INT(dpm_trainer_sync(t, &err), DPM_OK);
    CHECK_INT(dpm_trainer_step(t, 1, &st, &err), DPM_OK);
    CHECK(st.loss == (double)logf(10.f));
    dpm_trainer_destroy(t);
  }
  dpm_spec_free(spec);
}

/* ---- the spec and the devices ----------------------------------------------- */

/* The parse of a spec with `precision` on its line 4 fails with `msg`. */
static int refused(const char *precision, const char *msg) {
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "forward: [{op: FC, in: [data], out: pred, dim_out: 10}]\n"
           "losses: [loss]\n"
           "precision: {%s}\n",
           precision);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err);
  dpm_spec_free(spec);
  if (s == DPM_SPEC && strstr(err.msg, "t.yaml:4:") && strstr(err.msg, msg)) return 1;
  printf("    %s: status %d, \"%s\"\n", precision, (int)s, err.msg);
  return 0;
}

TEST(precision_spec_errors) {
  CHECK(refused("master: bf16", "'master' must be one of: fp32; got 'bf16'"));
  CHECK(refused("compute: fp8", "'compute' must be one of: fp32, bf16, fp16; got 'fp8'"));
  CHECK(refused("compute: [bf16]", "'compute' must be"));
}

/* The compute type is not part of the spec hash (checkpoints hold the f32
 * masters either way): a precision section that sets nothing else hashes
 * as none. */
TEST(precision_compute_outside_spec_hash) {
  Dpm__ModelSpec *a = prec_spec(MLP_FORWARD, 8, "compute: bf16"),
                 *b = prec_spec(MLP_FORWARD, 8, "compute: fp32"),
                 *c = prec_spec(MLP_FORWARD, 8, "");
  CHECK(a && b && c);
  CHECK(a->precision && a->precision->has_line && a->precision->line == 13);
  CHECK(dpm_spec_hash(a) == dpm_spec_hash(b));
  CHECK(dpm_spec_hash(a) == dpm_spec_hash(c));
  dpm_spec_free(a);
  dpm_spec_free(b);
  dpm_spec_free(c);
}

/* bf16 and fp16 run on fenced devices too: the CPU's low-precision
 * wrapper inside the fence (engine/exec.c binds op->inner), the same bits
 * as on cpu devices, step for step. (cuda devices take bf16 where every
 * 16-bit op has a cuda kernel, refusing fp16 at create: train/setup.c,
 * precision_check; the plugin does not load in this test binary.) On two
 * devices the first layer's FCGradient is shared between the replicas
 * (parallel/share.h), its packing and parts inside the fence. */
enum { FENCED_STEPS = 3 };
static const char *fenced_forward, *fenced_precision;
static int fenced_devices = 1;
static double fenced_loss[FENCED_STEPS];
static int fenced_ok;

static int lowp_losses(double *loss) {
  Dpm__ModelSpec *spec = prec_spec(fenced_forward, 8, fenced_precision);
  dpm_trainer *t = spec ? tf_trainer(spec, fenced_devices, NULL) : NULL;
  dpm_err err = {0};
  dpm_step_stats st;
  int ok = t != NULL;
  if (ok && fenced_devices > 1) {
    const dpm_plan *p = dpm_trainer_plan(t);
    ok = p->shared_op >= 0 && p->step.nodes[p->shared_op].def->id == DPM_OP_FC_GRADIENT;
    if (!ok) printf("    the first layer's FCGradient is not shared\n");
  }
  for (int i = 0; ok && i < FENCED_STEPS; i++) {
    ok = !dpm_trainer_step(t, 1, &st, &err);
    if (ok)
      loss[i] = st.loss;
    else
      printf("    step: %s\n", err.msg);
  }
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return ok;
}

static void fenced_body(void) { fenced_ok = lowp_losses(fenced_loss); }

static void fenced_matches_cpu(const char *forward, const char *precision) {
  double cpu[FENCED_STEPS];
  fenced_forward = forward;
  fenced_precision = precision;
  CHECK(lowp_losses(cpu));
  fenced_ok = 0;
  tf_on_fenced(fenced_body);
  CHECK(fenced_ok);
  for (int i = 0; i < FENCED_STEPS; i++) CHECK(cpu[i] == fenced_loss[i]);
}

TEST(precision_bf16_mlp_on_fenced_is_the_cpus) {
  fenced_matches_cpu(MLP_FORWARD, "compute: bf16");
}
TEST(precision_bf16_cnn_on_fenced_is_the_cpus) {
  fenced_matches_cpu(CNN_FORWARD, "compute: bf16");
}
TEST(precision_f16_mlp_on_fenced_is_the_cpus) {
  fenced_matches_cpu(MLP_FORWARD, "compute: fp16");
}
TEST(precision_bf16_mlp_on_two_fenced_is_the_cpus) {
  fenced_devices = 2;
  fenced_matches_cpu(MLP_FORWARD, "compute: bf16");
  fenced_devices = 1;
}
