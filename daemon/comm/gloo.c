/* Gloo communicator: the job's ranks run in several processes (hosts), each
 * process running `size` of them as threads; contract in comm.h, summation
 * order at dpm_comm_gloo_create.
 *
 * Every collective is a job of the group core's job queue (group.h). Job k
 * is every local rank's k-th call (a blocking collective or a started
 * allreduce): a rank arriving records what it called in the job's slot (a
 * ring of GLOO_JOBS); the last local rank to arrive checks that the local
 * ranks agree and publishes the job (ready = k + 1). Jobs run in order, one at a time
 * (turn, running): a blocking job whose turn it is when published runs on the rank that
 * published it (no thread wake-ups on the way); every other job (a started
 * allreduce, or a blocking one behind started ones) is handed to the
 * backend's thread. Running a job:
 *   1. with other processes, swap a header with each of them
 *      (dpm_gloo_exchange of the group core's dpm_group_header: the
 *      collective, its count or bytes, its root, its dtype, a float sum's
 *      wire and the job's number; judged by dpm_group_agree), so that every rank of the
 * job refuses a disagreement alike, with DPM_INVALID, before any data moves (Gloo itself
 * cannot survive mismatched sizes); the exchange also is the job-wide barrier;
 *   2. allreduce: sum the local buffers in rank order into local rank 0's,
 *      all-reduce that across the processes (Gloo's ring; float sums on a
 *      bf16 wire: dpm_gloo_allreduce_bf16), and copy the
 *      result into the other local buffers; broadcast: Gloo's broadcast
 *      from the root's process into local rank 0's buffer (the root's own
 *      there), then copies to the other local buffers;
 * then publish the job's status (done = k + 1). With one process there is
 * no Gloo context: no step 1, and step 2 only sums and copies locally. A
 * blocking call waits for its job to be done; a started allreduce returns
 * once the rank arrived, and its wait waits for the job, so the
 * cross-process reduction runs on the thread while the ranks compute. A
 * rank leaves a job once it has the result; the last to leave frees the
 * slot for job k + GLOO_JOBS.
 *
 * Timeouts: a rank waits timeout_ms for the other local ranks to arrive at
 * a job (then breaks the group, naming the missing ranks); once all have
 * arrived it waits for the job without a bound of its own, since every
 * wait in running one is bounded by Gloo's timeout (the same timeout_ms).
 * Any failure of the network calls breaks the group too: the Gloo context
 * is spent. Broken is sticky: later calls fail with DPM_STATE quoting the
 * first failure, and jobs already published finish with that error
 * instead of running.
 *
 * The job queue, the agreement of the local ranks (dpm_group_judge), the
 * timeout messages and the sticky failure are the group core's (group.h).
 *
 * Threads: ranks arrive lock-free (their own slot entries, one atomic
 * increment); the last arriver publishes under the queue's mu, and takes
 * the job or signals cv_thread; whoever ran a job publishes done under mu
 * and wakes the ranks asleep on the queue's cv. Job buffers are read only
 * between ready and done, while every rank of the job waits for it (or,
 * for a started allreduce, has promised to leave the buffer alone); the
 * Gloo context is used by the one running the job only; started, waited
 * and the fifo are touched by the rank's own calls only. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/gloo_shim.h"
#include "comm/group.h"
#include "common/clock.h"

/* Slots of jobs: a rank may be DPM_COMM_MAX_STARTED started allreduces and
 * one blocking call ahead of the slowest local rank's leaving. */
#define GLOO_JOBS (2 * DPM_COMM_MAX_STARTED)
/* Elements summed per pass of the local reduction (a chunk of each buffer
 * stays in L1 between its reading and its writing). */
#define SUM_CHUNK 1024

/* What a job keeps beside its queue slot: its run. Its message is the
 * slot's (the verdict's, then the result's). */
typedef struct {
  atomic_ulong done; /* k + 1 once job k has run */
  dpm_status status; /* the job's result, set before done */
} gloo_run;

