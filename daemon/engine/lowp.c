/* bf16 and f16 conversions (engine/lowp.h): the scalar definitions. */
#include "engine/lowp.h"

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

void dpm_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_bf16_from_f32_1(src[i]);
}
void dpm_f32_from_bf16(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f32_from_bf16_1(src[i]);
}
void dpm_f16_from_f32(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f16_from_f32_1(src[i]);
}
void dpm_f32_from_f16(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dpm_f32_from_f16_1(src[i]);
}
