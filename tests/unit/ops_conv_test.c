/* Conv and ConvGradient: forward values by hand and against a direct
 * convolution on both lowerings (im2col for small C*k, MEC otherwise),
 * gradient checks with strides, padding, odd sizes and 1x1 kernels, with and
 * without the input gradient, rejection of bad shapes and arguments, and
 * Conv fused with the Relu after it. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/gemm.h"
#include "engine/exec.h"
#include "optest.h"
#include "test.h"

/* A conv case: X [n,c,h,w], W [m,c,k,k], b [m], values random unless given. */
static ot_case conv_case(const char *args, int n, int c, int h, int w, int m, int k,
                         unsigned seed) {
  return (ot_case){.op = "Conv",
                   .args = args,
                   .n_in = 3,
                   .in = {{.shape = ot_f32(4, n, c, h, w)},
                          {.shape = ot_f32(4, m, c, k, k)},
                          {.shape = ot_f32(1, m)}},
                   .n_out = 1,
                   .seed = seed};
}

TEST(op_conv_forward) {
  const float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const float w[] = {1, 2, 3, 4, 0, 0, 0, 1}, b[] = {0.5f, -1};
  ot_case c = conv_case("dim_out=2 kernel=2", 1, 1, 3, 3, 2, 2, 0);
  c.in[0].f = x, c.in[1].f = w, c.in[2].f = b;
  /* filter 0: x00 + 2 x01 + 3 x10 + 4 x11 + 0.5; filter 1: x11 - 1 */
  const float want[] = {37.5f, 47.5f, 67.5f, 77.5f, 4, 5, 7, 8};
  CHECK(ot_forward_is(&c, ot_f32(4, 1, 2, 2, 2), want, 0));
}

/* Padding contributes zeros; two images, two channels, stride 2. */
TEST(op_conv_forward_pad_stride) {
  float x[2 * 2 * 9], w[18];
  for (int i = 0; i < 9; i++) {
    x[i] = (float)(i + 1), x[9 + i] = 1;             /* image 0: 1..9, ones */
    x[18 + i] = (float)(2 * (i + 1)), x[27 + i] = 1; /* image 1: 2..18, ones */
  }
  for (int i = 0; i < 18; i++) w[i] = 1;
  const float b[] = {0};
  ot_case c = conv_case("dim_out=1 kernel=3 pad=1 stride=2", 2, 2, 3, 3, 1, 3, 0);
  c.in[0].f = x, c.in[1].f = w, c.in[2].f = b;
  /* corner windows hold 4 inputs: 1+2+4+5 = 12 ... plus 4 ones */
  const float want[] = {16, 20, 28, 32, 28, 36, 52, 60};
  CHECK(ot_forward_is(&c, ot_f32(4, 2, 1, 2, 2), want, 0));
}