typedef struct {
  dpm_comm base;            /* first: handed out as dpm_comm */
  int timeout_ms;           /* bound on waits for local ranks; Gloo's timeout */
  int world;                /* ranks in the job */
  int nproc;                /* processes in the job (world / size) */
  int proc;                 /* this one's: rank_base / size */
  int rank_base;            /* the job-wide rank of local rank 0 */
  dpm_comm_wire wire;       /* how float sums cross processes */
  dpm_gloo *net;            /* the Gloo context; NULL with one process */
  dpm_group_queue q;        /* the jobs; its mu guards turn, running and stop too,
                               and ranks sleep on its cv until a job is done */
  pthread_cond_t cv_thread; /* the thread sleeps here: signalled when a job is
                               handed to it, or it must stop */
  unsigned long turn;       /* under q.mu: the first job not done (jobs run in order) */
  int running;              /* under q.mu: job `turn` is running (thread or inline) */
  int stop;                 /* under q.mu: destroy asks the thread to end */
  gloo_run runs[GLOO_JOBS]; /* beside the queue's slots */
  unsigned long *fifo;      /* [size * DPM_COMM_MAX_STARTED] started jobs, oldest first */
  unsigned long *started, *waited; /* [size] started allreduces, and waited for */
  dpm_group_header *headers;       /* [nproc] the thread's exchange (a job's
                                      sequence number is its k) */
  pthread_t thread;
  int have_thread;
} gloo_comm;

static gloo_comm *gloo_of(dpm_comm *c) { return (gloo_comm *)c; }

static dpm_status broken_state(gloo_comm *g, const char *op, dpm_err *err) {
  char m[DPM_GROUP_ERR];
  return dpm_errf(err, dpm_group_state(&g->q, op, m), "%s", m);
}

/* ---- jobs: arriving, finishing ------------------------------------------- */

/* Rank `rank` arrives at its next job with `call`; *job is its number.
 * Waits (until `until`) for the job's slot to be free. The last local rank
 * to arrive hands the job over; with `can_run` (a blocking call), when no
 * earlier job is unfinished, it takes the job itself (*run = 1: the caller
 * runs it and completes it, saving two thread wake-ups) instead of handing
 * it to the thread. */
static dpm_status arrive(gloo_comm *g, int rank, dpm_group_call call, const char *op,
                         const struct timespec *until, int can_run, int *run,
                         unsigned long *job, dpm_err *err) {
  char m[DPM_GROUP_ERR];
  int last;
  *run = 0;
  dpm_status s = dpm_group_arrive(&g->q, rank, &call, op, until, job, &last, m);
  if (s) return dpm_errf(err, s, "%s", m);
  if (last) {
    pthread_mutex_lock(&g->q.mu);
    if (dpm_group_publish_locked(&g->q, *job)) { /* else: the ranks' finish sees broken */
      /* the other ranks wait for done, which wakes them */
      if (can_run && g->turn == *job && !g->running)
        g->running = *run = 1;
      else
        pthread_cond_signal(&g->cv_thread);
    }
    pthread_mutex_unlock(&g->q.mu);
  }
  return DPM_OK;
}

/* Rank `rank` waits for job k's result: first, until `until`, for every
 * local rank to arrive (breaking the group otherwise), then for the thread;
 * then it leaves the job. */
static dpm_status finish(gloo_comm *g, int rank, unsigned long k, const char *op,
                         const struct timespec *until, dpm_err *err) {
  char m[DPM_GROUP_ERR];
  dpm_status s = dpm_group_ready(&g->q, k, until, op, m);
  if (s) return dpm_errf(err, s, "%s", m);
  gloo_run *x = &g->runs[dpm_group_slot(&g->q, k)];
  dpm_group_await(&g->q, &x->done, k + 1, NULL, 0); /* a ready job is always finished */
  s = x->status ? dpm_errf(err, x->status, "%s", dpm_group_job_of(&g->q, k)->msg)
                : DPM_OK;
  dpm_group_leave(&g->q, k, rank);
  return s;
}

