/* MaxPool, AveragePool and their gradients: forward values by hand (with
 * padding that must never win a max or count in an average), the argmax
 * indices and the gradient scatter with overlapping windows, gradient checks
 * on odd sizes, strides and padding, and rejection of bad shapes; the 2x2
 * stride 2 fast paths against a computation by hand (ties, odd sizes), and
 * MaxPoolGradient fused with the ReluGradient before it. */
#include <stdlib.h>

#include "optest.h"
#include "test.h"

static ot_case pool_case(const char *op, const char *args, dpm_shape x, const float *v) {
  return (ot_case){.op = op,
                   .args = args,
                   .n_in = 1,
                   .in = {{.shape = x, .f = v}},
                   .n_out = 1,
                   .seed = 1};
}

static const float x4[] = {1, 5, 2, 0, 3, -1, 4, 8, -2, 6, 7, 1, 9, 0, -3, 2};
static const float neg3[] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};

TEST(op_maxpool_forward) {
  ot_case c = pool_case("MaxPool", "kernel=2 stride=2", ot_f32(4, 1, 1, 4, 4), x4);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 2, 2), (const float[]){5, 8, 9, 7}, 0));
  /* windows of 4 in-bounds inputs at the corners: the zero padding never wins */
  c = pool_case("MaxPool", "kernel=3 stride=2 pad=1", ot_f32(4, 1, 1, 3, 3), neg3);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 2, 2), (const float[]){-1, -2, -4, -5}, 0));
  /* default stride 1: overlapping windows, 5 columns give 4 outputs */
  c = pool_case("MaxPool", "kernel=2", ot_f32(4, 1, 1, 2, 5),
                (const float[]){1, 3, 2, 5, 4, 0, 0, 0, 0, 6});
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 1, 4), (const float[]){3, 3, 5, 6}, 0));
}

TEST(op_averagepool_forward) {
  ot_case c = pool_case("AveragePool", "kernel=2 stride=2", ot_f32(4, 1, 1, 4, 4), x4);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 2, 2), (const float[]){2, 3.5f, 3.25f, 1.75f},
                      0));
  /* padding is not counted: each corner window averages its 4 inputs */
  c = pool_case("AveragePool", "kernel=3 stride=2 pad=1", ot_f32(4, 1, 1, 3, 3), neg3);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 2, 2), (const float[]){-3, -4, -6, -7}, 0));
  /* floor: a 5x3 input with kernel 2 stride 2 gives 2x1 */
  float x[15];
  for (int i = 0; i < 15; i++) x[i] = (float)i;
  c = pool_case("AveragePool", "kernel=2 stride=2", ot_f32(4, 1, 1, 5, 3), x);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 2, 1), (const float[]){2, 8}, 0));
}

static void fini_all(dpm_tensor *t, int n) {
  for (int k = 0; k < n; k++) dpm_tensor_fini(&t[k]);
}

/* Overlapping windows share an argmax: its input gets every dY. */
TEST(op_maxpool_indices_and_gradient) {
  const float xv[] = {1, 2, 3, 4, 9, 6, 7, 8, 5}, dyv[] = {1, 2, 3, 4};
  const float want[] = {0, 0, 0, 0, 10, 0, 0, 0, 0};
  /* x, y, y_idx, dy, dx */
  dpm_tensor t[5] = {ot_tensor(ot_f32(4, 1, 1, 3, 3), xv),
                     {.data = NULL},
                     {.data = NULL},
                     ot_tensor(ot_f32(4, 1, 1, 2, 2), dyv),
                     {.data = NULL}};
  dpm_err err = {0};
  int ran = !ot_run_op("MaxPool", "kernel=2", 0, 1, (dpm_tensor *[]){&t[0]}, 2,
                       (dpm_tensor *[]){&t[1], &t[2]}, &err);
  int32_t idx[4] = {-1, -1, -1, -1};
  double d = -1;
  if (ran) {
    memcpy(idx, t[2].data, sizeof idx);
    if (!ot_run_op("MaxPoolGradient", "kernel=2", 0, 3,
                   (dpm_tensor *[]){&t[0], &t[3], &t[2]}, 1, (dpm_tensor *[]){&t[4]},
                   &err))
      d = ot_maxdiff(dpm_f32(&t[4]), want, 9);
  }
  fini_all(t, 5);
  CHECK(ran);
  for (int i = 0; i < 4; i++) CHECK_INT(idx[i], 4);
  CHECK(d == 0);
}

