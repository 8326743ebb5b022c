/* The matrix products of the Fashion-MNIST MLP (batch 64, and 32 per replica
 * on two) and of the CNN (its convolutions per image, and its big FC),
 * through dpm_gemm with its AVX-512 tiles and
 * with cblas, side by side in one run (the two alternate, medians), plus a
 * 1024^3 sgemm for scale.
 *
 *   build/bench/gemm [--rounds N]      (OPENBLAS_NUM_THREADS=1) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "bench.h"
#include "engine/tensor.h"

/* One product: an nt call (n, m, k) or an outer call (rows, cols, inner; A
 * stored transposed or not), on tight operands. */
typedef enum { NT, OUTER, OUTER_T } kind;

typedef struct {
  const char *name;
  kind p;
  int a, b, c;
} shape;

static float *x, *w, *dy, *out;

static void run_one(const shape *s) {
  switch (s->p) {
  case NT: /* Y[a][b] = X[a][.] W[b][.]^T over c, + bias, Relu */
    dpm_gemm_nt(&(dpm_gemm_nt_args){.n = s->a, .m = s->b, .k = s->c, .x = x, .ldx = s->c,
                                    .w = w, .ldw = s->c, .b = w, .relu = 1, .y = out,
                                    .ldy = s->b});
    break;
  case OUTER: /* O[a][b] = A[a][c] B[c][b] */
    dpm_gemm_outer(s->a, s->b, s->c, dy, s->c, 1, w, s->b, 0, out, s->b);
    break;
  case OUTER_T: /* O[a][b] = A[c][a]^T B[c][b] */
    dpm_gemm_outer(s->a, s->b, s->c, dy, 1, s->a, x, s->b, 0, out, s->b);
    break;
  }
}

/* Median µs of one call, with the kernels on or off; rounds alternate. */
static void measure(const shape *s, int rounds, double us[2]) {
  double *t[2] = {malloc((size_t)rounds * sizeof(double)),
                  malloc((size_t)rounds * sizeof(double))};
  const int reps = 10;
  for (int r = 0; r < rounds; r++)
    for (int tiled = 0; tiled < 2; tiled++) {
      dpm_gemm_use(tiled ? DPM_GEMM_TILES : DPM_GEMM_BLAS);
      run_one(s);
      double t0 = bench_now_ms();
      for (int i = 0; i < reps; i++) run_one(s);
      t[tiled][r] = (bench_now_ms() - t0) * 1e3 / reps;
    }
  for (int i = 0; i < 2; i++) {
    us[i] = bench_median(t[i], rounds);
    free(t[i]);
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 2 && !strcmp(argv[1], "--rounds") ? atoi(argv[2]) : 31;
  if (!dpm_gemm_current()) {
    printf("this CPU has no AVX-512F: dpm_gemm is cblas; nothing to compare\n");
    return 0;
  }
  const size_t big = (size_t)4 << 20;
  x = dpm_alloc(big * 4), w = dpm_alloc(big * 4), dy = dpm_alloc(big * 4),
  out = dpm_alloc(big * 4);
  for (size_t i = 0; i < big; i++) {
    x[i] = (float)(i % 13) * 0.01f - 0.05f;
    w[i] = (float)(i % 7) * 0.02f - 0.06f;
    dy[i] = (float)(i % 5) * 0.03f - 0.06f;
  }
  /* FC with batch N, M outputs, K inputs: forward NT(N, M, K), dW OUTER_T(M,
   * K, N), dX OUTER(N, K, M). Conv per image and kernel row, lowered as
   * conv.c does: conv1 (32 filters) forward OUTER(filters, pixels, rows of
   * L) and dW NT(rows of L, filters, pixels); conv2 (64 filters, the
   * transposed forms) forward OUTER_T(pixels, filters, rows of L), dW
   * OUTER(rows of L, filters, pixels), and dL OUTER_T(rows of L, pixels,
   * filters). */
  const shape shapes[] = {
      {"MLP fc1 forward  64x256x784", NT, 64, 256, 784},
      {"MLP fc1 dW       64x256x784", OUTER_T, 256, 784, 64},
      {"MLP fc2 forward  64x128x256", NT, 64, 128, 256},
      {"MLP fc2 dW       64x128x256", OUTER_T, 128, 256, 64},
      {"MLP fc2 dX       64x128x256", OUTER, 64, 256, 128},
      {"MLP fc3 forward  64x10x128", NT, 64, 10, 128},
      {"MLP fc3 dW       64x10x128", OUTER_T, 10, 128, 64},
      {"MLP fc3 dX       64x10x128", OUTER, 64, 128, 10},
      {"MLP fc1 forward  32x256x784", NT, 32, 256, 784},
      {"MLP fc1 dW       32x256x784", OUTER_T, 256, 784, 32},
      {"CNN conv1 fwd    32x784x26", OUTER, 32, 784, 26},
      {"CNN conv1 dW     26x32x784", NT, 26, 32, 784},
      {"CNN conv2 fwd^T  196x64x161", OUTER_T, 196, 64, 161},
      {"CNN conv2 dW^T   161x64x196", OUTER, 161, 64, 196},
      {"CNN conv2 dL     160x196x64", OUTER_T, 160, 196, 64},
      {"CNN fc forward   64x1024x3136", NT, 64, 1024, 3136},
      {"CNN fc dW        64x1024x3136", OUTER_T, 1024, 3136, 64},
      {"CNN fc dX        64x1024x3136", OUTER, 64, 3136, 1024},
      {"CNN fc forward   8x1024x3136", NT, 8, 1024, 3136},
      {"CNN fc dW        8x1024x3136", OUTER_T, 1024, 3136, 8},
      {"CNN fc dX        8x1024x3136", OUTER, 8, 3136, 1024},
  };

  double ref_ms[9];
  for (int i = 0; i < 9; i++) {
    double t0 = bench_now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024, 1, x, 1024,
                w, 1024, 0, out, 1024);
    ref_ms[i] = bench_now_ms() - t0;
  }
  printf("one thread; median µs per product; the kernels and cblas alternate; "
         "1024^3 sgemm %.1f GFLOP/s\n",
         2.0 * 1024 * 1024 * 1024 / (bench_median(ref_ms, 9) * 1e6));
  printf("%-30s %10s %10s %8s %8s\n", "product", "cblas µs", "tiled µs", "speedup",
         "GFLOP/s");
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *s = &shapes[i];
    double us[2];
    measure(s, rounds, us);
    double flops = 2.0 * s->a * s->b * s->c;
    printf("%-30s %10.1f %10.1f %7.2fx %8.1f\n", s->name, us[0], us[1], us[0] / us[1],
           flops / (us[1] * 1e3));
  }
  dpm_free(x);
  dpm_free(w);
  dpm_free(dy);
  dpm_free(out);
  return 0;
}