/* One call per rank at a time (comm.h): 1 if the rank may enter. */
static int enter(gloo_comm *g, int rank, const char *op, dpm_err *err) {
  char m[DPM_GROUP_MSG];
  if (!dpm_group_enter(&g->q, rank, op, m)) return 1;
  dpm_errf(err, DPM_INVALID, "%s", m);
  return 0;
}

static void run_job(gloo_comm *g, unsigned long k);
static void complete(gloo_comm *g, unsigned long k);

static dpm_status blocking(gloo_comm *g, int rank, dpm_group_call call, dpm_err *err) {
  const char *op = dpm_group_op_name(call.op);
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, op, err);
  if (!enter(g, rank, op, err)) return DPM_INVALID;
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  unsigned long k;
  int run;
  dpm_status s = arrive(g, rank, call, op, &until, 1, &run, &k, err);
  if (!s && run) { /* this rank took the job: run it here */
    run_job(g, k);
    complete(g, k);
  }
  if (!s) s = finish(g, rank, k, op, &until, err);
  dpm_group_exit(&g->q, rank);
  return s;
}

static dpm_status gloo_allreduce(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                                 size_t count, dpm_err *err) {
  return blocking(
      gloo_of(c), rank,
      (dpm_group_call){
          .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = t},
      err);
}

static dpm_status gloo_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                                 dpm_err *err) {
  return blocking(
      gloo_of(c), rank,
      (dpm_group_call){.op = DPM_GROUP_BROADCAST, .root = root, .n = bytes, .buf = buf},
      err);
}

static dpm_status gloo_barrier(dpm_comm *c, int rank, dpm_err *err) {
  return blocking(gloo_of(c), rank, (dpm_group_call){.op = DPM_GROUP_BARRIER, .root = -1},
                  err);
}

static dpm_status gloo_start(dpm_comm *c, int rank, float *buf, size_t count,
                             dpm_err *err) {
  gloo_comm *g = gloo_of(c);
  const char *op = "allreduce start";
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, op, err);
  if (g->started[rank] - g->waited[rank] == DPM_COMM_MAX_STARTED)
    return dpm_errf(err, DPM_INVALID,
                    "%s: rank %d already has %d started allreduces not waited for", op,
                    g->rank_base + rank, DPM_COMM_MAX_STARTED);
  if (!enter(g, rank, op, err)) return DPM_INVALID;
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  unsigned long k;
  dpm_group_call call = {
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = DPM_COMM_F32};
  int run; /* never: started jobs are the thread's */
  dpm_status s = arrive(g, rank, call, op, &until, 0, &run, &k, err);
  if (!s) {
    g->fifo[(size_t)rank * DPM_COMM_MAX_STARTED +
            g->started[rank] % DPM_COMM_MAX_STARTED] = k;
    g->started[rank]++;
  }
  dpm_group_exit(&g->q, rank);
  return s;
}

static dpm_status gloo_wait(dpm_comm *c, int rank, dpm_err *err) {
  gloo_comm *g = gloo_of(c);
  if (g->waited[rank] == g->started[rank])
    return dpm_errf(err, DPM_INVALID, "allreduce wait: rank %d has no started allreduce",
                    g->rank_base + rank);
  if (!enter(g, rank, "allreduce wait", err)) return DPM_INVALID;
  unsigned long k = g->fifo[(size_t)rank * DPM_COMM_MAX_STARTED +
                            g->waited[rank] % DPM_COMM_MAX_STARTED];
  g->waited[rank]++;
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  dpm_status s = finish(g, rank, k, "allreduce", &until, err);
  dpm_group_exit(&g->q, rank);
  return s;
}

/* ---- the thread ------------------------------------------------------------ */

