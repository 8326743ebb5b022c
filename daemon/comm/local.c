/* Local communicator: the ranks are threads of this process (one device
 * worker per rank) passing host memory; contract in comm.h.
 *
 * Every collective is one or two rounds of a generation-counting barrier
 * (mutex + condition variable on CLOCK_MONOTONIC). Arriving at a round, a
 * rank records what it called (a dpm_group_call, and the round's phase);
 * the last rank to arrive checks that all ranks agree (the group core,
 * group.h: dpm_group_judge) and publishes one verdict that every rank
 * returns, so a disagreement is
 * refused alike everywhere before any buffer is touched. After the first
 * round each rank works on its own slice of every rank's buffer; a second
 * round keeps every buffer in use until all ranks are done with it.
 *
 * Only the first round of a collective is bounded by the timeout: once all
 * ranks are in, the second round waits for work that is already running
 * (and must not return while a peer may still write the caller's buffer).
 * A timeout marks the group broken for good (comm.h; group.h's fault and
 * timeout message, which numbers blocking collectives and started
 * allreduces apart).
 *
 * Started allreduces (dpm_comm_allreduce_start/_wait) are jobs in a ring of
 * slots, summed in chunks claimed by the waiting ranks; see "Started
 * allreduces" below.
 *
 * Threads: a rank arrives lock-free (its own slot of calls, bufs and here,
 * then one atomic increment of arrived); the last to arrive judges the
 * round and bumps gen under mu, and the others watch gen, spinning, then
 * sleeping on cv under mu. So a round between quick ranks makes no system
 * call: a futex wake-up costs tens of microseconds in a VM, several times
 * per training step. The published buffer pointers are read between the two
 * rounds, when nobody can write them; the fault and seq change under mu
 * only. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/group.h"
#include "comm/spin.h"
#include "common/clock.h"

/* Started allreduces in flight per group: job k lives in slot k % LOCAL_JOBS. */
#define LOCAL_JOBS DPM_COMM_MAX_STARTED
/* Added to a job's arrivals by a rank that gives up on it: never published. */
#define LOCAL_POISON (1 << 20)

/* One started allreduce, every rank's k-th start. */
typedef struct {
  atomic_ulong uses;  /* jobs that used this slot and were left by every rank */
  atomic_ulong ready; /* k + 1 once job k is judged and published */
  atomic_int arrived; /* ranks that started it (+ LOCAL_POISON per rank that gave up) */
  atomic_int left;    /* ranks whose wait for it is over */
  atomic_ulong next;  /* chunks claimed */
  atomic_ulong done;  /* chunks summed */
  unsigned long chunks;
  dpm_status verdict; /* set with chunks by the judge, before ready */
  char msg[DPM_GROUP_MSG];
  dpm_group_call *calls; /* [size] the count and buffer each rank passed */
  void **bufs;           /* [size] */
} local_job;

typedef struct {
  dpm_comm base;         /* first: handed out as dpm_comm */
  int timeout_ms;        /* bound on the first round of each collective */
  pthread_mutex_t mu;    /* guards sleepers' changes, verdict and broken's writes */
  pthread_cond_t cv;     /* signalled when a round completes or breaks */
  atomic_ulong gen;      /* rounds completed; bumped under mu */
  int spin;              /* spin before sleeping: ranks <= CPUs */
  atomic_int sleepers;   /* ranks asleep on cv (await) */
  atomic_int arrived;    /* ranks arrived at the current round */
  dpm_group_fault fault; /* set by a timeout, never cleared; written under mu */
  unsigned long seq;     /* blocking collectives judged: the sequence number of the
                            next one (written by the judge under mu) */
  dpm_status verdict;    /* of the round completed last: DPM_OK or DPM_INVALID */
  char verdict_msg[DPM_GROUP_MSG];
  dpm_group_call *calls; /* [size] what each rank called at the current round */
  int *phase;            /* [size] 0: the call's first round; 1: its second */
  atomic_uchar *here;    /* [size] 1 once the rank arrived at the current round */
  void **bufs;           /* [size] each rank's buffer, set in first rounds */
  /* started allreduces (see "Started allreduces" below) */
  local_job *jobs;       /* [LOCAL_JOBS] */
  atomic_ulong *started; /* [size] allreduces each rank started */
  atomic_ulong *waited;  /* [size] of those, the ones it waited for */
} local_comm;

