/* FC and FCGradient over bf16 tensors: the native AVX512-BF16 kernels
 * (backend/cpu/gemm_bf16.h, fc_bf16.c) against the fallback (f32 kernels on
 * widened copies, lowp_run.h) and both against an exact reference, at
 * shapes with ragged edges; a short training run with each.
 *
 * Tolerances. Every output is bf16(relu?(b + sum_k x_k w_k)) over K bf16
 * products (b absent for dW and dX). A product of two bf16 (8 significant
 * bits each) has at most 16 and is exact in f32 (no value here is near
 * f32's range ends); only the f32 additions round, each by at most
 * u = 2^-24 relative. Summing K + 1 terms in any order takes K additions,
 * so an f32 result y~ is within g S of the exact sum y, with S = |b| +
 * sum_k |x_k w_k| and g = K u / (1 - K u) (Higham's gamma_K). vdpbf16ps
 * also treats bf16 subnormal inputs as zero (none here: the inputs are
 * in [-1, 1) and 0 or above 2^-40 once rounded) and flushes subnormal f32
 * results to zero: at most 2K of them a lane, each off by under 2^-126, so
 * f = 2K 2^-126 more. Relu is 1-Lipschitz. The output is then rounded to
 * bf16 (to nearest even, monotone): r is within ulp(r)/2 of y~, where ulp
 * is bf16's at |r| (y~ never lies in a higher binade than r).
 *   - against the exact y: y~ in [y - g S - f, y + g S + f], so r lies
 *     between those ends rounded (exactly, from double): a count of
 *     outputs outside, which must be 0 (as a ratio it would sit at 1: the
 *     half ulp is reached);
 *   - native r1 against fallback r2: each y~ within g S + f of y, so
 *     |y~1 - y~2| <= 2 (g S + f); rounding adds at most ulp / 2 each side
 *     (ulp at max(|r1|, |r2|)): one bf16 ulp in all where the two f32 sums
 *     straddle a rounding boundary, 0 where they round alike.
 * db is summed in f32 in the same order by both (the same bits: checked
 * bitwise). Each check reports its largest error / tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fc_bf16.h"
#include "backend/cpu/gemm_bf16.h"
#include "common/spec.h"
#include "engine/lowp.h"
#include "optest.h"
#include "test.h"
#include "trainer_fixture.h"

/* Uniform values in [-1, 1) from a fixed LCG. */
static void fill_uniform(float *v, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)((double)(seed >> 8) / (double)(1u << 23) - 1.0);
  }
}

/* bf16's ulp at |v| (its normal range; 2^-133 below). */
static double ulp_bf16(double v) {
  v = fabs(v);
  if (v < 0x1p-126) return 0x1p-133;
  int e;
  frexp(v, &e); /* v in [2^(e-1), 2^e) */
  return ldexp(1.0, e - 1 - 7);
}

static double gamma_k(int k) { return k * 0x1p-24 / (1 - k * 0x1p-24); }

static int native_ok(void) {
  if (dpm_bf16_native_allowed()) return 1;
  printf("    native bf16 comparison skipped: this CPU has no AVX512-BF16 (or "
         "DPM_CPU_KERNELS=generic); the fallback checks still run\n");
  return 0;
}

static dpm_tensor bf16_tensor(int ndim, const int64_t *d, const float *v) {
  return ot_tensor(dpm_shape_make(DPM_BF16, ndim, d), v);
}

static double get(const dpm_tensor *t, int64_t i) {
  return dpm_f32_from_bf16_1(dpm_u16(t)[i]);
}

/* v rounded to bf16, to nearest even, straight from double (no double
 * rounding through f32). */
