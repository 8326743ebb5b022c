/* The nccl communicator (comm/comm.h), inside the cuda plugin: the job's
 * ranks are GPUs, `size` of them in this process (one thread per rank, each
 * with its device's compute stream, cfg->streams), possibly in several
 * processes; buffers are device memory. Contract, summation order and
 * timeouts at cuda_nccl_create (below).
 *
 * One NCCL communicator per local rank, all nonblocking
 * (config.blocking = 0): a call that would block returns ncclInProgress
 * and is polled here (ncclCommGetAsyncError) against the group's timeout,
 * so no thread is ever stuck inside NCCL. Every collective first meets the
 * other local ranks on the host, as a job of the group core's job queue
 * (comm/group.h, compiled into the plugin; bounded by the timeout): the
 * last rank in checks that all called the same collective with the same
 * count, bytes and root (dpm_group_judge) and publishes the verdict, every
 * rank leaves the job once it has read it, and a disagreement is
 * DPM_INVALID on every local rank with nothing enqueued. The timeout's
 * message and the sticky failure are the core's too (rank numbers
 * job-wide). Then each rank enqueues its NCCL call on its own stream and
 * returns: the result is ordered before whatever the rank queues next
 * (comm.h, "Completion"); an event recorded after it tells the watch
 * whether the rank's last collective has finished. A host buffer
 * (the trainer's agreement on its meta and flags) goes through a device
 * bounce buffer of the rank's, and that call waits for its stream, since
 * its caller reads the result in host memory as soon as it returns.
 *
 * Failure: each rank's device carries a watch (cuda_watch_add): whenever
 * the device's worker waits for its stream, the watch checks the rank's
 * communicator for an asynchronous NCCL error, and whether the wait has
 * passed the timeout while the rank's last collective is still pending.
 * Either breaks the group: every communicator is aborted (ncclCommAbort,
 * which lets the streams drain), the message names the collective enqueued
 * last ("allreduce of 1234 floats: nccl timed out after 5000 ms"), and
 * every later call fails with DPM_STATE quoting it. A broken group is
 * destroyed and replaced by the caller (dpm_comm_renew).
 *
 * Warm groups: a group of one process (world == size) that its user
 * destroys unbroken is kept, idle, for the next group over the same
 * streams (the same GPUs in the same order), up to NCCL_IDLE_MAX of them;
 * the next model on those GPUs then starts without an NCCL init
 * (cuda_nccl_inits counts the inits). An idle group has no watches.
 * cuda_nccl_release frees the idle ones (at the end of the process, before
 * the devices close).
 *
 * Threads: rank r's calls come from one thread at a time; a rank's
 * communicator is used under its rank's mutex (calls, polls, and the abort,
 * which may come from another rank's watch), so an aborted communicator is
 * never touched again. A rank's mutex and the queue's mu are never held
 * together. broken is set once, under the queue's mu. A rank's bounce
 * buffer (host buffers, below) is its own thread's. */
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/nccl.h"
#include "comm/group.h"
#include "comm/store.h"
#include "common/clock.h"

typedef dpm_group_call nccl_call;

/* Jobs of the meeting's queue: a rank leaves job k before it arrives at
 * k + 1, and arrives there only once every rank arrived at k, so job k + 2
 * never waits for k's slot. */
#define NCCL_JOBS 2

typedef struct nccl_group nccl_group;

typedef struct {
  nccl_group *g;       /* the group (the watch's way back) */
  int device;          /* the CUDA device of the rank's stream */
  cudaStream_t stream; /* the rank's device's compute stream */
  cuda_dev *dev;       /* its state: watched */
  int watched;         /* the watch is registered */
  pthread_mutex_t mu;  /* guards comm (every NCCL call on it, its abort) and last */
  ncclComm_t comm;     /* NULL once aborted or destroyed */
  cudaEvent_t done;    /* recorded after the rank's last collective */
  float *one;          /* barrier's float on the device */
  void *bounce;        /* device copy of a host buffer (grow-only), bounce_cap bytes */
  size_t bounce_cap;
  int started;    /* started allreduces not yet waited for */
  char last[128]; /* the collective it enqueued last, for messages */
} nccl_rank;

struct nccl_group {
  dpm_comm base;     /* first: handed out as dpm_comm */
  dpm_group_queue q; /* the meetings (job k: the collective numbered k), the job
                        ranks (rank_base, world), the timeout and the fault
                        (DPM_TIMEOUT or DPM_IO) */
  nccl_rank *ranks;  /* [size] */
};