/* Direct convolution in double, for comparison. */
static void ref_conv(const float *x, const float *w, const float *b, int n, int c, int h,
                     int wd, int m, int k, int s, int p, double *y) {
  int ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
  for (int i = 0; i < n; i++)
    for (int f = 0; f < m; f++)
      for (int oy = 0; oy < ho; oy++)
        for (int ox = 0; ox < wo; ox++) {
          double acc = b[f];
          for (int ch = 0; ch < c; ch++)
            for (int ky = 0; ky < k; ky++)
              for (int kx = 0; kx < k; kx++) {
                int iy = oy * s + ky - p, ix = ox * s + kx - p;
                if (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                  acc += (double)w[((f * c + ch) * k + ky) * k + kx] *
                         x[((i * c + ch) * h + iy) * wd + ix];
              }
          *y++ = acc;
        }
}

/* Largest |Conv - direct| for one geometry, or -1 if the op failed. */
static double conv_vs_ref(int n, int c, int h, int wd, int m, int k, int s, int p) {
  char args[96];
  snprintf(args, sizeof args, "dim_out=%d kernel=%d stride=%d pad=%d", m, k, s, p);
  int nx = n * c * h * wd, nw = m * c * k * k;
  float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w),
        *b = malloc(m * sizeof *b);
  for (int i = 0; i < nx; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.f;
  for (int i = 0; i < nw; i++) w[i] = (float)((i * 53 % 97) - 48) / 48.f;
  for (int i = 0; i < m; i++) b[i] = (float)i / 4.f;
  ot_case cs = conv_case(args, n, c, h, wd, m, k, 0);
  cs.in[0].f = x, cs.in[1].f = w, cs.in[2].f = b;
  dpm_tensor y[1];
  dpm_err err = {0};
  double worst = -1;
  if (ot_forward(&cs, y, &err) == DPM_OK) {
    int64_t ny = dpm_tensor_numel(&y[0]);
    double *ref = malloc(ny * sizeof *ref);
    ref_conv(x, w, b, n, c, h, wd, m, k, s, p, ref);
    worst = 0;
    for (int64_t i = 0; i < ny; i++)
      worst = fmax(worst, fabs(dpm_f32(&y[0])[i] - ref[i]));
    free(ref);
    dpm_tensor_fini(&y[0]);
  } else {
    printf("    %s\n", err.msg);
  }
  free(x), free(w), free(b);
  return worst;
}

TEST(op_conv_forward_matches_direct) {
  /* im2col (C*k < 64) */
  CHECK(conv_vs_ref(2, 3, 7, 5, 4, 3, 1, 1) >= 0);
  CHECK_WITHIN(conv_vs_ref(2, 3, 7, 5, 4, 3, 1, 1), 1e-5);
  CHECK_WITHIN(conv_vs_ref(1, 2, 9, 8, 3, 4, 3, 2), 1e-5);
  CHECK_WITHIN(conv_vs_ref(2, 1, 6, 6, 3, 5, 1, 2), 1e-5);
  /* MEC (C*k >= 64): stride 1, stride phases, kernel smaller than stride */
  CHECK_WITHIN(conv_vs_ref(2, 22, 7, 6, 3, 3, 1, 1), 1e-4);
  CHECK_WITHIN(conv_vs_ref(2, 16, 9, 8, 3, 4, 2, 1), 1e-4);
  CHECK_WITHIN(conv_vs_ref(1, 13, 11, 10, 2, 5, 3, 2), 1e-4);
  CHECK_WITHIN(conv_vs_ref(1, 40, 7, 7, 3, 2, 3, 0), 1e-4);
  /* stride 1 with Wo == W ("same" padding) lowers whole planes at once;
   * stride 1 otherwise goes row by row */
  CHECK_WITHIN(conv_vs_ref(2, 2, 6, 7, 3, 5, 1, 2), 1e-5);
  CHECK_WITHIN(conv_vs_ref(2, 13, 6, 6, 3, 5, 1, 2), 1e-4);
  CHECK_WITHIN(conv_vs_ref(2, 32, 5, 9, 2, 5, 1, 2), 1e-4);
  CHECK_WITHIN(conv_vs_ref(2, 2, 1, 6, 3, 5, 1, 2), 1e-5); /* padding taller than X */
  CHECK_WITHIN(conv_vs_ref(2, 13, 2, 5, 3, 5, 1, 2), 1e-4);
  CHECK_WITHIN(conv_vs_ref(2, 3, 7, 6, 4, 3, 1, 0), 1e-5);
  CHECK_WITHIN(conv_vs_ref(2, 22, 7, 6, 3, 3, 1, 0), 1e-4);
  CHECK_WITHIN(conv_vs_ref(1, 22, 5, 6, 3, 3, 1, 2), 1e-4);
  /* 1x1 kernels */
  CHECK_WITHIN(conv_vs_ref(3, 64, 4, 3, 5, 1, 1, 0), 1e-4);
  CHECK_WITHIN(conv_vs_ref(2, 3, 6, 5, 2, 1, 2, 0), 1e-5);
  /* many filters: the transposed forms, on both lowerings, with every
   * product on the AVX-512 tiles, then on cblas */
  for (int mode = DPM_GEMM_TILES; mode >= DPM_GEMM_BLAS; mode -= 2) {
    dpm_gemm_use(mode);
    double worst = fmax(conv_vs_ref(2, 22, 7, 6, 50, 3, 1, 1),
                        fmax(conv_vs_ref(2, 3, 7, 5, 67, 3, 2, 1),
                             conv_vs_ref(1, 13, 6, 6, 64, 5, 1, 2)));
    dpm_gemm_use(DPM_GEMM_AUTO);
    CHECK_WITHIN(worst, 1e-4);
  }
}

/* Conv is linear in each single input element. */
#define EPS OT_LINEAR_EPS

/* 3x3 with padding: the op table's "Conv 3x3 pad 1" (tests/opcases/cases.c). */
TEST(op_conv_gradcheck) {
  ot_case c = conv_case("dim_out=2 kernel=3 pad=1 stride=2", 2, 3, 7, 5, 2, 3, 2);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=3 kernel=2 stride=3", 1, 2, 8, 7, 3, 2, 3);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=3 kernel=1", 2, 3, 3, 5, 3, 1, 4);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
}

