/* bf16 and f16 conversions (engine/lowp.h): the scalar definitions, and
 * the slice kernels (scalar loops; AVX2 and F16C where the CPU has them,
 * and rounding to bf16 by AVX512-BF16's instruction where it has that). */
#include "engine/lowp.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t dpm_bf16_from_f32_1(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);          /* ties to even; carries into the exponent */
  return (uint16_t)(u >> 16);
}

float dpm_f32_from_bf16_1(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t dpm_f16_from_f32_1(float f) {
  uint32_t u = bits_of(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds above 65504: inf */
  if (a < 0x38800000u) { /* below 2^-14: f16 subnormal (or zero) */
    /* value / 2^-24 rounded to an integer, ties to even: add 2^-1 ... via the
       fp32 adder, exact since the result fits in 10 bits */
    float r = float_of(a) + 0.5f; /* 0.5 = 2^-1: units of 2^-24 land in the low bits */
    return (uint16_t)(sign | (uint16_t)(bits_of(r) - 0x3f000000u));
  }
  uint32_t m = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 */
  return (uint16_t)(sign | (uint16_t)(m >> 13));
}

float dpm_f32_from_f16_1(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
  if (e == 0) { /* zero or subnormal: m x 2^-24, exact in fp32 */
    float v = (float)m * 0x1p-24f;
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- slices: the scalar loops, and AVX2 / F16C kernels ------------------ */

static void bf16_from_f32_generic(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_bf16_from_f32_1(src[i]);
}
static void f32_from_bf16_generic(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f32_from_bf16_1(src[i]);
}
static void f16_from_f32_generic(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f16_from_f32_1(src[i]);
}
static void f32_from_f16_generic(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f32_from_f16_1(src[i]);
}

/* One set of slice kernels. */
typedef struct {
  void (*bf16_from_f32)(uint16_t *, const float *, size_t);
  void (*f32_from_bf16)(float *, const uint16_t *, size_t);
  void (*f16_from_f32)(uint16_t *, const float *, size_t);
  void (*f32_from_f16)(float *, const uint16_t *, size_t);
} kernel_set;

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define VEC_FN __attribute__((target("avx2,f16c"))) static

/* 8 bf16 patterns from the low 16 bits of each 32-bit lane, in order. */
__attribute__((target("avx2"), always_inline)) static inline __m128i narrow_8(__m256i v) {
  __m256i p = _mm256_packus_epi32(v, v); /* per 128-bit lane: v0-3 v0-3 | v4-7 v4-7 */
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08)); /* v0-3 v4-7 */
}

/* dpm_bf16_from_f32_1 on 8 lanes at a time: the same integer steps. */
VEC_FN void bf16_from_f32_avx2(uint16_t *dst, const float *src, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, odd));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
    _mm_storeu_si128((__m128i *)(dst + i), narrow_8(_mm256_srli_epi32(r, 16)));
  }
  bf16_from_f32_generic(dst + i, src + i, n - i);
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define HAVE_BF16_CVT 1
/* The same 16 lanes at a time by vcvtneps2bf16 (AVX512-BF16), which
 * rounds to nearest even and quiets a NaN as dpm_bf16_from_f32_1 does but
 * flushes f32 subnormals to zero: a vector holding one takes the integer
 * steps. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
bf16_from_f32_cvt(uint16_t *dst, const float *src, size_t n) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000), abs_mask = _mm512_set1_epi32(0x7fffffff);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(src + i);
    __m512i u = _mm512_castps_si512(v);
    __mmask16 sub = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(u, expo), u, abs_mask);
    if (__builtin_expect(sub != 0, 0))
      bf16_from_f32_generic(dst + i, src + i, 16);
    else
      _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(v));
  }
  bf16_from_f32_avx2(dst + i, src + i, n - i);
}
#else
#define HAVE_BF16_CVT 0
#define bf16_from_f32_cvt bf16_from_f32_avx2
#endif

VEC_FN void f32_from_bf16_avx2(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
    _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
  }
  f32_from_bf16_generic(dst + i, src + i, n - i);
}

/* F16C's conversion rounds to nearest even (as asked, whatever MXCSR
 * says), makes subnormals and infinities as dpm_f16_from_f32_1 does, and
 * quiets a NaN keeping its top mantissa bits: the same bits. */
VEC_FN void f16_from_f32_avx2(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  f16_from_f32_generic(dst + i, src + i, n - i);
}

