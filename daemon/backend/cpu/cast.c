/* The CPU kernel of Cast (ops/cast.c): the conversions of engine/lowp.h,
 * f32 <-> bf16/f16 rounding to nearest even; bf16 <-> f16 through f32 (one
 * rounding: every bf16 and f16 value is exact in f32); the same type, a
 * copy. */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "engine/lowp.h"
#include "ops/cast.h"

/* Widen n values of type t at src to f32. */
static void widen(float *dst, const void *src, dpm_dtype t, size_t n) {
  if (t == DPM_BF16)
    dpm_f32_from_bf16(dst, src, n);
  else if (t == DPM_F16)
    dpm_f32_from_f16(dst, src, n);
  else
    memmove(dst, src, n * sizeof *dst);
}

/* Narrow n f32 values at src to type t. */
static void narrow(void *dst, const float *src, dpm_dtype t, size_t n) {
  if (t == DPM_BF16)
    dpm_bf16_from_f32(dst, src, n);
  else if (t == DPM_F16)
    dpm_f16_from_f32(dst, src, n);
  else
    memmove(dst, src, n * sizeof *src);
}

#define CAST_BLOCK 1024

static void cast_run(const dpm_op *op) {
  dpm_dtype from = dpm_cast_type(op->node, CAST_ARG_FROM);
  dpm_dtype to = dpm_cast_type(op->node, CAST_ARG_TO);
  size_t n = (size_t)dpm_tensor_numel(op->in[0]);
  const char *x = op->in[0]->data;
  char *y = op->out[0]->data;
  if (from == to) {
    if (x != y) memcpy(y, x, dpm_shape_bytes(&op->in[0]->shape));
    return;
  }
  if (from == DPM_F32) {
    narrow(y, (const float *)x, to, n);
    return;
  }
  if (to == DPM_F32) {
    widen((float *)y, x, from, n);
    return;
  }
  float buf[CAST_BLOCK]; /* bf16 <-> f16 */
  for (size_t c = 0; c < n; c += CAST_BLOCK) {
    size_t m = n - c < CAST_BLOCK ? n - c : CAST_BLOCK;
    widen(buf, x + c * 2, from, m);
    narrow(y + c * 2, buf, to, m);
  }
}

const dpm_kernel_def DPM_CPU_KERNEL(CAST) = {.run = cast_run};

void dpm_cpu_widen(float *dst, const void *src, dpm_dtype t, size_t n) {
  widen(dst, src, t, n);
}
void dpm_cpu_narrow(void *dst, const float *src, dpm_dtype t, size_t n) {
  narrow(dst, src, t, n);
}
