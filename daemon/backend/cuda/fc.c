/* The CUDA kernels of FC and FCGradient (ops/fc.c: Y = X W^T + b, X read
 * as [N, K], W [M, K], b [M], Y [N, M], all row-major), through cuBLASLt
 * on the device's compute stream with its workspace (dev->lt_ws).
 *
 * cuBLASLt is column-major: a row-major [R, C] matrix is a column-major
 * [C, R] one with leading dimension C, so every product is computed
 * transposed, on the tensors as they lie:
 *   FC:      Y^T [M, N] = op(W: [K, M], T) * (X^T: [K, N])  + b per row,
 *            with the BIAS epilogue (RELU_BIAS when a Relu is fused:
 *            DPM_FUSE_RELU, bias first, then max(., 0), as the CPU);
 *   dW:      dW^T [K, M] = (X^T: [K, N]) * op(dY^T: [M, N], T);
 *   dX:      dX^T [K, N] = (W^T: [K, M]) * (dY^T: [M, N]);
 *   db:      the column sums of dY, by the plugin's deterministic channel
 *            sum (reduce.cu) in the op's scratch.
 * FCGradient's outputs dW, db, dX may each be NULL (not wanted), as on the
 * CPU.
 *
 * bf16 (a model whose precision.compute is bf16: every float tensor of the
 * op bf16, as the precision rewrite types FC and FCGradient, but
 * FCGradient's dW and db f32 where the engine fused their Casts to f32,
 * DPM_FUSE_GRAD_F32): A, B and D of type CUDA_R_16BF (D CUDA_R_32F for
 * such a dW), CUBLAS_COMPUTE_32F (f32 products of bf16 values, f32
 * accumulation; TF32 does not apply), f32 alpha/beta, the bias bf16 (D's
 * type, set explicitly as CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), the
 * epilogue adding it and applying Relu in f32 before D is rounded once: as
 * the CPU's wrapper (backend/cpu/lowp_run.h) widens, runs the f32 kernel
 * and rounds. db: dY widened into the op's scratch (elem.h's conversion),
 * summed per column by the same channel sum in f32, rounded to bf16 unless
 * it is f32.
 *
 * Math: CUBLAS_COMPUTE_32F (full float32 products), or
 * CUBLAS_COMPUTE_32F_FAST_TF32 when op->ctx->math has DPM_MATH_TF32.
 * Under DPM_MATH_DETERMINISTIC the heuristic may only return algorithms
 * without a split-K reduction (reduction scheme mask NONE), so each
 * output element is one block's sum in a fixed order; should it offer none
 * for a problem, it is asked again without the mask: a split-K algorithm's
 * reduction (in place under counters, or a separate reduction kernel) also
 * adds in a fixed order for a fixed algorithm, and the cached choice stays
 * fixed for the device. The heuristic's choice is cached in the device's
 * cache (algo.h) under the problem's shape, transposes, epilogue, compute
 * type, determinism and the alignments of its pointers: only a model's
 * first step queries it.
 * Descriptors are created and destroyed per call (host only, no device
 * memory). A product with an empty inner dimension (K or N = 0) is a
 * memset (+ bias), which cuBLASLt does not take.
 *
 * Threads: as any kernel (backend.h). Errors: a failed call is recorded
 * as the device's sticky error (cuda.h) and the product is skipped. */
#include <string.h>

#include "backend/cuda/algo.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"
#include "backend/cuda/reduce_launch.h"

_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) <= CUDA_ALGO_VAL_BYTES,
               "a heuristic result fits a cache value");

/* D [m, n] (column-major, leading dimension ldd) = op(A) op(B) (+ bias
 * per row of D, Relu by the epilogue). A is stored [m, k] (ta N) or
 * [k, m] (ta T), B [k, n] (tb N) or [n, k] (tb T). */
typedef struct lt_mm {
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldd;
  const void *a, *b, *bias; /* of type t */
  void *d;
  cublasLtEpilogue_t epi;
  cudaDataType_t t;  /* CUDA_R_32F, or CUDA_R_16BF */
  cudaDataType_t dt; /* D's: t's, or CUDA_R_32F beside bf16 A and B */
} lt_mm;

/* The largest power of two (up to 256) dividing p's address. */
static uint32_t align_of(const void *p) {
  uintptr_t u = (uintptr_t)p;
  uint32_t a = 256;
  while (a > 1 && (u & (a - 1))) a >>= 1;
  return a;
}

static int layout(cuda_dev *dev, cublasLtMatrixLayout_t *l, cudaDataType_t t,
                  uint64_t rows, uint64_t cols, int64_t ld) {
  return CUBLAS_OK(dev, cublasLtMatrixLayoutCreate(l, t, rows, cols, ld));
}