/* Ties go to the first input in row-major order. */
TEST(op_maxpool_ties_take_the_first) {
  const float xv[] = {7, 7, 7, 7};
  dpm_tensor t[3] = {
      ot_tensor(ot_f32(4, 1, 1, 2, 2), xv), {.data = NULL}, {.data = NULL}};
  dpm_err err = {0};
  int ran = !ot_run_op("MaxPool", "kernel=2", 0, 1, (dpm_tensor *[]){&t[0]}, 2,
                       (dpm_tensor *[]){&t[1], &t[2]}, &err);
  int32_t idx = ran ? dpm_i32(&t[2])[0] : -1;
  fini_all(t, 3);
  CHECK_INT(idx, 0);
}

TEST(op_averagepool_gradient_counts_in_bounds_only) {
  /* each window spreads dY over its 4 inputs; the centre is in all four */
  const float dyv[] = {4, 8, 12, 16}, want[] = {1, 3, 2, 4, 10, 6, 3, 7, 4};
  dpm_tensor t[3] = {ot_tensor(ot_f32(4, 1, 1, 3, 3), NULL),
                     ot_tensor(ot_f32(4, 1, 1, 2, 2), dyv),
                     {.data = NULL}};
  double d = -1;
  dpm_err err = {0};
  if (!ot_run_op("AveragePoolGradient", "kernel=3 stride=2 pad=1", 0, 2,
                 (dpm_tensor *[]){&t[0], &t[1]}, 1, (dpm_tensor *[]){&t[2]}, &err))
    d = ot_maxdiff(dpm_f32(&t[2]), want, 9);
  fini_all(t, 3);
  CHECK(d == 0);
}

/* MaxPool's gradient: the op table's cases (tests/opcases/cases.c; windows
 * 2x2, 3x3 with padding, overlapping, with gaps). */

/* Windows 2x2 and 3x3 with padding: the op table's "AveragePool 2x2" and
 * "AveragePool 3x3 pad 1" (tests/opcases/cases.c). */
TEST(op_averagepool_gradcheck) {
  ot_case c = pool_case("AveragePool", "kernel=3 pad=2", ot_f32(4, 2, 1, 4, 3), NULL);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

/* global_pooling: each whole plane's mean, [N, C, 1, 1], square or not. */
TEST(op_averagepool_global_forward) {
  ot_case c = pool_case("AveragePool", "global_pooling=true", ot_f32(4, 1, 1, 4, 4), x4);
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 1, 1, 1), (const float[]){2.625f}, 0));
  float x[2 * 3 * 2 * 5];
  for (int i = 0; i < 60; i++) x[i] = (float)i;
  c = pool_case("AveragePool", "global_pooling=true", ot_f32(4, 2, 3, 2, 5), x);
  float want[6];
  for (int p = 0; p < 6; p++) want[p] = (float)(10 * p) + 4.5f; /* 10p .. 10p + 9 */
  CHECK(ot_forward_is(&c, ot_f32(4, 2, 3, 1, 1), want, 0));
}