/* The MEC lowering, with and without stride phases. */
TEST(op_conv_gradcheck_mec) {
  ot_case c = conv_case("dim_out=3 kernel=3 pad=1", 2, 22, 6, 5, 3, 3, 5);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=4 pad=1 stride=2", 1, 16, 7, 8, 2, 4, 6);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
}

/* Many filters: forward and weight gradient in the transposed forms. */
TEST(op_conv_gradcheck_many_filters) {
  ot_case c = conv_case("dim_out=49 kernel=3 pad=1", 2, 22, 5, 4, 49, 3, 15);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 300), 1e-3);
  c = conv_case("dim_out=50 kernel=3 pad=1 stride=2", 2, 3, 7, 5, 50, 3, 16);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 300), 1e-3);
}

/* no_bias: the op takes X and W only and equals Conv with a zero bias, on
 * both the plain and the transposed forms (M >= 48). */
TEST(op_conv_no_bias_forward) {
  const int shapes[][4] = {{3, 2, 3, 1}, {50, 3, 3, 1}};
  for (int k = 0; k < 2; k++) {
    const int m = shapes[k][0], ch = shapes[k][1], kk = shapes[k][2], p = shapes[k][3];
    char args[96], args_nb[128];
    snprintf(args, sizeof args, "dim_out=%d kernel=%d pad=%d", m, kk, p);
    snprintf(args_nb, sizeof args_nb, "%s no_bias=true", args);
    ot_case with = conv_case(args, 2, ch, 5, 4, m, kk, 21);
    float *zero = calloc((size_t)m, sizeof *zero);
    with.in[2].f = zero;
    ot_case without = with;
    without.args = args_nb;
    without.n_in = 2;
    dpm_tensor a, b;
    dpm_err err = {0};
    int ok_a = ot_forward(&with, &a, &err) == DPM_OK;
    int ok_b = ot_forward(&without, &b, &err) == DPM_OK;
    double diff =
        ok_a && ok_b ? ot_maxdiff(dpm_f32(&a), dpm_f32(&b), dpm_tensor_numel(&a)) : -1;
    if (ok_a) dpm_tensor_fini(&a);
    if (ok_b) dpm_tensor_fini(&b);
    free(zero);
    CHECK(ok_a && ok_b);
    CHECK(diff == 0);
  }
}

/* no_bias gradients: dW and dX, no db. */
TEST(op_conv_gradcheck_no_bias) {
  ot_case c =
      conv_case("dim_out=2 kernel=3 pad=1 stride=2 no_bias=true", 2, 3, 7, 5, 2, 3, 2);
  c.n_in = 2;
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=49 kernel=1 no_bias=true", 2, 22, 3, 4, 49, 1, 15);
  c.n_in = 2;
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 300), 1e-3);
}

/* Grouped convolution against a direct one, group by group: output
 * channel f sees input channels [f / (M/G) * C/G, +C/G) only. */
