/* dpm_gemm: both products, with the AVX-512 tiles (where the CPU has them)
 * and with cblas, against a double-precision reference over odd shapes:
 * partial tiles in every dimension, inner sizes past one chunk, padded
 * leading dimensions whose padding must stay untouched, accumulation, bias
 * and Relu. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/cpu/gemm.h"
#include "test.h"

#define GUARD 12345.f

static float *filled(size_t n, unsigned seed) {
  float *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 9) % 2001) / 1000.f - 1.f;
  }
  return v;
}

/* Every element of o (rows x ld) within cols is near want (|terms| scales
 * the tolerance); every padding element still holds GUARD. */
static int check_out(const float *o, const double *want, const double *mag, int rows,
                     int cols, int64_t ld, const char *what) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++) {
      float got = o[r * ld + c];
      if (c >= cols) {
        if (got != GUARD) {
          dpm_test_fail(__FILE__, __LINE__, "%s: padding [%d][%d] overwritten", what, r,
                        c);
          return 0;
        }
        continue;
      }
      double w = want[r * cols + c], tol = 1e-5 * mag[r * cols + c] + 1e-6;
      dpm_test_margin(__FILE__, __LINE__, fabs(got - w), tol);
      if (!(fabs(got - w) <= tol)) {
        dpm_test_fail(__FILE__, __LINE__, "%s: [%d][%d] = %.9g, expected %.9g", what, r,
                      c, got, w);
        return 0;
      }
    }
  return 1;
}

static int nt_case(int n, int m, int k, int bias, int relu, int acc) {
  int64_t ldx = k + 3, ldw = k + 1, ldy = m + 5;
  float *x = filled((size_t)(n * ldx), 1u + n), *w = filled((size_t)(m * ldw), 2u + m),
        *b = filled((size_t)m, 3u), *y = malloc((size_t)n * ldy * sizeof *y),
        *y0 = filled((size_t)n * m, 4u);
  double *want = malloc((size_t)n * m * sizeof *want),
         *mag = malloc((size_t)n * m * sizeof *mag);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double s = (bias ? b[j] : 0) + (acc ? y0[i * m + j] : 0);
      double a = fabs(bias ? b[j] : 0) + fabs(acc ? y0[i * m + j] : 0);
      for (int q = 0; q < k; q++) {
        double t = (double)x[i * ldx + q] * w[j * ldw + q];
        s += t, a += fabs(t);
      }
      want[i * m + j] = relu && s < 0 ? 0 : s;
      mag[i * m + j] = a;
    }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < ldy; j++) y[i * ldy + j] = j < m ? y0[i * m + j] : GUARD;
  dpm_gemm_nt(&(dpm_gemm_nt_args){.n = n, .m = m, .k = k, .x = x, .ldx = ldx, .w = w,
                                  .ldw = ldw, .b = bias ? b : NULL, .relu = relu,
                                  .acc = acc, .y = y, .ldy = ldy});
  char what[112];
  snprintf(what, sizeof what, "nt n=%d m=%d k=%d bias=%d relu=%d acc=%d mode=%d", n, m, k,
           bias, relu, acc, dpm_gemm_current());
  int ok = check_out(y, want, mag, n, m, ldy, what);
  free(x), free(w), free(b), free(y), free(y0), free(want), free(mag);
  return ok;
}

static int outer_case(int rows, int cols, int inner, int trans, int acc) {
  /* odd row counts get a tight A (one row, transposed: both strides 1) */
  int64_t lda = (trans ? rows : inner) + (rows % 2 ? 0 : 2), ldb = cols + 4,
          ldo = cols + 3;
  int64_t ars = trans ? 1 : lda, ass = trans ? lda : 1;
  float *a = filled((size_t)(trans ? inner : rows) * lda + 1, 5u + rows),
        *b = filled((size_t)inner * ldb + 1, 6u + cols),
        *o = malloc((size_t)rows * ldo * sizeof *o),
        *o0 = filled((size_t)rows * cols, 7u);
  double *want = malloc((size_t)rows * cols * sizeof *want),
         *mag = malloc((size_t)rows * cols * sizeof *mag);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ldo; c++) o[r * ldo + c] = c < cols ? o0[r * cols + c] : GUARD;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      double s = acc ? o0[r * cols + c] : 0, m = fabs(s);
      for (int q = 0; q < inner; q++) {
        double t = (double)a[r * ars + q * ass] * b[q * ldb + c];
        s += t, m += fabs(t);
      }
      want[r * cols + c] = s;
      mag[r * cols + c] = m;
    }
  dpm_gemm_outer(rows, cols, inner, a, ars, ass, b, ldb, acc, o, ldo);
  char what[96];
  snprintf(what, sizeof what, "outer rows=%d cols=%d inner=%d trans=%d acc=%d mode=%d",
           rows, cols, inner, trans, acc, dpm_gemm_current());
  int ok = check_out(o, want, mag, rows, cols, ldo, what);
  free(a), free(b), free(o), free(o0), free(want), free(mag);
  return ok;
}

TEST(gemm_nt_matches_reference) {
  static const int ns[] = {1, 3, 4, 5, 9}, ms[] = {1, 4, 6, 7, 13},
                   ks[] = {0, 1, 16, 17, 40};
  for (int mode = DPM_GEMM_TILES; mode >= DPM_GEMM_BLAS; mode--) {
    dpm_gemm_use(mode);
    for (int a = 0; a < 5; a++)
      for (int b = 0; b < 5; b++)
        for (int c = 0; c < 5; c++)
          if (!nt_case(ns[a], ms[b], ks[c], (a + b + c) % 2, (a + c) % 2, (b + c) % 2))
            goto done;
    /* past one k chunk, a full-size layer */
    if (!nt_case(7, 11, 2100, 1, 1, 0) || !nt_case(7, 11, 2100, 0, 0, 1) ||
        !nt_case(64, 128, 256, 1, 1, 0))
      goto done;
  }
done:
  dpm_gemm_use(DPM_GEMM_AUTO);
}

TEST(gemm_outer_matches_reference) {
  static const int rs[] = {1, 5, 6, 7, 13}, cs[] = {1, 16, 17, 63, 65, 130},
                   is[] = {0, 1, 7, 129};
  for (int mode = DPM_GEMM_TILES; mode >= DPM_GEMM_BLAS; mode--) {
    dpm_gemm_use(mode);
    for (int a = 0; a < 5; a++)
      for (int b = 0; b < 6; b++)
        for (int c = 0; c < 4; c++)
          for (int t = 0; t < 2; t++)
            if (!outer_case(rs[a], cs[b], is[c], t, (a + b + c + t) % 2)) goto done;
    if (!outer_case(128, 256, 64, 1, 0) || !outer_case(64, 256, 300, 0, 1)) goto done;
  }
done:
  dpm_gemm_use(DPM_GEMM_AUTO);
}
