/* FC and Conv matrix products: AVX-512 register tiles, or cblas. */
#include "backend/cpu/gemm.h"

#include <assert.h>
#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- cblas ----------------------------------------------------------------- */

static void nt_blas(const dpm_gemm_nt_args *a) {
  for (int i = 0; i < a->n; i++) {
    float *yi = a->y + i * a->ldy;
    if (a->acc)
      for (int j = 0; a->b && j < a->m; j++) yi[j] += a->b[j];
    else if (a->b)
      memcpy(yi, a->b, (size_t)a->m * sizeof *yi);
    else
      memset(yi, 0, (size_t)a->m * sizeof *yi);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->n, a->m, a->k, 1.f, a->x,
              (int)a->ldx, a->w, (int)a->ldw, 1.f, a->y, (int)a->ldy);
  for (int i = 0; a->relu && i < a->n; i++)
    for (int j = 0; j < a->m; j++) {
      float *v = &a->y[i * a->ldy + j];
      *v = *v > 0.f ? *v : 0.f;
    }
}

static void outer_blas(int rows, int cols, int inner, const float *a, int64_t ars,
                       int64_t ass, const float *b, int64_t ldb, int acc, float *o,
                       int64_t ldo) {
  int trans = ass != 1; /* then ars == 1 */
  /* one row: its stride is free, and cblas wants lda >= inner */
  int64_t lda = trans ? ass : rows > 1 ? ars : (inner > 1 ? inner : 1);
  cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, rows, cols,
              inner, 1.f, a, (int)lda, b, (int)ldb, acc ? 1.f : 0.f, o, (int)ldo);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backend/cpu/dot_reduce.h"

#define AVX512 __attribute__((target("avx512f"), always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 8")
#define AVX512_FN __attribute__((target("avx512f"))) static

static inline int min_i(int a, int b) { return a < b ? a : b; }