static local_comm *local_of(dpm_comm *c) { return (local_comm *)c; }

/* Run by the last rank to arrive: the verdict on the round. */
static dpm_status judge(local_comm *g) {
  int size = g->base.size;
  for (int r = 1; r < size; r++)
    if (g->calls[r].op != g->calls[0].op || g->phase[r] != g->phase[0])
      return dpm_group_mismatch(g->verdict_msg, 0, g->calls[0].op, r, g->calls[r].op);
  if (g->phase[0]) return DPM_OK;
  g->seq++;
  return dpm_group_judge(g->calls, size, 0, size, g->verdict_msg);
}

/* Whether rank r is missing, for a timeout's message: from the current
 * round (meet), from job k (a job's wait), or from the waits for job k (a
 * start that needs k's slot). */
typedef int (*local_absent_fn)(local_comm *g, int r, unsigned long k);

static int absent_from_round(local_comm *g, int r, unsigned long k) {
  (void)k;
  return !atomic_load(&g->here[r]);
}
static int absent_from_job(local_comm *g, int r, unsigned long k) {
  return atomic_load(&g->started[r]) <= k;
}
static int absent_from_waits(local_comm *g, int r, unsigned long k) {
  return atomic_load(&g->waited[r]) <= k;
}

/* An absent function with its arguments, for dpm_group_timeout_msg. */
typedef struct {
  local_comm *g;
  local_absent_fn absent;
  unsigned long k;
} local_absence;

static int absent_of(void *ctx, int r) {
  local_absence *a = ctx;
  return a->absent(a->g, r, a->k);
}

/* Under mu: mark the group broken, recording which ranks did not arrive at
 * `op`, collective number seq, and wake every sleeper. */
static void break_group(local_comm *g, const char *op, local_absent_fn absent,
                        unsigned long k, unsigned long seq) {
  char m[DPM_GROUP_MSG];
  local_absence a = {g, absent, k};
  dpm_group_timeout_msg(m, op, seq, g->timeout_ms, "ranks", g->base.size, 0, absent_of,
                        &a);
  dpm_group_fail(&g->fault, DPM_TIMEOUT, "%s", m);
  pthread_cond_broadcast(&g->cv);
}

/* A wake-up from a condition variable costs tens of microseconds, which is
 * most of a small collective: when every rank could have a CPU of its own, a
 * waiting rank first watches gen for up to SPIN_NS, yielding its CPU every
 * 64 checks so that a peer (or another process) sharing it runs. Measured on
 * 2 shared cores, 256 KiB allreduce over 2 ranks: ~10 us with the spin,
 * ~25-60 us without; a spin without the yields doubled the time when the
 * machine was loaded. */
#define SPIN_NS 200000

/* The error of a call on a group that a timeout broke earlier. */
static dpm_status broken_state(local_comm *g, const char *op, dpm_err *err) {
  char m[DPM_GROUP_MSG + 96];
  pthread_mutex_lock(&g->mu);
  dpm_group_fault_msg(&g->fault, op, m, sizeof m);
  pthread_mutex_unlock(&g->mu);
  return dpm_errf(err, DPM_STATE, "%s", m);
}