static nccl_group *group_of(dpm_comm *c) { return (nccl_group *)c; }

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void nap_us(long us) { nanosleep(&(struct timespec){0, us * 1000L}, NULL); }

/* ---- breaking ------------------------------------------------------------- */

/* Aborts every rank's communicator that is still there. */
static void abort_all(nccl_group *g) {
  for (int r = 0; r < g->base.size; r++) {
    nccl_rank *rk = &g->ranks[r];
    pthread_mutex_lock(&rk->mu);
    if (rk->comm) ncclCommAbort(rk->comm);
    rk->comm = NULL;
    pthread_mutex_unlock(&rk->mu);
  }
}

/* Breaks the group for a failure of a collective (`what`: "allreduce of 12
 * floats") and aborts every communicator. No rank mutex may be held. */
static void break_group(nccl_group *g, dpm_status code, const char *what,
                        const char *why) {
  char m[DPM_GROUP_MSG];
  snprintf(m, sizeof m, "%s: %s", what, why);
  dpm_group_break(&g->q, code, m);
  abort_all(g);
}

/* The error of a call on a broken group. */
static dpm_status broken_state(nccl_group *g, const char *op, dpm_err *err) {
  char m[DPM_GROUP_ERR];
  return cuda_errf(err, dpm_group_state(&g->q, op, m), "%s", m);
}

/* The failure that broke the group, as the call that met it returns it. */
static dpm_status broken_now(nccl_group *g, dpm_err *err) {
  return dpm_group_queue_failure(&g->q, err);
}

/* ---- the local meeting ---------------------------------------------------- */

/* Rank r arrives with `call` at its next job and returns once every local
 * rank has, with the verdict; DPM_TIMEOUT when some did not within the
 * timeout (the group then breaks, its communicators aborted), DPM_STATE on
 * a broken group. */
static dpm_status meet(nccl_group *g, int r, nccl_call call, dpm_err *err) {
  const char *op = dpm_group_op_name(call.op);
  char m[DPM_GROUP_ERR];
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, op, err);
  if (dpm_group_enter(&g->q, r, op, m)) return cuda_errf(err, DPM_INVALID, "%s", m);
  struct timespec until = dpm_mono_deadline(g->q.timeout_ms);
  unsigned long k;
  int last;
  dpm_status s = dpm_group_arrive(&g->q, r, &call, op, &until, &k, &last, m);
  if (!s && last) dpm_group_publish(&g->q, k);
  if (!s) s = dpm_group_ready(&g->q, k, &until, op, m);
  if (!s) {
    const dpm_group_job *j = dpm_group_job_of(&g->q, k);
    if ((s = j->verdict)) snprintf(m, sizeof m, "%s", j->msg);
    dpm_group_leave(&g->q, k, r);
  }
  dpm_group_exit(&g->q, r);
  if (s == DPM_TIMEOUT) abort_all(g); /* the meeting's timeout broke the group */
  return s ? cuda_errf(err, s, "%s", m) : DPM_OK;
}

/* ---- enqueueing ----------------------------------------------------------- */

/* What a call moves, for messages: "allreduce of 1234 floats". */
static void describe(const nccl_call *c, char *out, size_t cap) {
  if (c->op == DPM_GROUP_ALLREDUCE)
    snprintf(out, cap, "allreduce of %zu %ss", c->n, dpm_comm_dtype_name(c->t));
  else if (c->op == DPM_GROUP_BROADCAST)
    snprintf(out, cap, "broadcast of %zu bytes from rank %d", c->n, c->root);
  else
    snprintf(out, cap, "barrier");
}

/* Under rk->mu: polls a nonblocking call that returned ncclInProgress until
 * it is done, the timeout passes (*late), or the group is aborted
 * (ncclInvalidUsage with rk->comm NULL). */
static ncclResult_t settle(nccl_group *g, nccl_rank *rk, ncclResult_t res, int *late) {
  int64_t start = now_ms();
  *late = 0;
  while (res == ncclInProgress) {
    if (now_ms() - start > g->q.timeout_ms) {
      *late = 1;
      return res;
    }
    pthread_mutex_unlock(&rk->mu);
    nap_us(50);
    pthread_mutex_lock(&rk->mu);
    if (!rk->comm) return ncclInvalidUsage;
    ncclResult_t q = ncclCommGetAsyncError(rk->comm, &res);
    if (q != ncclSuccess) res = q;
  }
  return res;
}