static double rne_bf16(double v) {
  if (fabs(v) < 0x1p-126) return ldexp(nearbyint(ldexp(v, 133)), -133);
  int e;
  double m = frexp(v, &e); /* |m| in [0.5, 1): 8 significant bits are 2^8 m */
  return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* Per output: against the exact y, r must lie in [rne(y - gS - f), rne(y +
 * gS + f)] (r = rne(y~) and rne is monotone): a count of those outside;
 * against the other kernel's output, the worst error / tolerance and how
 * many differ at all. */
typedef struct {
  long outside;
  double vs_other;
  long differ, total;
} worst;

/* Native against fallback: both inside their enclosures [rne(y - gS - f),
 * rne(y + gS + f)] (checked exactly: `outside` 0) puts them within 2 gS + f
 * plus one ulp of each other, so vs_other <= 1 follows from those checks; it
 * is a proof's bound, not a tolerance that another CPU's rounding could
 * approach (one output a ulp apart reads 0.65), so it is not recorded as a
 * margin. */
#define CHECK_IMPLIED(vs_other) CHECK((vs_other) <= 1.0)

static void judge(worst *w, double r, const double *other, double y, double s, int k) {
  double gs = gamma_k(k) * s + 2.0 * k * 0x1p-126;
  if (!(r >= rne_bf16(y - gs) && r <= rne_bf16(y + gs))) {
    if (w->outside++ < 3) printf("    %.9g outside [%.9g, %.9g]\n", r, y - gs, y + gs);
  }
  if (other) {
    double to = 2 * gs + ulp_bf16(fmax(fabs(r), fabs(*other)));
    double d = fabs(r - *other) / to;
    if (!(d <= w->vs_other)) w->vs_other = isnan(d) ? INFINITY : fmax(d, w->vs_other);
    w->differ += r != *other;
    w->total++;
  }
}

/* FC over bf16 X [n, k], W [m, k], b [m] (relu fused or not), with the
 * native kernels on or off: Y in *y (caller frees). */
static int run_fc(int native, int n, int m, int k, int relu, dpm_tensor *x, dpm_tensor *w,
                  dpm_tensor *b, dpm_tensor *y) {
  dpm_bf16_native_use(native);
  uint64_t before = dpm_bf16_native_products();
  char args[32];
  snprintf(args, sizeof args, "dim_out=%d", m);
  dpm_tensor *in[] = {x, w, b}, *out[] = {y};
  dpm_err err = {0};
  dpm_status s =
      ot_run_fused("FC", args, 0, relu ? DPM_FUSE_RELU : 0, 3, in, 1, out, &err);
  uint64_t ran = dpm_bf16_native_products() - before;
  dpm_bf16_native_use(1);
  if (s) printf("    FC %dx%dx%d: %s\n", n, m, k, err.msg);
  if (!s && ran != (uint64_t) !!native) {
    printf("    FC %dx%dx%d: %llu native products, expected %d\n", n, m, k,
           (unsigned long long)ran, native);
    return 0;
  }
  return !s && y->shape.dtype == DPM_BF16;
}

/* FC at n x m x k: each kernel against the exact sums, native against the
 * fallback (where the CPU has it). */
static int fc_case(int n, int m, int k, int relu, worst *w) {
  float *xv = malloc(sizeof(float) * (size_t)n * k),
        *wv = malloc(sizeof(float) * (size_t)m * k),
        *bv = malloc(sizeof(float) * (size_t)m);
  fill_uniform(xv, (int64_t)n * k, (uint32_t)(n * 31 + k));
  fill_uniform(wv, (int64_t)m * k, (uint32_t)(m * 17 + k + 1));
  fill_uniform(bv, m, (uint32_t)m);
  dpm_tensor x = bf16_tensor(2, (int64_t[]){n, k}, xv),
             wt = bf16_tensor(2, (int64_t[]){m, k}, wv),
             b = bf16_tensor(1, (int64_t[]){m}, bv);
  dpm_tensor yn = {0}, yf = {0};
  int nat = dpm_bf16_native_allowed();
  int ok = run_fc(0, n, m, k, relu, &x, &wt, &b, &yf) &&
           (!nat || run_fc(1, n, m, k, relu, &x, &wt, &b, &yn));
  for (int i = 0; ok && i < n; i++)
    for (int j = 0; j < m; j++) {
      double y = get(&b, j), s = fabs(y);
      for (int kk = 0; kk < k; kk++) {
        double p = get(&x, (int64_t)i * k + kk) * get(&wt, (int64_t)j * k + kk);
        y += p;
        s += fabs(p);
      }
      if (relu && y < 0) y = 0;
      double rf = get(&yf, (int64_t)i * m + j);
      judge(&w[0], rf, NULL, y, s, k);
      if (nat) judge(&w[1], get(&yn, (int64_t)i * m + j), &rf, y, s, k);
    }
  dpm_tensor *all[] = {&x, &wt, &b, &yn, &yf};
  for (int i = 0; i < 5; i++) dpm_tensor_fini(all[i]);
  free(xv);
  free(wv);
  free(bv);
  return ok;
}

/* Shapes (n, m, k): below, at and past the tiles' 6 rows, 16-column
 * vectors, 64-column panels and pairs of k; the forward's dot tiles (4 x 6,
 * 32 values of k a step) up to DPM_BF16_NT_KMAX, and past it both
 * orientations of its dpm_bf16_gemm (m > n packs X, else W). */
static const int shapes[][3] = {{1, 1, 1},      {3, 5, 7},       {6, 16, 2},
                                {7, 17, 33},    {13, 64, 31},    {25, 70, 129},
                                {64, 10, 128},  {64, 256, 97},   {50, 130, 200},
                                {5, 7, 2048},   {9, 13, 2049},   {13, 7, 2081}};
#define N_SHAPES (int)(sizeof shapes / sizeof *shapes)

static void report(const char *what, const worst *w) {
  if (!dpm_bf16_native_allowed()) {
    printf("    %s: outside the exact bound %ld (fallback)\n", what, w[0].outside);
    return;
  }
  printf("    %s: outside the exact bound %ld (fallback), %ld (native); native against "
         "fallback %.3g of its tolerance, %ld of %ld outputs differ\n",
         what, w[0].outside, w[1].outside, w[1].vs_other, w[1].differ, w[1].total);
}

TEST(fc_bf16_native_matches_fallback) {
  worst w[2];
  memset(w, 0, sizeof w);
  int nat = native_ok();
  for (int c = 0; c < N_SHAPES; c++)
    for (int relu = 0; relu < 2; relu++)
      CHECK(fc_case(shapes[c][0], shapes[c][1], shapes[c][2], relu, w));
  report("FC", w);
  CHECK_INT(w[0].outside, 0);
  if (!nat) return;
  CHECK_INT(w[1].outside, 0);
  CHECK_IMPLIED(w[1].vs_other);
}

/* A row of Y has the same bits whatever the batch around it: FC's forward
 * over 9 rows against each row alone, for the dot tiles (k = 100) and for
 * dpm_bf16_gemm past their k (2100: W packed for the 9 rows, X for one). */
TEST(fc_bf16_forward_row_bits_independent_of_batch) {
  if (!native_ok()) return;
  const int n = 9, ks[] = {100, 2100}, ms[] = {11, 5};
  for (int c = 0; c < 2; c++) {
    const int k = ks[c], m = ms[c];
    float *f = malloc(sizeof(float) * (size_t)(n + m + 1) * k);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(n + m + 1) * k), *w = x + n * k,
             *b = w + m * k, *all = malloc(sizeof(uint16_t) * n * m),
             *one = malloc(sizeof(uint16_t) * m);
    fill_uniform(f, (int64_t)(n + m + 1) * k, (uint32_t)k);
    dpm_bf16_from_f32(x, f, (size_t)(n + m + 1) * k);
    size_t sb = dpm_fc_bf16_scratch(n, m, k, DPM_FC_BF16_FORWARD),
           s1 = dpm_fc_bf16_scratch(1, m, k, DPM_FC_BF16_FORWARD);
    void *scratch = aligned_alloc(64, ((sb > s1 ? sb : s1) + 64) / 64 * 64);
    dpm_fc_bf16_forward(n, m, k, x, w, b, 1, all, scratch);
    long differ = 0;
    for (int i = 0; i < n; i++) {
      dpm_fc_bf16_forward(1, m, k, x + i * k, w, b, 1, one, scratch);
      differ += memcmp(one, all + i * m, sizeof(uint16_t) * m) != 0;
    }
    printf("    k %d: %ld of %d rows differ alone\n", k, differ, n);
    CHECK_INT(differ, 0);
    free(scratch);
    free(f);
    free(x);
    free(all);
    free(one);
  }
}