/* Wake the ranks asleep in await, after the store they wait for. */
static void wake_sleepers(local_comm *g) {
  if (!atomic_load(&g->sleepers)) return;
  pthread_mutex_lock(&g->mu);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Wait until *w >= want (a counter that only grows): spinning first when
 * the ranks have CPUs of their own, then asleep on cv. Returns 1 once
 * there, 0 when the group broke or `until` (NULL: no deadline) passed. */
static int await(local_comm *g, atomic_ulong *w, unsigned long want,
                 const struct timespec *until) {
  struct timespec start = {0};
  for (unsigned i = 1; g->spin; i++) {
    if (atomic_load(w) >= want) return 1;
    if (dpm_group_broken(&g->fault) || !dpm_spin_step(i, &start, SPIN_NS)) break;
  }
  pthread_mutex_lock(&g->mu);
  atomic_fetch_add(&g->sleepers, 1);
  while (atomic_load(w) < want && !dpm_group_broken(&g->fault))
    if (until ? pthread_cond_timedwait(&g->cv, &g->mu, until) == ETIMEDOUT
              : pthread_cond_wait(&g->cv, &g->mu) != 0)
      break;
  atomic_fetch_sub(&g->sleepers, 1);
  pthread_mutex_unlock(&g->mu);
  return atomic_load(w) >= want;
}

/* One round: rank arrives with `call` (and, in a first round, its buffer)
 * and returns when all ranks have arrived, with the round's verdict; or
 * DPM_TIMEOUT (timed rounds only) / DPM_STATE / DPM_INVALID (the rank is
 * already inside a round). */
static dpm_status meet(local_comm *g, int rank, dpm_group_call call, int phase, int timed,
                       dpm_err *err) {
  const char *op = dpm_group_op_name(call.op);
  if (dpm_group_broken(&g->fault)) return broken_state(g, op, err);
  if (atomic_exchange(&g->here[rank], 1))
    return dpm_errf(
        err, DPM_INVALID,
        "%s: rank %d is already inside a collective (one call per rank at a time)", op,
        rank);
  struct timespec until = dpm_mono_deadline(g->timeout_ms);
  g->calls[rank] = call;
  g->phase[rank] = phase;
  if (phase == 0) g->bufs[rank] = call.buf;
  unsigned long mine = atomic_load(&g->gen); /* gen waits for this rank */
  if (atomic_fetch_add(&g->arrived, 1) + 1 == g->base.size) {
    pthread_mutex_lock(&g->mu); /* the last one in: judge and publish */
    if (!dpm_group_broken(&g->fault)) {
      g->verdict = judge(g);
      atomic_store(&g->arrived, 0);
      for (int r = 0; r < g->base.size; r++) atomic_store(&g->here[r], 0);
      atomic_fetch_add(&g->gen, 1);
      if (atomic_load(&g->sleepers)) pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
  } else {
    while (!await(g, &g->gen, mine + 1, timed ? &until : NULL) &&
           !dpm_group_broken(&g->fault)) {
      pthread_mutex_lock(&g->mu); /* the deadline passed */
      /* (with every rank in, the last one is on its way to publish) */
      if (atomic_load(&g->gen) == mine && !dpm_group_broken(&g->fault) &&
          atomic_load(&g->arrived) < g->base.size)
        break_group(g, op, absent_from_round, 0, g->seq);
      pthread_mutex_unlock(&g->mu);
    }
  }
  /* Both messages were written before gen moved or broken was set, and
   * stay until every rank, this one included, is in the next round. */
  if (atomic_load(&g->gen) == mine) /* the round broke while this rank was in it */
    return dpm_errf(err, DPM_TIMEOUT, "%s", g->fault.msg);
  return g->verdict ? dpm_errf(err, g->verdict, "%s", g->verdict_msg) : DPM_OK;
}

/* Slice r of n items split over `size` ranks in whole multiples of `align`
 * items: [*lo, *hi), empty when past the end. */
static void slice_of(size_t n, int size, int r, size_t align, size_t *lo, size_t *hi) {
  size_t per = (n + (size_t)size - 1) / (size_t)size;
  per = (per + align - 1) / align * align;
  *lo = per * (size_t)r < n ? per * (size_t)r : n;
  *hi = n - *lo > per ? *lo + per : n;
}

/* Elements summed per pass: a chunk of every buffer stays in L1 between the
 * reading and the writing of it. */
#define SUM_CHUNK 1024

/* The sums of one element type T: sum2_T, add_into_T, sum2_store_T and
 * reduce_slice_T (sum [lo, hi) of the n buffers in rank order into every
 * buffer), alike for float and double. */
#define LOCAL_SUMS(T)                                                                    \
  static void sum2_##T(T *restrict t, const T *restrict a, const T *restrict b,          \
                       size_t m) {                                                       \
    for (size_t i = 0; i < m; i++) t[i] = a[i] + b[i];                                   \
  }                                                                                      \
  static void add_into_##T(T *restrict t, const T *restrict a, size_t m) {               \
    for (size_t i = 0; i < m; i++) t[i] += a[i];                                         \
  }                                                                                      \
  /* Two ranks: sum and store in one pass. */                                            \
  static void sum2_store_##T(T *restrict a, T *restrict b, size_t m) {                   \
    for (size_t i = 0; i < m; i++) {                                                     \
      T s = a[i] + b[i];                                                                 \
      a[i] = s;                                                                          \
      b[i] = s;                                                                          \
    }                                                                                    \
  }                                                                                      \
  static void reduce_slice_##T(void *const *vbufs, int n, size_t lo, size_t hi) {        \
    T *const *bufs = (T *const *)vbufs;                                                  \
    if (n == 2) {                                                                        \
      sum2_store_##T(bufs[0] + lo, bufs[1] + lo, hi - lo);                               \
      return;                                                                            \
    }                                                                                    \
    T tmp[SUM_CHUNK] __attribute__((aligned(64)));                                       \
    for (size_t a = lo; a < hi; a += SUM_CHUNK) {                                        \
      size_t m = hi - a < SUM_CHUNK ? hi - a : SUM_CHUNK;                                \
      sum2_##T(tmp, bufs[0] + a, bufs[1] + a, m);                                        \
      for (int k = 2; k < n; k++) add_into_##T(tmp, bufs[k] + a, m);                     \
      for (int k = 0; k < n; k++) memcpy(bufs[k] + a, tmp, m * sizeof(T));               \
    }                                                                                    \
  }
