/* Gloo communicator (comm/gloo.c): processes forked from the test, each
 * with its local ranks on threads, meeting on 127.0.0.1 through a file
 * store in a fresh directory (the redis and key-value stores too). Checks
 * exact sums and bitwise identical results on every rank of the job (2 and
 * 3 processes of 1 rank, 2 of 2), broadcasts from several roots, the
 * barrier, started allreduces against the blocking call, disagreements
 * refused on every rank, and the failures: a rank or a process that never
 * comes, a peer killed mid-allreduce, a reused rendezvous prefix, each
 * measured against the timeout. Children report through shared memory and
 * exit through exit(), so LeakSanitizer checks them too (a leak makes
 * their exit status 23); only the parent CHECKs. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "test.h"

#define GT_PROCS 4
#define GT_LOCAL 2
#define GT_RANKS (GT_PROCS * GT_LOCAL)
/* A child still running this long after its start has hung: killed, failed. */
#define GT_DEADLINE_MS 15000

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t); /* system-wide: comparable across processes */
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* What one rank reports. */
typedef struct {
  int s;            /* status of the call under test */
  char msg[512];    /* its message */
  double t0, t1;    /* when that call began and returned */
  int s2;           /* status of a later call (after a failure) */
  char msg2[512];   /* its message */
  int broken;       /* dpm_comm_broken after the calls */
  int bad;          /* wrong values the rank saw itself */
  uint64_t hash[4]; /* results, to compare across the job */
  int done;         /* reached the end of its part */
} gt_slot;

/* Shared by the parent and its children (MAP_SHARED). */
typedef struct {
  gt_slot rank[GT_RANKS]; /* by job-wide rank */
  int create_s[GT_PROCS]; /* each process's dpm_comm_create */
  char create_msg[GT_PROCS][512];
  double create_t0[GT_PROCS], create_t1[GT_PROCS];
  atomic_int count; /* test's own: calls done */
  atomic_int flag;  /* test's own: go on */
} gt_shared;

/* One rank's view, for the test's rank function. */
typedef struct gt_rank {
  dpm_comm *comm;
  int rank, jrank, proc, nproc, size, world; /* local, job-wide; topology */
  gt_shared *sh;
  gt_slot *out;
  const void *arg;
} gt_rank;
typedef void (*gt_rank_fn)(gt_rank *r);

/* One run: nproc processes of size ranks. */
typedef struct {
  int nproc, size, timeout_ms;
  char store[256];
  char prefix[128];
  gt_rank_fn fn;
  const void *arg;
  int absent;          /* a process that never comes (-1: none) */
  unsigned bf16_procs; /* processes whose float sums cross as bf16 (bit p) */
} gt_spec;

static gt_shared *gt_map(void) {
  void *p = mmap(NULL, sizeof(gt_shared), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memset(p, 0, sizeof(gt_shared));
  return p;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

/* A fresh directory for a test's stores; removed by gt_clean. */
static int gt_dir(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/dpm-gloo-test-XXXXXX");
  return mkdtemp(dir) != NULL;
}
static void gt_clean(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

typedef struct {
  gt_rank r;
  gt_rank_fn fn;
} gt_start;

static void *gt_rank_main(void *arg) {
  gt_start *st = arg;
  st->r.out = &st->r.sh->rank[st->r.jrank];
  st->fn(&st->r);
  st->r.out->broken = dpm_comm_broken(st->r.comm);
  st->r.out->done = 1;
  return NULL;
}

/* Process p of the run: create the group, run the ranks, destroy it. */
static void gt_child(const gt_spec *sp, gt_shared *sh, int p) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dpm_comm_config cfg = {
      .kind = DPM_COMM_GLOO,
      .size = sp->size,
      .rank_base = p * sp->size,
      .world = sp->nproc * sp->size,
      .timeout_ms = sp->timeout_ms,
      .rendezvous = {.store = sp->store, .prefix = sp->prefix, .iface = "lo"},
      .wire = sp->bf16_procs >> p & 1 ? DPM_COMM_WIRE_BF16 : DPM_COMM_WIRE_F32,
  };
  dpm_comm *comm = NULL;
  dpm_err err = {0};
  sh->create_t0[p] = now_ms();
  sh->create_s[p] = dpm_comm_create(&cfg, &comm, &err);
  sh->create_t1[p] = now_ms();
  snprintf(sh->create_msg[p], sizeof sh->create_msg[p], "%s", err.msg);
  if (!comm || !sp->fn) {
    dpm_comm_destroy(comm);
    exit(0);
  }
  pthread_t th[GT_LOCAL];
  gt_start st[GT_LOCAL];
  int ok = 1;
  for (int r = 0; r < sp->size; r++) {
    st[r] = (gt_start){.r = {.comm = comm,
                             .rank = r,
                             .jrank = p * sp->size + r,
                             .proc = p,
                             .nproc = sp->nproc,
                             .size = sp->size,
                             .world = sp->nproc * sp->size,
                             .sh = sh,
                             .arg = sp->arg},
                       .fn = sp->fn};
    if (pthread_create(&th[r], NULL, gt_rank_main, &st[r])) ok = 0, st[r].fn = NULL;
  }
  for (int r = 0; r < sp->size; r++)
    if (st[r].fn) pthread_join(th[r], NULL);
  dpm_comm_destroy(comm);
  exit(ok ? 0 : 3);
}

/* Fork the run's processes (the absent one excepted) into pids. */
static int gt_fork(const gt_spec *sp, gt_shared *sh, pid_t *pids) {
  fflush(stdout);
  fflush(stderr);
  for (int p = 0; p < sp->nproc; p++) {
    pids[p] = -1;
    if (p == sp->absent) continue;
    pids[p] = fork();
    if (pids[p] < 0) return 0;
    if (pids[p] == 0) gt_child(sp, sh, p);
  }
  return 1;
}

/* Reap the processes; one still running after GT_DEADLINE_MS is killed.
 * status[p]: the wait status (-1: not forked). Returns 1 if every process
 * exited 0 (LeakSanitizer's exit status is 23). */
static int gt_reap(int nproc, pid_t *pids, int *status) {
  double until = now_ms() + GT_DEADLINE_MS;
  int ok = 1;
  for (int p = 0; p < nproc; p++) {
    status[p] = -1;
    if (pids[p] <= 0) continue;
    for (;;) {
      pid_t w = waitpid(pids[p], &status[p], WNOHANG);
      if (w == pids[p]) break;
      if (w < 0 && errno != EINTR) break;
      if (now_ms() > until) {
        kill(pids[p], SIGKILL);
        waitpid(pids[p], &status[p], 0);
        printf("    process %d hung: killed\n", p);
        break;
      }
      usleep(2000);
    }
    if (!WIFEXITED(status[p]) || WEXITSTATUS(status[p])) {
      printf("    process %d ended with status %#x\n", p, status[p]);
      ok = 0;
    }
  }
  return ok;
}

static int gt_run(const gt_spec *sp, gt_shared *sh) {
  pid_t pids[GT_PROCS];
  int status[GT_PROCS];
  if (!gt_fork(sp, sh, pids)) return 0;
  return gt_reap(sp->nproc, pids, status);
}

static int gt_formations;

/* A spec for nproc x size ranks on the file store in dir, a fresh prefix. */
static gt_spec gt_file_spec(const char *dir, int nproc, int size, int timeout_ms,
                            gt_rank_fn fn) {
  gt_spec sp = {
      .nproc = nproc, .size = size, .timeout_ms = timeout_ms, .fn = fn, .absent = -1};
  snprintf(sp.store, sizeof sp.store, "file://%s/store", dir); /* made by create */
  snprintf(sp.prefix, sizeof sp.prefix, "unit/%d-%d", (int)getpid(), gt_formations++);
  return sp;
}

/* Every process created its group. */
static int gt_created(const gt_spec *sp, gt_shared *sh) {
  int ok = 1;
  for (int p = 0; p < sp->nproc; p++)
    if (p != sp->absent && sh->create_s[p]) {
      printf("    process %d: create: %s: %s\n", p, dpm_status_name(sh->create_s[p]),
             sh->create_msg[p]);
      ok = 0;
    }
  return ok;
}

/* ---- values ------------------------------------------------------------ */

/* Integer-valued floats: their sum over any number of ranks is exact. */
static void int_values(float *b, size_t n, int jrank, int it) {
  for (size_t i = 0; i < n; i++) b[i] = (float)((jrank + 1) * (int)(i % 7) + it);
}
static int int_bad(const float *b, size_t n, int world, int it) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += b[i] != (float)(world * (world + 1) / 2 * (int)(i % 7) + world * it);
  return bad;
}

/* Floats of wildly different magnitudes: any change of summation order
 * shows in the low bits. */
static void messy_values(float *b, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    float m = (float)(x % 2000003) / 1000003.0f - 1.0f;
    b[i] = ldexpf(m, (int)(x >> 40) % 24 - 12);
  }
}

