/* Loss ops: Softmax, SoftmaxWithLoss, Accuracy. Forward values against hand
 * computations, gradient checks on several shapes (odd sizes, rows flattened
 * from 4-D), out-of-range labels, and rejection of bad shapes. */
#include <math.h>

#include "optest.h"
#include "test.h"

/* Softmax of one row, in double. */
static void ref_softmax(const float *x, double *y, int d) {
  double mx = x[0], sum = 0;
  for (int j = 1; j < d; j++) mx = fmax(mx, x[j]);
  for (int j = 0; j < d; j++) sum += y[j] = exp(x[j] - mx);
  for (int j = 0; j < d; j++) y[j] /= sum;
}

/* Deterministic logits in [-1, 1], distinct within 41 consecutive values. */
static void logits(float *x, int n) {
  for (int i = 0; i < n; i++) x[i] = (float)((i * 37 % 41) - 20) / 20.f;
}

/* ---- Softmax ------------------------------------------------------------- */

TEST(loss_softmax_forward) {
  const float x[] = {1, 2, 3, 0, 0, 0};
  ot_case c = {
      .op = "Softmax", .n_in = 1, .in = {{.shape = ot_f32(2, 2, 3), .f = x}}, .n_out = 1};
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  double s = exp(-2) + exp(-1) + 1;
  const double want[] = {exp(-2) / s, exp(-1) / s, 1 / s, 1 / 3., 1 / 3., 1 / 3.};
  for (int i = 0; i < 6; i++) CHECK_NEAR(dpm_f32(&y[0])[i], want[i], 1e-7);
  dpm_tensor_fini(&y[0]);
}

TEST(loss_softmax_is_stable_for_large_logits) {
  const float x[] = {1000, 1001, -1000, -1001};
  ot_case c = {
      .op = "Softmax", .n_in = 1, .in = {{.shape = ot_f32(2, 2, 2), .f = x}}, .n_out = 1};
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  double a = 1 / (1 + exp(1.0));
  const double want[] = {a, 1 - a, 1 - a, a};
  for (int i = 0; i < 4; i++) CHECK_NEAR(dpm_f32(&y[0])[i], want[i], 1e-6);
  dpm_tensor_fini(&y[0]);
}

TEST(loss_softmax_flattens_at_axis_1) {
  float x[2 * 3 * 2 * 2];
  logits(x, 24);
  ot_case c = {.op = "Softmax",
               .n_in = 1,
               .in = {{.shape = ot_f32(4, 2, 3, 2, 2), .f = x}},
               .n_out = 1};
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  CHECK_INT(y[0].shape.ndim, 4);
  for (int i = 0; i < 2; i++) {
    double want[12];
    ref_softmax(x + 12 * i, want, 12);
    for (int j = 0; j < 12; j++) CHECK_NEAR(dpm_f32(&y[0])[12 * i + j], want[j], 1e-7);
  }
  dpm_tensor_fini(&y[0]);
}

TEST(loss_softmax_gradcheck) {
  const dpm_shape shapes[] = {ot_f32(2, 3, 5), ot_f32(2, 1, 7), ot_f32(4, 2, 3, 3, 1),
                              ot_f32(2, 9, 1)};
  for (int s = 0; s < 4; s++) {
    ot_case c = {.op = "Softmax",
                 .n_in = 1,
                 .n_out = 1,
                 .seed = (unsigned)s,
                 .in = {{.shape = shapes[s]}}};
    CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  }
}

