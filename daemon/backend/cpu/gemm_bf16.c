/* bf16 products with f32 accumulation: AVX512-BF16 tiles (gemm_bf16.h). */
#include "backend/cpu/gemm_bf16.h"

#include "engine/lowp.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Columns of a panel of packed B: 4 vectors of 16. */
#define PANEL 64
/* Rows of a tile. */
#define TILE_R 6

static int64_t round16(int64_t c) { return (c + 15) / 16 * 16; }
static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

/* rows x pairs x 4 bytes and the like, or SIZE_MAX on overflow. */
static size_t mul3(int64_t a, int64_t b, int64_t c) {
  size_t ab, abc;
  if (a < 0 || b < 0 || __builtin_mul_overflow((size_t)a, (size_t)b, &ab) ||
      __builtin_mul_overflow(ab, (size_t)c, &abc) || abc > SIZE_MAX - 64)
    return SIZE_MAX;
  return align64(abc);
}

/* Packed B: pairs x round16(cols) x 2 bf16; packed A (ass != 1): pairs x
 * round16(rows) x 2 bf16. */
static size_t b_bytes(int cols, int inner) {
  return mul3((inner + 1) / 2, round16(cols), 4);
}
static size_t a_bytes(int rows, int inner, int64_t ass) {
  return ass == 1 ? 0 : mul3((inner + 1) / 2, round16(rows), 4);
}

size_t dpm_bf16_gemm_scratch(int rows, int cols, int inner, int64_t ass) {
  size_t b = b_bytes(cols, inner), a = a_bytes(rows, inner, ass);
  return b == SIZE_MAX || a == SIZE_MAX || a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define HAVE_NATIVE 1

/* ---- packing (plain C: runs only beside the native tiles) --------------- */

/* Panel p's width: 64 columns, the last one cols' rest rounded up to 16. */
static int panel_width(int cols, int c0) {
  int64_t w = round16(cols - c0);
  return (int)(w < PANEL ? w : PANEL);
}

/* B(s, c) into panels: the panel at c0 starts at c0 * pairs * 2 and holds,
 * for each pair p, pw columns x (B(2p, c), B(2p + 1, c)); pairs past inner
 * and columns past cols are zero. Here B's pairs lie side by side (bss ==
 * 1): each of B's columns is read once, in order. */
static void pack_b_pairs(const dpm_bf16_gemm_args *a, uint16_t *dst) {
  const int pairs = (a->inner + 1) / 2, whole = a->inner / 2;
  const int end = (int)round16(a->cols);
  for (int c = 0; c < end; c++) {
    int c0 = c / PANEL * PANEL, pw = panel_width(a->cols, c0);
    uint16_t *d = dst + (size_t)c0 * pairs * 2 + (size_t)(c - c0) * 2;
    const size_t step = (size_t)pw * 2;
    if (c >= a->cols) {
      for (int p = 0; p < pairs; p++) d[p * step] = d[p * step + 1] = 0;
      continue;
    }
    const uint16_t *src = a->b + c * a->bcs;
    for (int p = 0; p < whole; p++) memcpy(d + p * step, src + 2 * p, 4);
    if (whole < pairs) {
      d[whole * step] = src[2 * whole];
      d[whole * step + 1] = 0;
    }
  }
}

/* The same for any strides (bss != 1). */
static void pack_b_any(const dpm_bf16_gemm_args *a, uint16_t *dst) {
  const int pairs = (a->inner + 1) / 2;
  for (int c0 = 0; c0 < a->cols; c0 += PANEL) {
    int pw = panel_width(a->cols, c0), nc = a->cols - c0 < pw ? a->cols - c0 : pw;
    uint16_t *panel = dst + (size_t)c0 * pairs * 2;
    for (int p = 0; p < pairs; p++) {
      uint16_t *row = panel + (size_t)p * pw * 2;
      for (int t = 0; t < 2; t++) {
        int s = 2 * p + t;
        const uint16_t *src = s < a->inner ? a->b + s * a->bss + c0 * a->bcs : NULL;
        for (int c = 0; c < pw; c++) row[2 * c + t] = src && c < nc ? src[c * a->bcs] : 0;
      }
    }
  }
}

/* ---- tiles ---------------------------------------------------------------- */

#include <immintrin.h>

#include "backend/cpu/dot_reduce.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define TILE_FN TARGET __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 8")

/* Two rows side by side: dst[2c + t] = row t's value c for c < n (row 1
 * absent: zeros), zeros up to w (a multiple of 16). */
TARGET static void interleave_rows(const uint16_t *r0, const uint16_t *r1, int n, int w,
                                   uint16_t *dst) {
  for (int c = 0; c < w; c += 16) {
    int left = n - c;
    __mmask16 m = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1 : 0);
    __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + c));
    __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + c))
                    : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + 2 * c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

