/* Low-precision number formats as 16-bit patterns: bfloat16 (bf16: fp32's
 * sign and 8-bit exponent, 7 stored mantissa bits) and IEEE binary16 (f16:
 * 5-bit exponent, 10 mantissa bits), and their conversions to and from
 * fp32.
 *
 * Rounding: to nearest, ties to even, as PyTorch's and the hardware's
 * conversions do. bf16: a NaN stays a NaN (quiet), +-inf stay, nothing
 * overflows (same exponent range). f16: values beyond 65504 after rounding
 * become +-inf, values below the smallest subnormal (2^-24) round to +-0 or
 * to it, NaN stays a NaN. Widening (to fp32) is exact for both.
 *
 * The slice functions convert n values from src to dst (which must not
 * overlap). Pure functions of their inputs: thread-safe, no allocation, and
 * the same bits on every CPU whatever instructions they use. */
#ifndef DPM_ENGINE_LOWP_H
#define DPM_ENGINE_LOWP_H

#include <stddef.h>
#include <stdint.h>

uint16_t dpm_bf16_from_f32_1(float f);
float dpm_f32_from_bf16_1(uint16_t h);
uint16_t dpm_f16_from_f32_1(float f);
float dpm_f32_from_f16_1(uint16_t h);

void dpm_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void dpm_f32_from_bf16(float *dst, const uint16_t *src, size_t n);
void dpm_f16_from_f32(uint16_t *dst, const float *src, size_t n);
void dpm_f32_from_f16(float *dst, const uint16_t *src, size_t n);

#endif