/* Whether buf is host memory (NCCL moves device memory only). */
static int on_host(const void *buf) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) {
    cudaGetLastError(); /* not a pointer CUDA knows: plain host memory */
    return 1;
  }
  return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

static dpm_status enqueue(nccl_group *g, int r, const nccl_call *c, dpm_err *err);

/* A collective over a host buffer (the trainer's agreement on its meta,
 * flags): through the rank's bounce buffer on the device, waited for
 * (bounded by the watch) before the result is copied back, since the
 * caller reads host memory as soon as the call returns. */
static dpm_status staged(nccl_group *g, int r, const nccl_call *c, dpm_err *err) {
  nccl_rank *rk = &g->ranks[r];
  size_t bytes = c->op == DPM_GROUP_ALLREDUCE ? c->n * dpm_comm_dtype_size(c->t) : c->n;
  const char *op = dpm_group_op_name(c->op);
  cuda_use(rk->dev);
  cudaError_t e = cudaSuccess;
  if (bytes > rk->bounce_cap) {
    if (!cuda_wait(rk->dev) && !dpm_group_broken(&g->q.fault))
      return cuda_errf(err, DPM_IO, "%s: cuda:%d failed (see the device's error)", op,
                       rk->dev->index);
    if (rk->bounce) cudaFree(rk->bounce);
    rk->bounce = NULL;
    rk->bounce_cap = 0;
    if ((e = cudaMalloc(&rk->bounce, bytes)) != cudaSuccess)
      return cuda_errf(err, DPM_NOMEM,
                       "%s: no device memory for %zu bytes on cuda:%d: %s", op, bytes,
                       rk->dev->index, cudaGetErrorString(e));
    rk->bounce_cap = bytes;
  }
  if ((e = cudaMemcpyAsync(rk->bounce, c->buf, bytes, cudaMemcpyHostToDevice,
                           rk->stream)))
    return cuda_errf(err, DPM_IO, "%s: copy to cuda:%d: %s", op, rk->dev->index,
                     cudaGetErrorString(e));
  nccl_call d = *c;
  d.buf = rk->bounce;
  dpm_status s = enqueue(g, r, &d, err);
  if (s) return s;
  if (!cuda_wait(rk->dev) && !dpm_group_broken(&g->q.fault))
    return cuda_errf(err, DPM_IO, "%s: cuda:%d failed (see the device's error)", op,
                     rk->dev->index);
  if (dpm_group_broken(&g->q.fault)) return broken_now(g, err);
  if ((e = cudaMemcpyAsync(c->buf, rk->bounce, bytes, cudaMemcpyDeviceToHost,
                           rk->stream)) ||
      (e = cudaStreamSynchronize(rk->stream)))
    return cuda_errf(err, DPM_IO, "%s: copy from cuda:%d: %s", op, rk->dev->index,
                     cudaGetErrorString(e));
  return DPM_OK;
}

/* Records rk's completion event after the collective just queued. Inside a
 * capture the record must be an external one, so that every replay of the
 * graph records it; outside a capture that flag is invalid (the driver
 * fails the call), so a plain record. */
static cudaError_t record_done(nccl_rank *rk) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(rk->stream, &st);
  if (e != cudaSuccess) return e;
  return st == cudaStreamCaptureStatusActive
             ? cudaEventRecordWithFlags(rk->done, rk->stream, cudaEventRecordExternal)
             : cudaEventRecord(rk->done, rk->stream);
}