static void fail_with(gt_rank *r, dpm_status s, const dpm_err *e) {
  if (r->out->s <= 0) {
    r->out->s = s;
    snprintf(r->out->msg, sizeof r->out->msg, "%s", e->msg);
  }
}

/* ---- sums ---------------------------------------------------------------- */

static const size_t sum_counts[] = {0, 1, 17, 100003, 1 << 20};
#define N_COUNTS (sizeof sum_counts / sizeof *sum_counts)
#define MESSY_N 300007

/* Blocking allreduces of every count (exact sums), then messy data reduced
 * by a blocking call and by started ones (three in flight, a blocking call
 * among them, waited oldest first): each started result equals the
 * blocking call's bit for bit. */
static void sum_rank(gt_rank *r) {
  dpm_err e = {0};
  r->out->s = DPM_OK;
  for (size_t c = 0; c < N_COUNTS; c++) {
    size_t n = sum_counts[c];
    float *b = n ? malloc(n * sizeof *b) : NULL;
    int_values(b, n, r->jrank, (int)c);
    dpm_status s = dpm_comm_allreduce(r->comm, r->rank, b, n, &e);
    if (s)
      fail_with(r, s, &e);
    else
      r->out->bad += int_bad(b, n, r->world, (int)c);
    if (c == N_COUNTS - 1) r->out->hash[0] = fnv(b, n * sizeof *b);
    free(b);
  }
  float *a = malloc(MESSY_N * sizeof *a), *b = malloc(MESSY_N * sizeof *b);
  float *c = malloc(MESSY_N / 2 * sizeof *c), *c2 = malloc(MESSY_N / 2 * sizeof *c2);
  float *d = malloc(1000 * sizeof *d);
  messy_values(a, MESSY_N, (uint64_t)r->jrank + 1);
  memcpy(b, a, MESSY_N * sizeof *a);
  messy_values(c, MESSY_N / 2, (uint64_t)r->jrank + 100);
  memcpy(c2, c, MESSY_N / 2 * sizeof *c);
  int_values(d, 1000, r->jrank, 9);
  dpm_status s = dpm_comm_allreduce(r->comm, r->rank, a, MESSY_N, &e);
  if (s) fail_with(r, s, &e);
  if (!s && (s = dpm_comm_allreduce_start(r->comm, r->rank, b, MESSY_N, &e)))
    fail_with(r, s, &e);
  if (!s && (s = dpm_comm_allreduce_start(r->comm, r->rank, c, MESSY_N / 2, &e)))
    fail_with(r, s, &e);
  /* a blocking call in between: it runs after the started ones, which it
   * does not complete */
  float between[10];
  int_values(between, 10, r->jrank, 5);
  if (!s && (s = dpm_comm_allreduce(r->comm, r->rank, between, 10, &e)))
    fail_with(r, s, &e);
  if (!s) r->out->bad += int_bad(between, 10, r->world, 5);
  if (!s && (s = dpm_comm_allreduce_start(r->comm, r->rank, d, 1000, &e)))
    fail_with(r, s, &e);
  /* the oldest first: b is done after the first wait */
  if (!s && (s = dpm_comm_allreduce_wait(r->comm, r->rank, &e))) fail_with(r, s, &e);
  if (!s) r->out->bad += memcmp(a, b, MESSY_N * sizeof *a) != 0;
  if (!s && (s = dpm_comm_allreduce_wait(r->comm, r->rank, &e))) fail_with(r, s, &e);
  if (!s && (s = dpm_comm_allreduce_wait(r->comm, r->rank, &e))) fail_with(r, s, &e);
  if (!s) r->out->bad += int_bad(d, 1000, r->world, 9);
  if (!s && (s = dpm_comm_allreduce(r->comm, r->rank, c2, MESSY_N / 2, &e)))
    fail_with(r, s, &e);
  if (!s) r->out->bad += memcmp(c, c2, MESSY_N / 2 * sizeof *c) != 0;
  r->out->hash[1] = fnv(a, MESSY_N * sizeof *a);
  r->out->hash[2] = fnv(c, MESSY_N / 2 * sizeof *c);
  free(a), free(b), free(c), free(c2), free(d);
}

/* Every rank of the job: OK, nothing wrong, the same bits as rank 0. */
static int gt_all_same(const gt_spec *sp, gt_shared *sh, int hashes) {
  int ok = 1, world = sp->nproc * sp->size;
  for (int r = 0; r < world; r++) {
    gt_slot *o = &sh->rank[r];
    if (!o->done || o->s || o->bad) {
      printf("    %dx%d rank %d: done %d, %s (%s), %d wrong\n", sp->nproc, sp->size, r,
             o->done, o->s >= 0 ? dpm_status_name(o->s) : "-", o->msg, o->bad);
      ok = 0;
    }
    for (int h = 0; h < hashes; h++)
      if (o->hash[h] != sh->rank[0].hash[h]) {
        printf("    %dx%d rank %d: result %d differs from rank 0's\n", sp->nproc,
               sp->size, r, h);
        ok = 0;
      }
  }
  return ok;
}

