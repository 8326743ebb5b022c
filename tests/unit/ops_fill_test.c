/* Fill ops: exact values for ConstantFill (every dtype, scalar shape),
 * statistics (range, mean, std) for the random fills, reproducibility by
 * seed, and rejection of bad arguments. */
#include <math.h>

#include "optest.h"
#include "test.h"

static dpm_status fill(const char *op, const char *args, dpm_tensor *y, dpm_err *err) {
  ot_case c = {.op = op, .args = args, .n_in = 0, .n_out = 1};
  return ot_forward(&c, y, err);
}

typedef struct {
  double min, max, mean, std;
} stats;

static stats stats_of(const dpm_tensor *t) {
  const float *x = dpm_f32(t);
  int64_t n = dpm_tensor_numel(t);
  stats s = {x[0], x[0], 0, 0};
  for (int64_t i = 0; i < n; i++) {
    s.min = fmin(s.min, x[i]), s.max = fmax(s.max, x[i]);
    s.mean += x[i];
  }
  s.mean /= (double)n;
  for (int64_t i = 0; i < n; i++) s.std += (x[i] - s.mean) * (x[i] - s.mean);
  s.std = sqrt(s.std / (double)n);
  return s;
}

/* ---- ConstantFill -------------------------------------------------------- */

TEST(fill_constant_f32) {
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("ConstantFill", "shape=2,3 value=1.5", y, &err), DPM_OK);
  CHECK_INT(y[0].shape.dtype, DPM_F32);
  CHECK_INT(y[0].shape.ndim, 2);
  CHECK_INT(y[0].shape.d[0], 2);
  CHECK_INT(y[0].shape.d[1], 3);
  for (int i = 0; i < 6; i++) CHECK(dpm_f32(&y[0])[i] == 1.5f);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_constant_defaults_to_zero_scalar) {
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("ConstantFill", "", y, &err), DPM_OK);
  CHECK_INT(y[0].shape.ndim, 0);
  CHECK_INT(y[0].shape.dtype, DPM_F32);
  CHECK(dpm_f32(&y[0])[0] == 0.f);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_constant_integer_dtypes) {
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("ConstantFill", "dtype=i64 value=7", y, &err), DPM_OK);
  CHECK_INT(y[0].shape.dtype, DPM_I64);
  CHECK_INT(y[0].shape.ndim, 0);
  CHECK_INT(dpm_i64(&y[0])[0], 7);
  dpm_tensor_fini(&y[0]);
  CHECK_INT(fill("ConstantFill", "shape=5 dtype=i32 value=-3", y, &err), DPM_OK);
  CHECK_INT(y[0].shape.dtype, DPM_I32);
  for (int i = 0; i < 5; i++) CHECK_INT(dpm_i32(&y[0])[i], -3);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_constant_rejects_bad_args) {
  static const struct {
    const char *args, *msg;
  } bad[] = {
      {"dtype=i32 value=1.5", "value 1.5 is not representable as i32"},
      {"dtype=i32 value=3e9", "not representable as i32"},
      {"dtype=f64", "dtype"},
      {"shape=1,2,3,4,5", "shape has 5 dimensions"},
      {"shape=3,0", "shape"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    ot_case c = {.op = "ConstantFill", .args = bad[k].args, .n_out = 1};
    CHECK(ot_rejects(&c, bad[k].msg));
  }
}

/* ---- random fills -------------------------------------------------------- */

TEST(fill_xavier_statistics) {
  /* fan_in = 50: uniform in +-sqrt(3/50), std sqrt(1/50). */
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("XavierFill", "shape=64,50 seed=3", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  double r = sqrt(3.0 / 50);
  CHECK(s.min >= -r && s.max <= r);
  CHECK(s.min < -0.95 * r && s.max > 0.95 * r);
  CHECK_NEAR(s.mean, 0, 0.01);
  CHECK_NEAR(s.std, sqrt(1.0 / 50), 0.05 * sqrt(1.0 / 50));
  dpm_tensor_fini(&y[0]);
}

TEST(fill_xavier_conv_fan_in) {
  /* [16, 8, 3, 3]: fan_in = 72. */
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("XavierFill", "shape=16,8,3,3", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  double r = sqrt(3.0 / 72);
  CHECK(s.min >= -r && s.max <= r && s.max > 0.95 * r);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_msra_statistics) {
  /* [128, 64, 3, 3]: fan_out = 73728 / 64 = 1152, std sqrt(2/1152) = 1/24.
   * Among n = 73728 draws the sample mean's standard error is std/sqrt(n)
   * (1.5e-4) and the sample std's std/sqrt(2n) (0.26% of it): the bounds
   * below are about 14 and 19 of them. */
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("MSRAFill", "shape=128,64,3,3 seed=11", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  CHECK_NEAR(s.mean, 0, 0.05 / 24);
  CHECK_NEAR(s.std, 1.0 / 24, 0.05 / 24);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_gaussian_statistics) {
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("GaussianFill", "shape=100,100 mean=2 std=0.5", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  CHECK_NEAR(s.mean, 2, 0.02);
  CHECK_NEAR(s.std, 0.5, 0.02);
  CHECK(s.min < 0.5 && s.max > 3.5); /* 3 sigma out, among 10^4 draws */
  dpm_tensor_fini(&y[0]);
  CHECK_INT(fill("GaussianFill", "shape=100,100", y, &err), DPM_OK);
  s = stats_of(&y[0]);
  CHECK_NEAR(s.std, 0.01, 0.0005);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_uniform_statistics) {
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("UniformFill", "shape=100,101 min=-3 max=5", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  CHECK(s.min >= -3 && s.max <= 5 && s.min < -2.99 && s.max > 4.99);
  CHECK_NEAR(s.mean, 1, 0.05);
  CHECK_NEAR(s.std, 8 / sqrt(12.0), 0.05);
  dpm_tensor_fini(&y[0]);
  CHECK_INT(fill("UniformFill", "shape=1000", y, &err), DPM_OK);
  s = stats_of(&y[0]);
  CHECK(s.min >= -1 && s.max <= 1 && s.min < -0.9 && s.max > 0.9);
  dpm_tensor_fini(&y[0]);
}

TEST(fill_random_reproducible_by_seed) {
  static const char *const ops[] = {"XavierFill", "MSRAFill", "GaussianFill",
                                    "UniformFill"};
  for (int k = 0; k < 4; k++) {
    dpm_tensor a[1], b[1], c[1];
    dpm_err err = {0};
    CHECK_INT(fill(ops[k], "shape=7,9 seed=42", a, &err), DPM_OK);
    CHECK_INT(fill(ops[k], "shape=7,9 seed=42", b, &err), DPM_OK);
    CHECK_INT(fill(ops[k], "shape=7,9 seed=43", c, &err), DPM_OK);
    CHECK(ot_maxdiff(dpm_f32(&a[0]), dpm_f32(&b[0]), 63) == 0);
    int same = 0;
    for (int i = 0; i < 63; i++) same += dpm_f32(&a[0])[i] == dpm_f32(&c[0])[i];
    CHECK_INT(same, 0);
    dpm_tensor_fini(&a[0]), dpm_tensor_fini(&b[0]), dpm_tensor_fini(&c[0]);
  }
}

TEST(fill_random_scalar_and_vector) {
  /* Missing dimensions count as 1: a scalar's fan is 1, a vector's is its
   * length (MSRA) or 1 (Xavier). */
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(fill("XavierFill", "", y, &err), DPM_OK);
  CHECK_INT(y[0].shape.ndim, 0);
  CHECK(fabs(dpm_f32(&y[0])[0]) <= sqrt(3.0));
  dpm_tensor_fini(&y[0]);
  CHECK_INT(fill("XavierFill", "shape=1000", y, &err), DPM_OK);
  stats s = stats_of(&y[0]);
  CHECK(s.max <= sqrt(3.0) && s.max > 0.9 * sqrt(3.0));
  dpm_tensor_fini(&y[0]);
  CHECK_INT(fill("MSRAFill", "shape=2000", y, &err), DPM_OK);
  s = stats_of(&y[0]);
  CHECK_NEAR(s.std, sqrt(2.0 / 2000), 0.05 * sqrt(2.0 / 2000));
  dpm_tensor_fini(&y[0]);
}

TEST(fill_random_rejects_bad_args) {
  static const struct {
    const char *op, *args, *msg;
  } bad[] = {
      {"UniformFill", "min=2 max=1", "min 2 is greater than max 1"},
      {"GaussianFill", "std=-1", "std"},
      {"XavierFill", "shape=1,1,1,1,1", "shape has 5 dimensions"},
      {"MSRAFill", "shape=-4", "shape"},
      {"GaussianFill", "seed=x", "seed"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    ot_case c = {.op = bad[k].op, .args = bad[k].args, .n_out = 1};
    CHECK(ot_rejects(&c, bad[k].msg));
  }
}

TEST(fill_ops_are_spec_visible_without_inputs) {
  static const char *const ops[] = {"ConstantFill", "XavierFill", "MSRAFill",
                                    "GaussianFill", "UniformFill"};
  for (int k = 0; k < 5; k++) {
    const dpm_op_def *d = dpm_op_find(ops[k]);
    CHECK(d && !(d->flags & DPM_OP_HIDDEN) && d->max_in == 0 && d->max_out == 1);
    CHECK(dpm_op_arg_index(d, "shape") >= 0 && dpm_op_arg_index(d, "seed") >= 0);
  }
}