static void lt_run(const dpm_op *op, cuda_dev *dev, const lt_mm *p) {
  if (p->m <= 0 || p->n <= 0) return;
  const int bf = p->t == CUDA_R_16BF, dbf = p->dt == CUDA_R_16BF;
  if (p->k <= 0) { /* op(A) op(B) is 0 */
    if (bf && p->bias) { /* D = bias per row (ldd == m wherever a bias is) */
      dpm_cuda_bias_act_bf16(p->d, p->bias, p->n, p->m,
                             p->epi == CUBLASLT_EPILOGUE_RELU_BIAS, dev->compute);
      CUDA_OK(dev, cudaGetLastError());
      return;
    }
    CUDA_OK(dev, cudaMemsetAsync(p->d, 0,
                                 (size_t)(p->ldd * p->n) * (dbf ? sizeof(uint16_t)
                                                                : sizeof(float)),
                                 dev->compute));
    if (p->bias) {
      cuda_bias_act(p->d, p->bias, p->n, p->m, 1, p->epi == CUBLASLT_EPILOGUE_RELU_BIAS,
                    dev->compute);
      CUDA_OK(dev, cudaGetLastError());
    }
    return;
  }
  const cublasComputeType_t ct = (!bf && (op->ctx->math & DPM_MATH_TF32))
                                      ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
  const uint32_t al[4] = {align_of(p->a), align_of(p->b), align_of(p->d), align_of(p->d)};
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  const int32_t ta = p->ta, tb = p->tb;
  const uint32_t epi = p->epi;
  const int det = (op->ctx->math & DPM_MATH_DETERMINISTIC) != 0;
  if (!CUBLAS_OK(dev, cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F)) ||
      !CUBLAS_OK(dev, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &ta, sizeof ta)) ||
      !CUBLAS_OK(dev, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &tb, sizeof tb)) ||
      !CUBLAS_OK(dev, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                     &epi, sizeof epi)))
    goto done;
  if (p->bias && !CUBLAS_OK(dev, cublasLtMatmulDescSetAttribute(
                                     desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias,
                                     sizeof p->bias)))
    goto done;
  const int32_t bias_t = p->t; /* D's type, the default, said explicitly */
  if (p->bias && bf &&
      !CUBLAS_OK(dev, cublasLtMatmulDescSetAttribute(
                          desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                          sizeof bias_t)))
    goto done;
  if (!layout(dev, &la, p->t, p->ta == CUBLAS_OP_N ? p->m : p->k,
              p->ta == CUBLAS_OP_N ? p->k : p->m, p->lda) ||
      !layout(dev, &lb, p->t, p->tb == CUBLAS_OP_N ? p->k : p->n,
              p->tb == CUBLAS_OP_N ? p->n : p->k, p->ldb) ||
      !layout(dev, &ld, p->dt, p->m, p->n, p->ldd))
    goto done;

  cuda_algo_key key = {.kind = CUDA_ALGO_LT_MATMUL,
                       .v = {ta, tb, p->m, p->n, p->k, p->lda, p->ldb, p->ldd, epi, ct,
                             al[0], al[1], al[2], p->bias ? align_of(p->bias) : 0, det, p->t,
                             p->dt}};
  cublasLtMatmulHeuristicResult_t res;
  if (!cuda_algo_get(dev->algos, &key, &res, sizeof res)) {
    const uint64_t ws = CUDA_LT_WORKSPACE;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (!CUBLAS_OK(dev, cublasLtMatmulPreferenceCreate(&pref)) ||
        !CUBLAS_OK(dev,
                   cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)))
      goto done;
    static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
      if (!CUBLAS_OK(dev, cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i],
                                                               sizeof al[i])))
        goto done;
    const uint32_t no_split = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (det && !CUBLAS_OK(dev, cublasLtMatmulPreferenceSetAttribute(
                                   pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                   &no_split, sizeof no_split)))
      goto done;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(dev->lt, desc, la, lb, ld, ld,
                                                       pref, 1, &res, &found);
    if (det && (st != CUBLAS_STATUS_SUCCESS || found < 1)) { /* none without split-K */
      const uint32_t any = CUBLASLT_REDUCTION_SCHEME_MASK;
      if (!CUBLAS_OK(dev, cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any,
                              sizeof any)))
        goto done;
      found = 0;
      st = cublasLtMatmulAlgoGetHeuristic(dev->lt, desc, la, lb, ld, ld, pref, 1, &res,
                                          &found);
    }
    if (!cuda_check(dev, st == CUBLAS_STATUS_SUCCESS, (int)st,
                    "cublasLtMatmulAlgoGetHeuristic"))
      goto done;
    if (found < 1) {
      cuda_check(dev, 0, CUBLAS_STATUS_NOT_SUPPORTED,
                 "cublasLtMatmulAlgoGetHeuristic: none");
      goto done;
    }
    cuda_algo_put(dev->algos, &key, &res, sizeof res);
  }
  const float one = 1.f, zero = 0.f;
  CUBLAS_OK(dev,
            cublasLtMatmul(dev->lt, desc, &one, p->a, la, p->b, lb, &zero, p->d, ld, p->d,
                           ld, &res.algo, dev->lt_ws, CUDA_LT_WORKSPACE, dev->compute));
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