TEST(gloo_allreduce_exact_and_identical_2x1_3x1_2x2) {
  static const int topo[][2] = {{2, 1}, {3, 1}, {2, 2}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1;
  for (int t = 0; t < 3 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], 5000, sum_rank);
    ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 3);
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* ---- double sums ---------------------------------------------------------- */

#define F64_N 100003

/* Integer-valued doubles above float's precision (2^40 + ...): their sum
 * over any number of ranks is exact in double, in any order, and wrong
 * after any trip through floats. */
static void big_values(double *b, size_t n, int jrank, int it) {
  for (size_t i = 0; i < n; i++)
    b[i] = ldexp(1, 40) + (double)((jrank + 1) * (int)(i % 7 + 1)) + it;
}
static int big_bad(const double *b, size_t n, int world, int it) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += b[i] != world * (ldexp(1, 40) + it) +
                       (double)(world * (world + 1) / 2 * (int)(i % 7 + 1));
  return bad;
}

/* dpm_comm_allreduce_f64: exact sums of doubles that floats cannot hold
 * (1, 17 and F64_N of them), messy doubles hashed to compare every rank's
 * bits, with float allreduces in between on the same group. */
static void f64_rank(gt_rank *r) {
  dpm_err e = {0};
  r->out->s = DPM_OK;
  static const size_t ns[] = {1, 17, F64_N};
  for (size_t c = 0; c < 3; c++) {
    double *b = malloc(ns[c] * sizeof *b);
    big_values(b, ns[c], r->jrank, (int)c);
    dpm_status s = dpm_comm_allreduce_f64(r->comm, r->rank, b, ns[c], &e);
    if (s)
      fail_with(r, s, &e);
    else
      r->out->bad += big_bad(b, ns[c], r->world, (int)c);
    free(b);
    float f[10];
    int_values(f, 10, r->jrank, (int)c);
    if ((s = dpm_comm_allreduce(r->comm, r->rank, f, 10, &e)))
      fail_with(r, s, &e);
    else
      r->out->bad += int_bad(f, 10, r->world, (int)c);
  }
  double *m = malloc(F64_N * sizeof *m);
  uint64_t x = (uint64_t)r->jrank * 0x9e3779b97f4a7c15ull + 7;
  for (size_t i = 0; i < F64_N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double mant = (double)(x % 2000000003) / 1000000003.0 - 1.0;
    m[i] = ldexp(mant, (int)(x >> 40) % 160 - 80);
  }
  dpm_status s = dpm_comm_allreduce_f64(r->comm, r->rank, m, F64_N, &e);
  if (s) fail_with(r, s, &e);
  r->out->hash[0] = fnv(m, F64_N * sizeof *m);
  free(m);
}

/* Ranks that pass floats where the others pass doubles (process 1's, or
 * with one process its rank 1): refused on every rank of the job, and the
 * group still works. */
static void f64_mismatch_rank(gt_rank *r) {
  dpm_err e = {0};
  double d[8] = {0};
  float f[8] = {0};
  int floats = r->nproc > 1 ? r->proc == 1 : r->rank == 1;
  dpm_status s = floats ? dpm_comm_allreduce(r->comm, r->rank, f, 8, &e)
                        : dpm_comm_allreduce_f64(r->comm, r->rank, d, 8, &e);
  r->out->s = s;
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
  for (int i = 0; i < 8; i++) d[i] = r->jrank + 1;
  r->out->s2 = dpm_comm_allreduce_f64(r->comm, r->rank, d, 8, &e);
  if (!r->out->s2) r->out->bad += d[7] != r->world * (r->world + 1) / 2;
}

TEST(gloo_allreduce_f64_exact_and_identical_1x2_2x1_3x1_2x2) {
  static const int topo[][2] = {{1, 2}, {2, 1}, {3, 1}, {2, 2}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1;
  for (int t = 0; t < 4 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], 5000, f64_rank);
    ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 1);
  }
  for (int t = 0; t < 2 && ok; t++) { /* across processes, then within one */
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, 2, 2, 5000, f64_mismatch_rank);
    if (t) sp.nproc = 1;
    ok = gt_run(&sp, sh) && gt_created(&sp, sh);
    for (int r = 0; r < sp.nproc * sp.size && ok; r++) {
      gt_slot *o = &sh->rank[r];
      ok = o->s == DPM_INVALID && strstr(o->msg, "element type") && !o->s2 && !o->bad;
      if (!ok)
        printf("    rank %d: %s (%s); then %s, %d wrong\n", r, dpm_status_name(o->s),
               o->msg, dpm_status_name(o->s2), o->bad);
    }
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* ---- broadcast and barrier ------------------------------------------------ */

#define BC_BYTES 300001

static void bc_fill(unsigned char *b, int jrank) {
  for (size_t i = 0; i < BC_BYTES; i++) b[i] = (unsigned char)(jrank * 37 + i * 7);
}

/* Broadcasts from every job rank in turn (0 first), each checked against
 * the root's pattern; then a barrier that one rank reaches 200 ms late:
 * nobody leaves it before that rank arrived. */
static void bc_rank(gt_rank *r) {
  dpm_err e = {0};
  unsigned char *b = malloc(BC_BYTES), *want = malloc(BC_BYTES);
  r->out->s = DPM_OK;
  for (int root = 0; root < r->world; root++) {
    bc_fill(b, r->jrank);
    bc_fill(want, root);
    dpm_status s = dpm_comm_broadcast(r->comm, r->rank, root, b, BC_BYTES, &e);
    if (s) {
      fail_with(r, s, &e);
      break;
    }
    r->out->bad += memcmp(b, want, BC_BYTES) != 0;
  }
  free(b), free(want);
  int late = r->world - 1;
  if (r->jrank == late) usleep(200000);
  r->out->t0 = now_ms();
  dpm_status s = dpm_comm_barrier(r->comm, r->rank, &e);
  r->out->t1 = now_ms();
  if (s) fail_with(r, s, &e);
}

/* ---- a bf16 wire ------------------------------------------------------- */

static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) <= 0x7f800000u)
    u += 0x7fffu + ((u >> 16) & 1u); /* no NaNs here */
  u &= 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* What a bf16-wire allreduce of messy_values(seed base + job rank) must
 * give, worked out here: each process's local sum in fp32 (local rank
 * order), rounded to bf16 (to nearest even), then those summed in fp32 in
 * process order. Elements differing from it go to bad; also counts those
 * where the fp32 wire's order of the same sums (no rounding) would give
 * other bits, so the test knows the rounding showed. */
