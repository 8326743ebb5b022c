/* Matrix products of the shapes a training step has: a batch of a few dozen
 * rows against weights of tens to a few thousand columns. The CPU kernels
 * of FC and Conv (backend/cpu/fc.c, conv.c) run every product through these
 * two entry points.
 *
 * On x86-64 CPUs with AVX-512F (checked once, at load) each is a
 * register-tiled kernel that reads its operands where they lie: no packing
 * copies, no zeroing pass before a product, and FC's bias and Relu applied
 * while a tile is still in registers. For these shapes that is 1.1-1.8x
 * OpenBLAS's sgemm, which spends much of its time packing (bench/gemm).
 * Shapes where the tiles lose (tiny or far larger than L2; gemm.c lists
 * them), CPUs without AVX-512F, and processes started with the environment
 * variable DPM_CPU_KERNELS=generic (read once, at load) get one cblas_sgemm
 * plus the bias and Relu passes.
 *
 * The order of summation depends only on the shapes, so replicas computing
 * the same product on the same kind of CPU agree bitwise. Thread-safe; no
 * allocation; operands must not overlap the output. */
#ifndef DPM_BACKEND_CPU_GEMM_H
#define DPM_BACKEND_CPU_GEMM_H

#include <stdint.h>

/* Y[i][j] = relu?((acc ? Y[i][j] : 0) + b[j] + sum_k X[i][k] W[j][k]) for
 * i < n, j < m: the rows of X and W both run along k (FC's forward, Conv's
 * weight gradient over few filters). b may be NULL; relu and acc are 0 or 1. */
typedef struct dpm_gemm_nt_args {
  int n, m, k;
  const float *x;
  int64_t ldx;
  const float *w;
  int64_t ldw;
  const float *b;
  int relu, acc;
  float *y;
  int64_t ldy;
} dpm_gemm_nt_args;
void dpm_gemm_nt(const dpm_gemm_nt_args *a);

/* O[r][c] = (acc ? O[r][c] : 0) + sum_s A(r, s) B[s][c] for r < rows,
 * c < cols, where A(r, s) = a[r * ars + s * ass] and one of ars, ass is 1
 * (A stored as is or transposed). B's and O's rows run along c. */
void dpm_gemm_outer(int rows, int cols, int inner, const float *a, int64_t ars,
                    int64_t ass, const float *b, int64_t ldb, int acc, float *o,
                    int64_t ldo);

/* Which kernels run: cblas only; the tiles where they win (the default where
 * the CPU has AVX-512F); the tiles for every product (tests of their edge
 * cases). Tests and benchmarks switch; without AVX-512F, or with
 * DPM_CPU_KERNELS=generic, it stays BLAS. */
typedef enum { DPM_GEMM_BLAS, DPM_GEMM_AUTO, DPM_GEMM_TILES } dpm_gemm_mode;
dpm_gemm_mode dpm_gemm_current(void);
void dpm_gemm_use(dpm_gemm_mode m);

#endif