/* FCGradient with the native kernels on or off: dW, db and (with_dx) dX. */
static int run_fc_grad(int native, int with_dx, dpm_tensor *x, dpm_tensor *w,
                       dpm_tensor *dy, dpm_tensor out[3]) {
  dpm_bf16_native_use(native);
  uint64_t before = dpm_bf16_native_products();
  dpm_tensor *in[] = {x, w, dy}, *o[] = {&out[0], &out[1], with_dx ? &out[2] : NULL};
  dpm_err err = {0};
  char args[32];
  snprintf(args, sizeof args, "dim_out=%d", (int)w->shape.d[0]);
  dpm_status s = ot_run_op("FCGradient", args, 0, 3, in, with_dx ? 3 : 2, o, &err);
  uint64_t ran = dpm_bf16_native_products() - before;
  dpm_bf16_native_use(1);
  if (s) printf("    FCGradient: %s\n", err.msg);
  uint64_t want = native ? (uint64_t)(1 + with_dx) : 0;
  if (!s && ran != want) {
    printf("    FCGradient: %llu native products, expected %llu\n",
           (unsigned long long)ran, (unsigned long long)want);
    return 0;
  }
  return !s;
}

/* FCGradient's bf16 operands X [n, k], W [m, k] and dY [n, m], uniform in
 * [-1, 1) from seeds of the shape (the caller finis them). */