/* pack_b_any where B's rows run along c (bcs == 1): rows 2p and 2p + 1
 * interleaved, each row read once, in order. */
TARGET static void pack_b_rows(const dpm_bf16_gemm_args *a, uint16_t *dst) {
  const int pairs = (a->inner + 1) / 2;
  for (int p = 0; p < pairs; p++) {
    const uint16_t *r0 = a->b + 2 * p * a->bss;
    const uint16_t *r1 = 2 * p + 1 < a->inner ? r0 + a->bss : NULL;
    for (int c0 = 0; c0 < a->cols; c0 += PANEL) {
      int pw = panel_width(a->cols, c0);
      interleave_rows(r0 + c0, r1 ? r1 + c0 : NULL, a->cols - c0, pw,
                      dst + (size_t)c0 * pairs * 2 + (size_t)p * pw * 2);
    }
  }
}

/* A(r, s) pair-major, where A's columns run along r (ass != 1, so ars ==
 * 1): dst[p * 2 ra + 2 r + t] = A(r, 2p + t), ra = round16(rows), zero past
 * inner and past rows; A's values 2p and 2p + 1 of every row interleaved,
 * each read once, in order. */
TARGET static void pack_a_cols(const dpm_bf16_gemm_args *a, uint16_t *dst) {
  const int pairs = (a->inner + 1) / 2, ra = (int)round16(a->rows);
  for (int p = 0; p < pairs; p++) {
    const uint16_t *r0 = a->a + 2 * p * a->ass;
    interleave_rows(r0, 2 * p + 1 < a->inner ? r0 + a->ass : NULL, a->rows, ra,
                    dst + (size_t)p * 2 * ra);
  }
}

/* dpm_bf16_from_f32_1 on 16 lanes: vcvtneps2bf16, which rounds and quiets
 * NaNs as it does but flushes f32 subnormals to zero, unless a lane holds
 * one; then the same integer steps. */
TILE_FN __m256i narrow16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __mmask16 sub = _mm512_mask_test_epi32_mask(
      _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)), u,
      _mm512_set1_epi32(0x7fffffff));
  if (__builtin_expect(!sub, 1)) return (__m256i)_mm512_cvtneps_pbh(v);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* 16 bf16 (the first n; the rest 0) as f32. */
TILE_FN __m512 widen16(const uint16_t *p, int n) {
  __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of O from acc: bias, relu,
 * rounding, stores. */
TILE_FN void finish(const dpm_bf16_gemm_args *a, __m512 acc[TILE_R][4], int nv, int r0,
                    int nr, int c0, int nc) {
  UNROLL
  for (int v = 0; v < 4; v++) {
    int c = c0 + 16 * v, n = nc - 16 * v;
    if (v >= nv || n <= 0) continue;
    __m512 colb =
        a->bias && !a->bias_by_row ? widen16(a->bias + c, n) : _mm512_setzero_ps();
    __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    UNROLL
    for (int i = 0; i < TILE_R; i++) {
      if (i >= nr) continue;
      int r = r0 + i;
      __m512 x = acc[i][v];
      if (a->bias)
        x = _mm512_add_ps(
            x, a->bias_by_row ? _mm512_set1_ps(dpm_f32_from_bf16_1(a->bias[r])) : colb);
      if (a->relu) x = _mm512_max_ps(x, _mm512_setzero_ps());
      if (a->o32) {
        float *o = a->o32 + r * a->ors + c * a->ocs;
        if (a->ocs == 1) {
          if (a->acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, o));
          _mm512_mask_storeu_ps(o, m, x);
        } else {
          float t[16];
          _mm512_storeu_ps(t, x);
          for (int l = 0; l < n && l < 16; l++)
            o[l * a->ocs] = a->acc ? t[l] + o[l * a->ocs] : t[l];
        }
        continue;
      }
      __m256i h = narrow16(x);
      uint16_t *o = a->o + r * a->ors + c * a->ocs;
      if (a->ocs == 1) {
        _mm256_mask_storeu_epi16(o, m, h);
      } else {
        uint16_t t[16];
        _mm256_storeu_si256((__m256i *)t, h);
        for (int l = 0; l < n && l < 16; l++) o[l * a->ocs] = t[l];
      }
    }
  }
}

