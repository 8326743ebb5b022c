/* precision.allreduce's bf16 wire against the fp32 one: between 2 processes
 * on 127.0.0.1 (this one and a forked child, one rank each), dpm's gloo
 * allreduce of a float vector on two groups, one per wire (comm.h:
 * dpm_comm_wire), the two alternating so both see the same machine load.
 * Sizes: the gradients of the Fashion-MNIST MLP (235,146 floats) and CNN
 * (3,274,634) of examples/, reduced whole, and 16 MiB of floats.
 *
 * Figures per size: median ms of each wire, the bytes each process sends
 * (fp32 ring: 2 (P-1)/P x 4 per element; bf16 at 2 processes: 2, the
 * allgather of gloo_shim.h), and fp32 / bf16 time; best times in brackets. Timing is
 * process 0's, each call started right after a barrier of its own group. Prints figures;
 * not a test.
 *
 *   build/bench/gloo_wire [--rounds N]   (N: rounds per size; default 21) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench/two_procs.h"
#include "comm/comm.h"

#define TIMEOUT_MS 60000

static const struct {
  const char *name;
  size_t n; /* floats */
} sizes[] = {{"MLP grads", 235146}, {"CNN grads", 3274634}, {"16 MiB", 4 << 20}};
#define N_SIZES (sizeof sizes / sizeof *sizes)

/* One process's part; process 0 prints. Returns 0 on success. */
static int run(int proc, const char *dir, int rounds) {
  char store[300], msg[512] = "";
  snprintf(store, sizeof store, "file://%s", dir);
  dpm_comm *comm[2] = {NULL, NULL}; /* [wire] */
  dpm_err err = {0};
  int fail = 0;
  for (int w = 0; w < 2 && !fail; w++) {
    dpm_comm_config cfg = {.kind = DPM_COMM_GLOO,
                           .size = 1,
                           .rank_base = proc,
                           .world = 2,
                           .timeout_ms = TIMEOUT_MS,
                           .rendezvous = {.store = store,
                                          .prefix = w ? "bench/bf16" : "bench/f32",
                                          .iface = "lo"},
                           .wire = w ? DPM_COMM_WIRE_BF16 : DPM_COMM_WIRE_F32};
    if (dpm_comm_create(&cfg, &comm[w], &err)) {
      snprintf(msg, sizeof msg, "%s", err.msg);
      fail = 1;
    }
  }
  if (!proc && !fail)
    printf("gloo allreduce, 2 processes on 127.0.0.1 (lo), 1 rank each; fp32 and bf16 "
           "wires alternating; median ms (best in brackets)\n"
           "%-10s %9s %6s %9s %9s %9s %9s %9s   (%7s %7s %6s)\n",
           "size", "floats", "runs", "fp32 MB", "bf16 MB", "fp32 ms", "bf16 ms",
           "fp32/bf16", "fp32", "bf16", "ratio");
  for (size_t z = 0; z < N_SIZES && !fail; z++) {
    size_t n = sizes[z].n;
    int warm = 2;
    float *buf = malloc(n * sizeof *buf);
    double *ms = malloc(2 * (size_t)rounds * sizeof *ms);
    if (!buf || !ms) {
      snprintf(msg, sizeof msg, "out of memory");
      fail = 1;
    }
    for (int it = 0; !fail && it < warm + rounds; it++)
      for (int k = 0; k < 2 && !fail; k++) {
        int w = (k + it) % 2; /* which goes first alternates */
        for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 5) * 0.1f;
        if (dpm_comm_barrier(comm[w], 0, &err)) {
          snprintf(msg, sizeof msg, "%s", err.msg);
          fail = 1;
          break;
        }
        double t0 = bench_now_ms();
        if (dpm_comm_allreduce(comm[w], 0, buf, n, &err)) {
          snprintf(msg, sizeof msg, "%s", err.msg);
          fail = 1;
          break;
        }
        double t = bench_now_ms() - t0;
        if (it >= warm) ms[w * rounds + it - warm] = t;
      }
    if (!fail && !proc) {
      double f = bench_median(ms, rounds), b = bench_median(ms + rounds, rounds);
      double f0 = bench_quantile(ms, rounds, 0),
             b0 = bench_quantile(ms + rounds, rounds, 0);
      printf("%-10s %9zu %6d %9.2f %9.2f %9.3f %9.3f %9.2fx   (%7.3f %7.3f %5.2fx)\n",
             sizes[z].name, n, rounds, n * 4.0 / 1e6, n * 2.0 / 1e6, f, b, f / b, f0, b0,
             f0 / b0);
    }
    free(buf);
    free(ms);
  }
  if (fail) fprintf(stderr, "gloo_wire bench, process %d: %s\n", proc, msg);
  dpm_comm_destroy(comm[0]);
  dpm_comm_destroy(comm[1]);
  return fail;
}

int main(int argc, char **argv) {
  return bench_two_procs("gloo_wire", argc, argv, 21, run);
}