/* The cuBLASLt type of an op whose input x has dtype t. */
static cudaDataType_t lt_type(dpm_dtype t) { return t == DPM_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

static void fc_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  const int64_t n = x->shape.d[0], m = w->shape.d[0], k = w->shape.d[1];
  lt_run(op, dev,
         &(lt_mm){.ta = CUBLAS_OP_T,
                  .tb = CUBLAS_OP_N,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = k,
                  .ldb = k,
                  .ldd = m,
                  .a = w->data,
                  .b = x->data,
                  .bias = op->in[2]->data,
                  .d = op->out[0]->data,
                  .epi = (op->node->fuse & DPM_FUSE_RELU) ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                          : CUBLASLT_EPILOGUE_BIAS,
                  .t = lt_type(x->shape.dtype),
                  .dt = lt_type(x->shape.dtype)});
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* db's partial sums; in bf16 first dY widened (n m floats) and db in f32
 * (m floats), each 256-aligned. SIZE_MAX when the sizes overflow (the
 * reservation then fails: out of memory). */
static size_t fc_grad_scratch(const dpm_node *nd, const dpm_shape *in) {
  (void)nd;
  const int64_t n = in[0].d[0], m = in[1].d[0];
  size_t sum = cuda_chan_sum_scratch(n, m, 1);
  if (in[2].dtype != DPM_BF16) return sum;
  size_t dy, db, total;
  if (n < 0 || m < 0 || __builtin_mul_overflow((size_t)n, (size_t)m, &dy) ||
      __builtin_mul_overflow(dy, sizeof(float), &dy) || dy > SIZE_MAX - 512 ||
      __builtin_mul_overflow((size_t)m, sizeof(float), &db) || db > SIZE_MAX - 512 ||
      __builtin_add_overflow(align256(dy), align256(db), &total) ||
      __builtin_add_overflow(total, sum, &total))
    return SIZE_MAX;
  return total;
}

static void fc_grad_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_tensor *x = op->in[0], *w = op->in[1], *dy = op->in[2];
  const int64_t n = x->shape.d[0], m = w->shape.d[0], k = w->shape.d[1];
  const cudaDataType_t t = lt_type(dy->shape.dtype);
  /* dW and db in f32 beside bf16 inputs (DPM_FUSE_GRAD_F32) */
  const cudaDataType_t gt = (op->node->fuse & DPM_FUSE_GRAD_F32) ? CUDA_R_32F : t;
  if (op->out[0])
    lt_run(op, dev,
           &(lt_mm){.ta = CUBLAS_OP_N,
                    .tb = CUBLAS_OP_T,
                    .m = k,
                    .n = m,
                    .k = n,
                    .lda = k,
                    .ldb = m,
                    .ldd = k,
                    .a = x->data,
                    .b = dy->data,
                    .d = op->out[0]->data,
                    .epi = CUBLASLT_EPILOGUE_DEFAULT,
                    .t = t,
                    .dt = gt});
  if (op->out[1] && t == CUDA_R_32F) {
    cuda_chan_sum(dy->data, n, m, 1, op->out[1]->data, op->ctx->scratch, dev->compute);
    CUDA_OK(dev, cudaGetLastError());
  } else if (op->out[1]) { /* scratch: dY in f32, db in f32, the partial sums */
    char *s = op->ctx->scratch;
    float *dy32 = (float *)s;
    float *db32 = (float *)(s + align256((size_t)(n * m) * sizeof(float)));
    double *part = (double *)((char *)db32 + align256((size_t)m * sizeof(float)));
    const int f32_db = gt == CUDA_R_32F;
    dpm_cuda_cast(DPM_CUDA_T_BF16, DPM_CUDA_T_F32, dy->data, dy32, n * m, dev->compute);
    cuda_chan_sum(dy32, n, m, 1, f32_db ? op->out[1]->data : db32, part, dev->compute);
    if (!f32_db)
      dpm_cuda_cast(DPM_CUDA_T_F32, DPM_CUDA_T_BF16, db32, op->out[1]->data, m,
                    dev->compute);
    CUDA_OK(dev, cudaGetLastError());
  }
  if (op->out[2])
    lt_run(op, dev,
           &(lt_mm){.ta = CUBLAS_OP_N,
                    .tb = CUBLAS_OP_N,
                    .m = k,
                    .n = n,
                    .k = m,
                    .lda = k,
                    .ldb = m,
                    .ldd = k,
                    .a = w->data,
                    .b = dy->data,
                    .d = op->out[2]->data,
                    .epi = CUBLASLT_EPILOGUE_DEFAULT,
                    .t = t,
                    .dt = t});
}

/* Both also on bf16 tensors (every float tensor of the op bf16). */
const dpm_kernel_def DPM_CUDA_KERNEL(FC) = {.run = fc_run, .lowp = DPM_LOWP_BIT(DPM_BF16)};
const dpm_kernel_def DPM_CUDA_KERNEL(FC_GRADIENT) = {
    .run = fc_grad_run, .scratch = fc_grad_scratch, .lowp = DPM_LOWP_BIT(DPM_BF16)};
