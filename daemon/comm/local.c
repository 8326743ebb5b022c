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
 * Started allreduces (dpm_comm_allreduce_start/_wait) are jobs of the group
 * core's job queue (group.h), summed in chunks claimed by the waiting
 * ranks; see "Started allreduces" below.
 *
 * Threads: a rank arrives lock-free (its own slot of calls, bufs and here,
 * then one atomic increment of arrived); the last to arrive judges the
 * round and bumps gen under the queue's mu, and the others watch gen,
 * spinning, then sleeping on the queue's cv (dpm_group_await). So a round
 * between quick ranks makes no system call: a futex wake-up costs tens of
 * microseconds in a VM, several times per training step. The published
 * buffer pointers are read between the two rounds, when nobody can write
 * them; the fault and seq change under mu only. */
#include <pthread.h>
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

/* What a started allreduce keeps beside its queue slot: its chunks. Set by
 * the judge before the job is published (dpm_group_publish). */
typedef struct {
  atomic_ulong next;    /* chunks claimed */
  atomic_ulong done;    /* chunks summed */
  unsigned long chunks; /* chunks of the job; 0 when refused */
  void **bufs;          /* [size] each rank's buffer, from the calls */
} local_sum;

typedef struct {
  dpm_comm base;      /* first: handed out as dpm_comm */
  dpm_group_queue q;  /* the started allreduces; its mu, cv, sleepers and fault
                         serve the rounds too (timeout_ms: the first round's bound) */
  atomic_ulong gen;   /* rounds completed; bumped under q.mu */
  atomic_int arrived; /* ranks arrived at the current round */
  unsigned long seq;  /* blocking collectives judged: the sequence number of the
                         next one (written by the judge under q.mu) */
  dpm_status verdict; /* of the round completed last: DPM_OK or DPM_INVALID */
  char verdict_msg[DPM_GROUP_MSG];
  dpm_group_call *calls; /* [size] what each rank called at the current round */
  int *phase;            /* [size] 0: the call's first round; 1: its second */
  atomic_uchar *here;    /* [size] 1 once the rank arrived at the current round */
  void **bufs;           /* [size] each rank's buffer, set in first rounds */
  /* started allreduces (see "Started allreduces" below) */
  local_sum sums[LOCAL_JOBS]; /* beside the queue's slots */
  unsigned long *waited;      /* [size] started allreduces each rank waited for
                                 (the rank's own; started: q.next) */
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

/* Whether rank r is missing from the current round, for a timeout's
 * message. */
static int absent_from_round(void *ctx, int r) {
  return !atomic_load(&((local_comm *)ctx)->here[r]);
}

/* The error of a call on a group that a timeout broke earlier. */
static dpm_status broken_state(local_comm *g, const char *op, dpm_err *err) {
  char m[DPM_GROUP_ERR];
  return dpm_errf(err, dpm_group_state(&g->q, op, m), "%s", m);
}

/* One round: rank arrives with `call` (and, in a first round, its buffer)
 * and returns when all ranks have arrived, with the round's verdict; or
 * DPM_TIMEOUT (timed rounds only) / DPM_STATE / DPM_INVALID (the rank is
 * already inside a round). */
static dpm_status meet(local_comm *g, int rank, dpm_group_call call, int phase, int timed,
                       dpm_err *err) {
  const char *op = dpm_group_op_name(call.op);
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, op, err);
  if (atomic_exchange(&g->here[rank], 1))
    return dpm_errf(
        err, DPM_INVALID,
        "%s: rank %d is already inside a collective (one call per rank at a time)", op,
        rank);
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  g->calls[rank] = call;
  g->phase[rank] = phase;
  if (phase == 0) g->bufs[rank] = call.buf;
  unsigned long mine = atomic_load(&g->gen); /* gen waits for this rank */
  if (atomic_fetch_add(&g->arrived, 1) + 1 == g->base.size) {
    pthread_mutex_lock(&g->q.mu); /* the last one in: judge and publish */
    if (!dpm_group_broken(&g->q.fault)) {
      g->verdict = judge(g);
      atomic_store(&g->arrived, 0);
      for (int r = 0; r < g->base.size; r++) atomic_store(&g->here[r], 0);
      atomic_fetch_add(&g->gen, 1);
      if (atomic_load(&g->q.sleepers)) pthread_cond_broadcast(&g->q.cv);
    }
    pthread_mutex_unlock(&g->q.mu);
  } else {
    while (!dpm_group_await(&g->q, &g->gen, mine + 1, timed ? &until : NULL, 1) &&
           !dpm_group_broken(&g->q.fault)) {
      pthread_mutex_lock(&g->q.mu); /* the deadline passed */
      /* (with every rank in, the last one is on its way to publish) */
      if (atomic_load(&g->gen) == mine && !dpm_group_broken(&g->q.fault) &&
          atomic_load(&g->arrived) < g->base.size) {
        char m[DPM_GROUP_MSG];
        dpm_group_timeout_msg(m, op, g->seq, g->q.timeout_ms, g->q.who, g->base.size, 0,
                              absent_from_round, g);
        dpm_group_break_locked(&g->q, DPM_TIMEOUT, m);
      }
      pthread_mutex_unlock(&g->q.mu);
    }
  }
  /* Both messages were written before gen moved or broken was set, and
   * stay until every rank, this one included, is in the next round. */
  if (atomic_load(&g->gen) == mine) /* the round broke while this rank was in it */
    return dpm_errf(err, DPM_TIMEOUT, "%s", g->q.fault.msg);
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
 * Job k of the queue is every rank's k-th start. A start arrives at the
 * job with the rank's buffer and count (dpm_group_arrive); the last rank in
 * (judged: the same count everywhere) sets the job's chunks and publishes
 * it. The summing happens in the waits: each waiting rank, once the job is
 * published (dpm_group_ready), claims chunks of LOCAL_CHUNK floats and sums
 * each in rank order into every buffer (reduce_slice), so a rank that
 * waits while its peers still compute sums all that they have started, and
 * a slower rank finds its sums done. A wait returns once every chunk is
 * summed, leaving the job; the last to leave frees the slot for job k +
 * LOCAL_JOBS. A rank that gives up on a job not every rank has started
 * (its timeout, or a group broken elsewhere) breaks the group, and the job
 * is never published: no peer writes the buffer of a rank that returned. */

/* Floats a waiting rank claims at a time: 32 KiB, a few microseconds. */
#define LOCAL_CHUNK 8192

static dpm_status local_start(dpm_comm *c, int rank, float *buf, size_t count,
                              dpm_err *err) {
  local_comm *g = local_of(c);
  const char *op = "allreduce start";
  unsigned long k = g->q.next[rank];
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, op, err);
  if (k - g->waited[rank] == LOCAL_JOBS)
    return dpm_errf(err, DPM_INVALID,
                    "%s: rank %d already has %d started allreduces not waited for", op,
                    rank, LOCAL_JOBS);
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  dpm_group_call call = {
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = DPM_COMM_F32};
  char m[DPM_GROUP_ERR];
  int last;
  dpm_status s = dpm_group_arrive(&g->q, rank, &call, op, &until, &k, &last, m);
  if (s) return dpm_errf(err, s, "%s", m);
  if (last) {
    const dpm_group_job *j = dpm_group_job_of(&g->q, k);
    local_sum *x = &g->sums[dpm_group_slot(&g->q, k)];
    for (int r = 0; r < c->size; r++) x->bufs[r] = j->calls[r].buf;
    atomic_store(&x->next, 0);
    atomic_store(&x->done, 0);
    x->chunks = j->verdict ? 0 : (count + LOCAL_CHUNK - 1) / LOCAL_CHUNK;
    dpm_group_publish(&g->q, k);
  }
  return DPM_OK;
}