static void bf16_expect(const gt_rank *r, const float *got, size_t n, uint64_t base,
                        int *bad, int *rounded) {
  float *x = malloc(n * sizeof *x), *s = malloc(n * sizeof *s);
  float *want = malloc(n * sizeof *want), *plain = malloc(n * sizeof *plain);
  for (int p = 0; p < r->nproc; p++) {
    for (int l = 0; l < r->size; l++) {
      messy_values(x, n, base + (uint64_t)(p * r->size + l));
      for (size_t i = 0; i < n; i++) s[i] = l ? s[i] + x[i] : x[i];
    }
    for (size_t i = 0; i < n; i++) {
      want[i] = p ? want[i] + bf16_round(s[i]) : bf16_round(s[i]);
      plain[i] = p ? plain[i] + s[i] : s[i];
    }
  }
  for (size_t i = 0; i < n; i++) {
    *bad += memcmp(&got[i], &want[i], sizeof *got) != 0;
    *rounded += memcmp(&want[i], &plain[i], sizeof *got) != 0;
  }
  free(x), free(s), free(want), free(plain);
}

static const size_t bf16_counts[] = {0, 1, 2, 17, 100003};
#define BF16_N (sizeof bf16_counts / sizeof *bf16_counts)

/* Float allreduces on a bf16 wire (blocking, of every count, and a started
 * one) against bf16_expect; a double allreduce among them stays exact. */
static void bf16_rank(gt_rank *r) {
  dpm_err e = {0};
  dpm_status s = DPM_OK;
  int rounded = 0;
  r->out->s = DPM_OK;
  for (size_t c = 0; c < BF16_N && !s; c++) {
    size_t n = bf16_counts[c];
    uint64_t base = 1 + 100 * c;
    float *b = n ? malloc(n * sizeof *b) : NULL;
    messy_values(b, n, base + (uint64_t)r->jrank);
    if ((s = dpm_comm_allreduce(r->comm, r->rank, b, n, &e))) fail_with(r, s, &e);
    if (!s) bf16_expect(r, b, n, base, &r->out->bad, &rounded);
    if (c == BF16_N - 1) r->out->hash[0] = fnv(b, n * sizeof *b);
    free(b);
  }
  double d[9];
  big_values(d, 9, r->jrank, 3);
  if (!s && (s = dpm_comm_allreduce_f64(r->comm, r->rank, d, 9, &e))) fail_with(r, s, &e);
  if (!s) r->out->bad += big_bad(d, 9, r->world, 3);
  float *a = malloc(MESSY_N * sizeof *a);
  messy_values(a, MESSY_N, 7000 + (uint64_t)r->jrank);
  if (!s && (s = dpm_comm_allreduce_start(r->comm, r->rank, a, MESSY_N, &e)))
    fail_with(r, s, &e);
  if (!s && (s = dpm_comm_allreduce_wait(r->comm, r->rank, &e))) fail_with(r, s, &e);
  if (!s) bf16_expect(r, a, MESSY_N, 7000, &r->out->bad, &rounded);
  r->out->hash[1] = fnv(a, MESSY_N * sizeof *a);
  free(a);
  /* the rounding must show: most of these messy sums lose bits in bf16 */
  if (!s && rounded < MESSY_N / 2) r->out->bad += 1000000;
}

/* precision.allreduce bf16 (comm.h: dpm_comm_wire): every rank of 2, 3
 * processes of one rank and 2 of two (every bf16 copy gathered everywhere)
 * and 4 of one (segments summed by their owners) gets exactly the fp32
 * sum, in process order, of the processes' bf16-rounded sums, the same
 * bits everywhere. */
TEST(gloo_bf16_wire_sums_rounded_inputs_in_fp32_2x1_3x1_2x2_4x1) {
  static const int topo[][2] = {{2, 1}, {3, 1}, {2, 2}, {4, 1}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1;
  for (int t = 0; t < 4 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], 5000, bf16_rank);
    sp.bf16_procs = ~0u;
    ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 2);
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* One float allreduce with a message, then a double one (doubles cross as
 * they are whatever the wire). */
static void wire_mismatch_rank(gt_rank *r) {
  dpm_err e = {0};
  float f[4] = {1, 2, 3, 4};
  r->out->s = dpm_comm_allreduce(r->comm, r->rank, f, 4, &e);
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
  double d[3] = {1, 2, 3};
  r->out->s2 = dpm_comm_allreduce_f64(r->comm, r->rank, d, 3, &e);
  if (!r->out->s2) r->out->bad += d[2] != 3.0 * r->world;
}

/* Processes whose wires differ refuse the float sum on every rank, naming
 * the setting, before any data moves (never a hang); the group goes on. */
TEST(gloo_bf16_wire_mismatch_is_invalid_everywhere) {
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  gt_spec sp = gt_file_spec(dir, 2, 1, 5000, wire_mismatch_rank);
  sp.bf16_procs = 2u; /* process 1 only */
  int ok = gt_run(&sp, sh) && gt_created(&sp, sh);
  for (int r = 0; r < 2 && ok; r++) {
    gt_slot *o = &sh->rank[r];
    ok = o->done && o->s == DPM_INVALID &&
         strstr(o->msg, "disagree on the wire (precision.allreduce)") &&
         o->s2 == DPM_OK && !o->bad;
    if (!ok)
      printf("    rank %d: done %d, %s (%s), then %s, %d wrong\n", r, o->done,
             dpm_status_name(o->s), o->msg, dpm_status_name(o->s2), o->bad);
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* A wire the backend cannot keep is refused, naming the setting. */
TEST(gloo_bf16_wire_refused_by_nccl_and_unknown_wires) {
  dpm_comm *comm = NULL;
  dpm_err err = {0};
  dpm_comm_config cfg = {
      .kind = DPM_COMM_NCCL, .size = 1, .timeout_ms = 100, .wire = DPM_COMM_WIRE_BF16};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_UNSUPPORTED);
  CHECK_HAS(err.msg, "precision.allreduce bf16");
  CHECK(comm == NULL);
  cfg = (dpm_comm_config){.kind = DPM_COMM_GLOO, .size = 1, .timeout_ms = 100, .wire = 7};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "wire format 7");
  CHECK(comm == NULL);
}

TEST(gloo_broadcast_from_every_root_and_barrier) {
  static const int topo[][2] = {{2, 2}, {3, 1}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1, early = 0;
  for (int t = 0; t < 2 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], 5000, bc_rank);
    ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 0);
    int world = sp.nproc * sp.size;
    double arrived = sh->rank[world - 1].t0;
    for (int r = 0; r < world; r++)
      if (sh->rank[r].t1 < arrived) {
        printf("    %dx%d rank %d left the barrier %.1f ms before rank %d came\n",
               sp.nproc, sp.size, r, arrived - sh->rank[r].t1, world - 1);
        early = 1;
      }
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
  CHECK(!early);
}

/* ---- disagreements ---------------------------------------------------------- */

/* Rank `arg` (job-wide) passes one float more: every rank of the job gets
 * DPM_INVALID, buffers untouched; then the group goes on (an exact sum). */