/* Lanes of a 16-float vector that hold columns [c, c + 16) of `cols`. */
static inline __mmask16 lanes(int c, int cols) {
  int left = cols - c;
  return left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

/* ---- dot tiles (nt): 4 rows of X against 6 rows of W --------------------- */

/* The k chunk a tile sums before it is folded into Y: 6 rows of W (24 KiB)
 * stay in L1 while every row tile of X streams past them from L2. */
#define NT_KC 1024

/* Sums over k in [k0, k1) of rows xr[0..3] and wr[0..5], left as dot_reduce
 * leaves them. */
AVX512 void nt_tile(const float *xr[4], const float *wr[6], int k0, int k1,
                    __m512 out[2]) {
  __m512 acc[4][6];
  UNROLL
  for (int i = 0; i < 4; i++)
    UNROLL
    for (int j = 0; j < 6; j++) acc[i][j] = _mm512_setzero_ps();
  int k = k0;
  for (; k + 16 <= k1; k += 16) {
    __m512 xv[4];
    UNROLL
    for (int i = 0; i < 4; i++) xv[i] = _mm512_loadu_ps(xr[i] + k);
    UNROLL
    for (int j = 0; j < 6; j++) {
      __m512 wv = _mm512_loadu_ps(wr[j] + k);
      UNROLL
      for (int i = 0; i < 4; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k < k1) { /* the last, partial vector */
    __mmask16 mk = lanes(k, k1);
    __m512 xv[4];
    UNROLL
    for (int i = 0; i < 4; i++) xv[i] = _mm512_maskz_loadu_ps(mk, xr[i] + k);
    UNROLL
    for (int j = 0; j < 6; j++) {
      __m512 wv = _mm512_maskz_loadu_ps(mk, wr[j] + k);
      UNROLL
      for (int i = 0; i < 4; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  dot_reduce(acc, out);
}

AVX512_FN void nt_avx512(const dpm_gemm_nt_args *a) {
  const int n = a->n, m = a->m, k = a->k;
  const int64_t ldy = a->ldy;
  for (int k0 = 0; k0 < k || k0 == 0; k0 += NT_KC) {
    int k1 = min_i(k, k0 + NT_KC), first = k0 == 0 && !a->acc, last = k1 == k;
    for (int j0 = 0; j0 < m; j0 += 6) {
      int nj = min_i(6, m - j0);
      const float *wr[6];
      for (int j = 0; j < 6; j++) wr[j] = a->w + min_i(j0 + j, m - 1) * a->ldw;
      __mmask16 jm = (__mmask16)((1u << nj) - 1); /* j0 + j for j < nj, as lanes */
      __m512 bias[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
      if (a->b && last) {
        float bj[8] = {0};
        memcpy(bj, a->b + j0, (size_t)nj * sizeof *bj);
        bias[0] = _mm512_broadcast_f32x4(_mm_loadu_ps(bj));
        bias[1] = _mm512_broadcast_f32x4(_mm_loadu_ps(bj + 4));
      }
      for (int i0 = 0; i0 < n; i0 += 4) {
        int ni = min_i(4, n - i0);
        const float *xr[4];
        for (int i = 0; i < 4; i++) xr[i] = a->x + min_i(i0 + i, n - 1) * a->ldx;
        __m512 v[2];
        nt_tile(xr, wr, k0, k1, v);
        for (int h = 0; h < 2; h++) {
          __mmask16 hm = (__mmask16)(h ? jm >> 4 & 3 : jm & 15);
          for (int i = 0; i < ni; i++) {
            /* lane i of v[h] goes to Y[i0 + i][j0 + 4h ...]: a masked store of
             * the whole vector from 4i floats before (no fault, no write) */
            float *at = (float *)((uintptr_t)(a->y + (i0 + i) * ldy + j0 + 4 * h) -
                                  16 * (unsigned)i);
            __mmask16 lm = (__mmask16)(hm << 4 * i);
            __m512 r = _mm512_add_ps(v[h], bias[h]);
            if (!first) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(lm, at));
            if (a->relu && last) r = _mm512_max_ps(r, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(at, lm, r);
          }
        }
      }
    }
  }
}

/* ---- outer-product tiles: R rows of O by NV vectors of 16 columns ------- */

/* Panels are 4 vectors (64 columns) wide, with 6-row tiles (24
 * accumulators); a last panel that would be one vector wide joins the one
 * before it as 5 vectors with 5-row tiles (25): alone, its single vector
 * per row would leave the tile bound by its loads, not its FMAs. */
#define OUT_R 6
/* The inner chunk a tile sums before it is folded into O: a chunk of B's
 * column panel (128 x 64 floats, 32 KiB) stays in L1 across row tiles. */
#define OUT_SC 128

/* Vector v of a tile's row at p: a plain load, or a masked one for the last
 * vector of a partial panel (`masked` and `nv` are constants: no mask
 * register is touched in full panels). */
AVX512 __m512 tile_load(int v, int nv, int masked, __mmask16 tail, const float *p) {
  return masked && v == nv - 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p);
}

/* A tile's body, for accumulators of at most RMAX x VMAX vectors (fixed
 * sizes keep them in registers; R and nv are constants once inlined). */
#define OUTER_TILE(name, RMAX, VMAX)                                                     \
  AVX512 void name(int R, int nv, int masked, __mmask16 tail, const float *ar[OUT_R],    \
                   int64_t ass, const float *b, int64_t ldb, int s0, int s1, int nr,     \
                   int add, float *o, int64_t ldo) {                                     \
    __m512 acc[RMAX][VMAX];                                                              \
    UNROLL                                                                               \
    for (int i = 0; i < R; i++)                                                          \
      UNROLL                                                                             \
      for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();                     \
    for (int s = s0; s < s1; s++) {                                                      \
      const float *bs = b + s * ldb;                                                     \
      __m512 bv[VMAX];                                                                   \
      UNROLL                                                                             \
      for (int v = 0; v < nv; v++) bv[v] = tile_load(v, nv, masked, tail, bs + 16 * v); \
      UNROLL                                                                             \
      for (int i = 0; i < R; i++) {                                                      \
        __m512 av = _mm512_set1_ps(ar[i][s * ass]);                                      \
        UNROLL                                                                           \
        for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);  \
      }                                                                                  \
    }                                                                                    \
    UNROLL /* to R, not nr: constant indices keep acc in registers */                  \
    for (int i = 0; i < R; i++)                                                          \
      UNROLL                                                                             \
      for (int v = 0; v < nv && i < nr; v++) {                                           \
        float *oi = o + i * ldo + 16 * v;                                                \
        __m512 r = add ? _mm512_add_ps(acc[i][v], tile_load(v, nv, masked, tail, oi))    \
                       : acc[i][v];                                                      \
        if (masked && v == nv - 1)                                                       \
          _mm512_mask_storeu_ps(oi, tail, r);                                            \
        else                                                                             \
          _mm512_storeu_ps(oi, r);                                                       \
      }                                                                                  \
  }
OUTER_TILE(outer_tile, OUT_R, 4)
OUTER_TILE(outer_tile5, 5, 5)

AVX512_FN void outer_avx512(int rows, int cols, int inner, const float *a, int64_t ars,
                            int64_t ass, const float *b, int64_t ldb, int acc, float *o,
                            int64_t ldo) {
  for (int s0 = 0; s0 < inner || s0 == 0; s0 += OUT_SC) {
    int s1 = min_i(inner, s0 + OUT_SC), add = acc || s0 > 0;
    for (int c0 = 0, nv; c0 < cols; c0 += 16 * nv) {
      nv = min_i(4, (cols - c0 + 15) / 16);
      if (cols - c0 > 64 && cols - c0 <= 80) nv = 5; /* the last vector joins */
      int masked = c0 + 16 * nv > cols, R = nv == 5 ? 5 : OUT_R;
      __mmask16 tail = lanes(c0 + 16 * (nv - 1), cols);
      for (int r0 = 0; r0 < rows; r0 += R) {
        const float *ar[OUT_R];
        UNROLL
        for (int i = 0; i < OUT_R; i++) ar[i] = a + min_i(r0 + i, rows - 1) * ars;
        int nr = min_i(R, rows - r0);
        float *or0 = o + r0 * ldo + c0;
        const float *bc = b + c0;
#define TILE(F, R, NV, M) F(R, NV, M, tail, ar, ass, bc, ldb, s0, s1, nr, add, or0, ldo)
        switch (nv * 2 + masked) { /* constants: every acc[][] stays in a register */
        case 10: TILE(outer_tile5, 5, 5, 0); break;
        case 11: TILE(outer_tile5, 5, 5, 1); break;
        case 8: TILE(outer_tile, OUT_R, 4, 0); break;
        case 9: TILE(outer_tile, OUT_R, 4, 1); break;
        case 6: TILE(outer_tile, OUT_R, 3, 0); break;
        case 7: TILE(outer_tile, OUT_R, 3, 1); break;
        case 4: TILE(outer_tile, OUT_R, 2, 0); break;
        case 5: TILE(outer_tile, OUT_R, 2, 1); break;
        case 2: TILE(outer_tile, OUT_R, 1, 0); break;
        default: TILE(outer_tile, OUT_R, 1, 1); break;
        }
#undef TILE
      }
    }
  }
}

static int cpu_has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
static int cpu_has_avx512(void) { return 0; }
#define nt_avx512 nt_blas
#define outer_avx512 outer_blas
#endif

/* A dpm_gemm_mode, set at load (before any thread exists): BLAS unless the
 * tiles may run. */
static atomic_int mode;
/* Whether the tiles may run: the CPU has AVX-512F and DPM_CPU_KERNELS is
 * not "generic". Set at load, then read only. */
static int tiles_allowed;

__attribute__((constructor)) static void choose_mode(void) {
  const char *kernels = getenv("DPM_CPU_KERNELS");
  tiles_allowed = cpu_has_avx512() && !(kernels && !strcmp(kernels, "generic"));
  atomic_store(&mode, tiles_allowed ? DPM_GEMM_AUTO : DPM_GEMM_BLAS);
}

dpm_gemm_mode dpm_gemm_current(void) {
  return (dpm_gemm_mode)atomic_load_explicit(&mode, memory_order_relaxed);
}

void dpm_gemm_use(dpm_gemm_mode m) { atomic_store(&mode, tiles_allowed ? (int)m : 0); }

/* Where the tiles lose to cblas (bench/gemm): an nt product with few rows
 * on both sides (partial tiles dominate); an outer product whose inner sum
 * is short (the tile's stores dominate), whose rows are narrow (too few
 * accumulators), or whose operands are far larger than L2 (cblas packs). */
static int nt_tiles_win(const dpm_gemm_nt_args *a) { return a->n >= 48 || a->m >= 48; }

static int outer_tiles_win(int rows, int cols, int inner) {
  const int64_t l2 = 1 << 20; /* floats */
  return inner >= 32 && cols >= 48 && (int64_t)inner * cols <= l2 &&
         (int64_t)rows * cols <= l2;
}

void dpm_gemm_nt(const dpm_gemm_nt_args *a) {
  if (a->n <= 0 || a->m <= 0) return;
  dpm_gemm_mode m = dpm_gemm_current();
  (m == DPM_GEMM_TILES || (m && nt_tiles_win(a)) ? nt_avx512 : nt_blas)(a);
}

void dpm_gemm_outer(int rows, int cols, int inner, const float *a, int64_t ars,
                    int64_t ass, const float *b, int64_t ldb, int acc, float *o,
                    int64_t ldo) {
  assert(ars == 1 || ass == 1);
  if (rows <= 0 || cols <= 0) return;
  dpm_gemm_mode m = dpm_gemm_current();
  int tiles = m == DPM_GEMM_TILES || (m && outer_tiles_win(rows, cols, inner));
  (tiles ? outer_avx512 : outer_blas)(rows, cols, inner, a, ars, ass, b, ldb, acc, o,
                                      ldo);
}
