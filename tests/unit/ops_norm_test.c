/* SpatialBN and SpatialBNGradient: train-mode values, saved statistics and
 * the running-statistics update by hand, test mode on the running
 * statistics (which it leaves alone), 2-D input, gradient checks in both
 * modes, and rejection of bad shapes and arguments. */
#include "optest.h"
#include "test.h"

/* Two channels: c0 = {1, 3, 5, 7} (mean 4, var 5), c1 = {10, -6, 2, 2}
 * (mean 2, var 32); with epsilon 4 the inverse stds are 1/3 and 1/6. */
static const float x_nchw[] = {1, 3, 10, -6, 5, 7, 2, 2};
static const float x_nc[] = {1, 10, 3, -6, 5, 2, 7, 2};
static const float scale[] = {2, 0.5f}, bias[] = {1, -1};
static const float rm0[] = {0.5f, -1}, riv0[] = {1, 2};

static ot_case bn_case(const char *args, dpm_shape x, const float *xv, int is_test) {
  return (ot_case){.op = "SpatialBN",
                   .args = args,
                   .n_in = 5,
                   .in = {{.shape = x, .f = xv},
                          {.shape = ot_f32(1, 2), .f = scale},
                          {.shape = ot_f32(1, 2), .f = bias},
                          {.shape = ot_f32(1, 2), .f = rm0, .no_grad = 1},
                          {.shape = ot_f32(1, 2), .f = riv0, .no_grad = 1}},
                   .n_out = 1,
                   .is_test = is_test,
                   .seed = 1};
}

TEST(op_bn_forward_train) {
  /* c0: 2 (x - 4) / 3 + 1; c1: (x - 2) / 12 - 1 */
  const float want[] = {-1, 1 / 3.f, -1 / 3.f, -5 / 3.f, 5 / 3.f, 3, -1, -1};
  ot_case c = bn_case("epsilon=4", ot_f32(4, 2, 2, 1, 2), x_nchw, 0);
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 1e-6));
  /* [N, C]: the same numbers, one value per image and channel */
  const float want_nc[] = {-1, -1 / 3.f, 1 / 3.f, -5 / 3.f, 5 / 3.f, -1, 3, -1};
  c = bn_case("epsilon=4", ot_f32(2, 4, 2), x_nc, 0);
  CHECK(ot_forward_is(&c, c.in[0].shape, want_nc, 1e-6));
}

/* Test mode: riv + epsilon = {4, 16}, so y = x on c0, (x + 2) / 8 - 1 on c1. */
TEST(op_bn_forward_test_uses_running_stats) {
  const float rm[] = {1, -2}, riv[] = {3, 15};
  const float want[] = {1, 3, 0.5f, -1.5f, 5, 7, -0.5f, -0.5f};
  ot_case c = bn_case("epsilon=1", ot_f32(4, 2, 2, 1, 2), x_nchw, 1);
  c.in[3].f = rm, c.in[4].f = riv;
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 0));
}

/* Runs SpatialBN on the two-channel x and returns, in order, the running
 * mean and variance after the run, the saved mean and inverse std. */
static int bn_stats(int is_test, float got[4][2]) {
  dpm_tensor t[8] = {ot_tensor(ot_f32(4, 2, 2, 1, 2), x_nchw),
                     ot_tensor(ot_f32(1, 2), scale),
                     ot_tensor(ot_f32(1, 2), bias),
                     ot_tensor(ot_f32(1, 2), rm0),
                     ot_tensor(ot_f32(1, 2), riv0),
                     {.data = NULL},
                     {.data = NULL},
                     {.data = NULL}};
  dpm_err err = {0};
  int ok = !ot_run_op("SpatialBN", "epsilon=4", is_test, 5,
                      (dpm_tensor *[]){&t[0], &t[1], &t[2], &t[3], &t[4]}, 3,
                      (dpm_tensor *[]){&t[5], &t[6], &t[7]}, &err);
  if (ok)
    for (int k = 0; k < 4; k++)
      memcpy(got[k], t[k < 2 ? 3 + k : 4 + k].data, 2 * sizeof(float));
  else
    printf("    %s\n", err.msg);
  for (int k = 0; k < 8; k++) dpm_tensor_fini(&t[k]);
  return ok;
}

