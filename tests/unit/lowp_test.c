/* engine/lowp: the one-value conversions against values worked out by
 * hand, and the slice kernels (the generic loops and, where the CPU has
 * AVX2 and F16C, the vector kernels) bit for bit against the one-value
 * functions: every f16 and bf16 pattern, and a few million fp32 patterns
 * (random, plus zeros, infinities, NaNs, denormals, halfway cases and the
 * f16 overflow and underflow edges), at lengths that leave tails. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/lowp.h"
#include "test.h"

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

/* The kernels a test runs: generic, and vector where this CPU has it. */
static int kernel_sets(dpm_lowp_kernels *k) {
  int n = 0;
  k[n++] = DPM_LOWP_GENERIC;
  dpm_lowp_use(DPM_LOWP_VECTOR);
  if (dpm_lowp_current() == DPM_LOWP_VECTOR) k[n++] = DPM_LOWP_VECTOR;
  return n;
}

/* Whether the vector kernels should be there: AVX2 and F16C, and no
 * DPM_CPU_KERNELS=generic. */
static int vector_expected(void) {
  const char *env = getenv("DPM_CPU_KERNELS");
  if (env && !strcmp(env, "generic")) return 0;
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return 0;
#endif
}

TEST(lowp_one_value_by_hand) {
  /* bf16: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to even (1) */
  CHECK_INT(dpm_bf16_from_f32_1(1.f + 0x1p-8f), 0x3f80);
  CHECK_INT(dpm_bf16_from_f32_1(1.f + 3 * 0x1p-8f), 0x3f82); /* halfway, up to even */
  CHECK_INT(dpm_bf16_from_f32_1(1.f + 0x1p-8f + 0x1p-20f), 0x3f81);
  CHECK_INT(dpm_bf16_from_f32_1(float_of(0x7f7fffffu)), 0x7f80); /* max: rounds to inf */
  CHECK_INT(dpm_bf16_from_f32_1(float_of(0x7f800001u)), 0x7fc0); /* sNaN: quieted */
  CHECK_INT(dpm_bf16_from_f32_1(float_of(0x00008000u)), 0x0000); /* denormal, tie: even */
  CHECK_INT(dpm_bf16_from_f32_1(float_of(0x80018000u)), 0x8002);
  /* f16 */
  CHECK_INT(dpm_f16_from_f32_1(65504.f), 0x7bff);
  CHECK_INT(dpm_f16_from_f32_1(65519.f), 0x7bff);    /* below the halfway point */
  CHECK_INT(dpm_f16_from_f32_1(65520.f), 0x7c00);    /* halfway to 2^16: to even, inf */
  CHECK_INT(dpm_f16_from_f32_1(0x1p-24f), 0x0001);   /* smallest subnormal */
  CHECK_INT(dpm_f16_from_f32_1(0x1p-25f), 0x0000);   /* halfway: to even, 0 */
  CHECK_INT(dpm_f16_from_f32_1(0x1.8p-24f), 0x0002); /* halfway: to even, 2 */
  CHECK_INT(dpm_f16_from_f32_1(-0x1p-14f), 0x8400);  /* smallest normal */
  CHECK_INT(dpm_f16_from_f32_1(float_of(0x7f800001u)), 0x7e00);
  CHECK(bits_of(dpm_f32_from_f16_1(0x0001)) == bits_of(0x1p-24f));
  CHECK(bits_of(dpm_f32_from_f16_1(0xfc00)) == 0xff800000u);
  CHECK(bits_of(dpm_f32_from_bf16_1(0x3f81)) == bits_of(1.f + 0x1p-7f));
}

/* Every f16 and bf16 pattern: widening by each kernel set equals the
 * one-value function; an f16 widened and narrowed again is itself (a NaN
 * comes back quiet: its 0x200 bit set). */
