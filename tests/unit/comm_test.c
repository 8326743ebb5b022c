/* Local communicator: allreduce exactness (same rank order as a reference,
 * bitwise identical on every rank), repeated calls, broadcast from every
 * root, barrier, timeouts that break the group, bad arguments, and clean
 * destruction (refused disagreements: comm_contract_test.c). Ranks are threads; only the
 * main thread CHECKs. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"
#include "test.h"

#define MAX_RANKS 4

/* One rank's part in a test: its thread runs fn(rank_ctx). */
typedef struct rank_ctx {
  dpm_comm *comm;
  int rank;
  void *shared; /* the test's own state */
  dpm_status s; /* the status the rank saw (the first failure, if any) */
  dpm_err err;  /* with its message */
  int bad;      /* count of wrong results the rank saw itself */
  double ms;    /* how long its call took */
} rank_ctx;

typedef void (*rank_fn)(rank_ctx *);

typedef struct {
  rank_ctx *ctx;
  rank_fn fn;
} rank_start;

static void *rank_main(void *arg) {
  rank_start *st = arg;
  st->fn(st->ctx);
  return NULL;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Run fn on ranks [0, n) of comm, each on its own thread (ranks listed in
 * `skip` are left out: they never arrive), and join them. */
static int run_ranks(dpm_comm *comm, int n, rank_fn fn, void *shared, rank_ctx *ctx,
                     int skip) {
  pthread_t th[MAX_RANKS];
  rank_start st[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    ctx[r] = (rank_ctx){.comm = comm, .rank = r, .shared = shared};
    st[r] = (rank_start){&ctx[r], fn};
  }
  int started[MAX_RANKS] = {0};
  for (int r = 0; r < n; r++)
    if (r != skip) started[r] = !pthread_create(&th[r], NULL, rank_main, &st[r]);
  int ok = 1;
  for (int r = 0; r < n; r++) {
    if (started[r])
      pthread_join(th[r], NULL);
    else if (r != skip)
      ok = 0;
  }
  return ok;
}

/* ---- allreduce exactness -------------------------------------------- */

typedef struct {
  float *buf[MAX_RANKS];
  size_t count;
  int started; /* through dpm_comm_allreduce_start and _wait */
} ar_state;

static void ar_rank(rank_ctx *c) {
  ar_state *st = c->shared;
  float *buf = st->buf[c->rank];
  if (!st->started) {
    c->s = dpm_comm_allreduce(c->comm, c->rank, buf, st->count, &c->err);
    return;
  }
  c->s = dpm_comm_allreduce_start(c->comm, c->rank, buf, st->count, &c->err);
  if (!c->s) c->s = dpm_comm_allreduce_wait(c->comm, c->rank, &c->err);
}

/* Floats of wildly different magnitudes and signs, so that any other
 * summation order than the reference's shows in the low bits. */
static float messy(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  float m = (float)(*x % 2000003) / 1000003.0f - 1.0f;
  int e = (int)(*x >> 40) % 24 - 12;
  return ldexpf(m, e);
}

/* Blocking and started allreduces alike (mode 1: started; its chunks are
 * summed by whichever rank claims them). */
TEST(comm_allreduce_exact_rank_order) {
  static const size_t counts[] = {0, 1, 17, 1000003};
  for (int t = 0; t < 2 * MAX_RANKS; t++) {
    int mode = t / MAX_RANKS, n = t % MAX_RANKS + 1;
    dpm_comm *comm;
    dpm_err err;
    CHECK_INT(dpm_comm_local_create(n, 5000, &comm, &err), DPM_OK);
    CHECK_INT(dpm_comm_size(comm), n);
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
      size_t count = counts[ci];
      ar_state st = {.count = count, .started = mode};
      float *ref = malloc((count ? count : 1) * sizeof *ref);
      uint64_t x = 0x9e3779b97f4a7c15ull + count * 31 + (uint64_t)n;
      for (int r = 0; r < n; r++) {
        st.buf[r] = count ? malloc(count * sizeof(float)) : NULL;
        for (size_t i = 0; i < count; i++) st.buf[r][i] = messy(&x);
      }
      for (size_t i = 0; i < count; i++) {
        float s = st.buf[0][i];
        for (int r = 1; r < n; r++) s += st.buf[r][i];
        ref[i] = s;
      }
      rank_ctx ctx[MAX_RANKS];
      int ok = run_ranks(comm, n, ar_rank, &st, ctx, -1);
      int same = 1;
      for (int r = 0; r < n; r++)
        if (count && memcmp(st.buf[r], ref, count * sizeof *ref)) same = 0;
      for (int r = 0; r < n; r++) free(st.buf[r]);
      free(ref);
      if (!ok || !same) dpm_comm_destroy(comm);
      CHECK(ok);
      for (int r = 0; r < n; r++) CHECK_INT(ctx[r].s, DPM_OK);
      if (!same) printf("    mode=%d n=%d count=%zu\n", mode, n, count);
      CHECK(same);
    }
    dpm_comm_destroy(comm);
  }
}

