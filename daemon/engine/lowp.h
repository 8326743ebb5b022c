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
 * the same bits on every CPU whatever instructions they use: on x86-64
 * CPUs with AVX2 and F16C (checked once, at load) they run vector kernels
 * (8 values an instruction), elsewhere, and in processes started with the
 * environment variable DPM_CPU_KERNELS=generic (read once, at load), loops
 * over the functions of one value. */
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

/* Which slice kernels run: the loops over the one-value functions, or the
 * vector kernels (the default where the CPU has AVX2 and F16C; rounding to
 * bf16 by vcvtneps2bf16 where it has AVX512-BF16). Tests and
 * benchmarks switch (before starting threads that convert); without AVX2
 * and F16C, or with DPM_CPU_KERNELS=generic, it stays generic. */
typedef enum { DPM_LOWP_GENERIC, DPM_LOWP_VECTOR } dpm_lowp_kernels;
/* Whether the CPU has AVX-512 F, BW, VL and BF16, with the OS saving their
 * state (CPUID and XCR0); 0 off x86-64. */
int dpm_cpu_avx512_bf16(void);
dpm_lowp_kernels dpm_lowp_current(void);
void dpm_lowp_use(dpm_lowp_kernels k);

#endif