static void fc_grad_operands(int n, int m, int k, dpm_tensor *x, dpm_tensor *wt,
                             dpm_tensor *dy) {
  float *xv = malloc(sizeof(float) * (size_t)n * k),
        *wv = malloc(sizeof(float) * (size_t)m * k),
        *gv = malloc(sizeof(float) * (size_t)n * m);
  fill_uniform(xv, (int64_t)n * k, (uint32_t)(n + 3 * k));
  fill_uniform(wv, (int64_t)m * k, (uint32_t)(m + 5 * k));
  fill_uniform(gv, (int64_t)n * m, (uint32_t)(n * m + 7));
  *x = bf16_tensor(2, (int64_t[]){n, k}, xv);
  *wt = bf16_tensor(2, (int64_t[]){m, k}, wv);
  *dy = bf16_tensor(2, (int64_t[]){n, m}, gv);
  free(xv);
  free(wv);
  free(gv);
}

static int fc_grad_case(int n, int m, int k, int with_dx, worst *dw, worst *dx,
                        int *db_same) {
  dpm_tensor x, wt, dy;
  fc_grad_operands(n, m, k, &x, &wt, &dy);
  dpm_tensor gf[3], gn[3];
  memset(gf, 0, sizeof gf);
  memset(gn, 0, sizeof gn);
  int nat = dpm_bf16_native_allowed();
  int ok = run_fc_grad(0, with_dx, &x, &wt, &dy, gf) &&
           (!nat || run_fc_grad(1, with_dx, &x, &wt, &dy, gn));
  for (int j = 0; ok && j < m; j++)
    for (int kk = 0; kk < k; kk++) { /* dW[j][kk] = sum_i dY[i][j] X[i][kk] */
      double y = 0, s = 0;
      for (int i = 0; i < n; i++) {
        double p = get(&dy, (int64_t)i * m + j) * get(&x, (int64_t)i * k + kk);
        y += p;
        s += fabs(p);
      }
      double rf = get(&gf[0], (int64_t)j * k + kk);
      judge(&dw[0], rf, NULL, y, s, n);
      if (nat) judge(&dw[1], get(&gn[0], (int64_t)j * k + kk), &rf, y, s, n);
    }
  for (int i = 0; ok && with_dx && i < n; i++)
    for (int kk = 0; kk < k; kk++) { /* dX[i][kk] = sum_j dY[i][j] W[j][kk] */
      double y = 0, s = 0;
      for (int j = 0; j < m; j++) {
        double p = get(&dy, (int64_t)i * m + j) * get(&wt, (int64_t)j * k + kk);
        y += p;
        s += fabs(p);
      }
      double rf = get(&gf[2], (int64_t)i * k + kk);
      judge(&dx[0], rf, NULL, y, s, m);
      if (nat) judge(&dx[1], get(&gn[2], (int64_t)i * k + kk), &rf, y, s, m);
    }
  if (ok && nat && memcmp(gf[1].data, gn[1].data, (size_t)m * 2)) *db_same = 0;
  dpm_tensor *all[] = {&x, &wt, &dy, &gf[0], &gf[1], &gf[2], &gn[0], &gn[1], &gn[2]};
  for (int i = 0; i < 9; i++) dpm_tensor_fini(all[i]);
  return ok;
}

TEST(fc_gradient_bf16_native_matches_fallback) {
  worst dw[2], dx[2];
  memset(dw, 0, sizeof dw);
  memset(dx, 0, sizeof dx);
  int nat = native_ok(), db_same = 1;
  for (int c = 0; c < N_SHAPES; c++)
    for (int with_dx = 0; with_dx < 2; with_dx++)
      CHECK(fc_grad_case(shapes[c][0], shapes[c][1], shapes[c][2], with_dx, dw, dx,
                         &db_same));
  report("dW", dw);
  report("dX", dx);
  CHECK_INT(dw[0].outside, 0);
  CHECK_INT(dx[0].outside, 0);
  if (!nat) return;
  CHECK(db_same);
  CHECK_INT(dw[1].outside, 0);
  CHECK_IMPLIED(dw[1].vs_other);
  CHECK_INT(dx[1].outside, 0);
  CHECK_IMPLIED(dx[1].vs_other);
}