/* ---- double allreduce ------------------------------------------------ */

typedef struct {
  double *buf[MAX_RANKS];
  size_t count;
} ar64_state;

static void ar64_rank(rank_ctx *c) {
  ar64_state *st = c->shared;
  c->s = dpm_comm_allreduce_f64(c->comm, c->rank, st->buf[c->rank], st->count, &c->err);
}

/* Doubles of wildly different magnitudes and signs (beyond float's range
 * and precision), so that any other summation order, or a trip through
 * floats, shows in the low bits. */
static double messy64(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  double m = (double)(*x % 2000000003) / 1000000003.0 - 1.0;
  int e = (int)(*x >> 40) % 160 - 80;
  return ldexp(m, e);
}

/* dpm_comm_allreduce_f64: every rank gets the rank-ordered double sum, bit
 * for bit, on 1 to 4 ranks, and a group runs float and double allreduces
 * in turn. */
TEST(comm_allreduce_f64_exact_rank_order) {
  static const size_t counts[] = {0, 1, 9, 17, 500003};
  for (int n = 1; n <= MAX_RANKS; n++) {
    dpm_comm *comm;
    dpm_err err;
    CHECK_INT(dpm_comm_local_create(n, 5000, &comm, &err), DPM_OK);
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
      size_t count = counts[ci];
      ar64_state st = {.count = count};
      double *ref = malloc((count ? count : 1) * sizeof *ref);
      uint64_t x = 0x9e3779b97f4a7c15ull + count * 31 + (uint64_t)n;
      for (int r = 0; r < n; r++) {
        st.buf[r] = count ? malloc(count * sizeof(double)) : NULL;
        for (size_t i = 0; i < count; i++) st.buf[r][i] = messy64(&x);
      }
      for (size_t i = 0; i < count; i++) {
        double s = st.buf[0][i];
        for (int r = 1; r < n; r++) s += st.buf[r][i];
        ref[i] = s;
      }
      rank_ctx ctx[MAX_RANKS];
      int ok = run_ranks(comm, n, ar64_rank, &st, ctx, -1);
      int same = 1;
      for (int r = 0; r < n; r++)
        if (count && memcmp(st.buf[r], ref, count * sizeof *ref)) same = 0;
      for (int r = 0; r < n; r++) free(st.buf[r]);
      free(ref);
      /* a float allreduce on the same group after it */
      float fb[MAX_RANKS][3];
      ar_state fst = {.count = 3};
      for (int r = 0; r < n; r++) {
        fst.buf[r] = fb[r];
        for (int i = 0; i < 3; i++) fb[r][i] = (float)(r + i);
      }
      rank_ctx fctx[MAX_RANKS];
      ok &= run_ranks(comm, n, ar_rank, &fst, fctx, -1);
      for (int r = 0; r < n; r++)
        ok &= fctx[r].s == DPM_OK && fb[r][2] == (float)(n * (n - 1) / 2 + 2 * n);
      if (!ok || !same) dpm_comm_destroy(comm);
      CHECK(ok);
      for (int r = 0; r < n; r++) CHECK_INT(ctx[r].s, DPM_OK);
      if (!same) printf("    n=%d count=%zu\n", n, count);
      CHECK(same);
    }
    dpm_comm_destroy(comm);
  }
}