LOCAL_SUMS(float)
LOCAL_SUMS(double)

/* Sum [lo, hi) (elements of t) of the n buffers in rank order into every
 * buffer. */
static void reduce_slice(dpm_comm_dtype t, void *const *bufs, int n, size_t lo,
                         size_t hi) {
  if (t == DPM_COMM_F64)
    reduce_slice_double(bufs, n, lo, hi);
  else
    reduce_slice_float(bufs, n, lo, hi);
}

static dpm_status local_allreduce(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                                  size_t count, dpm_err *err) {
  local_comm *g = local_of(c);
  dpm_group_call call = {
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = t};
  dpm_status s = meet(g, rank, call, 0, 1, err);
  if (s || c->size == 1 || count == 0) return s;
  size_t lo, hi;
  slice_of(count, c->size, rank, 64 / dpm_comm_dtype_size(t), &lo, &hi);
  if (lo < hi) reduce_slice(t, g->bufs, c->size, lo, hi);
  return meet(g, rank, call, 1, 0, err);
}

/* Slice-parallel: rank r copies slice r of the root's buffer to every other
 * rank, so all ranks (the root too) share the copying. */
static dpm_status local_broadcast(dpm_comm *c, int rank, int root, void *buf,
                                  size_t bytes, dpm_err *err) {
  local_comm *g = local_of(c);
  dpm_group_call call = {.op = DPM_GROUP_BROADCAST, .root = root, .n = bytes, .buf = buf};
  dpm_status s = meet(g, rank, call, 0, 1, err);
  if (s || c->size == 1 || bytes == 0) return s;
  size_t lo, hi;
  slice_of(bytes, c->size, rank, 64, &lo, &hi);
  const char *src = g->bufs[root];
  for (int k = 0; k < c->size && lo < hi; k++)
    if (k != root) memcpy((char *)g->bufs[k] + lo, src + lo, hi - lo);
  return meet(g, rank, call, 1, 0, err);
}

static dpm_status local_barrier(dpm_comm *c, int rank, dpm_err *err) {
  return meet(local_of(c), rank, (dpm_group_call){.op = DPM_GROUP_BARRIER, .root = -1}, 0,
              1, err);
}

/* ---- Started allreduces -------------------------------------------------
 *
 * Job k is every rank's k-th start. A start records the rank's buffer and
 * count in the job's slot and counts the rank in; the last rank in judges
 * (the same count everywhere, dpm_group_judge) and publishes the job (ready =
 * k + 1). The summing happens in the waits: each waiting rank claims chunks
 * of LOCAL_CHUNK floats and sums each in rank order into every buffer
 * (reduce_slice), so a rank that waits while its peers still compute sums
 * all that they have started, and a slower rank finds its sums done. A wait
 * returns once every chunk is summed; the last rank to leave resets the
 * slot for job k + LOCAL_JOBS (uses). A rank that gives up on a job not
 * every rank has started (its timeout, or a group broken elsewhere) first
 * adds LOCAL_POISON to the arrivals, so that the job can never be published
 * and no peer writes the buffer of a rank that has returned. */

