/* The communicator contract (comm/comm.h), run against every backend in
 * `backends` below: agreement (sums of every element type in `dtypes`,
 * bitwise alike on every rank; broadcast from every root; barrier; started
 * allreduces), refused disagreements (DPM_INVALID on every rank, buffers
 * untouched, the group still usable), timeouts that name the collective,
 * the missing rank and the collective's number, and the sticky failure
 * after one. Adding a backend is one row of `backends`; adding an element
 * type is one row of `dtypes`.
 *
 * Each backend runs CONTRACT_RANKS ranks as threads of this process,
 * through the factory (dpm_comm_create), on buffers of its devices: host
 * memory (local, gloo), fenced devices (staged: host code cannot touch
 * them), cuda GPUs (nccl: skipped without a GPU, or with fewer GPUs than a
 * test needs). Data are small integers, so any summation order gives the
 * same exact sums. Only the main thread CHECKs. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "backend/device.h"
#include "comm/comm.h"
#include "test.h"

#define CONTRACT_RANKS 3
#define N 40 /* elements per buffer */

/* ---- element types ----------------------------------------------------- */

typedef struct {
  dpm_comm_dtype t;
  void (*set)(void *buf, size_t i, double v);
  double (*get)(const void *buf, size_t i);
} contract_dtype;

static void set_f32(void *b, size_t i, double v) { ((float *)b)[i] = (float)v; }
static double get_f32(const void *b, size_t i) { return ((const float *)b)[i]; }
static void set_f64(void *b, size_t i, double v) { ((double *)b)[i] = v; }
static double get_f64(const void *b, size_t i) { return ((const double *)b)[i]; }

static const contract_dtype dtypes[] = {
    {DPM_COMM_F32, set_f32, get_f32},
    {DPM_COMM_F64, set_f64, get_f64},
};
#define N_DTYPES (int)(sizeof dtypes / sizeof *dtypes)

/* ---- backends ------------------------------------------------------------ */

typedef struct {
  dpm_comm_kind kind;
  dpm_device_kind device; /* where buffers live: CPU (host memory), FENCED, CUDA */
} contract_backend;

static const contract_backend backends[] = {
    {DPM_COMM_LOCAL, DPM_DEVICE_CPU},     /* threads, host memory */
    {DPM_COMM_GLOO, DPM_DEVICE_CPU},      /* one process: no network */
    {DPM_COMM_STAGED, DPM_DEVICE_FENCED}, /* gloo on host copies */
    {DPM_COMM_NCCL, DPM_DEVICE_CUDA},     /* a GPU per rank; skipped without */
    {DPM_COMM_LOOP, DPM_DEVICE_CPU},      /* test builds' smallest backend */
};
#define N_BACKENDS (int)(sizeof backends / sizeof *backends)

typedef struct {
  const contract_backend *b;
  int n;     /* ranks */
  int bytes; /* of each buffer: N doubles, whatever the type */
  dpm_comm *comm;
  dpm_dev *dev[CONTRACT_RANKS]; /* device backends: each rank's device */
  void *buf[CONTRACT_RANKS];    /* each rank's buffer (on its device), as comm takes it */
  dpm_dptr
      dbuf[CONTRACT_RANKS]; /* device backends: the same, as the device API takes it */
  size_t got[CONTRACT_RANKS];
} contract_fixture;

static const char *bname(const contract_fixture *f) {
  return dpm_comm_kind_name(f->b->kind);
}

/* A group of the backend over up to CONTRACT_RANKS ranks (as many as it
 * has devices for), with a buffer per rank: 1; SKIP (and a line saying
 * why) when this machine has fewer than min_ranks devices for it; 0 (and
 * the error) when it fails. */