static double grouped_vs_ref(int n, int c, int h, int wd, int m, int k, int s, int p,
                             int grp, int no_bias) {
  char args[128];
  snprintf(args, sizeof args, "dim_out=%d kernel=%d stride=%d pad=%d group=%d%s", m, k, s,
           p, grp, no_bias ? " no_bias=true" : "");
  const int cg = c / grp, mg = m / grp;
  int nx = n * c * h * wd, nw = m * cg * k * k;
  float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w),
        *b = malloc(m * sizeof *b);
  for (int i = 0; i < nx; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.f;
  for (int i = 0; i < nw; i++) w[i] = (float)((i * 53 % 89) - 44) / 44.f;
  for (int i = 0; i < m; i++) b[i] = no_bias ? 0.f : (float)i / 7.f;
  int ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
  double *want = calloc((size_t)n * m * ho * wo, sizeof *want);
  for (int i = 0; i < n; i++)
    for (int f = 0; f < m; f++)
      for (int oy = 0; oy < ho; oy++)
        for (int ox = 0; ox < wo; ox++) {
          double acc = b[f];
          for (int ch = 0; ch < cg; ch++)
            for (int ky = 0; ky < k; ky++)
              for (int kx = 0; kx < k; kx++) {
                int iy = oy * s + ky - p, ix = ox * s + kx - p, xc = f / mg * cg + ch;
                if (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                  acc += (double)w[((f * cg + ch) * k + ky) * k + kx] *
                         x[((i * c + xc) * h + iy) * wd + ix];
              }
          want[((i * m + f) * ho + oy) * wo + ox] = acc;
        }
  ot_case cs = conv_case(args, n, c, h, wd, m, k, 0);
  cs.in[1].shape = ot_f32(4, m, cg, k, k);
  cs.in[0].f = x, cs.in[1].f = w, cs.in[2].f = b;
  cs.n_in = no_bias ? 2 : 3;
  dpm_tensor y;
  dpm_err err = {0};
  double worst = -1;
  if (ot_forward(&cs, &y, &err) == DPM_OK) {
    worst = 0;
    for (int64_t i = 0; i < dpm_tensor_numel(&y); i++)
      worst = fmax(worst, fabs(dpm_f32(&y)[i] - want[i]));
    dpm_tensor_fini(&y);
  } else {
    printf("    %s\n", err.msg);
  }
  free(x), free(w), free(b), free(want);
  return worst;
}

/* Groups on both lowerings and both forms: depthwise-like (C/G 1), small
 * and large C/G x k, many filters per group, with and without a bias. */
TEST(op_conv_group_matches_direct) {
  CHECK_WITHIN(grouped_vs_ref(2, 4, 7, 6, 6, 3, 1, 1, 2, 0), 1e-4);
  CHECK_WITHIN(grouped_vs_ref(2, 6, 9, 8, 6, 3, 2, 1, 6, 1), 1e-4);
  CHECK_WITHIN(grouped_vs_ref(1, 64, 6, 5, 8, 3, 1, 1, 2, 0), 1e-4);
  CHECK_WITHIN(grouped_vs_ref(2, 8, 5, 5, 100, 1, 1, 0, 2, 1), 1e-4);
}

TEST(op_conv_group_gradcheck) {
  ot_case c = conv_case("dim_out=6 kernel=3 pad=1 stride=2 group=3", 2, 6, 7, 5, 6, 3, 4);
  c.in[1].shape = ot_f32(4, 6, 2, 3, 3);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=8 kernel=3 pad=1 group=2 no_bias=true", 1, 44, 4, 3, 8, 3, 5);
  c.in[1].shape = ot_f32(4, 8, 22, 3, 3);
  c.n_in = 2;
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 300), 1e-3);
}

TEST(op_conv_group_must_divide) {
  ot_case c = conv_case("dim_out=6 kernel=3 group=4", 1, 8, 5, 5, 6, 3, 1);
  CHECK(ot_rejects(&c, "group 4 must divide the input channels (8) and dim_out (6)"));
  c = conv_case("dim_out=6 kernel=3 group=4", 1, 6, 5, 5, 8, 3, 1);
  c.args = "dim_out=8 kernel=3 group=4";
  CHECK(ot_rejects(&c, "group 4 must divide the input channels (6) and dim_out (8)"));
  c.args = "dim_out=8 kernel=3 group=0";
  CHECK(ot_rejects(&c, "'group'"));
  /* the weight is [M, C/G, k, k] */
  c = conv_case("dim_out=4 kernel=3 group=2", 1, 4, 5, 5, 4, 3, 1);
  CHECK(ot_rejects(&c, "weight must be f32[4,2,3,3], got f32[4,4,3,3]"));
}

/* Stride 1 with Wo == W, where lower and unlower move whole planes, on both
 * lowerings, and stride 1 without it. */
TEST(op_conv_gradcheck_same_width) {
  ot_case c = conv_case("dim_out=3 kernel=5 pad=2", 2, 13, 6, 7, 3, 5, 9);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=5 pad=2", 2, 2, 7, 6, 2, 5, 10);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=3", 2, 22, 6, 5, 2, 3, 11);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=3 pad=2", 1, 22, 4, 5, 2, 3, 12);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=5 pad=2", 2, 13, 2, 5, 2, 5, 13);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c = conv_case("dim_out=2 kernel=5 pad=2", 2, 2, 1, 6, 2, 5, 14);
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
}

/* A first layer: no input gradient, so no dL and no scatter back. */
TEST(op_conv_gradcheck_without_input_grad) {
  ot_case c = conv_case("dim_out=5 kernel=5 pad=2", 3, 1, 6, 7, 5, 5, 7);
  c.in[0].no_grad = 1;
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
  c.in[2].no_grad = 1; /* and a frozen bias */
  CHECK_WITHIN(ot_gradcheck(&c, EPS, 200), 1e-3);
}

