/* The bodies the CUDA element-wise, dropout and loss kernels run
 * (backend/cuda/elem.h), compiled here by gcc and checked against the CPU
 * kernels of the same ops on a few hundred varied inputs (negatives,
 * zeros, tiny and huge magnitudes, infinities): bit for bit where the body
 * does the CPU's float operations, within 1e-6 relative where a row is
 * reduced in the kernels' lane order (32 lanes per softmax row, 256 for
 * the loss), exactly for the accuracy count. The row checks replay what
 * the kernels of loss_kernels.cu do with the bodies. The dropout generator:
 * determinism, dependence on its keys and index, uniform distribution, and
 * the CPU's mask values and scaling. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/elem.h"
#include "engine/lowp.h"
#include "engine/op.h"
#include "optest.h"
#include "test.h"

enum { NV = 600, WARP = 32, REDUCE = 256 };

/* NV inputs: special values, then magnitudes from 1e-30 to 1e30 of both
 * signs, then uniform in [-6, 6). */
static void values(float *v) {
  static const float special[] = {0.f,   -0.f,   1.f,      -1.f,     0.5f,   -0.5f,
                                  88.f,  -88.f,  89.f,     -104.f,   1e-30f, -1e-30f,
                                  1e30f, -1e30f, 3e38f,    -3e38f,   20.f,   -20.f,
                                  9.5f,  -9.5f,  INFINITY, -INFINITY};
  int n = (int)(sizeof special / sizeof *special), i = 0;
  for (; i < n; i++) v[i] = special[i];
  for (int e = -30; e <= 30 && i + 1 < NV; e++, i += 2) {
    v[i] = 1.37f * powf(10.f, (float)e);
    v[i + 1] = -v[i];
  }
  srand(12345);
  for (; i < NV; i++) v[i] = 12.f * (float)rand() / ((float)RAND_MAX + 1.f) - 6.f;
}

static int same_bits(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y || (isnan(a) && isnan(b));
}

/* |a - b| within rel of scale (NaN matches NaN only). */
static int near(double a, double b, double rel, double scale) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= rel * scale;
}

/* Runs CPU op `name` on the given inputs (f32 unless label) and copies its
 * output k_out into out; 0 with the error printed on failure. */
static int cpu_run(const char *name, const char *args, int n_in, dpm_tensor *in,
                   int n_out, int k_out, float *out) {
  dpm_tensor o[4];
  memset(o, 0, sizeof o);
  dpm_tensor *ip[DPM_OP_MAX_IO], *op[4];
  for (int k = 0; k < n_in; k++) ip[k] = &in[k];
  for (int k = 0; k < n_out; k++) op[k] = &o[k];
  dpm_err err = {0};
  dpm_status s = ot_run_op(name, args, 0, n_in, ip, n_out, op, &err);
  if (s)
    printf("    %s\n", err.msg);
  else
    memcpy(out, o[k_out].data, dpm_shape_bytes(&o[k_out].shape));
  for (int k = 0; k < n_out; k++) dpm_tensor_fini(&o[k]);
  return s == DPM_OK;
}

static int cpu_unary(const char *name, const char *args, const float *x, float *y) {
  dpm_tensor t = ot_tensor(ot_f32(1, NV), x);
  int ok = cpu_run(name, args, 1, &t, 1, 0, y);
  dpm_tensor_fini(&t);
  return ok;
}

static int cpu_binary(const char *name, const char *args, const float *a, const float *b,
                      float *y) {
  dpm_tensor t[2] = {ot_tensor(ot_f32(1, NV), a), ot_tensor(ot_f32(1, NV), b)};
  int ok = cpu_run(name, args, 2, t, 1, 0, y);
  dpm_tensor_fini(&t[0]);
  dpm_tensor_fini(&t[1]);
  return ok;
}