/* The doubles above lose bits through floats: the test would see a
 * backend that summed them as floats. */
TEST(comm_allreduce_f64_data_needs_doubles) {
  uint64_t x = 99;
  int lossy = 0;
  for (int i = 0; i < 100 && !lossy; i++) {
    double a = messy64(&x);
    lossy = (double)(float)a != a;
  }
  CHECK(lossy);
}

/* The same vector summed in another order differs: the test above would see
 * a backend that did not keep rank order. */
TEST(comm_allreduce_order_matters_for_the_data) {
  uint64_t x = 12345;
  int differ = 0;
  for (int i = 0; i < 1000 && !differ; i++) {
    float a = messy(&x), b = messy(&x), c = messy(&x);
    differ = (a + b) + c != a + (b + c);
  }
  CHECK(differ);
}

/* ---- repeated calls -------------------------------------------------- */

#define REPEATS 100

static size_t repeat_count(int it) { return (size_t)(it * 977) % 5003 + (it % 3 == 0); }

/* Rank `rank`'s `count` values for round `it`: their sum over ranks is
 * exact in any order, so each rank checks its own result (repeat_bad). */
static float *repeat_values(int rank, size_t count, int it) {
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = (float)((rank + 1) * (int)(i % 7) + it);
  return buf;
}

/* Entries of buf that are not the sum of repeat_values over n ranks. */
static int repeat_bad(const float *buf, size_t count, int n, int it) {
  int bad = 0;
  for (size_t i = 0; i < count; i++)
    bad += buf[i] != (float)(n * (n + 1) / 2 * (int)(i % 7) + n * it);
  return bad;
}

static void repeat_rank(rank_ctx *c) {
  int n = dpm_comm_size(c->comm);
  for (int it = 0; it < REPEATS; it++) {
    size_t count = repeat_count(it);
    float *buf = repeat_values(c->rank, count, it);
    dpm_status s = dpm_comm_allreduce(c->comm, c->rank, buf, count, &c->err);
    if (s && !c->s) c->s = s;
    if (!s) c->bad += repeat_bad(buf, count, n, it);
    free(buf);
  }
}

/* fn on 3 ranks: every rank succeeds and sees no wrong value. */
static void check_on_three_ranks(rank_fn fn) {
  dpm_comm *comm;
  CHECK_INT(dpm_comm_local_create(3, 5000, &comm, NULL), DPM_OK);
  rank_ctx ctx[MAX_RANKS];
  int ok = run_ranks(comm, 3, fn, NULL, ctx, -1);
  dpm_comm_destroy(comm);
  CHECK(ok);
  for (int r = 0; r < 3; r++) {
    CHECK_INT(ctx[r].s, DPM_OK);
    CHECK_INT(ctx[r].bad, 0);
  }
}

TEST(comm_allreduce_repeated) { check_on_three_ranks(repeat_rank); }

/* ---- started allreduces ---------------------------------------------- */

/* Rounds of 1..4 started allreduces, then their waits, oldest first: 150
 * rounds pass every slot of the group's jobs several times. */
static void started_rank(rank_ctx *c) {
  int n = dpm_comm_size(c->comm);
  for (int it = 0; it < 150; it++) {
    float *buf[4] = {0};
    size_t count[4];
    int k = it % 4 + 1;
    for (int j = 0; j < k; j++) {
      count[j] = repeat_count(it * 4 + j) * 7; /* up to 35k floats: several chunks */
      buf[j] = repeat_values(c->rank, count[j], it + j);
      dpm_status s =
          dpm_comm_allreduce_start(c->comm, c->rank, buf[j], count[j], &c->err);
      if (s && !c->s) c->s = s;
    }
    for (int j = 0; j < k; j++) {
      dpm_status s = dpm_comm_allreduce_wait(c->comm, c->rank, &c->err);
      if (s && !c->s) c->s = s;
      if (!s) c->bad += repeat_bad(buf[j], count[j], n, it + j);
      free(buf[j]);
    }
  }
}