static void mismatch_rank(gt_rank *r) {
  int odd = *(const int *)r->arg;
  dpm_err e = {0};
  float b[101];
  int_values(b, 101, r->jrank, 0);
  r->out->t0 = now_ms();
  r->out->s = dpm_comm_allreduce(r->comm, r->rank, b, r->jrank == odd ? 101 : 100, &e);
  r->out->t1 = now_ms();
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
  float c[101];
  int_values(c, 101, r->jrank, 0);
  r->out->bad += memcmp(b, c, sizeof b) != 0;
  r->out->s2 = dpm_comm_allreduce(r->comm, r->rank, b, 100, &e);
  if (!r->out->s2) r->out->bad += int_bad(b, 100, r->world, 0);
  snprintf(r->out->msg2, sizeof r->out->msg2, "%s", e.msg);
}

TEST(gloo_count_mismatch_is_invalid_everywhere_not_a_hang) {
  /* across processes (2x1, rank 1), and inside one (2x2, rank 1) */
  static const int topo[][3] = {{2, 1, 1}, {2, 2, 1}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1;
  for (int t = 0; t < 2 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], 5000, mismatch_rank);
    sp.arg = &topo[t][2];
    ok = gt_run(&sp, sh) && gt_created(&sp, sh);
    for (int r = 0; ok && r < sp.nproc * sp.size; r++) {
      gt_slot *o = &sh->rank[r];
      if (o->s != DPM_INVALID || !strstr(o->msg, "disagree") || o->s2 != DPM_OK ||
          o->bad || o->broken || o->t1 - o->t0 > 2000) {
        printf("    %dx%d rank %d: %s (%s) in %.0f ms, then %s (%s), %d wrong\n",
               sp.nproc, sp.size, r, dpm_status_name(o->s), o->msg, o->t1 - o->t0,
               dpm_status_name(o->s2), o->msg2, o->bad);
        ok = 0;
      }
    }
    if (ok && t == 0) /* across processes: the message says who had what */
      ok = strstr(sh->rank[0].msg, "processes disagree on the count") &&
           strstr(sh->rank[0].msg, "process 1 (job rank 1");
    if (ok && t == 1) /* inside process 0: its ranks say how; process 1's say who */
      ok = strstr(sh->rank[0].msg, "rank 0 has 100, rank 1 has 101") &&
           strstr(sh->rank[2].msg, "the ranks of process 0");
    if (!ok) printf("    messages: %s | %s\n", sh->rank[0].msg, sh->rank[2].msg);
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* ---- timeouts ------------------------------------------------------------ */

#define GT_TIMEOUT 1000

/* Job rank `arg` never calls (it waits until the others are done, at most
 * 5 s, and leaves); the others' allreduce times out, then DPM_STATE. */
static void absent_rank(gt_rank *r) {
  int missing = *(const int *)r->arg;
  dpm_err e = {0};
  if (r->jrank == missing) {
    double t0 = now_ms();
    while (atomic_load(&r->sh->flag) < r->world - 1 && now_ms() - t0 < 5000) usleep(2000);
    r->out->s = DPM_OK;
    return;
  }
  float b[64];
  int_values(b, 64, r->jrank, 0);
  r->out->t0 = now_ms();
  r->out->s = dpm_comm_allreduce(r->comm, r->rank, b, 64, &e);
  r->out->t1 = now_ms();
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
  r->out->s2 = dpm_comm_barrier(r->comm, r->rank, &e);
  snprintf(r->out->msg2, sizeof r->out->msg2, "%s", e.msg);
  atomic_fetch_add(&r->sh->flag, 1);
}

TEST(gloo_rank_that_never_calls_times_out) {
  /* a whole process missing (2x1: rank 1), a local rank of one (2x2: rank 3) */
  static const int topo[][3] = {{2, 1, 1}, {2, 2, 3}};
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  int ok = 1;
  for (int t = 0; t < 2 && ok; t++) {
    memset(sh, 0, sizeof *sh);
    gt_spec sp = gt_file_spec(dir, topo[t][0], topo[t][1], GT_TIMEOUT, absent_rank);
    sp.arg = &topo[t][2];
    ok = gt_run(&sp, sh) && gt_created(&sp, sh);
    for (int r = 0; ok && r < sp.nproc * sp.size; r++) {
      if (r == topo[t][2]) continue;
      gt_slot *o = &sh->rank[r];
      double ms = o->t1 - o->t0;
      printf("    %dx%d rank %d: %s after %.0f ms (timeout %d): %s\n", sp.nproc, sp.size,
             r, dpm_status_name(o->s), ms, GT_TIMEOUT, o->msg);
      if (o->s != DPM_TIMEOUT || ms < GT_TIMEOUT - 50 || ms > GT_TIMEOUT + 1000 ||
          !strstr(o->msg, "allreduce") || o->s2 != DPM_STATE ||
          !strstr(o->msg2, "broken by an earlier failure") ||
          !strstr(o->msg2, "timed out") || !o->broken) {
        printf("    then: %s (%s), broken %d\n", dpm_status_name(o->s2), o->msg2,
               o->broken);
        ok = 0;
      }
    }
    /* who is missing: the process, or the local rank */
    if (ok && t == 0)
      ok = strstr(sh->rank[0].msg, "not arrived: process 1 (job rank 1") != NULL;
    if (ok && t == 1)
      ok = strstr(sh->rank[2].msg, "missing rank(s) 3") &&
           strstr(sh->rank[0].msg, "not arrived: process 1 (job ranks 2-3");
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

TEST(gloo_rendezvous_without_process_0_fails_within_the_timeout) {
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  gt_spec sp = gt_file_spec(dir, 3, 1, GT_TIMEOUT, NULL);
  sp.absent = 0;
  int ok = gt_run(&sp, sh);
  for (int p = 1; p < 3; p++) {
    double ms = sh->create_t1[p] - sh->create_t0[p];
    printf("    process %d: create %s after %.0f ms (timeout %d): %s\n", p,
           dpm_status_name(sh->create_s[p]), ms, GT_TIMEOUT, sh->create_msg[p]);
    if (sh->create_s[p] != DPM_TIMEOUT || ms < GT_TIMEOUT - 50 ||
        ms > GT_TIMEOUT + 1000 || !strstr(sh->create_msg[p], "process 0") ||
        !strstr(sh->create_msg[p], "has not arrived"))
      ok = 0;
  }
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* Allreduces of 16 MiB until one fails; the parent kills process 1. */
static void kill_rank(gt_rank *r) {
  size_t n = 4u << 20;
  float *b = malloc(n * sizeof *b);
  dpm_err e = {0};
  int_values(b, n, r->jrank, 0);
  for (int it = 0; it < 100000; it++) {
    r->out->t0 = now_ms();
    r->out->s = dpm_comm_allreduce(r->comm, r->rank, b, n, &e);
    r->out->t1 = now_ms();
    if (r->out->s) break;
    if (r->jrank == 0) atomic_fetch_add(&r->sh->count, 1);
  }
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
  r->out->s2 = dpm_comm_allreduce(r->comm, r->rank, b, n, &e);
  snprintf(r->out->msg2, sizeof r->out->msg2, "%s", e.msg);
  free(b);
}

TEST(gloo_peer_killed_mid_allreduce_fails_the_survivor) {
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  gt_spec sp = gt_file_spec(dir, 2, 1, 2000, kill_rank);
  pid_t pids[GT_PROCS];
  int status[GT_PROCS];
  CHECK(gt_fork(&sp, sh, pids));
  double t0 = now_ms();
  while (atomic_load(&sh->count) < 3 && now_ms() - t0 < 10000) usleep(1000);
  int ran = atomic_load(&sh->count) >= 3;
  usleep(3000); /* into the next one */
  double killed = now_ms();
  kill(pids[1], SIGKILL);
  waitpid(pids[1], &status[1], 0);
  pids[1] = -1; /* reaped */
  int killed_status = status[1];
  gt_reap(1, pids, status);
  status[1] = killed_status;
  gt_slot got = sh->rank[0], *o = &got;
  double ms = o->t1 - killed;
  printf("    survivor: %s %.0f ms after the kill (timeout 2000): %s\n",
         dpm_status_name(o->s), ms, o->msg);
  printf("    then: %s: %s\n", dpm_status_name(o->s2), o->msg2);
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ran);
  CHECK(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  CHECK(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0);
  CHECK_INT(o->s, DPM_IO);
  CHECK(ms < 2000 + 1000);
  CHECK_HAS(o->msg, "allreduce: lost process 1 (job rank 1, 127.0.0.1:");
  CHECK_INT(o->s2, DPM_STATE);
  CHECK_HAS(o->msg2, "lost process 1");
  CHECK(o->broken);
}

/* Process 1 leaves the group after a barrier (destroys it and exits);
 * process 0 then writes to it: an error naming the peer, not a SIGPIPE
 * that ends the process (this binary keeps SIGPIPE's default action). */
static void gone_rank(gt_rank *r) {
  dpm_err e = {0};
  r->out->s = dpm_comm_barrier(r->comm, r->rank, &e);
  if (r->out->s || r->jrank == 1) return;
  usleep(100000); /* its end closed */
  size_t n = 1u << 20;
  float *b = calloc(n, sizeof *b);
  for (int i = 0; i < 3 && !r->out->s2; i++)
    r->out->s2 = dpm_comm_allreduce(r->comm, r->rank, b, n, &e);
  snprintf(r->out->msg2, sizeof r->out->msg2, "%s", e.msg);
  free(b);
}

TEST(gloo_peer_gone_is_an_error_not_a_sigpipe) {
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  gt_spec sp = gt_file_spec(dir, 2, 1, 2000, gone_rank);
  int ok = gt_run(&sp, sh) && gt_created(&sp, sh);
  gt_slot got = sh->rank[0];
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok); /* process 0 exited 0: no SIGPIPE */
  CHECK_INT(got.s, DPM_OK);
  CHECK_INT(got.s2, DPM_IO);
  CHECK_HAS(got.msg2, "lost process 1 (job rank 1, 127.0.0.1:");
}

/* ---- stores -------------------------------------------------------------- */

/* A small exact allreduce and a broadcast from the last rank. */
static void small_rank(gt_rank *r) {
  dpm_err e = {0};
  float b[1000];
  int_values(b, 1000, r->jrank, 3);
  r->out->s = dpm_comm_allreduce(r->comm, r->rank, b, 1000, &e);
  if (!r->out->s) r->out->bad += int_bad(b, 1000, r->world, 3);
  int root = r->world - 1;
  for (int i = 0; i < 1000; i++) b[i] = (float)(r->jrank * 1000 + i);
  if (!r->out->s) r->out->s = dpm_comm_broadcast(r->comm, r->rank, root, b, sizeof b, &e);
  for (int i = 0; !r->out->s && i < 1000; i++) r->out->bad += b[i] != root * 1000 + i;
  r->out->hash[0] = fnv(b, sizeof b);
  snprintf(r->out->msg, sizeof r->out->msg, "%s", e.msg);
}

/* The same prefix again: every process fails at once with DPM_EXISTS. */
static int gt_reused_prefix(gt_spec sp, gt_shared *sh) {
  memset(sh, 0, sizeof *sh);
  sp.fn = NULL;
  int ok = gt_run(&sp, sh);
  for (int p = 0; p < sp.nproc; p++) {
    double ms = sh->create_t1[p] - sh->create_t0[p];
    if (sh->create_s[p] != DPM_EXISTS || ms > sp.timeout_ms + 1000 ||
        !strstr(sh->create_msg[p], "prefix was used before")) {
      printf("    reused prefix, process %d: %s after %.0f ms: %s\n", p,
             dpm_status_name(sh->create_s[p]), ms, sh->create_msg[p]);
      ok = 0;
    }
  }
  return ok;
}

TEST(gloo_file_store_prefix_used_twice_fails_cleanly) {
  char dir[64];
  CHECK(gt_dir(dir, sizeof dir));
  gt_shared *sh = gt_map();
  CHECK(sh);
  gt_spec sp = gt_file_spec(dir, 2, 1, GT_TIMEOUT, small_rank);
  int ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 1);
  ok = ok && gt_reused_prefix(sp, sh);
  munmap(sh, sizeof *sh);
  gt_clean(dir);
  CHECK(ok);
}

/* A port nobody listens on now (bound to 0, read back, closed). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
      !getsockname(fd, (struct sockaddr *)&a, &len))
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static int accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a);
  if (fd >= 0) close(fd);
  return ok;
}

static int have_program(const char *name) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

TEST(gloo_redis_store) {
  if (!have_program("redis-server")) {
    printf("    skipped: no redis-server (apt-get install redis-server)\n");
    return;
  }
  int port = free_port();
  CHECK(port > 0);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  fflush(stdout);
  pid_t redis = fork();
  CHECK(redis >= 0);
  if (redis == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int nul = open("/dev/null", O_RDWR);
    dup2(nul, 1), dup2(nul, 2);
    execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save",
           "", "--daemonize", "no", (char *)NULL);
    _exit(127);
  }
  double t0 = now_ms();
  while (!accepts(port) && now_ms() - t0 < 5000) usleep(5000);
  int up = accepts(port);
  gt_shared *sh = gt_map();
  int ok = 0, down = 0;
  if (up && sh) {
    gt_spec sp = {
        .nproc = 2, .size = 1, .timeout_ms = GT_TIMEOUT, .fn = small_rank, .absent = -1};
    snprintf(sp.store, sizeof sp.store, "redis://127.0.0.1:%d", port);
    snprintf(sp.prefix, sizeof sp.prefix, "unit/redis-%d", (int)getpid());
    ok = gt_run(&sp, sh) && gt_created(&sp, sh) && gt_all_same(&sp, sh, 1);
    ok = ok && gt_reused_prefix(sp, sh);
  }
  kill(redis, SIGTERM);
  waitpid(redis, NULL, 0);
  if (up && sh) { /* the server gone: an error, not a hang */
    dpm_comm_config cfg = {
        .kind = DPM_COMM_GLOO,
        .size = 1,
        .world = 2,
        .timeout_ms = 500,
        .rendezvous = {.store = NULL, .prefix = "unit/x", .iface = "lo"}};
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    cfg.rendezvous.store = url;
    dpm_comm *comm = NULL;
    dpm_err err = {0};
    down = dpm_comm_create(&cfg, &comm, &err) == DPM_IO && !comm &&
           strstr(err.msg, "no usable Redis server there");
    if (!down) printf("    redis down: %s\n", err.msg);
  }
  if (sh) munmap(sh, sizeof *sh);
  CHECK(up);
  CHECK(ok);
  CHECK(down);
}