/* The first index where body and CPU differ, or -1. */
static int first_diff(const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++)
    if (!same_bits(got[i], want[i])) {
      printf("    at %d: body %.9g, cpu %.9g\n", i, got[i], want[i]);
      return i;
    }
  return -1;
}

TEST(cuda_elem_activations_match_cpu_bitwise) {
  static float x[NV], want[NV], got[NV];
  values(x);
  CHECK(cpu_unary("Relu", "", x, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_relu(x[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  CHECK(cpu_unary("Sigmoid", "", x, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_sigmoid(x[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  CHECK(cpu_unary("Tanh", "", x, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_tanh(x[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  const double scales[] = {-2.5, 0.3, 1e-3, 0};
  for (int s = 0; s < 4; s++) {
    char args[32];
    snprintf(args, sizeof args, "scale=%.17g", scales[s]);
    CHECK(cpu_unary("Scale", args, x, want));
    for (int i = 0; i < NV; i++) got[i] = dpm_scale((float)scales[s], x[i]);
    CHECK_INT(first_diff(got, want, NV), -1);
  }
}

TEST(cuda_elem_gradients_match_cpu_bitwise) {
  static float y[NV], dy[NV], want[NV], got[NV];
  values(y);
  for (int i = 0; i < NV; i++) dy[i] = y[(i * 7 + 3) % NV];
  /* also outputs in the activations' ranges */
  for (int i = NV / 2; i < NV; i++)
    y[i] = (float)(i - NV / 2) / (float)(NV / 2) * 2.f - 1.f;
  CHECK(cpu_binary("ReluGradient", "", y, dy, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_relu_grad(y[i], dy[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  CHECK(cpu_binary("SigmoidGradient", "", y, dy, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_sigmoid_grad(y[i], dy[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  CHECK(cpu_binary("TanhGradient", "", y, dy, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_tanh_grad(y[i], dy[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
  /* DropoutGradient(dY, mask): dX = dY * mask */
  static float mask[NV];
  for (int i = 0; i < NV; i++) mask[i] = i % 3 ? 1.f / 0.7f : 0.f;
  CHECK(cpu_binary("DropoutGradient", "ratio=0.3", dy, mask, want));
  for (int i = 0; i < NV; i++) got[i] = dpm_dropout_apply(dy[i], mask[i]);
  CHECK_INT(first_diff(got, want, NV), -1);
}

TEST(cuda_elem_sum_matches_cpu_bitwise) {
  static float v[DPM_OP_MAX_IO][NV], want[NV], got[NV];
  values(v[0]);
  for (int k = 1; k < DPM_OP_MAX_IO; k++)
    for (int i = 0; i < NV; i++) v[k][i] = v[0][(i * (2 * k + 1) + k) % NV] * (float)k;
  const int counts[] = {1, 2, 3, 7, DPM_OP_MAX_IO};
  for (int c = 0; c < 5; c++) {
    int n_in = counts[c];
    dpm_tensor t[DPM_OP_MAX_IO];
    const float *p[DPM_OP_MAX_IO];
    for (int k = 0; k < n_in; k++) t[k] = ot_tensor(ot_f32(1, NV), v[k]), p[k] = v[k];
    int ok = cpu_run(n_in == 2 ? "Add" : "Sum", "", n_in, t, 1, 0, want);
    for (int k = 0; k < n_in; k++) dpm_tensor_fini(&t[k]);
    CHECK(ok);
    for (int i = 0; i < NV; i++) got[i] = dpm_sum_at(p, n_in, i);
    CHECK_INT(first_diff(got, want, NV), -1);
  }
}

/* ---- rows ------------------------------------------------------------------ */

/* Row widths and a row generator: ordinary logits, huge ones, equal ones,
 * one-hot-ish, a row with -inf entries, and a NaN row. */
static const int64_t widths[] = {1, 2, 3, 10, 31, 32, 33, 100, 257};
enum { NW = sizeof widths / sizeof *widths, ROWS = 12 };

static void row_values(float *x, int64_t d, int row) {
  for (int64_t j = 0; j < d; j++) {
    float u = (float)((j * 37 + row * 11) % 101) / 101.f;
    switch (row % 6) {
    case 0:
      x[j] = 8.f * u - 4.f;
      break;
    case 1:
      x[j] = 1e4f * u - 3e3f;
      break;
    case 2:
      x[j] = 2.5f;
      break;
    case 3:
      x[j] = j == row % d ? 30.f : -30.f * u;
      break;
    case 4:
      x[j] = j % 3 == 1 ? -INFINITY : 3.f * u;
      break;
    case 5:
      x[j] = row == 11 && j == d / 2 ? NAN : -50.f * u;
      break;
    }
  }
}

/* The softmax of a row as softmax_kernel computes it: 32 lanes' parts
 * combined by the trees. */
static void lane_softmax(const float *x, float *y, int64_t d) {
  float part[WARP];
  for (int l = 0; l < WARP; l++) part[l] = dpm_softmax_max_part(x, d, l, WARP);
  float mx = dpm_tree_max(part, WARP);
  for (int l = 0; l < WARP; l++) part[l] = dpm_softmax_exp_part(x, y, d, mx, l, WARP);
  float inv = dpm_fdiv(1.f, dpm_tree_sum(part, WARP));
  for (int l = 0; l < WARP; l++) dpm_softmax_scale_part(y, d, inv, l, WARP);
}

static float lane_dot(const float *y, const float *dy, int64_t d) {
  float part[WARP];
  for (int l = 0; l < WARP; l++) part[l] = dpm_softmax_dot_part(y, dy, d, l, WARP);
  return dpm_tree_sum(part, WARP);
}

/* Labels for the rows: in range mostly, and -1 and d (out of range). */
static int32_t label_of(int row, int64_t d) {
  return row == 4 ? -1 : row == 7 ? (int32_t)d : (int32_t)((row * 5) % d);
}

TEST(cuda_elem_softmax_rows_match_cpu) {
  static float x[ROWS * 257], want[ROWS * 257], got[ROWS * 257];
  for (int w = 0; w < NW; w++) {
    int64_t d = widths[w];
    for (int r = 0; r < ROWS; r++) row_values(x + r * d, d, r);
    dpm_tensor t = ot_tensor(ot_f32(2, ROWS, (int)d), x);
    int ok = cpu_run("Softmax", "", 1, &t, 1, 0, want);
    dpm_tensor_fini(&t);
    CHECK(ok);
    for (int r = 0; r < ROWS; r++) lane_softmax(x + r * d, got + r * d, d);
    for (int64_t i = 0; i < ROWS * d; i++)
      if (!near(got[i], want[i], 1e-6, fabs(want[i]))) {
        printf("    d %lld at %lld: lanes %.9g, cpu %.9g\n", (long long)d, (long long)i,
               got[i], want[i]);
        CHECK(0);
      }
    /* in place, as Softmax may run */
    memcpy(want, got, sizeof(float) * (size_t)(ROWS * d));
    for (int r = 0; r < ROWS; r++) lane_softmax(x + r * d, x + r * d, d);
    CHECK(memcmp(x, want, sizeof(float) * (size_t)(ROWS * d)) == 0);
  }
}

TEST(cuda_elem_softmax_gradient_rows_match_cpu) {
  static float y[ROWS * 257], dy[ROWS * 257], want[ROWS * 257];
  for (int w = 0; w < NW; w++) {
    int64_t d = widths[w];
    for (int r = 0; r < ROWS; r++) {
      row_values(y + r * d, d, r % 4); /* finite rows */
      lane_softmax(y + r * d, y + r * d, d);
      row_values(dy + r * d, d, (r + 1) % 4);
    }
    dpm_tensor t[2] = {ot_tensor(ot_f32(2, ROWS, (int)d), y),
                       ot_tensor(ot_f32(2, ROWS, (int)d), dy)};
    int ok = cpu_run("SoftmaxGradient", "", 2, t, 1, 0, want);
    dpm_tensor_fini(&t[0]);
    dpm_tensor_fini(&t[1]);
    CHECK(ok);
    for (int r = 0; r < ROWS; r++) {
      const float *yr = y + r * d, *dyr = dy + r * d;
      float dot = lane_dot(yr, dyr, d);
      for (int64_t j = 0; j < d; j++) {
        float g = dpm_softmax_grad(yr[j], dyr[j], dot), c = want[r * d + j];
        double scale = fabs(yr[j]) * (fabs(dyr[j]) + fabs(dot)) + 1e-30;
        if (!near(g, c, 1e-6, scale)) {
          printf("    d %lld row %d col %lld: lanes %.9g, cpu %.9g\n", (long long)d, r,
                 (long long)j, g, c);
          CHECK(0);
        }
      }
    }
  }
}

TEST(cuda_elem_softmax_with_loss_matches_cpu) {
  static float x[ROWS * 257], y[ROWS * 257], want_y[ROWS * 257];
  static float lab[ROWS];
  for (int w = 0; w < NW; w++) {
    int64_t d = widths[w];
    for (int r = 0; r < ROWS; r++) row_values(x + r * d, d, r);
    for (int r = 0; r < ROWS; r++) lab[r] = (float)label_of(r, d);
    int32_t label[ROWS];
    for (int r = 0; r < ROWS; r++) label[r] = label_of(r, d);
    /* the rows without NaN, then all of them (NaN loss); no label
     * smoothing, then 0.1 */
    for (int k = 0; k < 4; k++) {
      const int rows = ROWS - 1 + k % 2;
      const float eps = k >= 2 ? 0.1f : 0.f;
      const char *args = k >= 2 ? "label_smoothing=0.1" : "";
      dpm_tensor t[2] = {ot_tensor(ot_f32(2, rows, (int)d), x),
                         ot_tensor(ot_i32(1, rows), lab)};
      float want_loss;
      int ok = cpu_run("SoftmaxWithLoss", args, 2, t, 2, 1, &want_loss) &&
               cpu_run("SoftmaxWithLoss", args, 2, t, 2, 0, want_y);
      dpm_tensor_fini(&t[0]);
      dpm_tensor_fini(&t[1]);
      CHECK(ok);
      for (int r = 0; r < rows; r++) lane_softmax(x + r * d, y + r * d, d);
      for (int64_t i = 0; i < rows * d; i++)
        CHECK(near(y[i], want_y[i], 1e-6, fabs(want_y[i])));
      double part[REDUCE];
      for (int l = 0; l < REDUCE; l++)
        part[l] = dpm_swl_loss_part(y, label, rows, d, eps, l, REDUCE);
      float loss = (float)(dpm_tree_sum_d(part, REDUCE) / (double)rows);
      if (!near(loss, want_loss, 1e-6, fabs(want_loss))) {
        printf("    d %lld rows %d: loss %.9g, cpu %.9g\n", (long long)d, rows, loss,
               want_loss);
        CHECK(0);
      }
      CHECK(rows < ROWS || isnan(loss));
    }
  }
}

TEST(cuda_elem_softmax_with_loss_gradient_matches_cpu) {
  static float y[ROWS * 257], dy[ROWS * 257], want[ROWS * 257];
  static float lab[ROWS];
  const float dlosses[] = {1.f, 0.37f, 0.f, -2.f, 0.1f, 7.77f, 1e-3f};
  enum { ND = sizeof dlosses / sizeof *dlosses };
  for (int w = 0; w < NW; w++) {
    int64_t d = widths[w];
    int32_t label[ROWS];
    for (int r = 0; r < ROWS; r++) {
      row_values(y + r * d, d, r % 4);
      lane_softmax(y + r * d, y + r * d, d);
      row_values(dy + r * d, d, (r + 2) % 4);
      label[r] = label_of(r, d);
      lab[r] = (float)label[r];
    }
    for (int k = 0; k < 4 * ND; k++) { /* label smoothing 0, then 0.1 */
      float dloss = dlosses[k % ND], eps = k >= 2 * ND ? 0.1f : 0.f;
      int with_dy = k % (2 * ND) >= ND;
      const char *args = eps != 0.f ? "label_smoothing=0.1" : "";
      dpm_tensor t[4] = {ot_tensor(ot_f32(2, ROWS, (int)d), y),
                         ot_tensor(ot_i32(1, ROWS), lab), ot_tensor(ot_f32(0), &dloss),
                         ot_tensor(ot_f32(2, ROWS, (int)d), dy)};
      int ok = cpu_run("SoftmaxWithLossGradient", args, 3 + with_dy, t, 1, 0, want);
      for (int i = 0; i < 4; i++) dpm_tensor_fini(&t[i]);
      CHECK(ok);
      for (int r = 0; r < ROWS; r++) {
        const float *yr = y + r * d, *dyr = dy + r * d;
        float s = dpm_swl_row_scale(dloss, ROWS, label[r], d);
        float dot = with_dy ? lane_dot(yr, dyr, d) : 0.f;
        for (int64_t j = 0; j < d; j++) {
          float g = dpm_swl_grad(yr[j], j, label[r], s, eps, d, with_dy,
                                 with_dy ? dyr[j] : 0.f, dot);
          float c = want[r * d + j];
          /* bitwise without dY (no reduction); with it, within 1e-6 of its terms */
          int ok_j = with_dy ? near(g, c, 1e-6,
                                    fabs(yr[j] * s) + fabs(s) +
                                        fabs(yr[j]) * (fabs(dyr[j]) + fabs(dot)) + 1e-30)
                             : same_bits(g, c);
          if (!ok_j) {
            printf("    d %lld dloss %g dy %d row %d col %lld: body %.9g, cpu %.9g\n",
                   (long long)d, dloss, with_dy, r, (long long)j, g, c);
            CHECK(0);
          }
        }
      }
    }
  }
}

TEST(cuda_elem_accuracy_matches_cpu) {
  static float x[ROWS * 257], lab[ROWS];
  for (int w = 0; w < NW; w++) {
    int64_t d = widths[w];
    int32_t label[ROWS];
    for (int r = 0; r < ROWS; r++) {
      row_values(x + r * d, d, r);
      /* rows whose argmax is the label, and ties (row 2: all equal) */
      label[r] = r % 3 == 0 ? (int32_t)((r * 5) % d) : label_of(r, d);
      if (r % 3 == 0) x[r * d + label[r]] = 1e6f;
      lab[r] = (float)label[r];
    }
    /* top_k 1, then 3 where there are 3 classes */
    for (int q = 0; q < 2 * ROWS; q++) {
      const int rows = 1 + q % ROWS;
      const int64_t k = q >= ROWS ? 3 : 1;
      if (k > d) continue;
      dpm_tensor t[2] = {ot_tensor(ot_f32(2, rows, (int)d), x),
                         ot_tensor(ot_i32(1, rows), lab)};
      float want;
      int ok = cpu_run("Accuracy", k == 1 ? "" : "top_k=3", 2, t, 1, 0, &want);
      dpm_tensor_fini(&t[0]);
      dpm_tensor_fini(&t[1]);
      CHECK(ok);
      int64_t correct = 0;
      for (int l = 0; l < REDUCE; l++)
        correct += dpm_accuracy_part(x, label, rows, d, k, l, REDUCE);
      float got = (float)((double)correct / (double)rows);
      if (!same_bits(got, want)) {
        printf("    d %lld rows %d: %.9g, cpu %.9g\n", (long long)d, rows, got, want);
        CHECK(0);
      }
    }
  }
}

/* ---- dropout ---------------------------------------------------------------- */

TEST(cuda_elem_dropout_uniform_is_deterministic_and_keyed) {
  const uint64_t k0 = 0x0123456789abcdefull, k1 = 0xfedcba9876543210ull;
  int same_k0 = 0, same_k1 = 0, same_next = 0;
  for (uint64_t i = 0; i < 100000; i++) {
    double u = dpm_dropout_uniform(k0, k1, i);
    CHECK(u >= 0 && u < 1);
    CHECK(u == dpm_dropout_uniform(k0, k1, i));
    same_k0 += u == dpm_dropout_uniform(k0 + 1, k1, i);
    same_k1 += u == dpm_dropout_uniform(k0, k1 + 1, i);
    same_next += u == dpm_dropout_uniform(k0, k1, i + 1);
  }
  CHECK(same_k0 < 5 && same_k1 < 5 && same_next < 5);
  CHECK(dpm_dropout_uniform(0, 0, 0) != dpm_dropout_uniform(0, 0, 1));
}

TEST(cuda_elem_dropout_uniform_is_uniform) {
  enum { M = 1000000, BINS = 16 };
  const uint64_t keys[][2] = {{1, 2}, {0, 0}, {0x9e3779b97f4a7c15ull, 1}};
  for (int k = 0; k < 3; k++) {
    double sum = 0, sq = 0, lag = 0, prev = 0.5;
    long bin[BINS] = {0};
    for (uint64_t i = 0; i < M; i++) {
      double u = dpm_dropout_uniform(keys[k][0], keys[k][1], i);
      sum += u, sq += u * u, lag += (u - 0.5) * (prev - 0.5), prev = u;
      bin[(int)(u * BINS)]++;
    }
    /* Bounds of 6 standard errors or more among M draws: the mean's is
     * sqrt(1/12 / M) (2.9e-4), the variance's sqrt(1/180 / M) (7.5e-5), the
     * lag-1 correlation's 1/sqrt(M) (1e-3). */
    CHECK_NEAR(sum / M, 0.5, 6 * sqrt(1.0 / 12 / M));
    CHECK_NEAR(sq / M - (sum / M) * (sum / M), 1.0 / 12, 1e-3);
    CHECK_NEAR(lag / M * 12, 0, 0.01); /* consecutive draws uncorrelated */
    double chi2 = 0, e = (double)M / BINS;
    for (int b = 0; b < BINS; b++) chi2 += (bin[b] - e) * (bin[b] - e) / e;
    CHECK(chi2 < 45); /* 15 degrees of freedom: p < 1e-4 */
  }
}

/* The mask values and the scaling of the CPU kernel; the kept fraction. */
TEST(cuda_elem_dropout_mask_matches_cpu_semantics) {
  enum { N = 20000 };
  static float x[N], y[N], mask[N];
  values(x);
  for (int i = NV; i < N; i++) x[i] = x[i % NV] * 0.5f;
  const double ratios[] = {0.5, 0.3, 0.9, 0};
  for (int r = 0; r < 4; r++) {
    char args[32];
    snprintf(args, sizeof args, "ratio=%.17g", ratios[r]);
    dpm_tensor t = ot_tensor(ot_f32(1, N), x);
    int ok = cpu_run("Dropout", args, 1, &t, 2, 0, y) &&
             cpu_run("Dropout", args, 1, &t, 2, 1, mask);
    dpm_tensor_fini(&t);
    CHECK(ok);
    const float keep = (float)(1 / (1 - ratios[r]));
    int kept = 0, cpu_kept = 0;
    for (int i = 0; i < N; i++) {
      /* the CPU's mask holds the two values the body gives */
      CHECK(same_bits(mask[i], dpm_dropout_factor(ratios[r], ratios[r], keep)) ||
            same_bits(mask[i], dpm_dropout_factor(0, ratios[r], keep)) || ratios[r] == 0);
      CHECK(same_bits(y[i], dpm_dropout_apply(x[i], mask[i])));
      float m =
          dpm_dropout_factor(dpm_dropout_uniform(7, 9, (uint64_t)i), ratios[r], keep);
      CHECK(m == 0.f || same_bits(m, keep));
      kept += m != 0.f, cpu_kept += mask[i] != 0.f;
    }
    CHECK_NEAR((double)kept / N, 1 - ratios[r], 0.0167);
    CHECK_NEAR((double)kept / N, (double)cpu_kept / N, 0.025);
  }
}

/* ---- bf16 and f16: the Cast kernel's conversions, and bf16 Relu --------- */

static int same_u32(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y;
}

/* Every bf16 and f16 pattern widens to engine/lowp.h's bits (NaNs
 * included: their payloads too), and every widened value narrows back to
 * lowp.h's pattern. */
TEST(cuda_elem_cast_every_16_bit_pattern_is_lowp) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536 && bad < 5; h++) {
    float b = dpm_from_bf16((uint16_t)h), f = dpm_from_f16((uint16_t)h);
    if (!same_u32(b, dpm_f32_from_bf16_1((uint16_t)h)) ||
        dpm_to_bf16(b) != dpm_bf16_from_f32_1(b) ||
        !same_u32(f, dpm_f32_from_f16_1((uint16_t)h)) ||
        dpm_to_f16(f) != dpm_f16_from_f32_1(f)) {
      printf("    pattern 0x%04x\n", h);
      bad++;
    }
  }
  CHECK_INT(bad, 0);
}

/* f32 patterns: every high half with the low halves around bf16's and
 * f16's rounding points (ties both ways, one below and above), and a
 * stride through all 2^32 (NaNs, infinities, subnormals of both), against
 * lowp.h's one-value functions and its slice kernels (what the CPU's Cast
 * runs), bit for bit. */
TEST(cuda_elem_cast_f32_patterns_are_lowp) {
  enum { BLOCK = 4096 };
  static float x[BLOCK];
  static uint16_t sb[BLOCK], sh[BLOCK];
  static const uint32_t low[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff,
                                 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0xe000};
  const int n_low = (int)(sizeof low / sizeof *low);
  uint64_t u = 0, total = 0;
  int bad = 0, phase = 0;
  uint32_t hi = 0;
  while (bad < 5) {
    int n = 0;
    for (; n < BLOCK; n++) {
      uint32_t bits;
      if (phase == 0) { /* the rounding points of each high half */
        if (hi >= 65536u * (uint32_t)n_low) {
          phase = 1;
          break;
        }
        bits = ((hi / (uint32_t)n_low) << 16) | low[hi % (uint32_t)n_low];
        hi++;
      } else {
        if (u > 0xffffffffull) break;
        bits = (uint32_t)u;
        u += 997;
      }
      memcpy(&x[n], &bits, 4);
    }
    if (n == 0) {
      if (phase == 1 && u <= 0xffffffffull) continue;
      break;
    }
    dpm_bf16_from_f32(sb, x, (size_t)n);
    dpm_f16_from_f32(sh, x, (size_t)n);
    for (int i = 0; i < n && bad < 5; i++) {
      uint16_t b = dpm_to_bf16(x[i]), h = dpm_to_f16(x[i]);
      if (b != dpm_bf16_from_f32_1(x[i]) || b != sb[i] || h != dpm_f16_from_f32_1(x[i]) ||
          h != sh[i]) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        printf("    f32 0x%08x: bf16 0x%04x (lowp 0x%04x), f16 0x%04x (lowp 0x%04x)\n",
               bits, b, dpm_bf16_from_f32_1(x[i]), h, dpm_f16_from_f32_1(x[i]));
        bad++;
      }
    }
    total += (uint64_t)n;
  }
  CHECK_INT(bad, 0);
  CHECK(total > 5000000); /* 786,432 rounding points and 4.3 M strided */
}

/* bf16 Relu and ReluGradient on every bf16 pattern (dY over a permutation
 * of them) against the CPU's path: widened, the CPU's f32 kernel, rounded
 * to nearest even (backend/cpu/lowp_run.h). */
TEST(cuda_elem_relu_bf16_every_pattern_is_the_cpus) {
  static float x[NV], dy[NV], want[NV];
  static uint16_t hx[NV], hdy[NV];
  int bad = 0;
  for (uint32_t base = 0; base < 65536 && bad < 5; base += NV) {
    int n = 65536 - base < NV ? (int)(65536 - base) : NV;
    for (int i = 0; i < NV; i++) { /* the tail repeats pattern 0 */
      uint32_t h = i < n ? base + (uint32_t)i : 0;
      hx[i] = (uint16_t)h;
      hdy[i] = (uint16_t)((h * 40503u + 7u) & 0xffffu);
      x[i] = dpm_f32_from_bf16_1(hx[i]);
      dy[i] = dpm_f32_from_bf16_1(hdy[i]);
    }
    CHECK(cpu_unary("Relu", "", x, want));
    for (int i = 0; i < n; i++)
      if (dpm_relu_bf16(hx[i]) != dpm_bf16_from_f32_1(want[i])) {
        printf("    Relu 0x%04x\n", hx[i]);
        bad++;
      }
    CHECK(cpu_binary("ReluGradient", "", x, dy, want));
    for (int i = 0; i < n; i++)
      if (dpm_relu_grad_bf16(hx[i], hdy[i]) != dpm_bf16_from_f32_1(want[i])) {
        printf("    ReluGradient 0x%04x 0x%04x\n", hx[i], hdy[i]);
        bad++;
      }
  }
  CHECK_INT(bad, 0);
}

/* The bf16 Conv's bias body (a rounded output plus a bf16 bias, through
 * Relu, rounded) on every bf16 pattern of y against a permutation of them
 * as b: the CPU's Add of the widened values, then its Relu, each rounded
 * to bf16 (what the CPU's low-precision wrapper gives for an Add and a
 * Relu on bf16 tensors); without a bias, y through Relu alone. */
TEST(cuda_elem_bias_act_bf16_every_pattern_is_the_cpus) {
  static float y[NV], b[NV], sum[NV], act[NV];
  static uint16_t hy[NV], hb[NV];
  int bad = 0;
  for (uint32_t base = 0; base < 65536 && bad < 5; base += NV) {
    int n = 65536 - base < NV ? (int)(65536 - base) : NV;
    for (int i = 0; i < NV; i++) {
      uint32_t h = i < n ? base + (uint32_t)i : 0;
      hy[i] = (uint16_t)h;
      hb[i] = (uint16_t)((h * 40503u + 7u) & 0xffffu);
      y[i] = dpm_f32_from_bf16_1(hy[i]);
      b[i] = dpm_f32_from_bf16_1(hb[i]);
    }
    CHECK(cpu_binary("Add", "", y, b, sum));
    CHECK(cpu_unary("Relu", "", sum, act));
    for (int i = 0; i < n; i++) {
      uint16_t s = dpm_bf16_from_f32_1(sum[i]), a = dpm_bf16_from_f32_1(act[i]);
      uint16_t r = dpm_bf16_from_f32_1(dpm_f32_from_bf16_1(hy[i]) > 0.f
                                           ? dpm_f32_from_bf16_1(hy[i])
                                           : 0.f);
      if (dpm_bias_act_bf16(hy[i], hb[i], 1, 0) != s ||
          dpm_bias_act_bf16(hy[i], hb[i], 1, 1) != a ||
          dpm_bias_act_bf16(hy[i], 0, 0, 1) != r) {
        printf("    y 0x%04x b 0x%04x\n", hy[i], hb[i]);
        bad++;
      }
    }
  }
  CHECK_INT(bad, 0);
}
