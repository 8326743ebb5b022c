/* The bf16 and f16 slice conversions (engine/lowp.h): the generic loops
 * against the AVX2 / F16C kernels, on one vector of the size of a model's
 * gradients (default 1 Mi values, a few times the MLP's), the two
 * alternating within each round; median ns per element of each, and the
 * speedup. Prints figures; not a test.
 *
 *   build/bench/lowp [--n ELEMENTS] [--rounds N] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/lowp.h"

typedef enum { NARROW_BF16, WIDEN_BF16, NARROW_F16, WIDEN_F16, CONVERSIONS } conversion;
static const char *const names[CONVERSIONS] = {"f32 -> bf16", "bf16 -> f32", "f32 -> f16",
                                               "f16 -> f32"};

static void run_one(conversion c, float *f, uint16_t *h, size_t n) {
  switch (c) {
  case NARROW_BF16:
    dpm_bf16_from_f32(h, f, n);
    break;
  case WIDEN_BF16:
    dpm_f32_from_bf16(f, h, n);
    break;
  case NARROW_F16:
    dpm_f16_from_f32(h, f, n);
    break;
  default:
    dpm_f32_from_f16(f, h, n);
    break;
  }
}

int main(int argc, char **argv) {
  size_t n = 1 << 20;
  int rounds = 31;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n"))
      n = (size_t)atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds"))
      rounds = atoi(argv[i + 1]);
  }
  if (n < 1 || rounds < 1) return fprintf(stderr, "bad --n or --rounds\n"), 2;
  dpm_lowp_use(DPM_LOWP_VECTOR);
  if (dpm_lowp_current() != DPM_LOWP_VECTOR) {
    printf("no AVX2 and F16C here (or DPM_CPU_KERNELS=generic): nothing to compare\n");
    return 0;
  }
  float *f = malloc(n * sizeof *f), *keep = malloc(n * sizeof *keep);
  uint16_t *h = malloc(n * sizeof *h);
  double *t = malloc((size_t)rounds * 2 * sizeof *t);
  if (!f || !keep || !h || !t) return fprintf(stderr, "out of memory\n"), 1;
  unsigned seed = 1;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    keep[i] = (float)((int)(seed >> 8) % 20001 - 10000) * 1e-4f;
  }
  printf("%zu values; one thread; median ns per value over %d rounds; the two "
         "alternate\n",
         n, rounds);
  printf("%-14s %12s %12s %8s\n", "conversion", "generic ns", "vector ns", "speedup");
  for (int c = 0; c < CONVERSIONS; c++) {
    memcpy(f, keep, n * sizeof *f);
    dpm_bf16_from_f32(h, f, n); /* widening reads these */
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < 2; k++) {
        dpm_lowp_use(k ? DPM_LOWP_VECTOR : DPM_LOWP_GENERIC);
        double a = bench_now_ms();
        run_one((conversion)c, c == WIDEN_BF16 || c == WIDEN_F16 ? keep : f, h, n);
        t[k * rounds + r] = (bench_now_ms() - a) * 1e6 / (double)n;
      }
    double g = bench_median(t, rounds), v = bench_median(t + rounds, rounds);
    printf("%-14s %12.3f %12.3f %7.2fx\n", names[c], g, v, g / v);
  }
  free(f);
  free(keep);
  free(h);
  free(t);
  return 0;
}