#define SKIP (-1)
static int fixture(contract_fixture *f, const contract_backend *b, int timeout_ms,
                   int min_ranks) {
  memset(f, 0, sizeof *f);
  f->b = b;
  f->bytes = N * sizeof(double);
  dpm_err err = {0};
  int host = b->device == DPM_DEVICE_CPU;
  for (int r = 0; !host && r < CONTRACT_RANKS; r++, f->n++)
    if (dpm_dev_get((dpm_device){b->device, r}, &f->dev[r], &err)) break;
  if (host) f->n = CONTRACT_RANKS;
  if (f->n < min_ranks) {
    printf("    %s: skipped (%d device(s) of %d needed%s%s)\n",
           dpm_comm_kind_name(b->kind), f->n, min_ranks, err.msg[0] ? ": " : "", err.msg);
    return SKIP;
  }
  void *streams[CONTRACT_RANKS] = {0};
  for (int r = 0; !host && r < f->n; r++) streams[r] = dpm_dev_stream(f->dev[r]);
  dpm_comm_config cfg = {.kind = b->kind,
                         .size = f->n,
                         .timeout_ms = timeout_ms,
                         .streams = streams,
                         .devs = host ? NULL : f->dev};
  if (dpm_comm_create(&cfg, &f->comm, &err)) {
    printf("    %s: %s\n", dpm_comm_kind_name(b->kind), err.msg);
    return 0;
  }
  for (int r = 0; r < f->n; r++) {
    if (!host) f->dbuf[r] = dpm_dev_alloc(f->dev[r], (size_t)f->bytes, &f->got[r]);
    f->buf[r] = host ? calloc(1, (size_t)f->bytes) : dpm_dptr_raw(f->dbuf[r]);
    if (!f->buf[r]) return 0;
  }
  return 1;
}

static void fixture_fini(contract_fixture *f) {
  dpm_comm_destroy(f->comm);
  for (int r = 0; r < f->n; r++) {
    if (!f->buf[r]) continue;
    if (f->dev[r])
      dpm_dev_free(f->dev[r], f->dbuf[r], f->got[r]);
    else
      free(f->buf[r]);
  }
}

/* Rank r's buffer from host memory h, and back. */
static void put(contract_fixture *f, int r, const void *h) {
  if (f->dev[r])
    dpm_dev_to_device(f->dev[r], f->dbuf[r], h, (size_t)f->bytes);
  else
    memcpy(f->buf[r], h, (size_t)f->bytes);
}
static void take(contract_fixture *f, int r, void *h) {
  if (f->dev[r])
    dpm_dev_to_host(f->dev[r], h, f->dbuf[r], (size_t)f->bytes);
  else
    memcpy(h, f->buf[r], (size_t)f->bytes);
}

/* Rank r's value at element i before a collective: small integers. */
static double value(int r, size_t i) { return (double)(r * 1000 + (int)i); }

/* Fill every rank's buffer with value(r, i) in type d. */
static void fill(contract_fixture *f, const contract_dtype *d) {
  double h[N];
  for (int r = 0; r < f->n; r++) {
    for (size_t i = 0; i < N; i++) d->set(h, i, value(r, i));
    put(f, r, h);
  }
}

/* Whether rank r's buffer holds the sum of the ranks' values (sum), the
 * value of rank `from` (broadcast), in type d; prints the first wrong one. */
static int holds(contract_fixture *f, const contract_dtype *d, int r, int sum, int from) {
  double h[N];
  take(f, r, h);
  for (size_t i = 0; i < N; i++) {
    double want = 0;
    for (int k = 0; sum && k < f->n; k++) want += value(k, i);
    if (!sum) want = value(from, i);
    if (d->get(h, i) != want) {
      printf("    %s rank %d [%zu] = %g, expected %g\n", bname(f), r, i, d->get(h, i),
             want);
      return 0;
    }
  }
  return 1;
}

/* ---- ranks on threads ---------------------------------------------------- */

typedef enum {
  DO_ALLREDUCE,
  DO_BROADCAST,
  DO_BARRIER,
  DO_STARTED,
  DO_NOTHING
} contract_do;

/* What one rank calls. */
typedef struct {
  contract_do what;
  dpm_comm_dtype t; /* allreduce */
  size_t n;         /* elements (allreduce) or bytes (broadcast) */
  int root;
  int null_buf;
} contract_call;

typedef struct {
  contract_fixture *f;
  int rank;
  contract_call call;
  dpm_status s;
  dpm_err err;
} contract_rank;

static dpm_status call_once(contract_fixture *f, int r, const contract_call *c,
                            dpm_err *err) {
  void *buf = c->null_buf ? NULL : f->buf[r];
  switch (c->what) {
  case DO_ALLREDUCE:
    return c->t == DPM_COMM_F64 ? dpm_comm_allreduce_f64(f->comm, r, buf, c->n, err)
                                : dpm_comm_allreduce(f->comm, r, buf, c->n, err);
  case DO_BROADCAST:
    return dpm_comm_broadcast(f->comm, r, c->root, buf, c->n, err);
  case DO_BARRIER:
    return dpm_comm_barrier(f->comm, r, err);
  case DO_STARTED: {
    dpm_status s = dpm_comm_allreduce_start(f->comm, r, buf, c->n, err);
    return s ? s : dpm_comm_allreduce_wait(f->comm, r, err);
  }
  default:
    return DPM_OK;
  }
}