TEST(loss_softmax_rejects_vector) {
  ot_case c = {.op = "Softmax", .n_in = 1, .in = {{.shape = ot_f32(1, 5)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must have 2 to 4 dimensions"));
}

/* ---- SoftmaxWithLoss ----------------------------------------------------- */

TEST(loss_softmax_with_loss_forward) {
  const float x[] = {1, 2, 3, 1, 1, 1};
  const int32_t label[] = {2, 0};
  ot_case c = {
      .op = "SoftmaxWithLoss",
      .n_in = 2,
      .n_out = 2,
      .in = {{.shape = ot_f32(2, 2, 3), .f = x}, {.shape = ot_i32(1, 2), .i = label}}};
  dpm_tensor y[2];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  double s = exp(-2) + exp(-1) + 1;
  CHECK_NEAR(dpm_f32(&y[0])[2], 1 / s, 1e-7);
  CHECK_NEAR(dpm_f32(&y[0])[3], 1 / 3., 1e-7);
  CHECK_INT(y[1].shape.ndim, 0);
  CHECK_NEAR(dpm_f32(&y[1])[0], (log(s) + log(3.0)) / 2, 1e-6);
  dpm_tensor_fini(&y[0]), dpm_tensor_fini(&y[1]);
}

TEST(loss_softmax_with_loss_clamps_probability) {
  /* p(label 1) = e^-100 / (1 + e^-100) underflows: the loss is -log(1e-20). */
  const float x[] = {100, 0};
  const int32_t label[] = {1};
  ot_case c = {
      .op = "SoftmaxWithLoss",
      .n_in = 2,
      .n_out = 2,
      .in = {{.shape = ot_f32(2, 1, 2), .f = x}, {.shape = ot_i32(1, 1), .i = label}}};
  dpm_tensor y[2];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  CHECK_NEAR(dpm_f32(&y[1])[0], -log(1e-20), 1e-4);
  dpm_tensor_fini(&y[0]), dpm_tensor_fini(&y[1]);
}

TEST(loss_softmax_with_loss_nan_is_not_clamped) {
  /* Diverged logits: the loss must be NaN (the trainer stops on it), not
   * the clamped -log(1e-20). */
  const float x[] = {NAN, 0, 1, 2};
  const int32_t label[] = {1, 0};
  ot_case c = {
      .op = "SoftmaxWithLoss",
      .n_in = 2,
      .n_out = 2,
      .in = {{.shape = ot_f32(2, 2, 2), .f = x}, {.shape = ot_i32(1, 2), .i = label}}};
  dpm_tensor y[2];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  CHECK(isnan(dpm_f32(&y[1])[0]));
  dpm_tensor_fini(&y[0]), dpm_tensor_fini(&y[1]);
}

TEST(loss_softmax_with_loss_out_of_range_label) {
  /* Labels 3 and -1 with 3 classes: zero-probability classes, no reads. */
  const float x[] = {1, 2, 3, 1, 1, 1, 0, 0, 0};
  const int32_t label[] = {3, -1, 1};
  ot_case c = {
      .op = "SoftmaxWithLoss",
      .n_in = 2,
      .n_out = 2,
      .in = {{.shape = ot_f32(2, 3, 3), .f = x}, {.shape = ot_i32(1, 3), .i = label}}};
  dpm_tensor y[2];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  CHECK_NEAR(dpm_f32(&y[1])[0], (2 * -log(1e-20) + log(3.0)) / 3, 1e-4);
  dpm_tensor_fini(&y[0]), dpm_tensor_fini(&y[1]);
}

TEST(loss_softmax_with_loss_gradient_by_hand) {
  /* dlogits = (softmax - onehot) * dloss / N with dloss 3, N 2. */
  const float p[] = {0.2f, 0.3f, 0.5f, 0.6f, 0.3f, 0.1f}, dloss[] = {3};
  const int32_t label[] = {2, 0};
  ot_case c = {.op = "SoftmaxWithLossGradient",
               .n_in = 3,
               .n_out = 1,
               .in = {{.shape = ot_f32(2, 2, 3), .f = p},
                      {.shape = ot_i32(1, 2), .i = label},
                      {.shape = ot_f32(0), .f = dloss}}};
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  const double want[] = {0.3, 0.45, -0.75, -0.6, 0.45, 0.15};
  for (int i = 0; i < 6; i++) CHECK_NEAR(dpm_f32(&y[0])[i], want[i], 1e-6);
  dpm_tensor_fini(&y[0]);
  /* An out-of-range label's row has a constant loss: zero gradient. */
  const int32_t bad[] = {2, 3};
  c.in[1].i = bad;
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  for (int i = 0; i < 6; i++) CHECK_NEAR(dpm_f32(&y[0])[i], i < 3 ? want[i] : 0, 1e-6);
  dpm_tensor_fini(&y[0]);
}

TEST(loss_softmax_with_loss_gradcheck) {
  /* The harness weights both outputs, so this also covers the softmax
   * output's gradient (SoftmaxWithLossGradient's optional fourth input).
   * Logits favour the label so that the loss, an f32 output, is small and
   * its rounding stays well below the finite-difference tolerance. */
  const dpm_shape shapes[] = {ot_f32(2, 4, 5), ot_f32(2, 1, 3), ot_f32(4, 3, 2, 2, 3),
                              ot_f32(2, 7, 11)};
  for (int s = 0; s < 4; s++) {
    int64_t n = shapes[s].d[0], d = dpm_shape_span(&shapes[s], 1, shapes[s].ndim);
    int32_t label[8];
    float x[7 * 12];
    logits(x, (int)(n * d));
    for (int64_t i = 0; i < n; i++) {
      label[i] = (int32_t)((i * 5 + s) % d);
      x[i * d + label[i]] += 3.f;
    }
    ot_case c = {.op = "SoftmaxWithLoss",
                 .n_in = 2,
                 .n_out = 2,
                 .seed = (unsigned)s,
                 .in = {{.shape = shapes[s], .f = x},
                        {.shape = ot_i32(1, (int)n), .i = label, .no_grad = 1}}};
    CHECK_WITHIN(ot_gradcheck(&c, 2e-2, 200), 1e-3);
  }
}

/* label_smoothing eps: loss -sum q log p with q = (1 - eps) onehot + eps/K,
 * against a double computation; gradient (p - q) / N by hand and by finite
 * differences; eps 0 gives the plain loss bit for bit; 1 is refused. */
TEST(loss_softmax_with_loss_label_smoothing) {
  const float x[] = {1, 2, 3, 0.5f, -1, 1, 1, 2};
  const int32_t label[] = {2, 0};
  const double eps = 0.1;
  ot_case c = {
      .op = "SoftmaxWithLoss",
      .args = "label_smoothing=0.1",
      .n_in = 2,
      .n_out = 2,
      .in = {{.shape = ot_f32(2, 2, 4), .f = x}, {.shape = ot_i32(1, 2), .i = label}}};
  double want = 0;
  for (int i = 0; i < 2; i++) {
    double p[4];
    ref_softmax(x + 4 * i, p, 4);
    for (int j = 0; j < 4; j++)
      want -= ((j == label[i] ? 1 - eps : 0) + eps / 4) * log(p[j]) / 2;
  }
  dpm_tensor y[2];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  if (err.code) return;
  CHECK_NEAR(dpm_f32(&y[1])[0], want, 1e-6);
  dpm_tensor_fini(&y[0]), dpm_tensor_fini(&y[1]);
  /* gradient by hand: (p - q) * dloss / N */
  float sm[8], dx[8];
  const float dloss = 1.f;
  for (int i = 0; i < 2; i++) {
    double p[4];
    ref_softmax(x + 4 * i, p, 4);
    for (int j = 0; j < 4; j++) sm[4 * i + j] = (float)p[j];
  }
  dpm_tensor t[3] = {ot_tensor(ot_f32(2, 2, 4), sm), ot_tensor(ot_i32(1, 2), NULL),
                     ot_tensor(ot_f32(0), &dloss)};
  memcpy(t[1].data, label, sizeof label);
  dpm_tensor out = ot_tensor(ot_f32(2, 2, 4), NULL);
  int ran =
      !ot_run_op("SoftmaxWithLossGradient", "label_smoothing=0.1", 0, 3,
                 (dpm_tensor *[]){&t[0], &t[1], &t[2]}, 1, (dpm_tensor *[]){&out}, &err);
  if (ran) memcpy(dx, out.data, sizeof dx);
  for (int k = 0; k < 3; k++) dpm_tensor_fini(&t[k]);
  dpm_tensor_fini(&out);
  CHECK(ran);
  for (int i = 0; ran && i < 2; i++)
    for (int j = 0; j < 4; j++) {
      double q = (j == label[i] ? 1 - eps : 0) + eps / 4;
      CHECK_NEAR(dx[4 * i + j], (sm[4 * i + j] - q) / 2, 1e-7);
    }
  /* finite differences */
  float xg[7 * 11];
  int32_t lg[7];
  logits(xg, 77);
  for (int i = 0; i < 7; i++) lg[i] = (int32_t)(i * 5 % 11), xg[i * 11 + lg[i]] += 3.f;
  ot_case g = {.op = "SoftmaxWithLoss",
               .args = "label_smoothing=0.2",
               .n_in = 2,
               .n_out = 2,
               .in = {{.shape = ot_f32(2, 7, 11), .f = xg},
                      {.shape = ot_i32(1, 7), .i = lg, .no_grad = 1}}};
  CHECK_WITHIN(ot_gradcheck(&g, 2e-2, 200), 1e-3);
  /* 0 is today's loss, bit for bit */
  ot_case plain = c, zero = c;
  plain.args = "";
  zero.args = "label_smoothing=0";
  dpm_tensor a[2], b[2];
  int ok_a = ot_forward(&plain, a, &err) == DPM_OK,
      ok_b = ot_forward(&zero, b, &err) == 0;
  int same = ok_a && ok_b && !memcmp(a[1].data, b[1].data, sizeof(float));
  if (ok_a) dpm_tensor_fini(&a[0]), dpm_tensor_fini(&a[1]);
  if (ok_b) dpm_tensor_fini(&b[0]), dpm_tensor_fini(&b[1]);
  CHECK(same);
  c.args = "label_smoothing=1";
  CHECK(ot_rejects(&c, "label_smoothing must be below 1"));
  c.args = "label_smoothing=-0.1";
  CHECK(ot_rejects(&c, "label_smoothing"));
}

TEST(loss_softmax_with_loss_rejects_bad_label) {
  ot_case c = {.op = "SoftmaxWithLoss",
               .n_in = 2,
               .n_out = 2,
               .in = {{.shape = ot_f32(2, 4, 3)}, {.shape = ot_f32(1, 4)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "label must be i32[4]"));
  c.in[1].shape = ot_i32(1, 5);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "label must be i32[4]"));
  c.in[1].shape = ot_i32(2, 4, 1);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "got i32[4,1]"));
  c.in[1].shape = ot_i32(1, 4);
  c.in[0].shape = ot_i32(2, 4, 3);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "logits must be f32"));
}