/* A server that is not Redis: accepts connections on 127.0.0.1 and answers
 * each with `banner` (NULL: says nothing), until stopped. */
typedef struct {
  int fd, port;
  const char *banner;
  atomic_int stop;
  pthread_t th;
} fake_server;

static void *fake_serve(void *arg) {
  fake_server *f = arg;
  while (!atomic_load(&f->stop)) {
    int c = accept(f->fd, NULL, NULL);
    if (c < 0) continue;
    if (f->banner && write(c, f->banner, strlen(f->banner)) < 0) {
    }
    if (f->banner) close(c); /* silent: left open, so the client waits */
  }
  return NULL;
}

static int fake_start(fake_server *f, const char *banner) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  f->banner = banner;
  atomic_store(&f->stop, 0);
  f->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (f->fd < 0 || bind(f->fd, (struct sockaddr *)&a, sizeof a) || listen(f->fd, 8) ||
      getsockname(f->fd, (struct sockaddr *)&a, &n))
    return 0;
  f->port = ntohs(a.sin_port);
  return pthread_create(&f->th, NULL, fake_serve, f) == 0;
}

static void fake_stop(fake_server *f) {
  atomic_store(&f->stop, 1);
  shutdown(f->fd, SHUT_RDWR);
  accepts(f->port); /* wakes the accept */
  pthread_join(f->th, NULL);
  close(f->fd);
}

