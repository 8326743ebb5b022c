/* Communicator benchmark: allreduce over the local backend, 2 ranks (2
 * threads), against a single-thread memcpy of the same size measured in the
 * same run, the two alternating so both see the same machine load.
 *
 * Figures per size (64 MiB, 4 MiB, 256 KiB of floats): median allreduce
 * time and its algorithm bandwidth (bytes of the vector / time), median
 * memcpy time and bandwidth (bytes copied / time), and allreduce bandwidth
 * as a fraction of memcpy bandwidth. The goal: >= 0.5 at 64 MiB.
 * Also a started allreduce (dpm_comm_allreduce_start, then _wait on both
 * ranks: chunks claimed by the waiters instead of fixed slices), as a ratio
 * of its median time to the blocking call's.
 *
 * Timing is rank 0's: from its release at a barrier to the return of its
 * allreduce (which returns once both ranks are done). Rank 1 sleeps in the
 * next barrier while rank 0 times the memcpy.
 *
 *   build/bench/comm [--rounds N]      (N: rounds at 64 MiB; default 11) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "comm/comm.h"

#define RANKS 2

typedef struct {
  dpm_comm *comm;
  size_t count;     /* floats per rank */
  int rounds, warm; /* measured rounds, after `warm` unmeasured ones */
  float *buf[RANKS];
  char *src, *dst;               /* memcpy reference, rank 0 only */
  double *ar_ms, *cp_ms, *st_ms; /* blocking, memcpy, started */
  dpm_status s[RANKS];
  dpm_err err[RANKS];
} bench_state;

typedef struct {
  bench_state *st;
  int rank;
} bench_rank;

static void *rank_main(void *arg) {
  bench_rank *br = arg;
  bench_state *st = br->st;
  int r = br->rank;
  for (int i = 0; i < st->warm + st->rounds; i++) {
    dpm_status s = dpm_comm_barrier(st->comm, r, &st->err[r]);
    double t0 = bench_now_ms();
    if (!s) s = dpm_comm_allreduce(st->comm, r, st->buf[r], st->count, &st->err[r]);
    double t1 = bench_now_ms();
    if (!s) s = dpm_comm_barrier(st->comm, r, &st->err[r]);
    double t4 = bench_now_ms();
    if (!s) s = dpm_comm_allreduce_start(st->comm, r, st->buf[r], st->count, &st->err[r]);
    if (!s) s = dpm_comm_allreduce_wait(st->comm, r, &st->err[r]);
    double t5 = bench_now_ms();
    if (!s) s = dpm_comm_barrier(st->comm, r, &st->err[r]);
    if (s) {
      st->s[r] = s;
      return NULL;
    }
    if (r != 0) continue;
    double t2 = bench_now_ms();
    memcpy(st->dst, st->src, st->count * sizeof(float));
    double t3 = bench_now_ms();
    if (i >= st->warm) {
      st->ar_ms[i - st->warm] = t1 - t0;
      st->cp_ms[i - st->warm] = t3 - t2;
      st->st_ms[i - st->warm] = t5 - t4;
    }
  }
  return NULL;
}

/* Measure one size; prints one line. Returns 0 on success. */
static int bench_size(size_t bytes, int rounds) {
  bench_state st = {.count = bytes / sizeof(float), .rounds = rounds, .warm = 2};
  dpm_err err;
  if (dpm_comm_local_create(RANKS, 60000, &st.comm, &err)) {
    fprintf(stderr, "comm: %s\n", err.msg);
    return 1;
  }
  int ok = 1;
  for (int r = 0; r < RANKS; r++) ok &= !posix_memalign((void **)&st.buf[r], 64, bytes);
  ok &= !posix_memalign((void **)&st.src, 64, bytes);
  ok &= !posix_memalign((void **)&st.dst, 64, bytes);
  st.ar_ms = calloc((size_t)rounds, sizeof(double));
  st.cp_ms = calloc((size_t)rounds, sizeof(double));
  st.st_ms = calloc((size_t)rounds, sizeof(double));
  if (!ok || !st.ar_ms || !st.cp_ms || !st.st_ms) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  /* Small values: the sums double each round and stay far from overflow. */
  for (int r = 0; r < RANKS; r++)
    for (size_t i = 0; i < st.count; i++) st.buf[r][i] = (float)(i % 13) * 1e-6f;
  memset(st.src, 1, bytes);
  memset(st.dst, 0, bytes);

  pthread_t th[RANKS];
  bench_rank br[RANKS];
  for (int r = 0; r < RANKS; r++) {
    br[r] = (bench_rank){&st, r};
    if (pthread_create(&th[r], NULL, rank_main, &br[r])) {
      fprintf(stderr, "pthread_create failed\n");
      exit(1); /* rank threads already started hold st */
    }
  }
  for (int r = 0; r < RANKS; r++) pthread_join(th[r], NULL);
  int rc = 0;
  for (int r = 0; r < RANKS; r++)
    if (st.s[r]) {
      fprintf(stderr, "rank %d: %s\n", r, st.err[r].msg);
      rc = 1;
    }
  if (!rc) {
    double ar = bench_median(st.ar_ms, rounds), cp = bench_median(st.cp_ms, rounds),
           started = bench_median(st.st_ms, rounds);
    double ar_bw = (double)bytes / (ar * 1e-3) / 1e9,
           cp_bw = (double)bytes / (cp * 1e-3) / 1e9;
    char size[32];
    if (bytes >= 1 << 20)
      snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
    else
      snprintf(size, sizeof size, "%zu KiB", bytes >> 10);
    printf("%-8s  %4d rounds  allreduce %8.3f ms %6.2f GB/s  memcpy %8.3f ms %6.2f GB/s  "
           "allreduce/memcpy %.2f  started/blocking time %.2f\n",
           size, rounds, ar, ar_bw, cp, cp_bw, ar_bw / cp_bw, started / ar);
  }
  dpm_comm_destroy(st.comm);
  for (int r = 0; r < RANKS; r++) free(st.buf[r]);
  free(st.src);
  free(st.dst);
  free(st.ar_ms);
  free(st.cp_ms);
  free(st.st_ms);
  return rc;
}

int main(int argc, char **argv) {
  int rounds = 11;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || rounds > 10000) {
    fprintf(stderr, "--rounds: 1..10000\n");
    return 2;
  }
  printf("local allreduce, %d ranks (threads), sum in place; bandwidth = vector bytes / "
         "time\n",
         RANKS);
  static const struct {
    size_t bytes;
    int scale; /* rounds relative to the 64 MiB rounds */
  } sizes[] = {{64u << 20, 1}, {4u << 20, 5}, {256u << 10, 20}};
  int rc = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    rc |= bench_size(sizes[i].bytes, rounds * sizes[i].scale);
  return rc;
}