TEST(op_averagepool_global_gradcheck) {
  ot_case c =
      pool_case("AveragePool", "global_pooling=true", ot_f32(4, 2, 3, 3, 5), NULL);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[0].shape = ot_f32(4, 1, 2, 7, 2);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

/* A window with global_pooling is refused; MaxPool has no global_pooling. */
TEST(op_averagepool_global_refuses_window_args) {
  const char *bad[] = {"global_pooling=true kernel=2", "global_pooling=true stride=2",
                       "global_pooling=true pad=1"};
  for (int i = 0; i < 3; i++) {
    ot_case c = pool_case("AveragePool", bad[i], ot_f32(4, 1, 1, 4, 4), NULL);
    CHECK(ot_rejects(&c, "kernel, stride and pad do not apply with global_pooling"));
  }
  ot_case c =
      pool_case("MaxPool", "kernel=2 global_pooling=true", ot_f32(4, 1, 1, 4, 4), NULL);
  CHECK(ot_rejects(&c, "unknown argument 'global_pooling'"));
}

TEST(op_pool_rejects_bad_shapes_and_args) {
  const char *ops[] = {"MaxPool", "AveragePool"};
  for (int i = 0; i < 2; i++) {
    ot_case c = pool_case(ops[i], "kernel=2 pad=2", ot_f32(4, 1, 1, 4, 4), NULL);
    CHECK(ot_rejects(&c, "pad 2 must be smaller than kernel 2"));
    c.args = "kernel=5 pad=1";
    c.in[0].shape = ot_f32(4, 1, 1, 2, 6);
    CHECK(ot_rejects(&c, "kernel 5 is larger than the padded input 4x8"));
    c.args = "kernel=2";
    c.in[0].shape = ot_f32(3, 1, 4, 4);
    CHECK(ot_rejects(&c, "input must have 4 dimensions"));
    c.in[0].shape = ot_i32(4, 1, 1, 4, 4);
    CHECK(ot_rejects(&c, "input must be f32"));
    c.args = "stride=2";
    c.in[0].shape = ot_f32(4, 1, 1, 4, 4);
    CHECK(ot_rejects(&c, "missing required argument 'kernel'"));
  }
}

/* ---- the 2x2 stride 2 fast paths and the fused ReluGradient ------------ */

/* Values in {-2, ..., 2}: windows full of ties. */
static void tied(float *v, int n) {
  for (int i = 0; i < n; i++) v[i] = (float)((i * 7 + i / 5) % 5) - 2;
}

/* An output tensor holding NaNs: a kernel must overwrite each of them. */
static dpm_tensor garbage(dpm_shape s) {
  dpm_tensor t = ot_tensor(s, NULL);
  for (int64_t i = 0; i < dpm_tensor_numel(&t); i++) dpm_f32(&t)[i] = NAN;
  return t;
}

/* MaxPool 2x2/2 of one [n, c, h, w] by hand: each window's first max in
 * row-major order, then dX scattered from dY; dX and Y_idx are checked
 * whole, so the dropped last row and column of odd sizes must be zeros. */
static int maxpool_2x2_is_reference(int n, int c, int h, int w) {
  const int ho = h / 2, wo = w / 2, nx = n * c * h * w, ny = n * c * ho * wo;
  float *xv = malloc(nx * sizeof *xv), *dyv = malloc(ny * sizeof *dyv);
  float *y = malloc(ny * sizeof *y), *dx = calloc(nx, sizeof *dx);
  int32_t *idx = malloc(ny * sizeof *idx);
  tied(xv, nx);
  for (int i = 0; i < ny; i++) dyv[i] = (float)(i + 1);
  for (int pl = 0, o = 0; pl < n * c; pl++)
    for (int oy = 0; oy < ho; oy++)
      for (int ox = 0; ox < wo; ox++, o++) {
        const float *xp = xv + pl * h * w;
        int at = 2 * oy * w + 2 * ox;
        for (int k = 1; k < 4; k++) {
          int i = (2 * oy + k / 2) * w + 2 * ox + k % 2;
          if (xp[i] > xp[at]) at = i;
        }
        y[o] = xp[at], idx[o] = at;
        dx[pl * h * w + at] += dyv[o];
      }
  /* x, y, y_idx, dy, dx */
  dpm_tensor t[5] = {ot_tensor(ot_f32(4, n, c, h, w), xv),
                     {.data = NULL},
                     {.data = NULL},
                     ot_tensor(ot_f32(4, n, c, ho, wo), dyv),
                     garbage(ot_f32(4, n, c, h, w))};
  int ok = !ot_run_op("MaxPool", "kernel=2 stride=2", 0, 1, (dpm_tensor *[]){&t[0]}, 2,
                      (dpm_tensor *[]){&t[1], &t[2]}, NULL) &&
           !ot_run_op("MaxPoolGradient", "kernel=2 stride=2", 0, 3,
                      (dpm_tensor *[]){&t[0], &t[3], &t[2]}, 1, (dpm_tensor *[]){&t[4]},
                      NULL) &&
           !memcmp(dpm_f32(&t[1]), y, ny * sizeof *y) &&
           !memcmp(dpm_i32(&t[2]), idx, ny * sizeof *idx) &&
           !memcmp(dpm_f32(&t[4]), dx, nx * sizeof *dx);
  fini_all(t, 5);
  free(xv), free(dyv), free(y), free(dx), free(idx);
  return ok;
}

TEST(op_maxpool_2x2_matches_reference) {
  CHECK(maxpool_2x2_is_reference(2, 3, 7, 9)); /* odd: last row and column dropped */
  CHECK(maxpool_2x2_is_reference(1, 2, 6, 8));
  CHECK(maxpool_2x2_is_reference(3, 1, 2, 30)); /* one row of windows */
}

/* Ties in every position of the window go to the first in row-major order. */
TEST(op_maxpool_2x2_ties_take_the_first) {
  const float xv[] = {7, 7, 1, 3, 1, 2, 0, 0, /* row 0 */
                      7, 7, 3, 2, 3, 3, 0, 1 /* row 1 */};
  const float want_y[] = {7, 3, 3, 1};
  const int32_t want_idx[] = {0, 3, 12, 15};
  dpm_tensor t[3] = {
      ot_tensor(ot_f32(4, 1, 1, 2, 8), xv), {.data = NULL}, {.data = NULL}};
  int ok = !ot_run_op("MaxPool", "kernel=2 stride=2", 0, 1, (dpm_tensor *[]){&t[0]}, 2,
                      (dpm_tensor *[]){&t[1], &t[2]}, NULL) &&
           ot_maxdiff(dpm_f32(&t[1]), want_y, 4) == 0 &&
           !memcmp(dpm_i32(&t[2]), want_idx, sizeof want_idx);
  fini_all(t, 3);
  CHECK(ok);
}

TEST(op_averagepool_2x2_matches_reference) {
  /* quarters of small integers: every sum and share is exact */
  enum { N = 2, C = 3, H = 7, W = 9, HO = 3, WO = 4 };
  static float xv[N * C * H * W], dyv[N * C * HO * WO], y[N * C * HO * WO],
      dx[N * C * H * W];
  tied(xv, N * C * H * W);
  for (int i = 0; i < N * C * HO * WO; i++) dyv[i] = (float)(i % 9 - 4);
  for (int pl = 0, o = 0; pl < N * C; pl++)
    for (int oy = 0; oy < HO; oy++)
      for (int ox = 0; ox < WO; ox++, o++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) {
          int i = pl * H * W + (2 * oy + k / 2) * W + 2 * ox + k % 2;
          sum += xv[i];
          dx[i] = dyv[o] / 4;
        }
        y[o] = sum / 4;
      }
  ot_case c = pool_case("AveragePool", "kernel=2 stride=2", ot_f32(4, N, C, H, W), xv);
  CHECK(ot_forward_is(&c, ot_f32(4, N, C, HO, WO), y, 0));
  dpm_tensor t[3] = {ot_tensor(ot_f32(4, N, C, H, W), NULL),
                     ot_tensor(ot_f32(4, N, C, HO, WO), dyv),
                     garbage(ot_f32(4, N, C, H, W))};
  int ran = !ot_run_op("AveragePoolGradient", "kernel=2 stride=2", 0, 2,
                       (dpm_tensor *[]){&t[0], &t[1]}, 1, (dpm_tensor *[]){&t[2]}, NULL);
  int same = ran && !memcmp(dpm_f32(&t[2]), dx, sizeof dx);
  fini_all(t, 3);
  CHECK(ran);
  CHECK(same);
}