TEST(comm_started_allreduces_repeated) { check_on_three_ranks(started_rank); }

typedef struct {
  float *buf[2];
  size_t count;
  atomic_int rank0_done; /* rank 0's wait has returned */
  int rank1_saw_it;      /* rank 1 saw that before its own wait */
} early_state;

/* Rank 1 starts, then waits only after rank 0's wait has returned (or 5 s
 * passed): rank 0's wait must have summed everything, rank 1's chunks too. */
static void early_rank(rank_ctx *c) {
  early_state *st = c->shared;
  c->s = dpm_comm_allreduce_start(c->comm, c->rank, st->buf[c->rank], st->count, &c->err);
  if (c->rank == 1) {
    double t0 = now_ms();
    while (!atomic_load(&st->rank0_done) && now_ms() - t0 < 5000) sched_yield();
    st->rank1_saw_it = atomic_load(&st->rank0_done);
  }
  if (!c->s) c->s = dpm_comm_allreduce_wait(c->comm, c->rank, &c->err);
  if (c->rank == 0) atomic_store(&st->rank0_done, 1);
}

TEST(comm_started_allreduce_summed_by_the_rank_that_waits) {
  dpm_comm *comm;
  CHECK_INT(dpm_comm_local_create(2, 10000, &comm, NULL), DPM_OK);
  early_state st = {.count = 100003};
  float *ref = malloc(st.count * sizeof *ref);
  uint64_t x = 77;
  for (int r = 0; r < 2; r++) {
    st.buf[r] = malloc(st.count * sizeof(float));
    for (size_t i = 0; i < st.count; i++) st.buf[r][i] = messy(&x);
  }
  for (size_t i = 0; i < st.count; i++) ref[i] = st.buf[0][i] + st.buf[1][i];
  rank_ctx ctx[MAX_RANKS];
  int ok = run_ranks(comm, 2, early_rank, &st, ctx, -1);
  int same = !memcmp(st.buf[0], ref, st.count * sizeof *ref) &&
             !memcmp(st.buf[1], ref, st.count * sizeof *ref);
  for (int r = 0; r < 2; r++) free(st.buf[r]);
  free(ref);
  dpm_comm_destroy(comm);
  CHECK(ok);
  CHECK_INT(ctx[0].s, DPM_OK);
  CHECK_INT(ctx[1].s, DPM_OK);
  CHECK(st.rank1_saw_it);
  CHECK(same);
}

/* One thread playing both ranks: starts never wait for peers, so every
 * case is deterministic. */
TEST(comm_started_allreduce_errors) {
  dpm_comm *comm;
  dpm_err err;
  CHECK_INT(dpm_comm_local_create(2, 100, &comm, &err), DPM_OK);
  float a[41], b[41];
  for (int i = 0; i < 41; i++) a[i] = (float)i, b[i] = (float)(2 * i);
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "rank 0 has no started allreduce");
  /* disagreeing counts: both waits refuse, the buffers stay as they were */
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 40, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_start(comm, 1, b, 41, &err), DPM_OK);
  for (int r = 0; r < 2; r++) {
    CHECK_INT(dpm_comm_allreduce_wait(comm, r, &err), DPM_INVALID);
    CHECK_HAS(err.msg, "ranks disagree on the count: rank 0 has 40, rank 1 has 41");
  }
  CHECK(a[40] == 40 && b[40] == 80 && a[3] == 3 && b[3] == 6);
  /* at most DPM_COMM_MAX_STARTED in flight per rank; the group goes on */
  for (int k = 0; k < DPM_COMM_MAX_STARTED; k++)
    CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 1, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 1, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "already has 64 started allreduces");
  for (int k = 0; k < DPM_COMM_MAX_STARTED; k++)
    CHECK_INT(dpm_comm_allreduce_start(comm, 1, b, 1, &err), DPM_OK);
  for (int k = 0; k < DPM_COMM_MAX_STARTED; k++) {
    CHECK_INT(dpm_comm_allreduce_wait(comm, 1, &err), DPM_OK); /* rank 1 sums them */
    CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_OK);
  }
  CHECK(a[0] == 0 && b[0] == 0 && a[1] == 1 && b[1] == 2); /* 0 + 0, 64 times */
  /* a peer that never starts: the wait times out naming it, the group breaks */
  double t0 = now_ms();
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 41, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_TIMEOUT);
  CHECK(now_ms() - t0 >= 95);
  CHECK_HAS(err.msg, "allreduce: timed out after 100 ms; 1 of 2 ranks arrived");
  CHECK_HAS(err.msg, "missing rank(s) 1");
  CHECK(dpm_comm_broken(comm));
  CHECK_INT(dpm_comm_allreduce_start(comm, 1, b, 41, &err), DPM_STATE);
  CHECK_HAS(err.msg, "broken by an earlier timeout");
  CHECK_INT(dpm_comm_allreduce_wait(comm, 1, &err), DPM_INVALID);
  CHECK(a[40] == 40 && b[40] == 80);
  dpm_comm_destroy(comm);
}