/* dpm_comm_create on redis://127.0.0.1:port; its message with the port
 * written as PORT into msg. */
static dpm_status redis_attempt(int port, char *msg, size_t cap) {
  char url[64], ps[16];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  snprintf(ps, sizeof ps, "%d", port);
  dpm_comm_config cfg = {
      .kind = DPM_COMM_GLOO,
      .size = 1,
      .world = 2,
      .timeout_ms = 500,
      .rendezvous = {.store = url, .prefix = "unit/fake", .iface = "lo"}};
  dpm_comm *comm = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_comm_create(&cfg, &comm, &err);
  if (comm) dpm_comm_destroy(comm);
  char *p = strstr(err.msg, ps);
  if (p)
    snprintf(msg, cap, "%.*sPORT%s", (int)(p - err.msg), err.msg, p + strlen(ps));
  else
    snprintf(msg, cap, "%s", err.msg);
  return s;
}

/* A Redis store's failures say nothing of the other side: a closed port, a
 * server that answers something else first, and one that says nothing all
 * fail with one message (within the timeout), which never quotes the
 * answer. */
TEST(gloo_redis_errors_do_not_reveal_the_peer) {
  fake_server talk, mute;
  CHECK(fake_start(&talk, "Xsecret-banner 2.4\r\n"));
  CHECK(fake_start(&mute, NULL));
  int closed = free_port();
  char m_closed[512], m_talk[512], m_mute[512];
  double t0 = now_ms();
  dpm_status s_closed = redis_attempt(closed, m_closed, sizeof m_closed);
  dpm_status s_talk = redis_attempt(talk.port, m_talk, sizeof m_talk);
  double t1 = now_ms();
  dpm_status s_mute = redis_attempt(mute.port, m_mute, sizeof m_mute);
  double t2 = now_ms();
  fake_stop(&talk);
  fake_stop(&mute);
  printf("    closed: %s\n    talking: %s\n    mute: %s (%.0f ms)\n", m_closed, m_talk,
         m_mute, t2 - t1);
  CHECK_INT(s_closed, DPM_IO);
  CHECK_INT(s_talk, DPM_IO);
  CHECK_INT(s_mute, DPM_IO);
  CHECK(!strcmp(m_closed, m_talk) && !strcmp(m_closed, m_mute));
  CHECK(!strstr(m_talk, "secret") && !strstr(m_talk, "\"X\"") &&
        !strstr(m_closed, "refused"));
  CHECK(t1 - t0 < 5000);
  CHECK(t2 - t1 < 5000); /* the timeout (500 ms) bounds the wait for an answer */
}

/* The caller's key-value store: a map in this process, so the two
 * "processes" are threads here, each with its own group. */
#define KV_MAX 64
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, sets, gets;
  char *key[KV_MAX];
  void *val[KV_MAX];
  size_t len[KV_MAX];
} kv_map;

static int kv_find(kv_map *m, const char *key) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->key[i], key)) return i;
  return -1;
}

static dpm_status kv_set(void *ctx, const char *key, const void *value, size_t len,
                         dpm_err *err) {
  kv_map *m = ctx;
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&m->mu);
  m->sets++;
  if (kv_find(m, key) >= 0) {
    s = dpm_errf(err, DPM_EXISTS, "key '%s' is set", key);
  } else if (m->n == KV_MAX) {
    s = dpm_errf(err, DPM_NOMEM, "map full");
  } else {
    m->key[m->n] = strdup(key);
    m->val[m->n] = malloc(len ? len : 1);
    memcpy(m->val[m->n], value, len);
    m->len[m->n++] = len;
    pthread_cond_broadcast(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
  return s;
}

static dpm_status kv_get(void *ctx, const char *key, int timeout_ms, void **value,
                         size_t *len, dpm_err *err) {
  kv_map *m = ctx;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&m->mu);
  m->gets++;
  int i;
  while ((i = kv_find(m, key)) < 0)
    if (pthread_cond_timedwait(&m->cv, &m->mu, &until) == ETIMEDOUT) break;
  if (i >= 0) {
    *value = malloc(m->len[i] ? m->len[i] : 1);
    memcpy(*value, m->val[i], m->len[i]);
    *len = m->len[i];
  }
  pthread_mutex_unlock(&m->mu);
  return i >= 0 ? DPM_OK : dpm_errf(err, DPM_TIMEOUT, "no key '%s'", key);
}

typedef struct {
  dpm_comm_store *kv;
  const char *prefix;
  int proc;
  dpm_status create_s, s;
  char msg[512];
  float sum[100];
} kv_proc;