/* Queues rank r's part of `c` on its stream (c->n > 0 or a barrier). */
static dpm_status enqueue(nccl_group *g, int r, const nccl_call *c, dpm_err *err) {
  nccl_rank *rk = &g->ranks[r];
  char what[128], why[256];
  describe(c, what, sizeof what);
  pthread_mutex_lock(&rk->mu);
  if (!rk->comm) {
    pthread_mutex_unlock(&rk->mu);
    return broken_state(g, dpm_group_op_name(c->op), err);
  }
  snprintf(rk->last, sizeof rk->last, "%s", what);
  ncclResult_t res;
  if (c->op == DPM_GROUP_ALLREDUCE)
    res =
        ncclAllReduce(c->buf, c->buf, c->n, c->t == DPM_COMM_F64 ? ncclDouble : ncclFloat,
                      ncclSum, rk->comm, rk->stream);
  else if (c->op == DPM_GROUP_BROADCAST)
    res = ncclBroadcast(c->buf, c->buf, c->n, ncclUint8, c->root, rk->comm, rk->stream);
  else
    res = ncclAllReduce(rk->one, rk->one, 1, ncclFloat, ncclSum, rk->comm, rk->stream);
  int late = 0;
  res = settle(g, rk, res, &late);
  int aborted = !rk->comm;
  if (res == ncclSuccess) {
    cudaError_t e = record_done(rk);
    if (e != cudaSuccess) {
      CUDA_OK(rk->dev, e);
      snprintf(why, sizeof why, "recording its completion event failed: %s",
               cudaGetErrorString(e));
      res = ncclUnhandledCudaError;
    }
  } else if (!late && !aborted) {
    const char *detail = ncclGetLastError(rk->comm);
    snprintf(why, sizeof why, "nccl failed: %s%s%s", ncclGetErrorString(res),
             detail && *detail ? ": " : "", detail ? detail : "");
  }
  pthread_mutex_unlock(&rk->mu);
  if (res == ncclSuccess) return DPM_OK;
  if (aborted) return broken_now(g, err);
  if (late) {
    snprintf(why, sizeof why, "nccl did not take the call within %d ms", g->q.timeout_ms);
    break_group(g, DPM_TIMEOUT, what, why);
  } else {
    break_group(g, DPM_IO, what, why);
  }
  return broken_now(g, err);
}

/* ---- the collectives ------------------------------------------------------ */

static dpm_status nccl_allreduce(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                                 size_t count, dpm_err *err) {
  nccl_group *g = group_of(c);
  cuda_use(g->ranks[rank].dev); /* the rank's device current on this thread */
  nccl_call call = {
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = t};
  dpm_status s = meet(g, rank, call, err);
  if (s || count == 0) return s;
  return on_host(buf) ? staged(g, rank, &call, err) : enqueue(g, rank, &call, err);
}

static dpm_status nccl_start(dpm_comm *c, int rank, float *buf, size_t count,
                             dpm_err *err) {
  nccl_group *g = group_of(c);
  nccl_rank *rk = &g->ranks[rank];
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, "allreduce start", err);
  if (rk->started == DPM_COMM_MAX_STARTED)
    return cuda_errf(
        err, DPM_INVALID,
        "allreduce start: rank %d already has %d started allreduces not waited "
        "for",
        rank, DPM_COMM_MAX_STARTED);
  dpm_status s = nccl_allreduce(c, rank, DPM_COMM_F32, buf, count, err);
  rk->started += !s;
  return s;
}

/* The sum is already ordered on the rank's stream: a wait only reports
 * the group's failure, if any (an asynchronous NCCL error breaks it). */
static dpm_status nccl_wait(dpm_comm *c, int rank, dpm_err *err) {
  nccl_group *g = group_of(c);
  nccl_rank *rk = &g->ranks[rank];
  if (!rk->started)
    return cuda_errf(err, DPM_INVALID, "allreduce wait: rank %d has no started allreduce",
                     rank);
  rk->started--;
  ncclResult_t async = ncclSuccess;
  char what[128], why[256];
  pthread_mutex_lock(&rk->mu);
  if (rk->comm && ncclCommGetAsyncError(rk->comm, &async) == ncclSuccess &&
      async != ncclSuccess && async != ncclInProgress) {
    const char *detail = ncclGetLastError(rk->comm);
    snprintf(what, sizeof what, "%s", rk->last);
    snprintf(why, sizeof why, "nccl failed: %s%s%s", ncclGetErrorString(async),
             detail && *detail ? ": " : "", detail ? detail : "");
  }
  pthread_mutex_unlock(&rk->mu);
  if (async != ncclSuccess && async != ncclInProgress) break_group(g, DPM_IO, what, why);
  if (dpm_group_broken(&g->q.fault)) return broken_state(g, "allreduce wait", err);
  return DPM_OK;
}

static dpm_status nccl_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                                 dpm_err *err) {
  nccl_group *g = group_of(c);
  cuda_use(g->ranks[rank].dev); /* the rank's device current on this thread */
  nccl_call call = {.op = DPM_GROUP_BROADCAST, .n = bytes, .root = root, .buf = buf};
  dpm_status s = meet(g, rank, call, err);
  if (s || bytes == 0) return s;
  return on_host(buf) ? staged(g, rank, &call, err) : enqueue(g, rank, &call, err);
}

/* An allreduce of one float across the job, then a wait for the rank's
 * stream (its watch bounds the wait by the timeout). */