/* ---- broadcast and barrier ------------------------------------------ */

typedef struct {
  int root;
  size_t bytes;
} bc_state;

static void bc_rank(rank_ctx *c) {
  bc_state *st = c->shared;
  unsigned char *buf = malloc(st->bytes ? st->bytes : 1);
  for (size_t i = 0; i < st->bytes; i++)
    buf[i] = c->rank == st->root ? (unsigned char)(i * 7 + (size_t)st->root) : 0xee;
  c->s = dpm_comm_broadcast(c->comm, c->rank, st->root, st->bytes ? buf : NULL, st->bytes,
                            &c->err);
  for (size_t i = 0; i < st->bytes && !c->s; i++)
    if (buf[i] != (unsigned char)(i * 7 + (size_t)st->root)) c->bad++;
  free(buf);
}

TEST(comm_broadcast_every_root) {
  static const size_t sizes[] = {0, 1, 63, 1001, 300007};
  for (int n = 1; n <= MAX_RANKS; n++) {
    dpm_comm *comm;
    CHECK_INT(dpm_comm_local_create(n, 5000, &comm, NULL), DPM_OK);
    for (int root = 0; root < n; root++) {
      for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        bc_state st = {root, sizes[si]};
        rank_ctx ctx[MAX_RANKS];
        int ok = run_ranks(comm, n, bc_rank, &st, ctx, -1);
        int good = ok;
        for (int r = 0; r < n; r++) good &= ctx[r].s == DPM_OK && !ctx[r].bad;
        if (!good) {
          dpm_comm_destroy(comm);
          printf("    n=%d root=%d bytes=%zu\n", n, root, sizes[si]);
        }
        CHECK(good);
      }
    }
    dpm_comm_destroy(comm);
  }
}

#define BARRIER_ROUNDS 50

typedef struct {
  atomic_int arrived[BARRIER_ROUNDS];
} barrier_state;

/* Nobody leaves round i before everybody has counted in to it. */
static void barrier_rank(rank_ctx *c) {
  barrier_state *st = c->shared;
  int n = dpm_comm_size(c->comm);
  for (int i = 0; i < BARRIER_ROUNDS; i++) {
    atomic_fetch_add(&st->arrived[i], 1);
    dpm_status s = dpm_comm_barrier(c->comm, c->rank, &c->err);
    if (s && !c->s) c->s = s;
    if (atomic_load(&st->arrived[i]) != n) c->bad++;
  }
}

TEST(comm_barrier) {
  dpm_comm *comm;
  CHECK_INT(dpm_comm_local_create(4, 5000, &comm, NULL), DPM_OK);
  barrier_state st;
  for (int i = 0; i < BARRIER_ROUNDS; i++) atomic_init(&st.arrived[i], 0);
  rank_ctx ctx[MAX_RANKS];
  int ok = run_ranks(comm, 4, barrier_rank, &st, ctx, -1);
  dpm_comm_destroy(comm);
  CHECK(ok);
  for (int r = 0; r < 4; r++) {
    CHECK_INT(ctx[r].s, DPM_OK);
    CHECK_INT(ctx[r].bad, 0);
  }
}

