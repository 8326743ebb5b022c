/* Loopback communicator (test builds: DPM_COMM_LOOP through the factory):
 * the smallest backend that keeps the contract of comm.h, to show what a
 * new one needs: this file, its row in the factory, and its row in the
 * contract suite (tests/unit/comm_contract_test.c). The ranks are threads
 * of this process passing host memory. Everything but the data movement
 * is the group core's (group.h): the agreement, the timeout's message and
 * the sticky failure.
 *
 * Every collective is one meeting under mu: a rank records its call and
 * waits (at most timeout_ms) for the generation to move; the last rank in
 * judges the calls and, when they agree, moves the data for every rank
 * (the sum in rank order into every buffer; the root's bytes into every
 * other buffer) before it publishes the verdict, so no rank returns while
 * its buffer is in use. A started allreduce is remembered by its rank and
 * run, as a blocking one, by its wait. Slow by design (one thread does
 * all the work), and not for production.
 *
 * Threads: as any communicator (comm.h); everything shared is under mu. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/group.h"
#include "common/clock.h"

typedef struct {
  float *buf;
  size_t count;
} loop_started;

typedef struct {
  dpm_comm base;
  int timeout_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned long gen; /* meetings completed: the next one's sequence number */
  int arrived;
  dpm_status verdict;
  char verdict_msg[DPM_GROUP_MSG];
  dpm_group_fault fault;
  dpm_group_call *calls;  /* [size] */
  unsigned char *here;    /* [size] in the current meeting */
  loop_started *started;  /* [size * DPM_COMM_MAX_STARTED] each rank's FIFO */
  unsigned long *n_start; /* [size] started */
  unsigned long *n_wait;  /* [size] of those, waited for */
} loop_comm;

static loop_comm *loop_of(dpm_comm *c) { return (loop_comm *)c; }

static int absent_of(void *ctx, int r) { return !((loop_comm *)ctx)->here[r]; }

/* Run by the last rank in, under mu: the data movement of agreed calls. */
static void move(loop_comm *g) {
  const dpm_group_call *c0 = &g->calls[0];
  size_t es = dpm_comm_dtype_size(c0->t);
  if (c0->op == DPM_GROUP_BROADCAST) {
    for (int r = 0; r < g->base.size && c0->n; r++)
      if (r != c0->root) memcpy(g->calls[r].buf, g->calls[c0->root].buf, c0->n);
    return;
  }
  if (c0->op != DPM_GROUP_ALLREDUCE) return;
  for (size_t i = 0; i < c0->n; i++) {
    double sum = 0;
    float fsum = 0;
    for (int r = 0; r < g->base.size; r++) {
      const char *b = (const char *)g->calls[r].buf + i * es;
      if (c0->t == DPM_COMM_F64)
        sum += *(const double *)(const void *)b;
      else
        fsum += *(const float *)(const void *)b;
    }
    for (int r = 0; r < g->base.size; r++) {
      char *b = (char *)g->calls[r].buf + i * es;
      if (c0->t == DPM_COMM_F64)
        *(double *)(void *)b = sum;
      else
        *(float *)(void *)b = fsum;
    }
  }
}

static dpm_status meet(loop_comm *g, int rank, dpm_group_call call, dpm_err *err) {
  const char *op = dpm_group_op_name(call.op);
  char m[DPM_GROUP_MSG + 96];
  pthread_mutex_lock(&g->mu);
  if (dpm_group_broken(&g->fault)) {
    dpm_group_fault_msg(&g->fault, op, m, sizeof m);
    pthread_mutex_unlock(&g->mu);
    return dpm_errf(err, DPM_STATE, "%s", m);
  }
  g->calls[rank] = call;
  g->here[rank] = 1;
  unsigned long mine = g->gen;
  if (++g->arrived == g->base.size) {
    g->verdict = dpm_group_judge(g->calls, g->base.size, 0, g->base.size, g->verdict_msg);
    if (!g->verdict) move(g);
    g->arrived = 0;
    memset(g->here, 0, (size_t)g->base.size);
    g->gen++;
    pthread_cond_broadcast(&g->cv);
  } else {
    struct timespec until = dpm_mono_deadline(g->timeout_ms);
    while (g->gen == mine && !dpm_group_broken(&g->fault))
      if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT && g->gen == mine) {
        dpm_group_timeout_msg(m, op, mine, g->timeout_ms, "ranks", g->base.size, 0,
                              absent_of, g);
        dpm_group_fail(&g->fault, DPM_TIMEOUT, "%s", m);
        pthread_cond_broadcast(&g->cv);
      }
  }
  dpm_status s = g->gen == mine ? dpm_errf(err, DPM_TIMEOUT, "%s", g->fault.msg)
                 : g->verdict   ? dpm_errf(err, g->verdict, "%s", g->verdict_msg)
                                : DPM_OK;
  if (g->gen == mine) g->here[rank] = 0;
  pthread_mutex_unlock(&g->mu);
  return s;
}