/* FCGradient writing dW and db in f32 (DPM_FUSE_GRAD_F32: the engine fuses
 * a bf16 model's Casts of its parameter gradients into it), natively or
 * through the fallback: every dW is an f32 sum y~ within g S + f of the
 * exact y (no rounding after it: checked exactly, a count outside, which
 * must be 0), and db is the same f32 sums in both, bit for bit. */
static int fc_grad_f32_case(int n, int m, int k, int with_dx, long *outside,
                            int *db_same) {
  dpm_tensor x, wt, dy;
  fc_grad_operands(n, m, k, &x, &wt, &dy);
  dpm_tensor g[2][3];
  memset(g, 0, sizeof g);
  int ways = 1 + dpm_bf16_native_allowed(), ok = 1;
  char args[32];
  snprintf(args, sizeof args, "dim_out=%d", m);
  for (int nat = 0; nat < ways && ok; nat++) {
    dpm_bf16_native_use(nat);
    uint64_t before = dpm_bf16_native_products();
    dpm_tensor *in[] = {&x, &wt, &dy}, *o[] = {&g[nat][0], &g[nat][1], &g[nat][2]};
    dpm_err err = {0};
    ok = !ot_run_fused("FCGradient", args, 0, DPM_FUSE_GRAD_F32, 3, in, with_dx ? 3 : 2,
                       o, &err);
    uint64_t ran = dpm_bf16_native_products() - before;
    dpm_bf16_native_use(1);
    if (!ok) printf("    FCGradient: %s\n", err.msg);
    if (ok && (g[nat][0].shape.dtype != DPM_F32 || g[nat][1].shape.dtype != DPM_F32 ||
               ran != (uint64_t)(nat ? 1 + with_dx : 0))) {
      printf("    FCGradient %dx%dx%d: dW %s, %llu native products\n", n, m, k,
             dpm_dtype_name(g[nat][0].shape.dtype), (unsigned long long)ran);
      ok = 0;
    }
  }
  for (int nat = 0; ok && nat < ways; nat++)
    for (int j = 0; j < m; j++)
      for (int kk = 0; kk < k; kk++) {
        double y = 0, s = 0;
        for (int i = 0; i < n; i++) {
          double p = get(&dy, (int64_t)i * m + j) * get(&x, (int64_t)i * k + kk);
          y += p;
          s += fabs(p);
        }
        double gs = gamma_k(n) * s + 2.0 * n * 0x1p-126,
               r = dpm_f32(&g[nat][0])[(int64_t)j * k + kk];
        if (!(fabs(r - y) <= gs) && (*outside)++ < 3)
          printf("    %.9g outside [%.9g, %.9g]\n", r, y - gs, y + gs);
      }
  if (ok && ways == 2 && memcmp(g[0][1].data, g[1][1].data, (size_t)m * sizeof(float)))
    *db_same = 0;
  dpm_tensor *all[] = {&x, &wt, &dy, &g[0][0], &g[0][1], &g[0][2],
                       &g[1][0], &g[1][1], &g[1][2]};
  for (int i = 0; i < 9; i++) dpm_tensor_fini(all[i]);
  return ok;
}

TEST(fc_gradient_f32_grads_within_exact_bound) {
  long outside = 0;
  int db_same = 1;
  native_ok();
  for (int c = 0; c < N_SHAPES; c++)
    for (int with_dx = 0; with_dx < 2; with_dx++)
      CHECK(fc_grad_f32_case(shapes[c][0], shapes[c][1], shapes[c][2], with_dx, &outside,
                             &db_same));
  CHECK_INT(outside, 0);
  CHECK(db_same);
}

/* Off, no product runs natively and the results are the fallback's bit for
 * bit whatever the CPU (the switch the generic mode sets at load). */
