/* FC's three products over bf16 tensors, natively (AVX512-BF16 through
 * backend/cpu/gemm_bf16.h): the kernels that lowp_run.c runs for FC and
 * FCGradient when every tensor is bf16 (dpm_cpu_fc_bf16_run, lowp_run.h),
 * here on plain arrays for benchmarks. X [n, k], W [m, k], b [m], Y and dY
 * [n, m], all bf16, rows packed; each output is rounded to bf16 once from
 * f32 sums. Call only while dpm_bf16_native(); scratch holds
 * dpm_fc_bf16_scratch bytes (SIZE_MAX: the sizes overflow). Thread-safety
 * as dpm_bf16_gemm's. */
#ifndef DPM_BACKEND_CPU_FC_BF16_H
#define DPM_BACKEND_CPU_FC_BF16_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DPM_FC_BF16_FORWARD, DPM_FC_BF16_DW, DPM_FC_BF16_DX } dpm_fc_bf16_product;

size_t dpm_fc_bf16_scratch(int n, int m, int k, dpm_fc_bf16_product p);
/* Y = relu?(X W^T + b) (b may be NULL). */
void dpm_fc_bf16_forward(int n, int m, int k, const uint16_t *x, const uint16_t *w,
                         const uint16_t *b, int relu, uint16_t *y, void *scratch);
/* dW = dY^T X, rounded into dw or, dw NULL, in f32 into dw32. */
void dpm_fc_bf16_dw(int n, int m, int k, const uint16_t *x, const uint16_t *dy,
                    uint16_t *dw, float *dw32, void *scratch);
/* dX = dY W. */
void dpm_fc_bf16_dx(int n, int m, int k, const uint16_t *w, const uint16_t *dy,
                    uint16_t *dx, void *scratch);

#endif