static dpm_status nccl_barrier(dpm_comm *c, int rank, dpm_err *err) {
  nccl_group *g = group_of(c);
  nccl_call call = {.op = DPM_GROUP_BARRIER, .root = -1};
  dpm_status s = meet(g, rank, call, err);
  if (!s) s = enqueue(g, rank, &call, err);
  if (s) return s;
  if (!cuda_wait(g->ranks[rank].dev) && !dpm_group_broken(&g->q.fault))
    return cuda_errf(err, DPM_IO, "barrier: cuda:%d failed (see the device's error)",
                     g->ranks[rank].dev->index);
  return dpm_group_broken(&g->q.fault) ? broken_now(g, err) : DPM_OK;
}

static int nccl_broken(dpm_comm *c) { return dpm_group_broken(&group_of(c)->q.fault); }

/* ---- the watch ------------------------------------------------------------ */

/* Called by the waits of rank's device with the milliseconds waited: breaks
 * the group on an asynchronous NCCL error, or when the wait passed the
 * timeout while the rank's last collective is still pending; nonzero once
 * the group is broken (its communicators aborted). */
static int nccl_watch(void *arg, int64_t waited_ms) {
  nccl_rank *rk = arg;
  nccl_group *g = rk->g;
  if (dpm_group_broken(&g->q.fault)) {
    abort_all(g); /* a no-op once done */
    return 1;
  }
  char what[128], why[256];
  ncclResult_t async = ncclSuccess;
  int late = 0;
  pthread_mutex_lock(&rk->mu);
  if (rk->comm) {
    ncclResult_t q = ncclCommGetAsyncError(rk->comm, &async);
    if (q != ncclSuccess) async = q;
    late = waited_ms > g->q.timeout_ms && cudaEventQuery(rk->done) == cudaErrorNotReady;
    snprintf(what, sizeof what, "%s", rk->last[0] ? rk->last : "collective");
    if (async != ncclSuccess && async != ncclInProgress) {
      const char *detail = ncclGetLastError(rk->comm);
      snprintf(why, sizeof why, "nccl failed: %s%s%s", ncclGetErrorString(async),
               detail && *detail ? ": " : "", detail ? detail : "");
    }
  }
  pthread_mutex_unlock(&rk->mu);
  if (async != ncclSuccess && async != ncclInProgress) {
    break_group(g, DPM_IO, what, why);
    return 1;
  }
  if (late) {
    snprintf(why, sizeof why, "nccl timed out after %d ms", g->q.timeout_ms);
    break_group(g, DPM_TIMEOUT, what, why);
    return 1;
  }
  return 0;
}

/* ---- create and destroy --------------------------------------------------- */

/* Sets the calling thread's device; the thread's cached device (cuda_use)
 * is forgotten, so the next cuda_use sets its own again. */
static void use_device(int device) {
  cudaSetDevice(device);
  cuda_current = -1;
}

/* Waits until no communicator of g is in progress (init, finalize), up to
 * the timeout: DPM_OK, DPM_TIMEOUT, or DPM_IO with the first error. */
static dpm_status settle_all(nccl_group *g, const char *what, dpm_err *err) {
  int64_t start = now_ms();
  for (;;) {
    int pending = 0;
    for (int r = 0; r < g->base.size; r++) {
      nccl_rank *rk = &g->ranks[r];
      ncclResult_t st = ncclSuccess;
      if (!rk->comm) continue;
      ncclResult_t q = ncclCommGetAsyncError(rk->comm, &st);
      if (q != ncclSuccess) st = q;
      if (st == ncclInProgress) {
        pending++;
      } else if (st != ncclSuccess) {
        const char *detail = ncclGetLastError(rk->comm);
        return cuda_errf(err, DPM_IO, "%s: rank %d: %s%s%s", what, g->q.rank_base + r,
                         ncclGetErrorString(st), detail && *detail ? ": " : "",
                         detail ? detail : "");
      }
    }
    if (!pending) return DPM_OK;
    if (now_ms() - start > g->q.timeout_ms)
      return cuda_errf(
          err, DPM_TIMEOUT,
          "%s: %d of %d local ranks not ready after %d ms (job ranks %d..%d of "
          "%d)",
          what, pending, g->base.size, g->q.timeout_ms, g->q.rank_base,
          g->q.rank_base + g->base.size - 1, g->q.world);
    nap_us(1000);
  }
}