TEST(op_conv_rejects_bad_shapes) {
  ot_case c = conv_case("dim_out=2 kernel=5", 1, 1, 3, 3, 2, 5, 0);
  CHECK(ot_rejects(&c, "kernel 5 is larger than the padded input 3x3"));
  c = conv_case("dim_out=2 kernel=5 pad=1", 1, 1, 2, 9, 2, 5, 0);
  CHECK(ot_rejects(&c, "kernel 5 is larger than the padded input 4x11"));
  c = conv_case("dim_out=2 kernel=3", 1, 2, 5, 5, 2, 3, 0);
  c.in[1].shape = ot_f32(4, 2, 1, 3, 3);
  CHECK(ot_rejects(&c, "weight must be f32[2,2,3,3], got f32[2,1,3,3]"));
  c = conv_case("dim_out=2 kernel=3", 1, 2, 5, 5, 2, 3, 0);
  c.in[2].shape = ot_f32(1, 3);
  CHECK(ot_rejects(&c, "bias must be f32[2], got f32[3]"));
  c = conv_case("dim_out=2 kernel=3", 1, 2, 5, 5, 2, 3, 0);
  c.in[0].shape = ot_f32(3, 2, 5, 5);
  CHECK(ot_rejects(&c, "input must have 4 dimensions"));
}

TEST(op_conv_rejects_bad_args) {
  ot_case c = conv_case("kernel=3", 1, 1, 5, 5, 2, 3, 0);
  CHECK(ot_rejects(&c, "missing required argument 'dim_out'"));
  c.args = "dim_out=2";
  CHECK(ot_rejects(&c, "missing required argument 'kernel'"));
  c.args = "dim_out=2 kernel=3 stride=0";
  CHECK(ot_rejects(&c, "'stride'"));
  c.args = "dim_out=2 kernel=3 pad=-1";
  CHECK(ot_rejects(&c, "'pad'"));
  c.args = "dim_out=2 kernel=3 weight_init=zeros";
  CHECK(ot_rejects(&c, "must be one of"));
}

/* Conv fused with the in-place Relu after it gives exactly what that Relu
 * gives on the unfused output. */
static int fused_relu_is_exact(int n, int c, int h, int wd, int m, int k, int s, int p) {
  char args[96];
  snprintf(args, sizeof args, "dim_out=%d kernel=%d stride=%d pad=%d", m, k, s, p);
  /* x, w, b, relu(y), fused y */
  dpm_tensor t[5] = {ot_tensor(ot_f32(4, n, c, h, wd), NULL),
                     ot_tensor(ot_f32(4, m, c, k, k), NULL),
                     ot_tensor(ot_f32(1, m), NULL)};
  for (int j = 0; j < 3; j++)
    for (int64_t i = 0; i < dpm_tensor_numel(&t[j]); i++)
      dpm_f32(&t[j])[i] = (float)((i * 37 + j) % 101 - 50) / 50.f;
  dpm_tensor *in[] = {&t[0], &t[1], &t[2]};
  int ok = !ot_run_op("Conv", args, 0, 3, in, 1, (dpm_tensor *[]){&t[3]}, NULL) &&
           !ot_run_op("Relu", "", 0, 1, (dpm_tensor *[]){&t[3]}, 1,
                      (dpm_tensor *[]){&t[3]}, NULL);
  if (ok) {
    int64_t ny = dpm_tensor_numel(&t[3]);
    t[4] = ot_tensor(t[3].shape, NULL);
    for (int64_t i = 0; i < ny; i++) dpm_f32(&t[4])[i] = NAN; /* must be overwritten */
    ok = !ot_run_fused("Conv", args, 0, DPM_FUSE_RELU, 3, in, 1, (dpm_tensor *[]){&t[4]},
                       NULL) &&
         !memcmp(dpm_f32(&t[4]), dpm_f32(&t[3]), ny * sizeof(float));
  }
  for (int j = 0; j < 5; j++) dpm_tensor_fini(&t[j]);
  return ok;
}

TEST(op_conv_fused_relu) {
  CHECK(dpm_op_find("Conv")->fusable & DPM_FUSE_RELU);
  /* im2col */
  CHECK(fused_relu_is_exact(2, 3, 7, 5, 4, 3, 1, 1));
  CHECK(fused_relu_is_exact(1, 2, 9, 8, 3, 4, 3, 2));
  /* MEC, with and without stride phases */
  CHECK(fused_relu_is_exact(2, 22, 7, 6, 3, 3, 1, 1));
  CHECK(fused_relu_is_exact(2, 16, 9, 8, 3, 4, 2, 1));
  /* whole-plane lowering (stride 1, Wo == W) */
  CHECK(fused_relu_is_exact(2, 13, 6, 6, 3, 5, 1, 2));
}