/* Sums of rows ar[0..TILE_R) of A (pair p at ar[i] + p aps) against a panel of
 * nv vectors of packed B, over `pairs` pairs (the last one only its first
 * value when `odd`), finished into rows [r0, r0 + nr) and columns [c0, c0 +
 * nc) of O. nv is a constant once inlined and every loop unrolled: the
 * accumulators stay in registers. */
TILE_FN void tile(const dpm_bf16_gemm_args *a, int nv, const uint16_t *ar[TILE_R],
                  int64_t aps, const uint16_t *bp, int pw, int pairs, int odd, int r0,
                  int nr, int c0, int nc) {
  __m512 acc[TILE_R][4];
  UNROLL
  for (int i = 0; i < TILE_R; i++) UNROLL
  for (int v = 0; v < 4; v++) acc[i][v] = _mm512_setzero_ps();
  int whole = pairs - odd;
  for (int p = 0; p < whole; p++) {
    const uint16_t *bs = bp + (size_t)p * pw * 2;
    __m512i bv[4];
    UNROLL
    for (int v = 0; v < nv; v++) bv[v] = _mm512_loadu_si512(bs + 32 * v);
    UNROLL
    for (int i = 0; i < TILE_R; i++) {
      uint32_t w;
      memcpy(&w, ar[i] + p * aps, sizeof w);
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)w);
      UNROLL
      for (int v = 0; v < nv; v++)
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, (__m512bh)bv[v]);
    }
  }
  if (odd) { /* A's value 2p only: its neighbour may lie past the row */
    int p = whole;
    const uint16_t *bs = bp + (size_t)p * pw * 2;
    UNROLL
    for (int i = 0; i < TILE_R; i++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(ar[i][p * aps]);
      UNROLL
      for (int v = 0; v < nv; v++)
        acc[i][v] =
            _mm512_dpbf16_ps(acc[i][v], av, (__m512bh)_mm512_loadu_si512(bs + 32 * v));
    }
  }
  finish(a, acc, nv, r0, nr, c0, nc);
}

/* ---- dot tiles (nt): 4 rows of X against 6 (or 5) rows of W ------------- */

/* One step of a dot tile: values [s, s + 32) of rows xr[0..3] against
 * wr[0..J); `masked` (a constant) zeroes both sides past k. */
TILE_FN void dot_step(__m512 acc[4][6], int J, const uint16_t *xr[4], const uint16_t *wr[6],
                      int s, int masked, __mmask32 m) {
  __m512bh xv[4];
  UNROLL
  for (int i = 0; i < 4; i++)
    xv[i] = (__m512bh)(masked ? _mm512_maskz_loadu_epi16(m, xr[i] + s)
                              : _mm512_loadu_si512(xr[i] + s));
  UNROLL
  for (int j = 0; j < J; j++) {
    __m512bh wv = (__m512bh)(masked ? _mm512_maskz_loadu_epi16(m, wr[j] + s)
                                    : _mm512_loadu_si512(wr[j] + s));
    UNROLL
    for (int i = 0; i < 4; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[i], wv);
  }
}

/* Sums over s < k of rows xr[0..3] against wr[0..J), 32 values of s a
 * step, folded as dot_reduce leaves them (a column past J folds zeros: the
 * other columns' bits do not depend on J). */