TEST(bf16_native_switch_forces_fallback) {
  dpm_bf16_native_use(0);
  CHECK(!dpm_bf16_native());
  dpm_bf16_native_use(1);
  CHECK_INT(dpm_bf16_native(), dpm_bf16_native_allowed());
  const char *env = getenv("DPM_CPU_KERNELS");
  if (env && !strcmp(env, "generic")) CHECK(!dpm_bf16_native_allowed());
}

/* ---- training ---------------------------------------------------------- */

static Dpm__ModelSpec *mlp_bf16_spec(void) {
  const char *yaml =
      "name: t\n"
      "input: {reader: synthetic, batch_size: 16, num_examples: 2048,"
      " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 3, shuffle: true}\n"
      "forward:\n"
      "  - {op: FC, in: [data], out: h1, dim_out: 48}\n"
      "  - {op: Relu, in: [h1], out: h1}\n"
      "  - {op: FC, in: [h1], out: h2, dim_out: 33}\n"
      "  - {op: Relu, in: [h2], out: h2}\n"
      "  - {op: FC, in: [h2], out: pred, dim_out: 10}\n"
      "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
      "losses: [loss]\n"
      "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.01}}\n"
      "precision: {compute: bf16}\n";
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

/* 30 steps of a bf16 MLP with the native kernels and with the fallback,
 * from the same parameters and batches. The two differ per FC output by at
 * most one bf16 rounding where the f32 sums straddle a boundary (above),
 * a subset of the roundings by which bf16 differs from f32 at every input
 * and output, so the bound for bf16 against f32 (the loss within
 * 2e-2 relative at every step, precision_test's mlp_bf16_tracks_f32)
 * bounds them too; the worst step is printed. */
TEST(mlp_bf16_native_tracks_fallback) {
  if (!native_ok()) return;
  Dpm__ModelSpec *spec = mlp_bf16_spec();
  CHECK(spec);
  dpm_trainer *a = tf_trainer(spec, 1, NULL), *b = tf_trainer(spec, 1, NULL);
  double worst_rel = -1;
  uint64_t before = dpm_bf16_native_products(), native_ran = 0, fallback_ran = 0;
  dpm_err err = {0};
  dpm_step_stats sa, sb;
  for (int i = 0; a && b && i < 30; i++) {
    dpm_bf16_native_use(1);
    int fa = dpm_trainer_step(a, 1, &sa, &err);
    native_ran += dpm_bf16_native_products() - before;
    before = dpm_bf16_native_products();
    dpm_bf16_native_use(0);
    int fb = fa || dpm_trainer_step(b, 1, &sb, &err);
    fallback_ran += dpm_bf16_native_products() - before;
    before = dpm_bf16_native_products();
    dpm_bf16_native_use(1);
    if (fa || fb) {
      printf("    step: %s\n", err.msg);
      worst_rel = -1;
      break;
    }
    double rel = fabs(sa.loss - sb.loss) / fabs(sb.loss);
    if (rel > worst_rel) worst_rel = rel;
    if (i == 29)
      printf(
          "    step 30: loss %.9g (native) %.9g (fallback), worst step %.3g relative\n",
          sa.loss, sb.loss, worst_rel);
  }
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(spec);
  CHECK_WITHIN(worst_rel, 2e-2);
  /* 3 forward products and 5 backward (no dX for the first layer) a step */
  CHECK_INT(native_ran, 30 * 8);
  CHECK_INT(fallback_ran, 0);
}

/* ---- Conv ------------------------------------------------------------------
 * The same bounds, with K the additions an output's f32 sum takes: Y, C k^2
 * products and the bias (folded in as a product with a one); dW and db, one
 * term per image and output pixel (N Ho Wo); dX, at most M k^2 terms (M
 * for each of the k^2 lowered entries that fold back into one pixel). */

typedef struct {
  int n, c, h, m, k, pad, stride, group, relu; /* relu: fused into the forward */
} conv_case;

/* im2col and MEC lowering, plain and transposed products (M >= 48),
 * strides 1 and 2, groups, odd sizes. */
static const conv_case conv_cases[] = {
    {2, 3, 9, 5, 3, 1, 1, 1, 0},  {2, 16, 7, 50, 5, 2, 1, 1, 1},
    {3, 13, 8, 7, 5, 1, 2, 1, 0}, {1, 4, 11, 49, 3, 0, 2, 1, 0},
    {2, 8, 6, 10, 3, 1, 1, 2, 1},
};
#define N_CONV (int)(sizeof conv_cases / sizeof *conv_cases)

static double xat(const dpm_tensor *x, const conv_case *q, int n, int c, int iy, int ix) {
  if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->h) return 0;
  return get(x, (((int64_t)n * q->c + c) * q->h + iy) * q->h + ix);
}