static void free_group(nccl_group *g, int abort_comms) {
  int prev = -1;
  cudaGetDevice(&prev);
  for (int r = 0; g->ranks && r < g->base.size; r++) {
    nccl_rank *rk = &g->ranks[r];
    if (rk->watched) cuda_watch_remove(rk->dev, nccl_watch, rk);
  }
  int finalized = 0;
  if (!abort_comms) { /* flush what was issued, then destroy */
    dpm_err ignored;
    for (int r = 0; r < g->base.size; r++)
      if (g->ranks[r].comm) ncclCommFinalize(g->ranks[r].comm);
    finalized = settle_all(g, "nccl finalize", &ignored) == DPM_OK;
  }
  for (int r = 0; g->ranks && r < g->base.size; r++) {
    nccl_rank *rk = &g->ranks[r];
    if (rk->comm) finalized ? ncclCommDestroy(rk->comm) : ncclCommAbort(rk->comm);
    rk->comm = NULL;
    if (rk->done || rk->one || rk->bounce) use_device(rk->device);
    if (rk->done) cudaEventDestroy(rk->done);
    if (rk->one) cudaFree(rk->one);
    if (rk->bounce) cudaFree(rk->bounce);
    pthread_mutex_destroy(&rk->mu);
  }
  if (prev >= 0) use_device(prev);
  dpm_group_queue_fini(&g->q);
  free(g->ranks);
  free(g);
}

/* ---- warm groups ------------------------------------------------------------ */

#define NCCL_IDLE_MAX 8

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static nccl_group *idle[NCCL_IDLE_MAX];
static atomic_ulong inits; /* groups whose communicators were created */

unsigned long cuda_nccl_inits(void) { return atomic_load(&inits); }

static void watch_all(nccl_group *g, int on) {
  for (int r = 0; r < g->base.size; r++) {
    nccl_rank *rk = &g->ranks[r];
    if (on && !rk->watched) cuda_watch_add(rk->dev, nccl_watch, rk);
    if (!on && rk->watched) cuda_watch_remove(rk->dev, nccl_watch, rk);
    rk->watched = on;
  }
}

/* An idle group over exactly cfg's streams, taken out of the cache; NULL:
 * none. */
static nccl_group *take_idle(const dpm_comm_config *cfg, int world) {
  if (world != cfg->size) return NULL;
  nccl_group *found = NULL;
  pthread_mutex_lock(&idle_mu);
  for (int i = 0; i < NCCL_IDLE_MAX && !found; i++) {
    nccl_group *g = idle[i];
    int same = g && g->base.size == cfg->size;
    for (int r = 0; same && r < cfg->size; r++)
      same = (void *)g->ranks[r].stream == cfg->streams[r];
    if (same) {
      found = g;
      idle[i] = NULL;
    }
  }
  pthread_mutex_unlock(&idle_mu);
  if (found) {
    found->q.timeout_ms = cfg->timeout_ms;
    watch_all(found, 1);
  }
  return found;
}

/* Keeps an unbroken group of one process idle; 0 when it is not kept. */
static int keep_idle(nccl_group *g) {
  if (dpm_group_broken(&g->q.fault) || g->q.world != g->base.size) return 0;
  watch_all(g, 0);
  int kept = 0;
  pthread_mutex_lock(&idle_mu);
  for (int i = 0; i < NCCL_IDLE_MAX && !kept; i++)
    if (!idle[i]) idle[i] = g, kept = 1;
  pthread_mutex_unlock(&idle_mu);
  return kept;
}

void cuda_nccl_release(void) {
  pthread_mutex_lock(&idle_mu);
  for (int i = 0; i < NCCL_IDLE_MAX; i++)
    if (idle[i]) free_group(idle[i], 0);
  memset(idle, 0, sizeof idle);
  pthread_mutex_unlock(&idle_mu);
}

static dpm_status nccl_failure(dpm_comm *c, dpm_err *err) {
  return broken_now(group_of(c), err);
}

static void nccl_destroy(dpm_comm *c) {
  nccl_group *g = group_of(c);
  if (!keep_idle(g)) free_group(g, dpm_group_broken(&g->q.fault));
}

static const dpm_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .allreduce_start = nccl_start,
    .allreduce_wait = nccl_wait,
    .broken = nccl_broken,
    .failure = nccl_failure,
    .destroy = nccl_destroy,
};

/* ---- the rendezvous of the unique id ------------------------------------- */

static dpm_status new_id(ncclUniqueId *id, dpm_err *err) {
  ncclResult_t res = ncclGetUniqueId(id);
  if (res != ncclSuccess)
    return cuda_errf(err, DPM_IO, "nccl init: ncclGetUniqueId failed: %s",
                     ncclGetErrorString(res));
  return DPM_OK;
}