/* Sum the job's unclaimed chunks, then wait for the peers' claimed ones. */
static void sum_chunks(local_comm *g, local_sum *x, size_t n) {
  for (unsigned long ch; (ch = atomic_fetch_add(&x->next, 1)) < x->chunks;) {
    size_t lo = ch * LOCAL_CHUNK, hi = n - lo > LOCAL_CHUNK ? lo + LOCAL_CHUNK : n;
    reduce_slice(DPM_COMM_F32, x->bufs, g->base.size, lo, hi);
    atomic_fetch_add(&x->done, 1);
  }
  dpm_spin_until(&x->done, x->chunks); /* the peers' claimed chunks */
}

static dpm_status local_wait(dpm_comm *c, int rank, dpm_err *err) {
  local_comm *g = local_of(c);
  unsigned long k = g->waited[rank];
  if (k == g->q.next[rank])
    return dpm_errf(err, DPM_INVALID, "allreduce wait: rank %d has no started allreduce",
                    rank);
  g->waited[rank] = k + 1;
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  char m[DPM_GROUP_ERR];
  dpm_status s = dpm_group_ready(&g->q, k, &until, "allreduce", m);
  if (s) return dpm_errf(err, s, "%s", m);
  const dpm_group_job *j = dpm_group_job_of(&g->q, k);
  s = j->verdict ? dpm_errf(err, j->verdict, "%s", j->msg) : DPM_OK;
  if (!s && c->size > 1) sum_chunks(g, &g->sums[dpm_group_slot(&g->q, k)], j->calls[0].n);
  dpm_group_leave(&g->q, k, rank);
  return s;
}

static int local_broken(dpm_comm *c) { return dpm_group_broken(&local_of(c)->q.fault); }

static dpm_status local_failure(dpm_comm *c, dpm_err *err) {
  return dpm_group_queue_failure(&local_of(c)->q, err);
}

/* Frees g and what it holds but the queue. */
static void free_all(local_comm *g) {
  for (int k = 0; k < LOCAL_JOBS; k++) free(g->sums[k].bufs);
  free(g->waited);
  free(g->calls);
  free(g->phase);
  free(g->here);
  free(g->bufs);
  free(g);
}

static void local_destroy(dpm_comm *c) {
  local_comm *g = local_of(c);
  dpm_group_queue_fini(&g->q);
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
  g->waited = calloc((size_t)size, sizeof *g->waited);
  int sums_ok = 1;
  for (int k = 0; sums_ok && k < LOCAL_JOBS; k++)
    sums_ok = (g->sums[k].bufs = calloc((size_t)size, sizeof *g->sums[k].bufs)) != NULL;
  int spin = size > 1 && size <= sysconf(_SC_NPROCESSORS_ONLN);
  if (!g->calls || !g->phase || !g->here || !g->bufs || !g->waited || !sums_ok ||
      !dpm_group_queue_init(&g->q, LOCAL_JOBS, size, 0, size, timeout_ms, spin, "ranks",
                            "timeout")) {
    free_all(g);
    return dpm_errf(err, DPM_NOMEM, "local comm: out of memory for %d ranks", size);
  }
  g->base = (dpm_comm){.ops = &local_comm_ops, .size = size};
  *out = &g->base;
  return DPM_OK;
}