/* ---- Accuracy ------------------------------------------------------------ */

TEST(loss_accuracy_forward) {
  /* Rows: right; tie (first max is 0, label 1): wrong; right; label out of
   * range: wrong. */
  const float x[] = {0.1f, 0.9f, 0, 0.5f, 0.5f, 0, 0.2f, 0.3f, 0.5f, 1, 0, 0};
  const int32_t label[] = {1, 1, 2, 5};
  ot_case c = {
      .op = "Accuracy",
      .n_in = 2,
      .n_out = 1,
      .in = {{.shape = ot_f32(2, 4, 3), .f = x}, {.shape = ot_i32(1, 4), .i = label}}};
  dpm_tensor y[1];
  dpm_err err = {0};
  CHECK_INT(ot_forward(&c, y, &err), DPM_OK);
  CHECK_INT(y[0].shape.ndim, 0);
  CHECK(dpm_f32(&y[0])[0] == 0.5f);
  dpm_tensor_fini(&y[0]);
}

/* top_k: Caffe2's ranking (ties go to the lower index); a label out of
 * range is wrong; top_k above the class count is refused. */
TEST(loss_accuracy_top_k) {
  /* row 0: label 3 ranks third (0.9 > 0.5 > 0.4): in top 3, not top 2.
   * row 1: all tie; label 2 has two lower indices ahead: in top 3 only.
   * row 2: label 0 is the max: in every top k. row 3: label 7: wrong. */
  const float x[] = {0.9f, 0.5f, 0.1f, 0.4f, 1, 1, 1, 1, 5, 1, 2, 3, 1, 2, 3, 4};
  const int32_t label[] = {3, 2, 0, 7};
  const float want[] = {0.25f, 0.25f, 0.75f, 0.75f};
  const char *args[] = {"top_k=1", "top_k=2", "top_k=3", "top_k=4"};
  for (int k = 0; k < 4; k++) {
    ot_case c = {
        .op = "Accuracy",
        .args = args[k],
        .n_in = 2,
        .n_out = 1,
        .in = {{.shape = ot_f32(2, 4, 4), .f = x}, {.shape = ot_i32(1, 4), .i = label}}};
    CHECK(ot_forward_is(&c, dpm_shape_scalar(DPM_F32), &want[k], 0));
  }
  ot_case c = {
      .op = "Accuracy",
      .args = "top_k=5",
      .n_in = 2,
      .n_out = 1,
      .in = {{.shape = ot_f32(2, 4, 4), .f = x}, {.shape = ot_i32(1, 4), .i = label}}};
  CHECK(ot_rejects(&c, "top_k 5 is more than the 4 classes"));
}

TEST(loss_accuracy_has_no_gradient) {
  const dpm_op_def *d = dpm_op_find("Accuracy");
  CHECK(d && (d->flags & DPM_OP_NO_GRAD) && !d->grad);
}

TEST(loss_accuracy_rejects_bad_label) {
  ot_case c = {.op = "Accuracy",
               .n_in = 2,
               .n_out = 1,
               .in = {{.shape = ot_f32(2, 4, 3)}, {.shape = ot_i32(1, 3)}}};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "label must be i32[4]"));
}