/* "process 1 (job ranks 2-3, HOST:PORT)" (a dpm_group_describe_fn) */
static const char *describe(void *ctx, int p, char *buf, size_t cap) {
  gloo_comm *g = ctx;
  if (g->net) {
    dpm_gloo_describe(g->net, p, buf, cap);
  } else {
    snprintf(buf, cap, "process %d", p);
  }
  return buf;
}

static void add_into_float(void *restrict vt, const void *restrict va, size_t m) {
  float *restrict t = vt;
  const float *restrict a = va;
  for (size_t i = 0; i < m; i++) t[i] += a[i];
}

static void add_into_double(void *restrict vt, const void *restrict va, size_t m) {
  double *restrict t = vt;
  const double *restrict a = va;
  for (size_t i = 0; i < m; i++) t[i] += a[i];
}

/* Local sum in rank order into rank 0's buffer, Gloo across processes, the
 * result into the other local buffers; elements of the job's type. */
static dpm_status run_allreduce(gloo_comm *g, const dpm_group_job *j, dpm_err *err) {
  size_t n = j->calls[0].n;
  dpm_comm_dtype t = j->calls[0].t;
  size_t es = dpm_comm_dtype_size(t);
  void (*add_into)(void *restrict, const void *restrict, size_t) =
      t == DPM_COMM_F64 ? add_into_double : add_into_float;
  int size = g->base.size;
  char *b0 = j->calls[0].buf;
  if (!n) return DPM_OK;
  for (size_t a = 0; a < n && size > 1; a += SUM_CHUNK) {
    size_t m = n - a < SUM_CHUNK ? n - a : SUM_CHUNK;
    for (int r = 1; r < size; r++)
      add_into(b0 + a * es, (const char *)j->calls[r].buf + a * es, m);
  }
  if (g->net) {
    dpm_status s = t == DPM_COMM_F32 && g->wire == DPM_COMM_WIRE_BF16
                       ? dpm_gloo_allreduce_bf16(g->net, "allreduce", (float *)b0, n, err)
                       : dpm_gloo_allreduce(g->net, "allreduce", t, b0, n, err);
    if (s) return s;
  }
  for (int r = 1; r < size; r++) memcpy(j->calls[r].buf, b0, n * es);
  return DPM_OK;
}

static dpm_status run_broadcast(gloo_comm *g, const dpm_group_job *j, dpm_err *err) {
  int root = j->calls[0].root, size = g->base.size;
  int rp = root / size, src = rp == g->proc ? root % size : 0;
  size_t n = j->calls[0].n;
  if (!n) return DPM_OK;
  if (g->net) {
    dpm_status s = dpm_gloo_broadcast(g->net, "broadcast", rp, j->calls[src].buf, n, err);
    if (s) return s;
  }
  for (int r = 0; r < size; r++)
    if (r != src) memcpy(j->calls[r].buf, j->calls[src].buf, n);
  return DPM_OK;
}

/* Job k, ready: its status into its run, its message into its slot. */
static void run_job(gloo_comm *g, unsigned long k) {
  dpm_group_job *j = dpm_group_job_of(&g->q, k);
  gloo_run *x = &g->runs[dpm_group_slot(&g->q, k)];
  const dpm_group_call *c0 = &j->calls[0];
  const char *op = j->verdict ? "collective" : dpm_group_op_name(c0->op);
  dpm_err e = {0};
  dpm_status s;
  if (dpm_group_broken(&g->q.fault)) {
    pthread_mutex_lock(&g->q.mu);
    dpm_group_fault_msg(&g->q.fault, op, j->msg, sizeof j->msg);
    pthread_mutex_unlock(&g->q.mu);
    x->status = DPM_STATE;
    return;
  }
  if (g->net) {
    dpm_group_header mine = dpm_group_header_of(c0, !j->verdict, k);
    if (c0->op == DPM_GROUP_ALLREDUCE && c0->t == DPM_COMM_F32) mine.wire = g->wire;
    s = dpm_gloo_exchange(g->net, op, &mine, sizeof mine, g->headers, &e);
    if (s) goto failed;
  }
  if (j->verdict ||
      (g->net && dpm_group_agree(g->headers, g->nproc, describe, g, j->msg))) {
    x->status = DPM_INVALID; /* j->msg says why */
    return;
  }
  s = c0->op == DPM_GROUP_ALLREDUCE   ? run_allreduce(g, j, &e)
      : c0->op == DPM_GROUP_BROADCAST ? run_broadcast(g, j, &e)
                                      : DPM_OK; /* the exchange was the barrier */
  if (!s) {
    x->status = DPM_OK;
    return;
  }
failed: /* the Gloo context is spent: so is the group */
  dpm_group_break(&g->q, s, e.msg);
  snprintf(j->msg, sizeof j->msg, "%s", e.msg);
  x->status = s;
}

