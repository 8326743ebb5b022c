/* The FC products of the Fashion-MNIST MLP (batch 64, and 32 per replica on
 * two) and of the CNN's big FC, through dpm_gemm with its AVX-512 tiles and
 * with cblas, side by side in one run (the two alternate, medians), plus a
 * 1024^3 sgemm for scale.
 *
 *   build/bench/gemm [--rounds N]      (OPENBLAS_NUM_THREADS=1) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/tensor.h"
#include "ops/gemm.h"

typedef enum { FWD, DW, DX } product;

typedef struct {
  const char *name;
  product p;
  int n, m, k; /* FC: batch, outputs, inputs */
} shape;

static float *x, *w, *dy, *out;

static void run_one(const shape *s) {
  switch (s->p) {
  case FWD: /* Y = X W^T + b, Relu */
    dpm_gemm_nt(s->n, s->m, s->k, x, s->k, w, s->k, w, 1, out, s->m);
    break;
  case DW: /* dW = dY^T X */
    dpm_gemm_outer(s->m, s->k, s->n, dy, 1, s->m, x, s->k, 0, out, s->k);
    break;
  case DX: /* dX = dY W */
    dpm_gemm_outer(s->n, s->k, s->m, dy, s->m, 1, w, s->k, 0, out, s->k);
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
      dpm_gemm_use_tiled(tiled);
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
  dpm_gemm_use_tiled(1);
  if (!dpm_gemm_tiled()) {
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
  const shape shapes[] = {
      {"MLP fc1 forward  64x256x784", FWD, 64, 256, 784},
      {"MLP fc1 dW       64x256x784", DW, 64, 256, 784},
      {"MLP fc2 forward  64x128x256", FWD, 64, 128, 256},
      {"MLP fc2 dW       64x128x256", DW, 64, 128, 256},
      {"MLP fc2 dX       64x128x256", DX, 64, 128, 256},
      {"MLP fc3 forward  64x10x128", FWD, 64, 10, 128},
      {"MLP fc3 dX       64x10x128", DX, 64, 10, 128},
      {"MLP fc1 forward  32x256x784", FWD, 32, 256, 784},
      {"MLP fc1 dW       32x256x784", DW, 32, 256, 784},
      {"CNN fc forward   64x1024x3136", FWD, 64, 1024, 3136},
      {"CNN fc dW        64x1024x3136", DW, 64, 1024, 3136},
      {"CNN fc dX        64x1024x3136", DX, 64, 1024, 3136},
  };
  double ref_ms[9];
  for (int i = 0; i < 9; i++) {
    double t0 = bench_now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024, 1, x, 1024, w,
                1024, 0, out, 1024);
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
    double flops = 2.0 * s->n * s->m * s->k;
    printf("%-30s %10.1f %10.1f %7.2fx %8.1f\n", s->name, us[0], us[1], us[0] / us[1],
           flops / (us[1] * 1e3));
  }
  dpm_free(x);
  dpm_free(w);
  dpm_free(dy);
  dpm_free(out);
  return 0;
}