static void *rank_main(void *arg) {
  contract_rank *cr = arg;
  cr->s = call_once(cr->f, cr->rank, &cr->call, &cr->err);
  return NULL;
}

/* Every rank r of f calls calls[r] on its own thread (DO_NOTHING: the rank
 * never arrives); joins them. */
static int run(contract_fixture *f, const contract_call *calls, contract_rank *out) {
  pthread_t th[CONTRACT_RANKS];
  int ok = 1, started[CONTRACT_RANKS] = {0};
  for (int r = 0; r < f->n; r++) {
    out[r] = (contract_rank){.f = f, .rank = r, .call = calls[r]};
    if (calls[r].what != DO_NOTHING)
      ok &= started[r] = !pthread_create(&th[r], NULL, rank_main, &out[r]);
  }
  for (int r = 0; r < f->n; r++)
    if (started[r]) pthread_join(th[r], NULL);
  return ok;
}

/* The same call on every rank. */
static int run_all(contract_fixture *f, contract_call c, contract_rank *out) {
  contract_call calls[CONTRACT_RANKS];
  for (int r = 0; r < CONTRACT_RANKS; r++) calls[r] = c;
  return run(f, calls, out);
}

static int all_ok(contract_fixture *f, const contract_rank *out) {
  for (int r = 0; r < f->n; r++)
    if (out[r].s) {
      printf("    %s rank %d: %s: %s\n", bname(f), r, dpm_status_name(out[r].s),
             out[r].err.msg);
      return 0;
    }
  return 1;
}

#define TIMEOUT_MS 20000 /* generous: the contract tests are not about speed */

/* Runs body on a fresh group of every backend (timeout_ms, at least
 * min_ranks ranks; a backend this machine cannot run so is skipped): 1
 * when every body returned 1. */
static int on_every_backend(int timeout_ms, int min_ranks,
                            int (*body)(contract_fixture *)) {
  int ok = 1;
  for (int b = 0; b < N_BACKENDS; b++) {
    contract_fixture f;
    int made = fixture(&f, &backends[b], timeout_ms, min_ranks);
    if (made == 1 && !body(&f)) {
      printf("    %s: failed\n", bname(&f));
      made = 0;
    }
    fixture_fini(&f);
    ok &= made != 0;
  }
  return ok;
}

/* ---- agreement --------------------------------------------------------- */

static int sums_every_dtype(contract_fixture *f) {
  int ok = 1;
  for (int d = 0; d < N_DTYPES && ok; d++) {
    contract_rank out[CONTRACT_RANKS];
    fill(f, &dtypes[d]);
    ok = run_all(f, (contract_call){.what = DO_ALLREDUCE, .t = dtypes[d].t, .n = N},
                 out) &&
         all_ok(f, out);
    for (int r = 0; r < f->n && ok; r++) ok = holds(f, &dtypes[d], r, 1, 0);
    if (!ok) printf("    %s: %s\n", bname(f), dpm_comm_dtype_name(dtypes[d].t));
  }
  return ok;
}

TEST(contract_allreduce_sums_every_dtype_alike_on_every_rank) {
  CHECK(on_every_backend(TIMEOUT_MS, 1, sums_every_dtype));
}

static int started_and_barrier(contract_fixture *f) {
  contract_rank out[CONTRACT_RANKS];
  fill(f, &dtypes[0]);
  int ok = run_all(f, (contract_call){.what = DO_STARTED, .n = N}, out) && all_ok(f, out);
  for (int r = 0; r < f->n && ok; r++) ok = holds(f, &dtypes[0], r, 1, 0);
  ok = ok && run_all(f, (contract_call){.what = DO_BARRIER}, out) && all_ok(f, out);
  return ok;
}

TEST(contract_started_allreduce_and_barrier) {
  CHECK(on_every_backend(TIMEOUT_MS, 1, started_and_barrier));
}

static int broadcast_every_root(contract_fixture *f) {
  int ok = 1;
  for (int root = 0; root < f->n && ok; root++) {
    contract_rank out[CONTRACT_RANKS];
    fill(f, &dtypes[1]);
    ok =
        run_all(
            f, (contract_call){.what = DO_BROADCAST, .n = (size_t)f->bytes, .root = root},
            out) &&
        all_ok(f, out);
    for (int r = 0; r < f->n && ok; r++) ok = holds(f, &dtypes[1], r, 0, root);
  }
  return ok;
}