/* ---- timeouts -------------------------------------------------------- */

/* The ranks that do come start together (shared: a pthread barrier), so
 * none arrives after the group broke. */
static void timed_barrier_rank(rank_ctx *c) {
  pthread_barrier_wait(c->shared);
  double t0 = now_ms();
  c->s = dpm_comm_barrier(c->comm, c->rank, &c->err);
  c->ms = now_ms() - t0;
}

static void timed_allreduce_rank(rank_ctx *c) {
  float v[5] = {1, 2, 3, 4, 5};
  pthread_barrier_wait(c->shared);
  double t0 = now_ms();
  c->s = dpm_comm_allreduce(c->comm, c->rank, v, 5, &c->err);
  c->ms = now_ms() - t0;
}

TEST(comm_timeout_breaks_the_group) {
  dpm_comm *comm;
  CHECK_INT(dpm_comm_local_create(3, 100, &comm, NULL), DPM_OK);
  rank_ctx ctx[MAX_RANKS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  int ok =
      run_ranks(comm, 3, timed_barrier_rank, &start, ctx, 2); /* rank 2 never comes */
  pthread_barrier_destroy(&start);
  dpm_err err;
  float v[3] = {1, 2, 3};
  dpm_status late = dpm_comm_barrier(comm, 2, &err), later;
  char late_msg[sizeof err.msg];
  memcpy(late_msg, err.msg, sizeof late_msg);
  later = dpm_comm_allreduce(comm, 0, v, 3, &err);
  dpm_comm_destroy(comm);
  CHECK(ok);
  for (int r = 0; r < 2; r++) {
    CHECK_INT(ctx[r].s, DPM_TIMEOUT);
    CHECK_INT(ctx[r].err.code, DPM_TIMEOUT);
    CHECK_HAS(ctx[r].err.msg, "barrier");
    CHECK_HAS(ctx[r].err.msg, "missing rank(s) 2");
    CHECK(ctx[r].ms < 1500);
  }
  /* the first to arrive waited the whole timeout; later ones fail with it */
  CHECK(fmax(ctx[0].ms, ctx[1].ms) >= 95);
  CHECK_INT(late, DPM_STATE);
  CHECK_HAS(late_msg, "communicator broken by an earlier timeout");
  CHECK_INT(later, DPM_STATE);
  CHECK_HAS(err.msg, "allreduce");
  CHECK_HAS(err.msg, "broken");
  CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3);
}

TEST(comm_timeout_in_allreduce_names_the_ranks) {
  dpm_comm *comm;
  CHECK_INT(dpm_comm_local_create(4, 80, &comm, NULL), DPM_OK);
  rank_ctx ctx[MAX_RANKS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 3);
  int ok = run_ranks(comm, 4, timed_allreduce_rank, &start, ctx, 1);
  pthread_barrier_destroy(&start);
  dpm_err err;
  dpm_status later = dpm_comm_barrier(comm, 3, &err);
  dpm_comm_destroy(comm);
  CHECK(ok);
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    CHECK_INT(ctx[r].s, DPM_TIMEOUT);
    CHECK_HAS(ctx[r].err.msg, "allreduce: timed out after 80 ms; 3 of 4 ranks arrived");
    CHECK_HAS(ctx[r].err.msg, "missing rank(s) 1");
    CHECK(ctx[r].ms < 1500);
  }
  CHECK(fmax(fmax(ctx[0].ms, ctx[2].ms), ctx[3].ms) >= 75);
  CHECK_INT(later, DPM_STATE);
}

/* ---- bad arguments ------------------------------------------------- */

/* Refused disagreements between ranks are the contract suite's
 * (comm_contract_test.c), for every backend. */