/* MaxPoolGradient fused with the ReluGradient of the Relu before the pool
 * gives exactly what ReluGradient(X, dX) gives on its unfused dX. X is a
 * Relu output: zeros, some of them whole windows, and positives. */
static int fused_relu_grad_is_exact(const char *args, int n, int c, int h, int w) {
  const int nx = n * c * h * w;
  float *xv = malloc(nx * sizeof *xv);
  tied(xv, nx);
  for (int i = 0; i < nx; i++) xv[i] = xv[i] > 0 ? xv[i] : 0;
  /* x, y, y_idx, dy, dx, relu'd dx, fused dx */
  dpm_tensor t[7] = {ot_tensor(ot_f32(4, n, c, h, w), xv)};
  int ok = !ot_run_op("MaxPool", args, 0, 1, (dpm_tensor *[]){&t[0]}, 2,
                      (dpm_tensor *[]){&t[1], &t[2]}, NULL);
  if (ok) {
    int64_t ny = dpm_tensor_numel(&t[1]);
    t[3] = ot_tensor(t[1].shape, NULL);
    for (int64_t i = 0; i < ny; i++) dpm_f32(&t[3])[i] = (float)(i % 11) - 5.5f;
    t[6] = garbage(t[0].shape);
    dpm_tensor *gin[] = {&t[0], &t[3], &t[2]};
    ok = !ot_run_op("MaxPoolGradient", args, 0, 3, gin, 1, (dpm_tensor *[]){&t[4]},
                    NULL) &&
         !ot_run_op("ReluGradient", "", 0, 2, (dpm_tensor *[]){&t[0], &t[4]}, 1,
                    (dpm_tensor *[]){&t[5]}, NULL) &&
         !ot_run_fused("MaxPoolGradient", args, 0, DPM_FUSE_RELU_GRAD, 3, gin, 1,
                       (dpm_tensor *[]){&t[6]}, NULL) &&
         !memcmp(dpm_f32(&t[6]), dpm_f32(&t[5]), nx * sizeof(float));
  }
  fini_all(t, 7);
  free(xv);
  return ok;
}

TEST(op_maxpoolgradient_fused_relu_grad) {
  CHECK(dpm_op_find("MaxPoolGradient")->fusable & DPM_FUSE_RELU_GRAD);
  CHECK(fused_relu_grad_is_exact("kernel=2 stride=2", 2, 3, 7, 9));
  CHECK(fused_relu_grad_is_exact("kernel=3 stride=2 pad=1", 1, 2, 6, 5));
  CHECK(fused_relu_grad_is_exact("kernel=3", 2, 1, 4, 5)); /* overlapping windows */
}