/* The job's unique id: made by the process of job rank 0, passed through
 * the rendezvous store (cfg->store, opened by the host's factory) to the
 * others. */
static dpm_status share_id(const dpm_comm_config *cfg, ncclUniqueId *id, dpm_err *err) {
  const char *prefix = cfg->rendezvous.prefix;
  int leader = cfg->rank_base == 0;
  if (!prefix || !*prefix)
    return cuda_errf(err, DPM_INVALID, "nccl rendezvous: no prefix for the formation");
  if (!cfg->store) return cuda_errf(err, DPM_INVALID, "nccl rendezvous: no store");
  char key[1024];
  if (snprintf(key, sizeof key, "%s/nccl-id", prefix) >= (int)sizeof key)
    return cuda_errf(err, DPM_INVALID, "nccl rendezvous: prefix too long");
  dpm_status s;
  if (leader) {
    if ((s = new_id(id, err))) return s;
    return dpm_store_set(cfg->store, key, id, sizeof *id, err);
  }
  void *v = NULL;
  size_t len = 0;
  if ((s = dpm_store_get(cfg->store, key, cfg->timeout_ms, &v, &len, err))) return s;
  if (len != sizeof *id) {
    free(v);
    return cuda_errf(err, DPM_IO, "nccl rendezvous: key '%s' holds %zu bytes, not %zu",
                     key, len, sizeof *id);
  }
  memcpy(id, v, sizeof *id);
  free(v);
  return DPM_OK;
}

/* ---- create --------------------------------------------------------------- */

void cuda_nccl_env(void) { setenv("NCCL_NVLS_ENABLE", "0", 0); }

/* Creates the local ranks' communicators in one group call, nonblocking,
 * and waits for them up to the timeout. */