/* Momentum 0.9; the running variance is unbiased: var * 4/3 here. */
TEST(op_bn_train_updates_running_stats) {
  float got[4][2];
  CHECK(bn_stats(0, got));
  CHECK_NEAR(got[0][0], 0.9 * 0.5 + 0.1 * 4, 1e-6);
  CHECK_NEAR(got[0][1], 0.9 * -1 + 0.1 * 2, 1e-6);
  CHECK_NEAR(got[1][0], 0.9 * 1 + 0.1 * 5 * 4 / 3., 1e-6);
  CHECK_NEAR(got[1][1], 0.9 * 2 + 0.1 * 32 * 4 / 3., 1e-6);
  CHECK_NEAR(got[2][0], 4, 1e-6);
  CHECK_NEAR(got[2][1], 2, 1e-6);
  CHECK_NEAR(got[3][0], 1 / 3., 1e-7);
  CHECK_NEAR(got[3][1], 1 / 6., 1e-7);
}

TEST(op_bn_test_leaves_running_stats) {
  float got[4][2];
  CHECK(bn_stats(1, got));
  for (int c = 0; c < 2; c++) {
    CHECK(got[0][c] == rm0[c]);
    CHECK(got[1][c] == riv0[c]);
    CHECK(got[2][c] == rm0[c]); /* saved: the running mean */
    CHECK_NEAR(got[3][c], 1 / sqrt(riv0[c] + 4), 1e-7);
  }
}

/* A channel mean far from zero against its spread keeps its variance. */
TEST(op_bn_variance_of_offset_data) {
  float x[2 * 1 * 4];
  for (int i = 0; i < 8; i++) x[i] = 1000.f + (i % 2 ? 0.01f : -0.01f);
  ot_case c = bn_case("epsilon=1e-12", ot_f32(4, 2, 1, 2, 2), x, 0);
  c.in[1].shape = c.in[2].shape = c.in[3].shape = c.in[4].shape = ot_f32(1, 1);
  float want[8];
  for (int i = 0; i < 8; i++) want[i] = 2 * (i % 2 ? 1.f : -1.f) + 1;
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 2e-3));
}

/* Channels of 14 to 18 values: with fewer, a step of 1e-2 moves the batch
 * statistics enough to show curvature; with many more, float rounding in Y
 * summed over the channel drowns the small per-element gradients. */
TEST(op_bn_gradcheck_train) {
  static const struct {
    int nd, n, c, h, w;
  } cases[] = {{4, 2, 4, 1, 7}, {4, 7, 1, 2, 1}, {4, 3, 2, 2, 3}, {2, 16, 3, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int c_ = cases[i].c;
    dpm_shape x = cases[i].nd == 4 ? ot_f32(4, cases[i].n, c_, cases[i].h, cases[i].w)
                                   : ot_f32(2, cases[i].n, c_);
    ot_case c = bn_case("", x, NULL, 0);
    for (int k = 1; k < 5; k++) c.in[k].shape = ot_f32(1, c_), c.in[k].f = NULL;
    c.seed = (unsigned)i + 2;
    CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  }
}

/* In test mode the statistics are constants: a positive running variance. */
TEST(op_bn_gradcheck_test_mode) {
  const float rm[] = {0.1f, -0.2f, 0.3f}, riv[] = {0.5f, 1.5f, 2};
  ot_case c = bn_case("", ot_f32(4, 2, 3, 2, 3), NULL, 1);
  for (int k = 1; k < 5; k++) c.in[k].shape = ot_f32(1, 3), c.in[k].f = NULL;
  c.in[3].f = rm, c.in[4].f = riv;
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_bn_rejects_bad_shapes_and_args) {
  ot_case c = bn_case("", ot_f32(3, 2, 2, 2), NULL, 0);
  CHECK(ot_rejects(&c, "input must be [N,C] or [N,C,H,W], got f32[2,2,2]"));
  c = bn_case("", ot_f32(4, 2, 2, 1, 2), x_nchw, 0);
  c.in[2].shape = ot_f32(1, 3);
  CHECK(ot_rejects(&c, "input 2 must be f32[2], got f32[3]"));
  c = bn_case("", ot_f32(4, 2, 2, 1, 2), x_nchw, 0);
  c.in[4].shape = ot_f32(2, 1, 2);
  CHECK(ot_rejects(&c, "input 4 must be f32[2], got f32[1,2]"));
  c = bn_case("epsilon=0", ot_f32(4, 2, 2, 1, 2), x_nchw, 0);
  CHECK(ot_rejects(&c, "'epsilon'"));
  c.args = "momentum=1.5";
  CHECK(ot_rejects(&c, "'momentum'"));
}