TILE_FN void dot_tile(int J, const uint16_t *xr[4], const uint16_t *wr[6], int k,
                      __m512 out[2]) {
  __m512 acc[4][6];
  UNROLL
  for (int i = 0; i < 4; i++) UNROLL
  for (int j = 0; j < 6; j++) acc[i][j] = _mm512_setzero_ps();
  int s = 0;
  for (; s + 32 <= k; s += 32) dot_step(acc, J, xr, wr, s, 0, 0);
  if (s < k) dot_step(acc, J, xr, wr, s, 1, (__mmask32)((1u << (k - s)) - 1));
  dot_reduce(acc, out);
}

/* Rows of W a tile takes at j0: 6, or 5 where that leaves none idle (10 or
 * 9 left: 5 + 5, 5 + 4; 5 left). */
static int dot_rows(int left) { return left == 10 || left == 9 || left == 5 ? 5 : 6; }

TARGET static void nt_native(const dpm_bf16_nt_args *a) {
  const int n = a->n, m = a->m;
  for (int j0 = 0, J; j0 < m; j0 += J) {
    J = dot_rows(m - j0);
    int nj = m - j0 < J ? m - j0 : J;
    const uint16_t *wr[6];
    for (int j = 0; j < 6; j++) wr[j] = a->w + (j0 + j < m ? j0 + j : m - 1) * a->ldw;
    __mmask16 jm = (__mmask16)((1u << nj) - 1); /* j0 + j for j < nj, as lanes */
    __m512 bias[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (a->bias) {
      float bj[8] = {0};
      for (int j = 0; j < nj; j++) bj[j] = dpm_f32_from_bf16_1(a->bias[j0 + j]);
      bias[0] = _mm512_broadcast_f32x4(_mm_loadu_ps(bj));
      bias[1] = _mm512_broadcast_f32x4(_mm_loadu_ps(bj + 4));
    }
    for (int i0 = 0; i0 < n; i0 += 4) {
      int ni = n - i0 < 4 ? n - i0 : 4;
      const uint16_t *xr[4];
      for (int i = 0; i < 4; i++) xr[i] = a->x + (i0 + i < n ? i0 + i : n - 1) * a->ldx;
      __m512 v[2];
      if (J == 5) /* a constant: the accumulators stay in registers */
        dot_tile(5, xr, wr, a->k, v);
      else
        dot_tile(6, xr, wr, a->k, v);
      for (int h = 0; h < 2; h++) {
        __mmask16 hm = (__mmask16)(h ? jm >> 4 & 3 : jm & 15);
        __m512 r = _mm512_add_ps(v[h], bias[h]);
        if (a->relu) r = _mm512_max_ps(r, _mm512_setzero_ps());
        __m256i y = narrow16(r);
        for (int i = 0; i < ni; i++) {
          /* lane i of y goes to Y[i0 + i][j0 + 4h ...]: a masked store of
           * the whole vector from 4i values before (no fault, no write) */
          uint16_t *at = (uint16_t *)((uintptr_t)(a->y + (i0 + i) * a->ldy + j0 + 4 * h) -
                                      8 * (unsigned)i);
          _mm256_mask_storeu_epi16(at, (__mmask16)(hm << 4 * i), y);
        }
      }
    }
  }
}

/* Packed B at the scratch's start, then packed A (when ass != 1). */
static uint16_t *a_pack(const dpm_bf16_gemm_args *a, const void *scratch) {
  return (uint16_t *)((char *)scratch + b_bytes(a->cols, a->inner));
}

TARGET static void pack_native(const dpm_bf16_gemm_args *a, void *scratch) {
  if (a->bcs == 1)
    pack_b_rows(a, scratch);
  else if (a->bss == 1)
    pack_b_pairs(a, scratch);
  else
    pack_b_any(a, scratch);
  if (a->ass != 1) pack_a_cols(a, a_pack(a, scratch));
}

/* Rows [lo, hi) of O from the operands pack_native packed. */
TARGET static void rows_native(const dpm_bf16_gemm_args *a, const void *scratch, int lo,
                               int hi) {
  const int pairs = (a->inner + 1) / 2, odd = a->inner & 1;
  /* A's rows in place (pairs side by side), or packed pair-major */
  const uint16_t *bpack = scratch, *abase = a->a;
  int64_t ars = a->ars, aps = 2;
  if (a->ass != 1) {
    abase = a_pack(a, scratch);
    ars = 2, aps = 2 * round16(a->rows);
  }
  for (int c0 = 0; c0 < a->cols; c0 += PANEL) {
    int pw = panel_width(a->cols, c0);
    int nv = pw / 16, nc = a->cols - c0 < pw ? a->cols - c0 : pw;
    const uint16_t *bp = bpack + (size_t)c0 * pairs * 2;
    for (int r0 = lo; r0 < hi; r0 += TILE_R) {
      const uint16_t *ar[TILE_R];
      for (int i = 0; i < TILE_R; i++)
        ar[i] = abase + (r0 + i < hi ? r0 + i : hi - 1) * ars;
      int nr = hi - r0 < TILE_R ? hi - r0 : TILE_R;
      switch (nv) { /* constants: the accumulators stay in registers */
      case 4:
        tile(a, 4, ar, aps, bp, pw, pairs, odd, r0, nr, c0, nc);
        break;
      case 3:
        tile(a, 3, ar, aps, bp, pw, pairs, odd, r0, nr, c0, nc);
        break;
      case 2:
        tile(a, 2, ar, aps, bp, pw, pairs, odd, r0, nr, c0, nc);
        break;
      default:
        tile(a, 1, ar, aps, bp, pw, pairs, odd, r0, nr, c0, nc);
        break;
      }
    }
  }
}

static int cpu_has_bf16(void) { return dpm_cpu_avx512_bf16(); }
#else
#define HAVE_NATIVE 0
static int cpu_has_bf16(void) { return 0; }
#endif

/* Whether the native kernels may run (set at load, then read only), and
 * whether they do. */
static int native_allowed;
static atomic_int native_on;
static atomic_ullong products;

__attribute__((constructor)) static void choose(void) {
  const char *env = getenv("DPM_CPU_KERNELS");
  native_allowed = cpu_has_bf16() && !(env && !strcmp(env, "generic"));
  atomic_store(&native_on, native_allowed);
}

int dpm_bf16_native(void) {
  return atomic_load_explicit(&native_on, memory_order_relaxed);
}
int dpm_bf16_native_allowed(void) { return native_allowed; }
void dpm_bf16_native_use(int on) { atomic_store(&native_on, native_allowed && on); }

uint64_t dpm_bf16_native_products(void) {
  return atomic_load_explicit(&products, memory_order_relaxed);
}

void dpm_bf16_gemm_pack(const dpm_bf16_gemm_args *a, void *scratch) {
  if (a->rows <= 0 || a->cols <= 0) return;
  assert(a->ass == 1 || a->ars == 1);
#if HAVE_NATIVE
  if (native_allowed) pack_native(a, scratch);
#else
  (void)scratch;
#endif
}

void dpm_bf16_gemm_rows(const dpm_bf16_gemm_args *a, const void *scratch, int r0, int r1) {
  if (r1 > a->rows) r1 = a->rows;
  if (r0 < 0 || r0 >= r1 || a->cols <= 0) return;
#if HAVE_NATIVE
  if (!native_allowed) return;
  rows_native(a, scratch, r0, r1);
  atomic_fetch_add_explicit(&products, 1, memory_order_relaxed);
#else
  (void)scratch;
#endif
}

void dpm_bf16_gemm_nt(const dpm_bf16_nt_args *a) {
  if (a->n <= 0 || a->m <= 0) return;
#if HAVE_NATIVE
  if (!native_allowed) return;
  nt_native(a);
  atomic_fetch_add_explicit(&products, 1, memory_order_relaxed);
#endif
}

void dpm_bf16_gemm(const dpm_bf16_gemm_args *a, void *scratch) {
  dpm_bf16_gemm_pack(a, scratch);
  dpm_bf16_gemm_rows(a, scratch, 0, a->rows);
}