TEST(contract_broadcast_from_every_root) {
  CHECK(on_every_backend(TIMEOUT_MS, 1, broadcast_every_root));
}

/* ---- refused disagreements ------------------------------------------------ */

/* Rank 1 (of every backend's group of at least two) calls `odd`, the others
 * `even`: every rank gets DPM_INVALID with msg, every buffer is as it was,
 * and the group then sums as before. */
static int refused(const contract_backend *b, contract_call even, contract_call odd,
                   const char *msg) {
  contract_fixture f;
  int made = fixture(&f, b, TIMEOUT_MS, 2);
  if (made != 1) {
    fixture_fini(&f);
    return made == SKIP;
  }
  contract_call calls[CONTRACT_RANKS];
  for (int r = 0; r < f.n; r++) calls[r] = r == 1 ? odd : even;
  contract_rank out[CONTRACT_RANKS];
  const contract_dtype *d = &dtypes[even.t == DPM_COMM_F64];
  fill(&f, d);
  int ok = run(&f, calls, out);
  for (int r = 0; r < f.n && ok; r++) {
    ok = out[r].s == DPM_INVALID && strstr(out[r].err.msg, msg) && holds(&f, d, r, 0, r);
    if (!ok)
      printf("    %s rank %d: %s: %s (expected INVALID: %s)\n", bname(&f), r,
             dpm_status_name(out[r].s), out[r].err.msg, msg);
  }
  ok = ok && run_all(&f, (contract_call){.what = DO_ALLREDUCE, .t = d->t, .n = N}, out) &&
       all_ok(&f, out);
  for (int r = 0; r < f.n && ok; r++) ok = holds(&f, d, r, 1, 0);
  fixture_fini(&f);
  return ok;
}

TEST(contract_disagreements_are_refused_on_every_rank) {
  contract_call ar = {.what = DO_ALLREDUCE, .n = N};
  contract_call shorter = {.what = DO_ALLREDUCE, .n = N - 1};
  contract_call doubles = {.what = DO_ALLREDUCE, .t = DPM_COMM_F64, .n = N};
  contract_call barrier = {.what = DO_BARRIER};
  contract_call bc0 = {.what = DO_BROADCAST, .n = 64, .root = 0};
  contract_call bc1 = {.what = DO_BROADCAST, .n = 64, .root = 1};
  contract_call no_buf = {.what = DO_ALLREDUCE, .n = N, .null_buf = 1};
  contract_call started = {.what = DO_STARTED, .n = N};
  contract_call started_shorter = {.what = DO_STARTED, .n = N - 1};
  contract_call short17 = {.what = DO_ALLREDUCE, .n = 17};
  contract_call long1000 = {.what = DO_ALLREDUCE, .n = 1000}; /* checked before use */
  contract_call bc_far = {.what = DO_BROADCAST, .n = 64, .root = 99};
  for (int b = 0; b < N_BACKENDS; b++) {
    const contract_backend *be = &backends[b];
    CHECK(
        refused(be, ar, shorter,
                "allreduce: ranks disagree on the count: rank 0 has 40, rank 1 has 39"));
    CHECK(refused(be, ar, barrier,
                  "collective mismatch: rank 0 called allreduce, rank 1 called barrier"));
    CHECK(refused(be, ar, doubles,
                  "allreduce: ranks disagree on the element type: rank 0 passes floats, "
                  "rank 1 doubles"));
    CHECK(refused(be, bc0, bc1, "broadcast: ranks disagree on the root"));
    CHECK(refused(be, ar, no_buf, "allreduce: rank 1 passed no buffer for 40"));
    CHECK(refused(be, short17, long1000, "rank 1 has 1000"));
    CHECK(
        refused(be, started, started_shorter,
                "allreduce: ranks disagree on the count: rank 0 has 40, rank 1 has 39"));
    CHECK(refused(be, bc_far, bc_far, "broadcast: root 99 outside the group of"));
  }
}

/* ---- timeouts and the sticky failure ------------------------------------------ */