/* Job k has run: the next one's turn; its ranks may take the result. */
static void complete(gloo_comm *g, unsigned long k) {
  pthread_mutex_lock(&g->q.mu);
  g->running = 0;
  g->turn = k + 1;
  atomic_store(&g->runs[dpm_group_slot(&g->q, k)].done, k + 1);
  if (atomic_load(&g->q.sleepers)) pthread_cond_broadcast(&g->q.cv);
  if (atomic_load(&dpm_group_job_of(&g->q, k + 1)->ready) >= k + 2)
    pthread_cond_signal(&g->cv_thread);
  pthread_mutex_unlock(&g->q.mu);
}

/* Runs every job its ranks did not take, in order, one at a time. */
static void *thread_main(void *arg) {
  gloo_comm *g = arg;
  for (;;) {
    pthread_mutex_lock(&g->q.mu);
    unsigned long k = g->turn;
    while (!g->stop &&
           (g->running || atomic_load(&dpm_group_job_of(&g->q, k)->ready) < k + 1)) {
      pthread_cond_wait(&g->cv_thread, &g->q.mu);
      k = g->turn;
    }
    int stop = g->stop;
    g->running = !stop;
    pthread_mutex_unlock(&g->q.mu);
    if (stop) return NULL;
    run_job(g, k);
    complete(g, k);
  }
}

/* ---- the group ------------------------------------------------------------- */

static int gloo_broken(dpm_comm *c) { return dpm_group_broken(&gloo_of(c)->q.fault); }

static dpm_status gloo_failure(dpm_comm *c, dpm_err *err) {
  return dpm_group_queue_failure(&gloo_of(c)->q, err);
}

/* Frees g and its arrays (not the queue, the condition variable, the net). */
static void free_all(gloo_comm *g) {
  free(g->fifo);
  free(g->started);
  free(g->waited);
  free(g->headers);
  free(g);
}

static void gloo_destroy(dpm_comm *c) {
  gloo_comm *g = gloo_of(c);
  if (g->have_thread) {
    pthread_mutex_lock(&g->q.mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv_thread);
    pthread_mutex_unlock(&g->q.mu);
    pthread_join(g->thread, NULL);
  }
  dpm_gloo_destroy(g->net);
  pthread_cond_destroy(&g->cv_thread);
  dpm_group_queue_fini(&g->q);
  free_all(g);
}

static const dpm_comm_ops gloo_comm_ops = {
    .name = "gloo",
    .allreduce = gloo_allreduce,
    .broadcast = gloo_broadcast,
    .barrier = gloo_barrier,
    .allreduce_start = gloo_start,
    .allreduce_wait = gloo_wait,
    .broken = gloo_broken,
    .failure = gloo_failure,
    .destroy = gloo_destroy,
};