TEST(lowp_every_16_bit_pattern) {
  enum { N = 65536 };
  dpm_lowp_kernels ks[2];
  int nk = kernel_sets(ks), bad = 0;
  CHECK_INT(nk, vector_expected() ? 2 : 1);
  uint16_t *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
  float *f = malloc(N * sizeof *f);
  CHECK(h && back && f);
  for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
  for (int k = 0; k < nk && !bad; k++) {
    dpm_lowp_use(ks[k]);
    dpm_f32_from_f16(f, h, N);
    for (uint32_t i = 0; i < N && !bad; i++)
      if (bits_of(f[i]) != bits_of(dpm_f32_from_f16_1(h[i]))) {
        dpm_test_fail(__FILE__, __LINE__, "kernels %d: f16 %04x widens to %08x, not %08x",
                      (int)ks[k], i, bits_of(f[i]), bits_of(dpm_f32_from_f16_1(h[i])));
        bad = 1;
      }
    dpm_f16_from_f32(back, f, N);
    for (uint32_t i = 0; i < N && !bad; i++) {
      int nan = (i & 0x7fffu) > 0x7c00u;
      uint16_t want = (uint16_t)(nan ? i | 0x200u : i);
      if (back[i] != want) {
        dpm_test_fail(__FILE__, __LINE__, "kernels %d: f16 %04x comes back as %04x",
                      (int)ks[k], i, back[i]);
        bad = 1;
      }
    }
    dpm_f32_from_bf16(f, h, N);
    for (uint32_t i = 0; i < N && !bad; i++)
      if (bits_of(f[i]) != i << 16) {
        dpm_test_fail(__FILE__, __LINE__, "kernels %d: bf16 %04x widens to %08x",
                      (int)ks[k], i, bits_of(f[i]));
        bad = 1;
      }
  }
  dpm_lowp_use(DPM_LOWP_VECTOR);
  free(h);
  free(back);
  free(f);
}

/* fp32 patterns worth a look: zeros, infinities, NaNs (quiet, signalling,
 * with and without payload), denormals, and the cases around each
 * rounding boundary of both formats. */
static size_t edge_patterns(uint32_t *u) {
  static const uint32_t base[] = {
      0x00000000u, 0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu,
      0x7f7fffffu, 0x00000001u, 0x00007fffu, 0x00008000u, 0x00008001u, 0x00018000u,
      0x007fffffu, 0x00800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x477fe000u,
      0x477fefffu, 0x477ff000u, 0x47800000u, 0x33800000u, 0x33000000u, 0x33000001u,
      0x33c00000u, 0x387fe000u, 0x387ff000u, 0x38800000u, 0x387fffffu, 0x3f801000u,
      0x3f803000u, 0x3f800fffu, 0x3f801001u, 0x7f7f8000u, 0x7f7f7fffu, 0x34000000u,
  };
  size_t n = 0;
  for (size_t i = 0; i < sizeof base / sizeof *base; i++)
    for (uint32_t d = 0; d < 3; d++) { /* the pattern, one below, one above; both signs */
      uint32_t v = base[i] + d - 1;
      u[n++] = v;
      u[n++] = v ^ 0x80000000u;
    }
  return n;
}

TEST(lowp_vector_matches_scalar_bits) {
  enum { N = 1 << 21, ROUNDS = 2 }; /* 4 Mi patterns */
  uint32_t *u = malloc(N * sizeof *u);
  uint16_t *h = malloc(N * sizeof *h);
  CHECK(u && h);
  dpm_lowp_kernels ks[2];
  int nk = kernel_sets(ks), bad = 0;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < ROUNDS && !bad; round++) {
    size_t e = edge_patterns(u);
    for (size_t i = e; i < N; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      uint32_t r = (uint32_t)(x >> 16);
      /* a quarter near the f16 range and its rounding bits, so the f16
       * paths see their subnormals and ties often */
      if ((x & 3) == 0)
        r = (r & 0x80001fffu) | (0x33000000u + ((r >> 13) & 0x0fffu) * 0x2000u);
      if ((x & 7) == 1) r = (r & 0xffff0000u) | 0x8000u; /* a bf16 tie */
      u[i] = r;
    }
    const float *f = (const float *)u;
    size_t len = N - (size_t)round * 5; /* 0 and 3 past a multiple of 8: a tail */
    for (int k = 0; k < nk && !bad; k++) {
      dpm_lowp_use(ks[k]);
      dpm_bf16_from_f32(h, f, len);
      for (size_t i = 0; i < len && !bad; i++)
        if (h[i] != dpm_bf16_from_f32_1(f[i])) {
          dpm_test_fail(__FILE__, __LINE__, "kernels %d: bf16 of %08x: %04x, not %04x",
                        (int)ks[k], u[i], h[i], dpm_bf16_from_f32_1(f[i]));
          bad = 1;
        }
      dpm_f16_from_f32(h, f, len);
      for (size_t i = 0; i < len && !bad; i++)
        if (h[i] != dpm_f16_from_f32_1(f[i])) {
          dpm_test_fail(__FILE__, __LINE__, "kernels %d: f16 of %08x: %04x, not %04x",
                        (int)ks[k], u[i], h[i], dpm_f16_from_f32_1(f[i]));
          bad = 1;
        }
    }
  }
  dpm_lowp_use(DPM_LOWP_VECTOR);
  free(u);
  free(h);
}