static int timeout_breaks(contract_fixture *f) {
  int missing = f->n - 1;
  contract_call calls[CONTRACT_RANKS];
  for (int r = 0; r < f->n; r++)
    calls[r] = (contract_call){.what = r == missing ? DO_NOTHING : DO_ALLREDUCE, .n = N};
  contract_rank out[CONTRACT_RANKS], later[CONTRACT_RANKS];
  char want[64];
  snprintf(want, sizeof want, "missing rank(s) %d (collective 0)", missing);
  fill(f, &dtypes[0]);
  int ok = run(f, calls, out);
  for (int r = 0; r < missing && ok; r++) {
    ok = out[r].s == DPM_TIMEOUT &&
         strstr(out[r].err.msg, "allreduce: timed out after") &&
         strstr(out[r].err.msg, want);
    if (!ok)
      printf("    %s rank %d: %s: %s (expected TIMEOUT: %s)\n", bname(f), r,
             dpm_status_name(out[r].s), out[r].err.msg, want);
  }
  /* sticky: every later call, by any rank, fails at once quoting it */
  ok = ok && dpm_comm_broken(f->comm);
  dpm_err err = {0};
  if (ok && (dpm_comm_failure(f->comm, &err) != DPM_TIMEOUT || !strstr(err.msg, want))) {
    printf("    %s failure: %s: %s (expected TIMEOUT: %s)\n", bname(f),
           dpm_status_name(err.code), err.msg, want);
    ok = 0;
  }
  ok = ok && run_all(f, (contract_call){.what = DO_BARRIER}, later);
  for (int r = 0; r < f->n && ok; r++) {
    ok = later[r].s == DPM_STATE &&
         strstr(later[r].err.msg, "barrier: communicator broken "
                                  "by an earlier") &&
         strstr(later[r].err.msg, want);
    if (!ok)
      printf("    %s rank %d later: %s: %s\n", bname(f), r, dpm_status_name(later[r].s),
             later[r].err.msg);
  }
  return ok;
}

TEST(contract_timeout_names_the_missing_rank_and_breaks_the_group) {
  CHECK(on_every_backend(150, 2, timeout_breaks));
}

/* A started allreduce that a rank never starts, caught by a blocking
 * collective's timeout: the barrier's ranks get DPM_TIMEOUT, and the wait
 * that follows fails with DPM_STATE quoting it (it did not time out
 * itself: the group was broken before). A backend whose start meets the
 * ranks (nccl) times out in the start instead, and its barrier fails with
 * DPM_STATE. */
typedef struct {
  contract_fixture *f;
  int rank;
  dpm_status start, barrier, wait;
  dpm_err e_start, e_barrier, e_wait;
} start_barrier_rank;

static void *start_barrier_main(void *arg) {
  start_barrier_rank *sr = arg;
  contract_fixture *f = sr->f;
  sr->start =
      dpm_comm_allreduce_start(f->comm, sr->rank, f->buf[sr->rank], N, &sr->e_start);
  sr->barrier = dpm_comm_barrier(f->comm, sr->rank, &sr->e_barrier);
  sr->wait =
      sr->start ? DPM_STATE : dpm_comm_allreduce_wait(f->comm, sr->rank, &sr->e_wait);
  return NULL;
}

static int started_then_timeout(contract_fixture *f) {
  int missing = f->n - 1, ok = 1;
  start_barrier_rank sr[CONTRACT_RANKS];
  pthread_t th[CONTRACT_RANKS];
  fill(f, &dtypes[0]);
  for (int r = 0; r < missing; r++) {
    sr[r] = (start_barrier_rank){.f = f, .rank = r};
    if (pthread_create(&th[r], NULL, start_barrier_main, &sr[r])) return 0;
  }
  for (int r = 0; r < missing; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < missing && ok; r++) {
    const start_barrier_rank *x = &sr[r];
    if (x->start) /* the start met the ranks and timed out; the barrier came later */
      ok = x->start == DPM_TIMEOUT && x->barrier == DPM_STATE;
    else
      ok = x->barrier == DPM_TIMEOUT && strstr(x->e_barrier.msg, "barrier: timed out") &&
           x->wait == DPM_STATE &&
           strstr(x->e_wait.msg, "allreduce: communicator broken by an earlier") &&
           strstr(x->e_wait.msg, "barrier: timed out");
    if (!ok)
      printf("    %s rank %d: start %s (%s), barrier %s (%s), wait %s (%s)\n", bname(f),
             r, dpm_status_name(x->start), x->e_start.msg, dpm_status_name(x->barrier),
             x->e_barrier.msg, dpm_status_name(x->wait), x->e_wait.msg);
  }
  return ok;
}

TEST(contract_started_allreduce_caught_by_a_timeout_fails_as_broken) {
  CHECK(on_every_backend(150, 2, started_then_timeout));
}