/* F16C's widening is exact but quiets a signalling NaN; dpm_f32_from_f16_1
 * keeps a NaN's bits as they are, so NaN lanes take those bits. */
VEC_FN void f32_from_f16_avx2(float *dst, const uint16_t *src, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fff), inf = _mm256_set1_epi32(0x7c00);
  const __m256i sign = _mm256_set1_epi32(0x8000), man = _mm256_set1_epi32(0x3ff);
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, abs_mask), inf);
    __m256i bits = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, sign), 16), exp),
        _mm256_slli_epi32(_mm256_and_si256(w, man), 13));
    _mm256_storeu_si256((__m256i *)(dst + i), _mm256_blendv_epi8(f, bits, nan));
  }
  f32_from_f16_generic(dst + i, src + i, n - i);
}

/* AVX2 (its OS support too) from the compiler's check; F16C from CPUID
 * leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no "f16c"). */
static int cpu_has_vector(void) {
  unsigned a, b, c, d;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
         (c & bit_F16C);
}

/* CPUID: AVX-512F (leaf 7 EBX 16), BW and VL (EBX 30, 31), AVX512-BF16
 * (leaf 7 subleaf 1 EAX 5), and the OS saving opmask and ZMM state
 * (OSXSAVE, then XCR0 bits 1, 2, 5, 6, 7). */
int dpm_cpu_avx512_bf16(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xE6) != 0xE6) return 0;
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & (1u << 16)) || !(b & (1u << 30)) || !(b & (1u << 31))) return 0;
  __cpuid_count(7, 1, a, b, c, d);
  return (a >> 5) & 1;
}
#else
static int cpu_has_vector(void) { return 0; }
int dpm_cpu_avx512_bf16(void) { return 0; }
#define HAVE_BF16_CVT 0
#define bf16_from_f32_cvt bf16_from_f32_generic
#define bf16_from_f32_avx2 bf16_from_f32_generic
#define f32_from_bf16_avx2 f32_from_bf16_generic
#define f16_from_f32_avx2 f16_from_f32_generic
#define f32_from_f16_avx2 f32_from_f16_generic
#endif

static kernel_set kernels[] = { /* the vector set's bf16 rounding: chosen at load */
    [DPM_LOWP_GENERIC] = {bf16_from_f32_generic, f32_from_bf16_generic,
                          f16_from_f32_generic, f32_from_f16_generic},
    [DPM_LOWP_VECTOR] = {bf16_from_f32_avx2, f32_from_bf16_avx2, f16_from_f32_avx2,
                         f32_from_f16_avx2},
};

/* The dpm_lowp_kernels in use: set at load (before any thread exists),
 * then only by dpm_lowp_use. */
static atomic_int current;
/* Whether the vector kernels may run: the CPU has AVX2 and F16C and
 * DPM_CPU_KERNELS is not "generic". Set at load, then read only. */
static int vector_allowed;

__attribute__((constructor)) static void choose_kernels(void) {
  const char *env = getenv("DPM_CPU_KERNELS");
  vector_allowed = cpu_has_vector() && !(env && !strcmp(env, "generic"));
  if (HAVE_BF16_CVT && vector_allowed && dpm_cpu_avx512_bf16())
    kernels[DPM_LOWP_VECTOR].bf16_from_f32 = bf16_from_f32_cvt;
  atomic_store(&current, vector_allowed ? DPM_LOWP_VECTOR : DPM_LOWP_GENERIC);
}

dpm_lowp_kernels dpm_lowp_current(void) {
  return (dpm_lowp_kernels)atomic_load_explicit(&current, memory_order_relaxed);
}

void dpm_lowp_use(dpm_lowp_kernels k) {
  atomic_store(&current, vector_allowed && k == DPM_LOWP_VECTOR ? DPM_LOWP_VECTOR
                                                                : DPM_LOWP_GENERIC);
}

static const kernel_set *now(void) { return &kernels[dpm_lowp_current()]; }

void dpm_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
  now()->bf16_from_f32(dst, src, n);
}
void dpm_f32_from_bf16(float *dst, const uint16_t *src, size_t n) {
  now()->f32_from_bf16(dst, src, n);
}
void dpm_f16_from_f32(uint16_t *dst, const float *src, size_t n) {
  now()->f16_from_f32(dst, src, n);
}
void dpm_f32_from_f16(float *dst, const uint16_t *src, size_t n) {
  now()->f32_from_f16(dst, src, n);
}