static dpm_status check_config(const dpm_comm_config *cfg, int world, dpm_err *err) {
  if (cfg->size < 1 || cfg->size > DPM_COMM_MAX_RANKS)
    return dpm_errf(err, DPM_INVALID, "gloo comm: size %d outside 1..%d", cfg->size,
                    DPM_COMM_MAX_RANKS);
  if (world < cfg->size || world > DPM_COMM_MAX_RANKS || world % cfg->size)
    return dpm_errf(err, DPM_INVALID,
                    "gloo comm: a job of %d ranks cannot be processes of %d ranks each "
                    "(at most %d ranks in all)",
                    world, cfg->size, DPM_COMM_MAX_RANKS);
  if (cfg->rank_base < 0 || cfg->rank_base >= world || cfg->rank_base % cfg->size)
    return dpm_errf(err, DPM_INVALID,
                    "gloo comm: rank base %d is not a multiple of %d below %d",
                    cfg->rank_base, cfg->size, world);
  if (cfg->timeout_ms <= 0)
    return dpm_errf(err, DPM_INVALID, "gloo comm: timeout %d ms must be positive",
                    cfg->timeout_ms);
  if ((unsigned)cfg->wire >= DPM_COMM_WIRE_COUNT)
    return dpm_errf(err, DPM_INVALID, "gloo comm: wire format %d", (int)cfg->wire);
  return DPM_OK;
}

dpm_status dpm_comm_gloo_create(const dpm_comm_config *cfg, dpm_comm **out,
                                dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "gloo comm: no output pointer");
  *out = NULL;
  if (!cfg) return dpm_errf(err, DPM_INVALID, "gloo comm: no config");
  int world = cfg->world ? cfg->world : cfg->size;
  dpm_status s = check_config(cfg, world, err);
  if (s) return s;
  int size = cfg->size, nproc = world / size;
  gloo_comm *g = calloc(1, sizeof *g);
  if (!g) return dpm_errf(err, DPM_NOMEM, "gloo comm: out of memory");
  g->fifo = calloc((size_t)size * DPM_COMM_MAX_STARTED, sizeof *g->fifo);
  g->started = calloc((size_t)size, sizeof *g->started);
  g->waited = calloc((size_t)size, sizeof *g->waited);
  g->headers = calloc((size_t)nproc, sizeof *g->headers);
  char who[48];
  snprintf(who, sizeof who, "ranks of process %d", cfg->rank_base / size);
  int arrays_ok = g->fifo && g->started && g->waited && g->headers;
  int q_ok = arrays_ok && dpm_group_queue_init(&g->q, GLOO_JOBS, size, cfg->rank_base,
                                               world, cfg->timeout_ms, 0, who, "failure");
  int tcv_ok = q_ok && !pthread_cond_init(&g->cv_thread, NULL);
  if (!tcv_ok) {
    if (q_ok) dpm_group_queue_fini(&g->q);
    free_all(g);
    return dpm_errf(err, DPM_NOMEM, "gloo comm: out of memory for %d ranks", size);
  }
  g->base = (dpm_comm){.ops = &gloo_comm_ops, .size = size};
  g->timeout_ms = cfg->timeout_ms;
  g->world = world;
  g->nproc = nproc;
  g->proc = cfg->rank_base / size;
  g->rank_base = cfg->rank_base;
  g->wire = cfg->wire;
  if (nproc > 1) {
    dpm_gloo_config gc = {.rank = g->proc,
                          .size = nproc,
                          .local_ranks = size,
                          .timeout_ms = cfg->timeout_ms,
                          .store = cfg->store,
                          .prefix = cfg->rendezvous.prefix,
                          .iface = cfg->rendezvous.iface};
    s = dpm_gloo_create(&gc, &g->net, err);
  }
  if (!s && pthread_create(&g->thread, NULL, thread_main, g))
    s = dpm_errf(err, DPM_NOMEM, "gloo comm: cannot start its thread");
  if (s) {
    dpm_gloo_destroy(g->net);
    pthread_cond_destroy(&g->cv_thread);
    dpm_group_queue_fini(&g->q);
    free_all(g);
    return s;
  }
  g->have_thread = 1;
  *out = &g->base;
  return DPM_OK;
}