static int conv_run_native(int native, const char *op, const char *args, unsigned fuse,
                           int n_in, dpm_tensor **in, int n_out, dpm_tensor **out,
                           int want) {
  dpm_bf16_native_use(native);
  uint64_t before = dpm_bf16_native_products();
  dpm_err err = {0};
  dpm_status s = ot_run_fused(op, args, 0, fuse, n_in, in, n_out, out, &err);
  uint64_t ran = dpm_bf16_native_products() - before;
  dpm_bf16_native_use(1);
  if (s) printf("    %s: %s\n", op, err.msg);
  if (!s && (native ? ran < (uint64_t)want : ran != 0)) {
    printf("    %s: %llu native products\n", op, (unsigned long long)ran);
    return 0;
  }
  return !s;
}

static int conv_case_run(const conv_case *q, worst *wy, worst *wdw, worst *wdb,
                         worst *wdx) {
  const int cg = q->c / q->group, mg = q->m / q->group;
  const int ho = (q->h + 2 * q->pad - q->k) / q->stride + 1;
  int64_t nx = (int64_t)q->n * q->c * q->h * q->h, nw = (int64_t)q->m * cg * q->k * q->k,
          ny = (int64_t)q->n * q->m * ho * ho;
  float *xv = malloc(sizeof(float) * (size_t)nx),
        *wv = malloc(sizeof(float) * (size_t)nw),
        *bv = malloc(sizeof(float) * (size_t)q->m),
        *gv = malloc(sizeof(float) * (size_t)ny);
  fill_uniform(xv, nx, (uint32_t)(q->c * 7 + q->h));
  fill_uniform(wv, nw, (uint32_t)(q->m * 3 + q->k));
  fill_uniform(bv, q->m, 11);
  fill_uniform(gv, ny, (uint32_t)(q->n + 5));
  dpm_tensor x = bf16_tensor(4, (int64_t[]){q->n, q->c, q->h, q->h}, xv),
             w = bf16_tensor(4, (int64_t[]){q->m, cg, q->k, q->k}, wv),
             b = bf16_tensor(1, (int64_t[]){q->m}, bv),
             dy = bf16_tensor(4, (int64_t[]){q->n, q->m, ho, ho}, gv);
  dpm_tensor r[2][4];
  memset(r, 0, sizeof r);
  char args[96];
  snprintf(args, sizeof args, "dim_out=%d kernel=%d pad=%d stride=%d group=%d", q->m,
           q->k, q->pad, q->stride, q->group);
  int nat = dpm_bf16_native_allowed(), ok = 1;
  for (int v = 0; v < 1 + nat && ok; v++) { /* 0: fallback, 1: native */
    dpm_tensor *in[] = {&x, &w, &b}, *out[] = {&r[v][0]};
    dpm_tensor *gin[] = {&x, &w, &dy}, *gout[] = {&r[v][1], &r[v][2], &r[v][3]};
    ok = conv_run_native(v, "Conv", args, q->relu ? DPM_FUSE_RELU : 0, 3, in, 1, out,
                         q->group) &&
         conv_run_native(v, "ConvGradient", args, 0, 3, gin, 3, gout, 2 * q->group);
  }
  /* Y[n][m][oy][ox] */
  for (int n = 0; ok && n < q->n; n++)
    for (int m = 0; m < q->m; m++)
      for (int oy = 0; oy < ho; oy++)
        for (int ox = 0; ox < ho; ox++) {
          double y = get(&b, m), s = fabs(y);
          int g0 = m / mg * cg;
          for (int c = 0; c < cg; c++)
            for (int ky = 0; ky < q->k; ky++)
              for (int kx = 0; kx < q->k; kx++) {
                double p = xat(&x, q, n, g0 + c, oy * q->stride + ky - q->pad,
                               ox * q->stride + kx - q->pad) *
                           get(&w, (((int64_t)m * cg + c) * q->k + ky) * q->k + kx);
                y += p;
                s += fabs(p);
              }
          if (q->relu && y < 0) y = 0;
          int64_t i = (((int64_t)n * q->m + m) * ho + oy) * ho + ox;
          double rf = get(&r[0][0], i);
          judge(&wy[0], rf, NULL, y, s, cg * q->k * q->k);
          if (nat) judge(&wy[1], get(&r[1][0], i), &rf, y, s, cg * q->k * q->k);
        }
  /* dW[m][c][ky][kx] and db[m] */
  const int terms = q->n * ho * ho;
  for (int m = 0; ok && m < q->m; m++) {
    int g0 = m / mg * cg;
    double yb = 0, sb = 0;
    for (int n = 0; n < q->n; n++)
      for (int o = 0; o < ho * ho; o++) {
        double d = get(&dy, ((int64_t)n * q->m + m) * ho * ho + o);
        yb += d;
        sb += fabs(d);
      }
    judge(&wdb[0], get(&r[0][2], m), NULL, yb, sb, terms);
    if (nat) {
      double rf = get(&r[0][2], m);
      judge(&wdb[1], get(&r[1][2], m), &rf, yb, sb, terms);
    }
    for (int c = 0; c < cg; c++)
      for (int ky = 0; ky < q->k; ky++)
        for (int kx = 0; kx < q->k; kx++) {
          double y = 0, s = 0;
          for (int n = 0; n < q->n; n++)
            for (int oy = 0; oy < ho; oy++)
              for (int ox = 0; ox < ho; ox++) {
                double p = get(&dy, (((int64_t)n * q->m + m) * ho + oy) * ho + ox) *
                           xat(&x, q, n, g0 + c, oy * q->stride + ky - q->pad,
                               ox * q->stride + kx - q->pad);
                y += p;
                s += fabs(p);
              }
          int64_t i = (((int64_t)m * cg + c) * q->k + ky) * q->k + kx;
          double rf = get(&r[0][1], i);
          judge(&wdw[0], rf, NULL, y, s, terms);
          if (nat) judge(&wdw[1], get(&r[1][1], i), &rf, y, s, terms);
        }
  }
  /* dX[n][c][iy][ix] = sum over m, ky, kx of dY at the outputs reading it */
  double *dxe = calloc((size_t)nx, sizeof *dxe), *dxs = calloc((size_t)nx, sizeof *dxs);
  for (int n = 0; ok && n < q->n; n++)
    for (int m = 0; m < q->m; m++)
      for (int c = 0; c < cg; c++)
        for (int oy = 0; oy < ho; oy++)
          for (int ox = 0; ox < ho; ox++)
            for (int ky = 0; ky < q->k; ky++)
              for (int kx = 0; kx < q->k; kx++) {
                int iy = oy * q->stride + ky - q->pad, ix = ox * q->stride + kx - q->pad;
                if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->h) continue;
                double p = get(&dy, (((int64_t)n * q->m + m) * ho + oy) * ho + ox) *
                           get(&w, (((int64_t)m * cg + c) * q->k + ky) * q->k + kx);
                int64_t i =
                    (((int64_t)n * q->c + m / mg * cg + c) * q->h + iy) * q->h + ix;
                dxe[i] += p;
                dxs[i] += fabs(p);
              }
  for (int64_t i = 0; ok && i < nx; i++) {
    double rf = get(&r[0][3], i);
    judge(&wdx[0], rf, NULL, dxe[i], dxs[i], mg * q->k * q->k);
    if (nat) judge(&wdx[1], get(&r[1][3], i), &rf, dxe[i], dxs[i], mg * q->k * q->k);
  }
  free(dxe);
  free(dxs);
  dpm_tensor *all[] = {&x, &w, &b, &dy};
  for (int i = 0; i < 4; i++) dpm_tensor_fini(all[i]);
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < 4; i++) dpm_tensor_fini(&r[v][i]);
  free(xv);
  free(wv);
  free(bv);
  free(gv);
  return ok;
}

TEST(conv_bf16_native_matches_fallback) {
  worst w[4][2];
  memset(w, 0, sizeof w);
  int nat = native_ok();
  for (int c = 0; c < N_CONV; c++)
    CHECK(conv_case_run(&conv_cases[c], w[0], w[1], w[2], w[3]));
  const char *names[] = {"Conv Y", "dW", "db", "dX"};
  for (int i = 0; i < 4; i++) report(names[i], w[i]);
  for (int i = 0; i < 4; i++) CHECK_INT(w[i][0].outside, 0);
  if (!nat) return;
  for (int i = 0; i < 4; i++) {
    CHECK_INT(w[i][1].outside, 0);
    CHECK_IMPLIED(w[i][1].vs_other);
  }
}