TEST(comm_bad_arguments) {
  dpm_comm *comm = (dpm_comm *)1;
  dpm_err err;
  CHECK_INT(dpm_comm_local_create(0, 100, &comm, &err), DPM_INVALID);
  CHECK(comm == NULL);
  CHECK_HAS(err.msg, "size 0 outside 1..");
  CHECK_INT(dpm_comm_local_create(DPM_COMM_MAX_RANKS + 1, 100, &comm, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_local_create(2, 0, &comm, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "timeout");
  CHECK_INT(dpm_comm_local_create(2, 100, NULL, &err), DPM_INVALID);
  float v[1] = {1};
  CHECK_INT(dpm_comm_allreduce(NULL, 0, v, 1, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_local_create(2, 100, &comm, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce(comm, 2, v, 1, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "rank 2 outside the group of 2");
  CHECK_INT(dpm_comm_broadcast(comm, -1, 0, v, 4, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_barrier(comm, 5, &err), DPM_INVALID);
  CHECK(!strcmp(dpm_comm_backend(comm), "local"));
  CHECK_INT(dpm_comm_size(comm), 2);
  dpm_comm_destroy(comm);
  dpm_comm_destroy(NULL);
}

/* One rank alone: every collective is immediate and exact. */
TEST(comm_single_rank) {
  dpm_comm *comm;
  dpm_err err;
  CHECK_INT(dpm_comm_local_create(1, 100, &comm, &err), DPM_OK);
  float v[3] = {1.5f, -2, 3};
  CHECK_INT(dpm_comm_allreduce(comm, 0, v, 3, &err), DPM_OK);
  CHECK(v[0] == 1.5f && v[1] == -2 && v[2] == 3);
  CHECK_INT(dpm_comm_broadcast(comm, 0, 0, v, sizeof v, &err), DPM_OK);
  CHECK_INT(dpm_comm_barrier(comm, 0, &err), DPM_OK);
  CHECK_INT(dpm_comm_broadcast(comm, 0, 1, v, sizeof v, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_allreduce(comm, 0, NULL, 3, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_allreduce(comm, 0, NULL, 0, &err), DPM_OK);
  dpm_comm_destroy(comm);
}

/* Groups of every size come and go without leaks (ASan checks at exit). */
TEST(comm_create_destroy) {
  for (int n = 1; n <= DPM_COMM_MAX_RANKS; n = n * 2 + 1) {
    dpm_comm *comm;
    CHECK_INT(dpm_comm_local_create(n, 1000, &comm, NULL), DPM_OK);
    CHECK_INT(dpm_comm_size(comm), n);
    dpm_comm_destroy(comm);
  }
}

/* The factory's choice of backend (dpm_comm_choose): from the replicas'
 * device kind and the job's processes alone; and a staged group needs its
 * devices. */
TEST(comm_factory_chooses_the_backend_for_the_devices) {
  static const struct {
    dpm_device_kind device;
    int shards;
    dpm_comm_kind want;
  } cases[] = {
      {DPM_DEVICE_CPU, 1, DPM_COMM_LOCAL},    {DPM_DEVICE_CPU, 2, DPM_COMM_GLOO},
      {DPM_DEVICE_CUDA, 1, DPM_COMM_NCCL},    {DPM_DEVICE_CUDA, 3, DPM_COMM_NCCL},
      {DPM_DEVICE_FENCED, 1, DPM_COMM_LOCAL}, {DPM_DEVICE_FENCED, 2, DPM_COMM_STAGED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpm_comm_kind got = dpm_comm_choose(cases[i].device, cases[i].shards);
    if (got != cases[i].want)
      printf("    case %zu: %s, expected %s\n", i, dpm_comm_kind_name(got),
             dpm_comm_kind_name(cases[i].want));
    CHECK_INT(got, cases[i].want);
  }
  dpm_comm_config cfg = {.kind = DPM_COMM_STAGED, .size = 2, .timeout_ms = 100};
  dpm_comm *c = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_comm_create(&cfg, &c, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "staged comm: no devices for its 2 ranks");
  cfg.kind = DPM_COMM_KIND_COUNT;
  CHECK_INT(dpm_comm_create(&cfg, &c, &err), DPM_INVALID);
  CHECK(c == NULL);
}