/* Floats a waiting rank claims at a time: 32 KiB, a few microseconds. */
#define LOCAL_CHUNK 8192

/* The status of a rank that gives up: the group is broken, by this rank
 * (its timeout, recorded as `op` missing `absent` ranks) or another. */
static dpm_status give_up(local_comm *g, const char *op, local_absent_fn absent,
                          unsigned long k, dpm_err *err) {
  pthread_mutex_lock(&g->mu);
  if (!dpm_group_broken(&g->fault)) break_group(g, op, absent, k, k);
  dpm_errf(err, DPM_TIMEOUT, "%s", g->fault.msg);
  pthread_mutex_unlock(&g->mu);
  return DPM_TIMEOUT;
}

static void publish(local_comm *g, local_job *j, unsigned long k) {
  j->verdict = dpm_group_judge(j->calls, g->base.size, 0, g->base.size, j->msg);
  j->chunks = j->verdict ? 0 : (j->calls[0].n + LOCAL_CHUNK - 1) / LOCAL_CHUNK;
  atomic_store(&j->ready, k + 1);
  wake_sleepers(g);
}

static dpm_status local_start(dpm_comm *c, int rank, float *buf, size_t count,
                              dpm_err *err) {
  local_comm *g = local_of(c);
  unsigned long k = atomic_load(&g->started[rank]);
  if (dpm_group_broken(&g->fault)) return broken_state(g, "allreduce start", err);
  if (k - atomic_load(&g->waited[rank]) == LOCAL_JOBS)
    return dpm_errf(err, DPM_INVALID,
                    "allreduce start: rank %d already has %d started allreduces not "
                    "waited for",
                    rank, LOCAL_JOBS);
  local_job *j = &g->jobs[k % LOCAL_JOBS];
  struct timespec until = dpm_mono_deadline(g->timeout_ms);
  if (!await(g, &j->uses, k / LOCAL_JOBS, &until))
    return give_up(g, "allreduce start (an earlier allreduce not yet waited for)",
                   absent_from_waits, k - LOCAL_JOBS, err);
  j->calls[rank] = (dpm_group_call){
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = DPM_COMM_F32};
  j->bufs[rank] = buf;
  atomic_store(&g->started[rank], k + 1);
  if (atomic_fetch_add(&j->arrived, 1) + 1 == c->size) publish(g, j, k);
  return DPM_OK;
}

/* Sum the job's unclaimed chunks, then wait for the peers' claimed ones. */
static void sum_chunks(local_comm *g, local_job *j) {
  size_t n = j->calls[0].n;
  for (unsigned long ch; (ch = atomic_fetch_add(&j->next, 1)) < j->chunks;) {
    size_t lo = ch * LOCAL_CHUNK, hi = n - lo > LOCAL_CHUNK ? lo + LOCAL_CHUNK : n;
    reduce_slice(DPM_COMM_F32, j->bufs, g->base.size, lo, hi);
    atomic_fetch_add(&j->done, 1);
  }
  dpm_spin_until(&j->done, j->chunks); /* the peers' claimed chunks */
}

static dpm_status local_wait(dpm_comm *c, int rank, dpm_err *err) {
  local_comm *g = local_of(c);
  unsigned long k = atomic_load(&g->waited[rank]);
  if (k == atomic_load(&g->started[rank]))
    return dpm_errf(err, DPM_INVALID, "allreduce wait: rank %d has no started allreduce",
                    rank);
  local_job *j = &g->jobs[k % LOCAL_JOBS];
  atomic_store(&g->waited[rank], k + 1);
  struct timespec until = dpm_mono_deadline(g->timeout_ms);
  if (!await(g, &j->ready, k + 1, &until)) {
    if (atomic_fetch_add(&j->arrived, LOCAL_POISON) != c->size)
      return give_up(g, "allreduce", absent_from_job, k, err);
    dpm_spin_until(&j->ready, k + 1); /* all were in: the judge is publishing it */
  }
  dpm_status s = j->verdict ? dpm_errf(err, j->verdict, "%s", j->msg) : DPM_OK;
  if (!s && c->size > 1) sum_chunks(g, j);
  if (atomic_fetch_add(&j->left, 1) + 1 == c->size) {
    atomic_store(&j->arrived, 0);
    atomic_store(&j->next, 0);
    atomic_store(&j->done, 0);
    atomic_store(&j->left, 0);
    atomic_fetch_add(&j->uses, 1);
    wake_sleepers(g);
  }
  return s;
}

