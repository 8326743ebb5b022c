/* bf16 matrix products with f32 accumulation on CPUs with AVX512-BF16
 * (vdpbf16ps: 32 bf16 products a vector, summed in pairs into 16 f32
 * lanes): the native kernels of FC and FCGradient over bf16 tensors
 * (backend/cpu/fc_bf16.c). Elsewhere those ops run their f32 kernels on
 * f32 copies (backend/cpu/lowp_run.h), the fallback.
 *
 * One product: O(r, c) = bf16(relu?(bias + sum_s A(r, s) B(s, c))) for
 * r < rows, c < cols, s < inner (or the f32 sum, optionally accumulated:
 * Conv sums several products before it rounds). B is packed into scratch in the VNNI pair
 * layout (for each pair of s, 16 columns x 2 values a vector, in panels of
 * at most 64 columns); A is read in place when its pairs of s are adjacent
 * (ass == 1), else packed too. Tiles of 6 rows x 4 vectors of 16 columns
 * keep their 24 f32 accumulators in registers over the whole inner sum,
 * which runs in order of s (each lane adds the pair s = 2p, 2p + 1 at step
 * p); the result is rounded to bf16 once, to nearest even, exactly as
 * dpm_bf16_from_f32_1 (engine/lowp.h) does.
 *
 * vdpbf16ps treats bf16 subnormal inputs as zero and flushes f32 subnormal
 * results to zero, whatever MXCSR says: the results differ from the
 * fallback's by summation order (products of two bf16 are exact in f32)
 * and by those flushes (tests/unit/bf16_gemm_test.c derives the bound).
 *
 * Which kernels run is chosen at load: native where CPUID says AVX512-BF16
 * (and AVX-512F, with the OS saving the AVX-512 state) and DPM_CPU_KERNELS
 * is not "generic"; tests and benchmarks may switch to the fallback and
 * back. Thread-safe (the switch is atomic; a product writes only o and its
 * scratch); no allocation; operands must not overlap o or the scratch. */
#ifndef DPM_BACKEND_CPU_GEMM_BF16_H
#define DPM_BACKEND_CPU_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

typedef struct dpm_bf16_gemm_args {
  int rows, cols, inner;
  const uint16_t *a; /* A(r, s) = a[r * ars + s * ass]; ars or ass is 1 */
  int64_t ars, ass;
  const uint16_t *b; /* B(s, c) = b[s * bss + c * bcs] */
  int64_t bss, bcs;
  const uint16_t *bias; /* NULL, or bias[c] (bias[r] when bias_by_row) */
  int bias_by_row, relu;
  uint16_t *o; /* O(r, c) = o[r * ors + c * ocs] */
  int64_t ors, ocs;
  /* Instead of o (NULL then): f32 results, not rounded, at the same
   * strides, added to what o32 holds when acc (a sum over several
   * products, rounded once by the caller). */
  float *o32;
  int acc;
} dpm_bf16_gemm_args;

/* Scratch bytes a product of these sizes needs (ass as in the args), or
 * SIZE_MAX when that overflows. */
size_t dpm_bf16_gemm_scratch(int rows, int cols, int inner, int64_t ass);

/* Runs the product (only while dpm_bf16_native() says so); scratch holds
 * dpm_bf16_gemm_scratch bytes, 64-byte aligned. */
void dpm_bf16_gemm(const dpm_bf16_gemm_args *a, void *scratch);
/* The same in steps, for a caller that splits the product by rows of O:
 * dpm_bf16_gemm_pack packs the operands into scratch once; then
 * dpm_bf16_gemm_rows computes rows [r0, r1) of O from them, only reading
 * the scratch. Any split of the rows, run in any order and on any
 * threads, gives dpm_bf16_gemm's bits (each output is one sum over inner,
 * in order, whichever tile computes it). */
void dpm_bf16_gemm_pack(const dpm_bf16_gemm_args *a, void *scratch);
void dpm_bf16_gemm_rows(const dpm_bf16_gemm_args *a, const void *scratch, int r0, int r1);

/* FC's forward with both operands read where they lie, no scratch:
 * Y[i][j] = bf16(relu?(b[j] + sum_s X[i][s] W[j][s])) for i < n, j < m,
 * s < k (b may be NULL). Dot tiles of 4 rows of X against 6 rows of W (5
 * where that leaves none idle) sum 32 values of s a step into 16 f32
 * lanes each (vdpbf16ps's pairs), then fold the lanes in a fixed tree
 * (dot_reduce.h): the bits depend only on k, not on n, m or where a row
 * falls in a tile. The rows of W stay in L1 while X streams past them, for
 * k up to DPM_BF16_NT_KMAX; larger k is dpm_bf16_gemm's. Same rules as
 * dpm_bf16_gemm otherwise. */
#define DPM_BF16_NT_KMAX 2048
typedef struct dpm_bf16_nt_args {
  int n, m, k;
  const uint16_t *x; /* X[i][s] = x[i * ldx + s] */
  int64_t ldx;
  const uint16_t *w; /* W[j][s] = w[j * ldw + s] */
  int64_t ldw;
  const uint16_t *bias;
  int relu;
  uint16_t *y; /* Y[i][j] = y[i * ldy + j] */
  int64_t ldy;
} dpm_bf16_nt_args;
void dpm_bf16_gemm_nt(const dpm_bf16_nt_args *a);

/* Whether the native kernels run now; whether they may run at all (the
 * CPU and DPM_CPU_KERNELS, checked at load); switching (to on only where
 * allowed). */
int dpm_bf16_native(void);
int dpm_bf16_native_allowed(void);
void dpm_bf16_native_use(int on);
/* Products run natively since load (tests and benchmarks: which path ran). */
uint64_t dpm_bf16_native_products(void);

#endif