static dpm_status loop_allreduce(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                                 size_t count, dpm_err *err) {
  return meet(loop_of(c), rank,
              (dpm_group_call){
                  .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = count, .buf = buf, .t = t},
              err);
}

static dpm_status loop_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                                 dpm_err *err) {
  return meet(
      loop_of(c), rank,
      (dpm_group_call){.op = DPM_GROUP_BROADCAST, .root = root, .n = bytes, .buf = buf},
      err);
}

static dpm_status loop_barrier(dpm_comm *c, int rank, dpm_err *err) {
  return meet(loop_of(c), rank, (dpm_group_call){.op = DPM_GROUP_BARRIER, .root = -1},
              err);
}

static dpm_status loop_start(dpm_comm *c, int rank, float *buf, size_t count,
                             dpm_err *err) {
  loop_comm *g = loop_of(c);
  if (g->n_start[rank] - g->n_wait[rank] == DPM_COMM_MAX_STARTED)
    return dpm_errf(err, DPM_INVALID,
                    "allreduce start: rank %d already has %d started allreduces not "
                    "waited for",
                    rank, DPM_COMM_MAX_STARTED);
  size_t slot =
      (size_t)rank * DPM_COMM_MAX_STARTED + g->n_start[rank]++ % DPM_COMM_MAX_STARTED;
  g->started[slot] = (loop_started){buf, count};
  return DPM_OK;
}

static dpm_status loop_wait(dpm_comm *c, int rank, dpm_err *err) {
  loop_comm *g = loop_of(c);
  if (g->n_wait[rank] == g->n_start[rank])
    return dpm_errf(err, DPM_INVALID, "allreduce wait: rank %d has no started allreduce",
                    rank);
  size_t slot =
      (size_t)rank * DPM_COMM_MAX_STARTED + g->n_wait[rank]++ % DPM_COMM_MAX_STARTED;
  loop_started st = g->started[slot];
  return loop_allreduce(c, rank, DPM_COMM_F32, st.buf, st.count, err);
}

static int loop_broken(dpm_comm *c) { return dpm_group_broken(&loop_of(c)->fault); }

static dpm_status loop_failure(dpm_comm *c, dpm_err *err) {
  loop_comm *g = loop_of(c);
  pthread_mutex_lock(&g->mu);
  dpm_status s = dpm_group_failure(&g->fault, err);
  pthread_mutex_unlock(&g->mu);
  return s;
}

static void free_all(loop_comm *g) {
  free(g->calls);
  free(g->here);
  free(g->started);
  free(g->n_start);
  free(g->n_wait);
  free(g);
}

static void loop_destroy(dpm_comm *c) {
  loop_comm *g = loop_of(c);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free_all(g);
}

static const dpm_comm_ops loop_ops = {
    .name = "loop",
    .allreduce = loop_allreduce,
    .broadcast = loop_broadcast,
    .barrier = loop_barrier,
    .allreduce_start = loop_start,
    .allreduce_wait = loop_wait,
    .broken = loop_broken,
    .failure = loop_failure,
    .destroy = loop_destroy,
};

dpm_status dpm_comm_loop_create(const dpm_comm_config *cfg, dpm_comm **out,
                                dpm_err *err) {
  *out = NULL;
  int size = cfg->size, world = cfg->world ? cfg->world : cfg->size;
  if (size < 1 || size > DPM_COMM_MAX_RANKS || world != size || cfg->rank_base)
    return dpm_errf(err, DPM_INVALID, "loop comm: %d ranks of a job of %d, from %d", size,
                    world, cfg->rank_base);
  if (cfg->timeout_ms <= 0)
    return dpm_errf(err, DPM_INVALID, "loop comm: timeout %d ms must be positive",
                    cfg->timeout_ms);
  loop_comm *g = calloc(1, sizeof *g);
  if (!g) return dpm_errf(err, DPM_NOMEM, "loop comm: out of memory");
  g->calls = calloc((size_t)size, sizeof *g->calls);
  g->here = calloc((size_t)size, 1);
  g->started = calloc((size_t)size * DPM_COMM_MAX_STARTED, sizeof *g->started);
  g->n_start = calloc((size_t)size, sizeof *g->n_start);
  g->n_wait = calloc((size_t)size, sizeof *g->n_wait);
  int cv_ok = dpm_group_cond_init(&g->cv);
  if (!g->calls || !g->here || !g->started || !g->n_start || !g->n_wait || !cv_ok ||
      pthread_mutex_init(&g->mu, NULL)) {
    if (cv_ok) pthread_cond_destroy(&g->cv);
    free_all(g);
    return dpm_errf(err, DPM_NOMEM, "loop comm: out of memory for %d ranks", size);
  }
  g->base = (dpm_comm){.ops = &loop_ops, .size = size};
  g->timeout_ms = cfg->timeout_ms;
  dpm_group_fault_init(&g->fault, "failure");
  *out = &g->base;
  return DPM_OK;
}