static int local_broken(dpm_comm *c) { return dpm_group_broken(&local_of(c)->fault); }

static dpm_status local_failure(dpm_comm *c, dpm_err *err) {
  local_comm *g = local_of(c);
  pthread_mutex_lock(&g->mu);
  dpm_status s = dpm_group_failure(&g->fault, err);
  pthread_mutex_unlock(&g->mu);
  return s;
}

static void free_all(local_comm *g) {
  for (int k = 0; g->jobs && k < LOCAL_JOBS; k++) {
    free(g->jobs[k].calls);
    free(g->jobs[k].bufs);
  }
  free(g->jobs);
  free(g->started);
  free(g->waited);
  free(g->calls);
  free(g->phase);
  free(g->here);
  free(g->bufs);
  free(g);
}

static void local_destroy(dpm_comm *c) {
  local_comm *g = local_of(c);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free_all(g);
}

static const dpm_comm_ops local_comm_ops = {
    .name = "local",
    .allreduce = local_allreduce,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .allreduce_start = local_start,
    .allreduce_wait = local_wait,
    .broken = local_broken,
    .failure = local_failure,
    .destroy = local_destroy,
};

dpm_status dpm_comm_local_create(int size, int timeout_ms, dpm_comm **out, dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "local comm: no output pointer");
  *out = NULL;
  if (size < 1 || size > DPM_COMM_MAX_RANKS)
    return dpm_errf(err, DPM_INVALID, "local comm: size %d outside 1..%d", size,
                    DPM_COMM_MAX_RANKS);
  if (timeout_ms <= 0)
    return dpm_errf(err, DPM_INVALID, "local comm: timeout %d ms must be positive",
                    timeout_ms);
  local_comm *g = calloc(1, sizeof *g);
  if (!g) return dpm_errf(err, DPM_NOMEM, "local comm: out of memory");
  g->calls = calloc((size_t)size, sizeof *g->calls);
  g->phase = calloc((size_t)size, sizeof *g->phase);
  g->here = calloc((size_t)size, sizeof *g->here);
  g->bufs = calloc((size_t)size, sizeof *g->bufs);
  g->started = calloc((size_t)size, sizeof *g->started);
  g->waited = calloc((size_t)size, sizeof *g->waited);
  int jobs_ok = (g->jobs = calloc(LOCAL_JOBS, sizeof *g->jobs)) != NULL;
  for (int k = 0; jobs_ok && k < LOCAL_JOBS; k++) {
    g->jobs[k].calls = calloc((size_t)size, sizeof *g->jobs[k].calls);
    g->jobs[k].bufs = calloc((size_t)size, sizeof *g->jobs[k].bufs);
    jobs_ok = g->jobs[k].calls && g->jobs[k].bufs;
  }
  int mu_ok = !pthread_mutex_init(&g->mu, NULL), cv_ok = dpm_group_cond_init(&g->cv);
  if (!g->calls || !g->phase || !g->here || !g->bufs || !g->started || !g->waited ||
      !jobs_ok || !mu_ok || !cv_ok) {
    if (mu_ok) pthread_mutex_destroy(&g->mu);
    if (cv_ok) pthread_cond_destroy(&g->cv);
    free_all(g);
    return dpm_errf(err, DPM_NOMEM, "local comm: out of memory for %d ranks", size);
  }
  g->base = (dpm_comm){.ops = &local_comm_ops, .size = size};
  g->timeout_ms = timeout_ms;
  dpm_group_fault_init(&g->fault, "timeout");
  g->spin = size > 1 && size <= sysconf(_SC_NPROCESSORS_ONLN);
  *out = &g->base;
  return DPM_OK;
}
