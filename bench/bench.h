/* Small helpers shared by the benchmark programs: a monotonic clock and
 * medians. Single-threaded use. */
#ifndef DPM_BENCH_H
#define DPM_BENCH_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

static inline double bench_now_ms(void) { return dpm_mono_ns() / 1e6; }

static inline int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Quantile q (0..1) of v[0..n), nearest rank (sorts v). */
static inline double bench_quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  return v[(int)(q * (n - 1) + 0.5)];
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) { return bench_quantile(v, n, 0.5); }

/* Median of a copy of v[0..n): the rounds' order stays for the paired
 * ratios (v[n / 2] when the copy cannot be made). */
static inline double bench_median_of(const double *v, int n) {
  double *w = malloc((size_t)n * sizeof *w);
  if (!w) return v[n / 2];
  memcpy(w, v, (size_t)n * sizeof *w);
  double m = bench_median(w, n);
  free(w);
  return m;
}

#endif