static dpm_status init_comms(nccl_group *g, const ncclUniqueId *id, int deterministic,
                             dpm_err *err) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (deterministic) config.collnetEnable = 0; /* NVLS: cuda_nccl_env */
  ncclResult_t first = ncclSuccess;
  int failed_rank = -1;
  ncclGroupStart();
  for (int r = 0; r < g->base.size; r++) {
    use_device(g->ranks[r].device);
    ncclResult_t res = ncclCommInitRankConfig(&g->ranks[r].comm, g->q.world, *id,
                                              g->q.rank_base + r, &config);
    if (res != ncclSuccess && res != ncclInProgress && first == ncclSuccess) {
      first = res;
      failed_rank = g->q.rank_base + r;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (first == ncclSuccess && end != ncclSuccess && end != ncclInProgress) first = end;
  if (first != ncclSuccess)
    return cuda_errf(err, DPM_IO,
                     "nccl init: ncclCommInitRankConfig (rank %d of %d) failed: "
                     "%s",
                     failed_rank, g->q.world, ncclGetErrorString(first));
  return settle_all(g, "nccl init", err);
}

/* Summation order (comm.h asks a backend that cannot keep the rank order
 * to document its own): NCCL's allreduce sums along the ring or tree that
 * it builds from the topology (the GPUs and their links, the network, the
 * ranks), chunk by chunk, so the order is not ((b0 + b1) + b2) + ...; every
 * rank receives the same reduced chunks, so results are bitwise identical
 * on every rank, and reproducible from run to run for the same topology,
 * rank placement, count, NCCL version and NCCL_ALGO / NCCL_PROTO (nothing
 * here sets anything that makes NCCL's reductions nondeterministic: a
 * deterministic group turns CollNet/SHARP off in its config, and NVLS
 * in-switch reduction, which NCCL enables by default on NVSwitch systems
 * and only its environment turns off, is off in dpm's processes unless the
 * user's environment says otherwise: cuda_nccl_env). They may differ in
 * the last bits from the CPU's rank-order sum.
 *
 * The group: cfg->size local ranks, each with its device's compute stream
 * (cfg->streams[r]; its device from cudaStreamGetDevice, its device state
 * from cuda_dev_of_stream); job ranks rank_base .. rank_base + size - 1 of
 * world (0: size). A call's rank is the local one; broadcast's root is a
 * job-wide rank. Within one process (world == size) the unique id is made
 * here; across processes the job's rank 0's process makes it and publishes
 * it through the rendezvous store the host's factory opened (cfg->store,
 * comm/store.h: file, redis or the caller's key-value store; key
 * "<prefix>/nccl-id"; the store's ops are the host's, so the plugin opens
 * no path and no connection itself). Communicators
 * are created nonblocking in one group call and waited for up to
 * timeout_ms (DPM_TIMEOUT "nccl init: ..." after that, every communicator
 * aborted).
 *
 * Errors: DPM_INVALID (numbers, streams, rendezvous), the store's
 * (DPM_EXISTS for a used prefix, DPM_DENIED, DPM_IO), DPM_TIMEOUT, DPM_IO
 * (NCCL or CUDA failures), DPM_NOMEM; *out is NULL on failure. */
dpm_status cuda_nccl_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  if (!out) return cuda_errf(err, DPM_INVALID, "nccl comm: no output pointer");
  *out = NULL;
  int size = cfg->size, world = cfg->world ? cfg->world : cfg->size;
  if (size < 1 || size > DPM_COMM_MAX_RANKS)
    return cuda_errf(err, DPM_INVALID, "nccl comm: size %d outside 1..%d", size,
                     DPM_COMM_MAX_RANKS);
  if (cfg->timeout_ms <= 0)
    return cuda_errf(err, DPM_INVALID, "nccl comm: timeout %d ms must be positive",
                     cfg->timeout_ms);
  if (world < size || cfg->rank_base < 0 || cfg->rank_base % size ||
      cfg->rank_base > world - size)
    return cuda_errf(
        err, DPM_INVALID,
        "nccl comm: ranks %d..%d do not fit a job of %d ranks in processes of %d",
        cfg->rank_base, cfg->rank_base + size - 1, world, size);
  if (!cfg->streams) return cuda_errf(err, DPM_INVALID, "nccl comm: no streams");
  nccl_group *g = take_idle(cfg, world);
  if (g) {
    *out = &g->base;
    return DPM_OK;
  }
  g = calloc(1, sizeof *g);
  if (!g) return cuda_errf(err, DPM_NOMEM, "nccl comm: out of memory");
  g->ranks = calloc((size_t)size, sizeof *g->ranks);
  if (!g->ranks || !dpm_group_queue_init(&g->q, NCCL_JOBS, size, cfg->rank_base, world,
                                         cfg->timeout_ms, 0, "local ranks", "failure")) {
    free(g->ranks);
    free(g);
    return cuda_errf(err, DPM_NOMEM, "nccl comm: out of memory for %d ranks", size);
  }
  g->base = (dpm_comm){.ops = &nccl_ops, .size = size};
  for (int r = 0; r < size; r++) {
    g->ranks[r].g = g;
    pthread_mutex_init(&g->ranks[r].mu, NULL);
  }
  int prev = -1;
  cudaGetDevice(&prev);
  dpm_status s = DPM_OK;
  for (int r = 0; r < size && !s; r++) {
    nccl_rank *rk = &g->ranks[r];
    rk->stream = (cudaStream_t)cfg->streams[r];
    rk->dev = rk->stream ? cuda_dev_of_stream(cfg->streams[r]) : NULL;
    cudaError_t e = rk->stream ? cudaStreamGetDevice(rk->stream, &rk->device)
                               : cudaErrorInvalidResourceHandle;
    if (!rk->dev || e != cudaSuccess) {
      s = cuda_errf(
          err, DPM_INVALID,
          "nccl comm: rank %d's stream is not the compute stream of an open cuda "
          "device",
          r);
      break;
    }
    for (int k = 0; k < r; k++)
      if (g->ranks[k].device == rk->device)
        s = cuda_errf(err, DPM_INVALID, "nccl comm: ranks %d and %d are both on cuda:%d",
                      k, r, rk->device);
    use_device(rk->device);
    if (!s && ((e = cudaEventCreateWithFlags(&rk->done, cudaEventDisableTiming)) ||
               (e = cudaMalloc((void **)&rk->one, sizeof(float))) ||
               (e = cudaMemset(rk->one, 0, sizeof(float)))))
      s = cuda_errf(err, DPM_IO, "nccl comm: cuda:%d: %s", rk->device,
                    cudaGetErrorString(e));
  }
  ncclUniqueId id;
  if (!s) s = world == size ? new_id(&id, err) : share_id(cfg, &id, err);
  if (!s) s = init_comms(g, &id, cfg->deterministic, err);
  if (prev >= 0) use_device(prev);
  if (s) {
    free_group(g, 1);
    return s;
  }
  atomic_fetch_add(&inits, 1);
  watch_all(g, 1);
  *out = &g->base;
  return DPM_OK;
}
