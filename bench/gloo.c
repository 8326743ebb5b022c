/* Gloo communicator benchmark: between 2 processes on 127.0.0.1 (this one
 * and a forked child, one rank each), dpm's gloo allreduce (through
 * dpm_comm: the handoff to the backend's thread, the swap of headers, then
 * Gloo's ring) against a bare Gloo ring allreduce of the same size on a
 * context of its own (bench/gloo_bare.cc), the two alternating so both see
 * the same machine load. Sizes 1, 16 and 64 MiB of floats.
 *
 * Figures per size: median time and algorithm bandwidth (bytes of the
 * vector / time) of each, and dpm's bandwidth over bare Gloo's (the goal:
 * >= 0.95); then the best times and their ratio, which a loaded machine
 * disturbs less (dpm's own cost: the swap of headers, one round trip). Timing is process
 * 0's, each call started right after a barrier of its own kind (dpm_comm_barrier, Gloo's
 * barrier) that both processes pass. Prints figures; not a test.
 *
 *   build/bench/gloo [--rounds N]   (N: rounds at 64 MiB; default 9; more
 *                                    at the smaller sizes) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench/gloo_bare.h"
#include "bench/two_procs.h"
#include "comm/comm.h"

#define TIMEOUT_MS 60000

typedef struct {
  dpm_comm *comm;
  bare_gloo *bare;
  int proc;
  char msg[512];
} side;

/* One process's part; process 0 prints. Returns 0 on success. */
static int run(int proc, const char *dir, int rounds64) {
  char store[300], prefix[64], bprefix[64];
  snprintf(store, sizeof store, "file://%s", dir);
  snprintf(prefix, sizeof prefix, "bench/dpm");
  snprintf(bprefix, sizeof bprefix, "bench/bare");
  side s = {.proc = proc};
  dpm_err err = {0};
  dpm_comm_config cfg = {.kind = DPM_COMM_GLOO,
                         .size = 1,
                         .rank_base = proc,
                         .world = 2,
                         .timeout_ms = TIMEOUT_MS,
                         .rendezvous = {.store = store, .prefix = prefix, .iface = "lo"}};
  if (dpm_comm_create(&cfg, &s.comm, &err)) {
    fprintf(stderr, "gloo bench, process %d: %s\n", proc, err.msg);
    return 1;
  }
  if (bare_gloo_create(proc, 2, dir, bprefix, "lo", TIMEOUT_MS, &s.bare, s.msg,
                       sizeof s.msg)) {
    fprintf(stderr, "gloo bench, process %d: %s\n", proc, s.msg);
    dpm_comm_destroy(s.comm);
    return 1;
  }
  static const int mib[] = {1, 16, 64};
  int fail = 0;
  if (!proc)
    printf("gloo allreduce, 2 processes on 127.0.0.1 (lo), 1 rank each; dpm and bare "
           "Gloo alternating; medians (best in brackets)\n"
           "    size   runs   dpm ms  dpm GB/s   bare ms bare GB/s   dpm/bare   (dpm ms "
           "bare ms dpm/bare)\n");
  for (int m = 0; m < 3 && !fail; m++) {
    size_t n = (size_t)mib[m] << 18; /* floats */
    int rounds = m == 2 ? rounds64 : m == 1 ? rounds64 * 2 : rounds64 * 4, warm = 2;
    float *buf = malloc(n * sizeof *buf);
    double *dpm_ms = malloc((size_t)rounds * sizeof *dpm_ms);
    double *bare_ms = malloc((size_t)rounds * sizeof *bare_ms);
    if (!buf || !dpm_ms || !bare_ms) {
      fprintf(stderr, "gloo bench: out of memory\n");
      fail = 1;
    }
    for (size_t i = 0; !fail && i < n; i++) buf[i] = (float)(i % 5);
    for (int it = 0; !fail && it < warm + rounds; it++) {
      for (int k = 0; k < 2 && !fail; k++) {
        int dpm = (k + it) % 2 == 0; /* which goes first alternates too */
        /* both processes start together, after a barrier on the context
         * about to be measured (so neither finds the other's warm) */
        if (dpm && dpm_comm_barrier(s.comm, 0, &err)) {
          snprintf(s.msg, sizeof s.msg, "%s", err.msg);
          fail = 1;
        } else if (!dpm) {
          fail = bare_gloo_barrier(s.bare, s.msg, sizeof s.msg) != 0;
        }
        double t0 = bench_now_ms();
        if (!fail && dpm) {
          fail = dpm_comm_allreduce(s.comm, 0, buf, n, &err) != DPM_OK;
          if (fail) snprintf(s.msg, sizeof s.msg, "%s", err.msg);
        } else if (!fail) {
          fail = bare_gloo_allreduce(s.bare, buf, n, s.msg, sizeof s.msg) != 0;
        }
        double ms = bench_now_ms() - t0;
        if (it == 0 && k == 0 && !fail) /* the first sum: (i % 5) * 2 */
          for (size_t i = 0; i < n && !fail; i++)
            if (buf[i] != (float)(i % 5) * 2) {
              snprintf(s.msg, sizeof s.msg, "wrong sum at %zu: %g", i, buf[i]);
              fail = 1;
            }
        if (it >= warm) (dpm ? dpm_ms : bare_ms)[it - warm] = ms;
        if (!fail && (it == 0 && k == 1)) /* small values again */
          for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 5);
      }
    }
    if (!fail && !proc) {
      double d = bench_median(dpm_ms, rounds), b = bench_median(bare_ms, rounds);
      double d0 = bench_quantile(dpm_ms, rounds, 0),
             b0 = bench_quantile(bare_ms, rounds, 0);
      double gb = (double)n * sizeof(float) / 1e6; /* GB/s = MB / ms */
      printf("  %3d MiB  %5d  %7.2f  %8.3f  %8.2f  %8.3f   %8.3f   (%6.2f %7.2f %8.3f)\n",
             mib[m], rounds, d, gb / d, b, gb / b, b / d, d0, b0, b0 / d0);
    }
    free(buf), free(dpm_ms), free(bare_ms);
  }
  if (fail) fprintf(stderr, "gloo bench, process %d: %s\n", proc, s.msg);
  bare_gloo_destroy(s.bare);
  dpm_comm_destroy(s.comm);
  return fail;
}

int main(int argc, char **argv) { return bench_two_procs("gloo", argc, argv, 9, run); }
