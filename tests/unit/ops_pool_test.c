/* MaxPool, AveragePool and their gradients: forward values by hand (with
 * padding that must never win a max or count in an average), the argmax
 * indices and the gradient scatter with overlapping windows, gradient checks
 * on odd sizes, strides and padding, and rejection of bad shapes. */
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

/* Distinct values 0.05 apart: a step of 0.01 never changes an argmax. */
static void spaced(float *v, int n) {
  for (int i = 0; i < n; i++) v[i] = (float)((i * 37) % n) * 0.05f - 1;
}

TEST(op_maxpool_gradcheck) {
  static const struct {
    const char *args;
    int n, c, h, w;
  } cases[] = {
      {"kernel=2 stride=2", 2, 3, 5, 7},       /* floor drops a row and a column */
      {"kernel=3 stride=2 pad=1", 1, 2, 6, 5}, /* padding */
      {"kernel=3", 2, 1, 4, 5},                /* overlapping windows */
      {"kernel=2 stride=3", 1, 1, 7, 8},       /* gaps between windows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int n = cases[i].n * cases[i].c * cases[i].h * cases[i].w;
    float v[256];
    spaced(v, n);
    ot_case c = pool_case("MaxPool", cases[i].args,
                          ot_f32(4, cases[i].n, cases[i].c, cases[i].h, cases[i].w), v);
    CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  }
}

TEST(op_averagepool_gradcheck) {
  ot_case c = pool_case("AveragePool", "kernel=2 stride=2", ot_f32(4, 2, 3, 5, 7), NULL);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c = pool_case("AveragePool", "kernel=3 stride=2 pad=1", ot_f32(4, 1, 2, 6, 5), NULL);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c = pool_case("AveragePool", "kernel=3 pad=2", ot_f32(4, 2, 1, 4, 3), NULL);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
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
