/* Dropout and DropoutGradient: kept fraction and scaling, reproducibility
 * from the context's seed, identity in test mode and at ratio 0, running in
 * place, gradient checks in both modes, and rejection of bad arguments. */
#include "optest.h"
#include "test.h"

enum { N = 20000 };

/* Y of Dropout on N ones (so Y is the mask) into y; 0 on failure. */
static int mask_of(const char *args, unsigned seed, int is_test, float *y) {
  static float ones[N];
  for (int i = 0; i < N; i++) ones[i] = 1;
  ot_case c = {.op = "Dropout",
               .args = args,
               .n_in = 1,
               .in = {{.shape = ot_f32(2, 100, N / 100), .f = ones}},
               .n_out = 1,
               .is_test = is_test,
               .seed = seed};
  dpm_tensor out[1];
  dpm_err err = {0};
  if (ot_forward(&c, out, &err)) {
    printf("    %s\n", err.msg);
    return 0;
  }
  memcpy(y, out[0].data, sizeof(float) * N);
  dpm_tensor_fini(&out[0]);
  return 1;
}

TEST(op_dropout_keeps_1_minus_ratio_scaled) {
  static float y[N];
  const double ratios[] = {0.5, 0.3, 0.9};
  for (int r = 0; r < 3; r++) {
    char args[32];
    snprintf(args, sizeof args, "ratio=%g", ratios[r]);
    CHECK(mask_of(args, 1, 0, y));
    const float keep = (float)(1 / (1 - ratios[r]));
    int kept = 0, other = 0;
    for (int i = 0; i < N; i++) kept += y[i] == keep, other += y[i] != keep && y[i] != 0;
    CHECK_INT(other, 0);
    /* binomial: 4.7 standard deviations at ratio 0.5 */
    CHECK_NEAR((double)kept / N, 1 - ratios[r], 0.0167);
  }
  CHECK(mask_of("", 1, 0, y)); /* default ratio 0.5 */
  int kept = 0;
  for (int i = 0; i < N; i++) kept += y[i] == 2.f;
  CHECK_NEAR((double)kept / N, 0.5, 0.0167);
}

/* The harness seeds the context's stream from the case seed. */
TEST(op_dropout_is_reproducible_from_the_seed) {
  static float a[N], b[N], c[N];
  CHECK(mask_of("ratio=0.4", 7, 0, a));
  CHECK(mask_of("ratio=0.4", 7, 0, b));
  CHECK(mask_of("ratio=0.4", 8, 0, c));
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
}

TEST(op_dropout_identity_in_test_mode_and_at_ratio_0) {
  float x[105];
  for (int i = 0; i < 105; i++) x[i] = (float)(i - 50) / 7.f;
  ot_case c = {.op = "Dropout",
               .args = "ratio=0.7",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 3, 5, 7), .f = x}},
               .n_out = 1,
               .is_test = 1,
               .seed = 3};
  CHECK(ot_forward_is(&c, c.in[0].shape, x, 0));
  c.args = "ratio=0", c.is_test = 0;
  CHECK(ot_forward_is(&c, c.in[0].shape, x, 0));
}

/* Y (or dX) may be X's (or dY's) own tensor. */
TEST(op_dropout_runs_in_place) {
  const dpm_op_def *fwd = dpm_op_find("Dropout"), *bwd = dpm_op_find("DropoutGradient");
  CHECK(fwd && bwd);
  CHECK(fwd->flags & DPM_OP_INPLACE);
  CHECK(bwd->flags & DPM_OP_INPLACE);
  dpm_tensor x = ot_tensor(ot_f32(1, 64), NULL), mask = {0};
  for (int i = 0; i < 64; i++) dpm_f32(&x)[i] = (float)(i + 1);
  dpm_err err = {0};
  int ran = !ot_run_op("Dropout", "", 0, 1, (dpm_tensor *[]){&x}, 2,
                       (dpm_tensor *[]){&x, &mask}, &err);
  int bad = 0;
  for (int i = 0; ran && i < 64; i++)
    bad += dpm_f32(&x)[i] != (float)(i + 1) * dpm_f32(&mask)[i];
  /* the gradient in place: dX = dY * mask on dY's tensor */
  ran = ran && !ot_run_op("DropoutGradient", "", 0, 2, (dpm_tensor *[]){&x, &mask}, 1,
                          (dpm_tensor *[]){&x}, &err);
  for (int i = 0; ran && i < 64; i++)
    bad += dpm_f32(&x)[i] != (float)(i + 1) * dpm_f32(&mask)[i] * dpm_f32(&mask)[i];
  if (!ran) printf("    %s\n", err.msg);
  dpm_tensor_fini(&x);
  dpm_tensor_fini(&mask);
  CHECK(ran);
  CHECK_INT(bad, 0);
}

TEST(op_dropout_gradcheck) {
  ot_case c = {.op = "Dropout",
               .args = "ratio=0.5",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 3, 5, 7)}},
               .n_out = 1,
               .seed = 4};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.args = "ratio=0.2";
  c.in[0].shape = ot_f32(4, 2, 3, 1, 9);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.is_test = 1;
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_dropout_rejects_bad_args) {
  ot_case c = {.op = "Dropout",
               .args = "ratio=1",
               .n_in = 1,
               .in = {{.shape = ot_f32(2, 4, 4)}},
               .n_out = 1};
  CHECK(ot_rejects(&c, "ratio must be below 1"));
  c.args = "ratio=-0.1";
  CHECK(ot_rejects(&c, "'ratio'"));
  c.args = "ratio=0.5";
  c.in[0].shape = ot_i32(2, 4, 4);
  CHECK(ot_rejects(&c, "input must be f32"));
}