static void *kv_proc_main(void *arg) {
  kv_proc *p = arg;
  dpm_comm_config cfg = {.kind = DPM_COMM_GLOO,
                         .size = 1,
                         .rank_base = p->proc,
                         .world = 2,
                         .timeout_ms = 5000,
                         .rendezvous = {.kv = p->kv, .prefix = p->prefix, .iface = "lo"}};
  dpm_comm *comm = NULL;
  dpm_err err = {0};
  p->create_s = dpm_comm_create(&cfg, &comm, &err);
  if (!p->create_s) {
    for (int i = 0; i < 100; i++) p->sum[i] = (float)(i * (p->proc + 1));
    p->s = dpm_comm_allreduce(comm, 0, p->sum, 100, &err);
  }
  snprintf(p->msg, sizeof p->msg, "%s", err.msg);
  dpm_comm_destroy(comm);
  return NULL;
}

static int kv_form(dpm_comm_store *kv, const char *prefix, kv_proc *p) {
  pthread_t th[2];
  int started[2];
  for (int i = 0; i < 2; i++) {
    p[i] = (kv_proc){.kv = kv, .prefix = prefix, .proc = i};
    started[i] = !pthread_create(&th[i], NULL, kv_proc_main, &p[i]);
  }
  for (int i = 0; i < 2; i++)
    if (started[i]) pthread_join(th[i], NULL);
  return started[0] && started[1];
}

TEST(gloo_key_value_callback_store) {
  kv_map m = {.n = 0};
  pthread_mutex_init(&m.mu, NULL);
  pthread_cond_init(&m.cv, NULL);
  dpm_comm_store kv = {.ctx = &m, .set = kv_set, .get = kv_get};
  kv_proc p[2], again[2];
  int ran = kv_form(&kv, "unit/kv", p);
  int sets = m.sets, gets = m.gets;
  int ran2 = kv_form(&kv, "unit/kv", again); /* the same prefix: refused */
  for (int i = 0; i < m.n; i++) free(m.key[i]), free(m.val[i]);
  pthread_cond_destroy(&m.cv);
  pthread_mutex_destroy(&m.mu);
  CHECK(ran && ran2);
  for (int i = 0; i < 2; i++) {
    if (p[i].create_s || p[i].s) printf("    process %d: %s\n", i, p[i].msg);
    CHECK_INT(p[i].create_s, DPM_OK);
    CHECK_INT(p[i].s, DPM_OK);
    for (int k = 0; k < 100; k++) CHECK(p[i].sum[k] == (float)(3 * k));
    CHECK_INT(again[i].create_s, DPM_EXISTS);
    CHECK_HAS(again[i].msg, "prefix was used before");
  }
  CHECK(sets >= 4 && gets >= 2); /* two keys set by each, the other's read */
}

/* ---- one process, bad configs ---------------------------------------------- */

/* world == size: no rendezvous, no network; local ranks in rank order. */
TEST(gloo_one_process_needs_no_rendezvous) {
  dpm_comm_config cfg = {.kind = DPM_COMM_GLOO, .size = 2, .timeout_ms = 200};
  dpm_comm *comm = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_OK);
  CHECK(!strcmp(dpm_comm_backend(comm), "gloo"));
  CHECK_INT(dpm_comm_size(comm), 2);
  float a[41], b[41];
  for (int i = 0; i < 41; i++) a[i] = (float)i, b[i] = (float)(2 * i);
  /* one thread plays both ranks: starts never wait for the other rank */
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_INVALID);
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 41, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_start(comm, 1, b, 41, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_wait(comm, 1, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_OK);
  for (int i = 0; i < 41; i++) CHECK(a[i] == 3 * i && b[i] == 3 * i);
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 40, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_start(comm, 1, b, 41, &err), DPM_OK);
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "ranks disagree on the count: rank 0 has 40, rank 1 has 41");
  CHECK_INT(dpm_comm_allreduce_wait(comm, 1, &err), DPM_INVALID);
  CHECK(a[40] == 120 && b[40] == 120);
  CHECK_INT(dpm_comm_allreduce_start(comm, 0, a, 41, &err), DPM_OK);
  double t0 = now_ms();
  CHECK_INT(dpm_comm_allreduce_wait(comm, 0, &err), DPM_TIMEOUT);
  CHECK(now_ms() - t0 >= 190);
  CHECK_HAS(err.msg, "allreduce: timed out after 200 ms; 1 of 2 ranks of process 0");
  CHECK_HAS(err.msg, "missing rank(s) 1");
  CHECK(dpm_comm_broken(comm));
  CHECK_INT(dpm_comm_barrier(comm, 1, &err), DPM_STATE);
  CHECK_HAS(err.msg,
            "barrier: communicator broken by an earlier failure (allreduce: timed");
  dpm_comm_destroy(comm);
}

TEST(gloo_refuses_bad_configs) {
  static const struct {
    int size, base, world, timeout;
    const char *store, *prefix, *iface, *says;
  } bad[] = {
      {2, 0, 3, 100, "file:///tmp/x", "p", "lo", "cannot be processes of 2 ranks"},
      {2, 1, 4, 100, "file:///tmp/x", "p", "lo", "rank base 1 is not a multiple of 2"},
      {2, 4, 4, 100, "file:///tmp/x", "p", "lo", "rank base 4"},
      {1, 0, 2, 0, "file:///tmp/x", "p", "lo", "timeout 0 ms"},
      {1, 0, 2, 100, "file:///tmp/x", NULL, "lo", "no prefix"},
      {1, 0, 2, 100, "file:///tmp/x", "", "lo", "no prefix"},
      {1, 0, 2, 100, NULL, "p", "lo", "neither a store URL nor key-value callbacks"},
      {1, 0, 2, 100, "ftp://x", "p", "lo", "expected file:///DIR or redis://HOST:PORT"},
      {1, 0, 2, 100, "file://relative", "p", "lo", "expected file:///DIR"},
      {1, 0, 2, 100, "redis://host", "p", "lo", "expected redis://HOST:PORT"},
      {1, 0, 2, 100, "redis://host:99999", "p", "lo", "expected redis://HOST:PORT"},
      {1, 0, 2, 100, "file:///tmp/x", "p", "nosuchif0",
       "no network interface 'nosuchif0'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dpm_comm_config cfg = {.kind = DPM_COMM_GLOO,
                           .size = bad[i].size,
                           .rank_base = bad[i].base,
                           .world = bad[i].world,
                           .timeout_ms = bad[i].timeout,
                           .rendezvous = {.store = bad[i].store,
                                          .prefix = bad[i].prefix,
                                          .iface = bad[i].iface}};
    dpm_comm *comm = (dpm_comm *)&cfg;
    dpm_err err = {0};
    dpm_status s = dpm_comm_create(&cfg, &comm, &err);
    if (s != DPM_INVALID || !strstr(err.msg, bad[i].says))
      printf("    case %zu: %s: %s\n", i, dpm_status_name(s), err.msg);
    CHECK_INT(s, DPM_INVALID);
    CHECK_HAS(err.msg, bad[i].says);
    CHECK(comm == NULL);
  }
}
