/* The group core (group.h). No engine symbols: the cuda plugin compiles
 * this file into itself. State: a fault's fields, and a queue's. */
#include "comm/group.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/spin.h"

static const char *const op_names[DPM_GROUP_OP_COUNT] = {
    [DPM_GROUP_ALLREDUCE] = "allreduce",
    [DPM_GROUP_BROADCAST] = "broadcast",
    [DPM_GROUP_BARRIER] = "barrier",
};

const char *dpm_group_op_name(dpm_group_op op) {
  return op >= 0 && op < DPM_GROUP_OP_COUNT ? op_names[op] : "?";
}

static dpm_status refuse(char *msg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static dpm_status refuse(char *msg, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, DPM_GROUP_MSG, fmt, ap);
  va_end(ap);
  return DPM_INVALID;
}

dpm_status dpm_group_mismatch(char *msg, int a, dpm_group_op x, int b, dpm_group_op y) {
  return refuse(msg, "collective mismatch: rank %d called %s, rank %d called %s", a,
                dpm_group_op_name(x), b, dpm_group_op_name(y));
}

dpm_status dpm_group_judge(const dpm_group_call *calls, int size, int rank_base,
                           int world, char *msg) {
  const dpm_group_call *c0 = &calls[0];
  const char *op = dpm_group_op_name(c0->op);
  const char *what = c0->op == DPM_GROUP_ALLREDUCE ? "count" : "bytes";
  int b = rank_base;
  for (int r = 1; r < size; r++) {
    const dpm_group_call *c = &calls[r];
    if (c->op != c0->op) return dpm_group_mismatch(msg, b, c0->op, b + r, c->op);
    if (c0->op == DPM_GROUP_ALLREDUCE && c->t != c0->t)
      return refuse(msg,
                    "allreduce: ranks disagree on the element type: rank %d passes %ss, "
                    "rank %d %ss",
                    b, dpm_comm_dtype_name(c0->t), b + r, dpm_comm_dtype_name(c->t));
    if (c0->op != DPM_GROUP_BARRIER && c->n != c0->n)
      return refuse(msg, "%s: ranks disagree on the %s: rank %d has %zu, rank %d has %zu",
                    op, what, b, c0->n, b + r, c->n);
    if (c0->op == DPM_GROUP_BROADCAST && c->root != c0->root)
      return refuse(
          msg, "broadcast: ranks disagree on the root: rank %d has %d, rank %d has %d", b,
          c0->root, b + r, c->root);
  }
  if (c0->op == DPM_GROUP_BARRIER) return DPM_OK;
  for (int r = 0; r < size; r++)
    if (calls[r].n && !calls[r].buf)
      return refuse(msg, "%s: rank %d passed no buffer for %zu %s", op, b + r, calls[r].n,
                    what);
  if (c0->op == DPM_GROUP_ALLREDUCE && c0->n > SIZE_MAX / dpm_comm_dtype_size(c0->t))
    return refuse(msg, "allreduce: count %zu is too large", c0->n);
  if (c0->op == DPM_GROUP_BROADCAST && (c0->root < 0 || c0->root >= world))
    return refuse(msg, "broadcast: root %d outside the group of %d", c0->root, world);
  return DPM_OK;
}

dpm_group_header dpm_group_header_of(const dpm_group_call *c, int agreed,
                                     unsigned long seq) {
  return (dpm_group_header){
      .op = agreed ? (uint32_t)c->op + 1 : 0,
      .root = c->op == DPM_GROUP_BROADCAST ? c->root : -1,
      .n = c->op == DPM_GROUP_BARRIER ? 0 : c->n,
      .seq = seq,
      .dtype = c->op == DPM_GROUP_ALLREDUCE ? (uint32_t)c->t : 0,
  };
}

dpm_status dpm_group_agree(const dpm_group_header *h, int nproc,
                           dpm_group_describe_fn describe, void *ctx, char *msg) {
  const dpm_group_header *h0 = &h[0];
  char a[160], b[160];
  for (int p = 0; p < nproc; p++) {
    if (!h[p].op)
      return refuse(msg, "the ranks of %s disagree on their call (its ranks say how)",
                    describe(ctx, p, a, sizeof a));
    if (h[p].op > DPM_GROUP_OP_COUNT)
      return refuse(msg, "%s sent collective %u, which this build does not know",
                    describe(ctx, p, a, sizeof a), (unsigned)h[p].op);
  }
  for (int p = 1; p < nproc; p++) {
    if (h[p].seq != h0->seq)
      return refuse(msg, "collective mismatch: %s is at collective %llu, %s at %llu",
                    describe(ctx, 0, a, sizeof a), (unsigned long long)h0->seq,
                    describe(ctx, p, b, sizeof b), (unsigned long long)h[p].seq);
    if (h[p].op != h0->op)
      return refuse(msg, "collective mismatch: %s called %s, %s called %s",
                    describe(ctx, 0, a, sizeof a), op_names[h0->op - 1],
                    describe(ctx, p, b, sizeof b), op_names[h[p].op - 1]);
  }
  const char *op = op_names[h0->op - 1];
  for (int p = 1; p < nproc; p++) {
    if (h[p].n != h0->n)
      return refuse(msg, "%s: processes disagree on the %s: %s has %llu, %s has %llu", op,
                    h0->op - 1 == DPM_GROUP_ALLREDUCE ? "count" : "bytes",
                    describe(ctx, 0, a, sizeof a), (unsigned long long)h0->n,
                    describe(ctx, p, b, sizeof b), (unsigned long long)h[p].n);
    if (h[p].root != h0->root)
      return refuse(msg, "%s: processes disagree on the root: %s has %d, %s has %d", op,
                    describe(ctx, 0, a, sizeof a), (int)h0->root,
                    describe(ctx, p, b, sizeof b), (int)h[p].root);
    if (h[p].dtype != h0->dtype || h[p].dtype >= DPM_COMM_DTYPE_COUNT)
      return refuse(msg,
                    "%s: processes disagree on the element type: %s passes %ss, %s %s",
                    op, describe(ctx, 0, a, sizeof a), dpm_comm_dtype_name(h0->dtype),
                    describe(ctx, p, b, sizeof b),
                    h[p].dtype < DPM_COMM_DTYPE_COUNT ? dpm_comm_dtype_name(h[p].dtype)
                                                      : "an unknown type");
    if (h[p].wire != h0->wire)
      return refuse(msg,
                    "%s: processes disagree on the wire (precision.allreduce): %s sends "
                    "%s, %s %s",
                    op, describe(ctx, 0, a, sizeof a), h0->wire ? "bf16" : "fp32",
                    describe(ctx, p, b, sizeof b), h[p].wire ? "bf16" : "fp32");
  }
  return DPM_OK;
}

void dpm_group_timeout_msg(char *msg, const char *op, unsigned long seq, int timeout_ms,
                           const char *who, int size, int rank_base,
                           dpm_group_absent_fn absent, void *ctx) {
  char list[200];
  size_t len = 0, cap = sizeof list;
  int missing = 0, cut = 0;
  list[0] = 0;
  for (int r = 0; r < size; r++) {
    if (!absent(ctx, r)) continue;
    if (!cut && len + 16 >= cap) {
      snprintf(list + len, cap - len, " ...");
      cut = 1;
    }
    if (!cut)
      len += (size_t)snprintf(list + len, cap - len, "%s %d", missing ? "," : "",
                              rank_base + r);
    missing++;
  }
  snprintf(msg, DPM_GROUP_MSG,
           "%s: timed out after %d ms; %d of %d %s arrived; missing rank(s)%s "
           "(collective %lu)",
           op, timeout_ms, size - missing, size, who, list, seq);
}

int dpm_group_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca)) return 0;
  int ok =
      !pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) && !pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return ok;
}

void dpm_group_fault_init(dpm_group_fault *f, const char *cause) {
  atomic_store(&f->broken, 0);
  f->code = DPM_OK;
  f->cause = cause;
  f->msg[0] = 0;
}

int dpm_group_fail(dpm_group_fault *f, dpm_status code, const char *fmt, ...) {
  if (atomic_load(&f->broken)) return 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof f->msg, fmt, ap);
  va_end(ap);
  f->code = code;
  atomic_store(&f->broken, 1);
  return 1;
}

dpm_status dpm_group_failure(const dpm_group_fault *f, dpm_err *err) {
  if (err) {
    err->code = f->code;
    snprintf(err->msg, sizeof err->msg, "%s", f->msg);
  }
  return f->code;
}

void dpm_group_fault_msg(const dpm_group_fault *f, const char *op, char *out,
                         size_t cap) {
  snprintf(out, cap, "%s: communicator broken by an earlier %s (%s)", op, f->cause,
           f->msg);
}

/* ---- the job queue (group.h: orderings and threads) ---------------------- */

int dpm_group_queue_init(dpm_group_queue *q, int slots, int size, int rank_base,
                         int world, int timeout_ms, int spin, const char *who,
                         const char *cause) {
  *q = (dpm_group_queue){.spin = spin,
                         .size = size,
                         .rank_base = rank_base,
                         .world = world,
                         .timeout_ms = timeout_ms,
                         .broken_job = ULONG_MAX,
                         .slots = slots};
  snprintf(q->who, sizeof q->who, "%s", who);
  dpm_group_fault_init(&q->fault, cause);
  q->next = calloc((size_t)size, sizeof *q->next);
  q->inside = calloc((size_t)size, sizeof *q->inside);
  int ok = q->next && q->inside && (q->jobs = calloc((size_t)slots, sizeof *q->jobs));
  for (int k = 0; ok && k < slots; k++) {
    q->jobs[k].calls = calloc((size_t)size, sizeof *q->jobs[k].calls);
    q->jobs[k].here = calloc((size_t)size, sizeof *q->jobs[k].here);
    ok = q->jobs[k].calls && q->jobs[k].here;
  }
  int mu_ok = ok && !pthread_mutex_init(&q->mu, NULL);
  int cv_ok = mu_ok && dpm_group_cond_init(&q->cv);
  if (cv_ok) return 1;
  if (mu_ok) pthread_mutex_destroy(&q->mu);
  for (int k = 0; q->jobs && k < slots; k++) {
    free(q->jobs[k].calls);
    free(q->jobs[k].here);
  }
  free(q->jobs);
  free(q->next);
  free((void *)q->inside);
  *q = (dpm_group_queue){0};
  return 0;
}

void dpm_group_queue_fini(dpm_group_queue *q) {
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  for (int k = 0; k < q->slots; k++) {
    free(q->jobs[k].calls);
    free((void *)q->jobs[k].here);
  }
  free(q->jobs);
  free(q->next);
  free((void *)q->inside);
}

int dpm_group_await(dpm_group_queue *q, const atomic_ulong *w, unsigned long want,
                    const struct timespec *until, int stop_on_broken) {
  struct timespec start = {0};
  for (unsigned i = 1; q->spin; i++) {
    if (atomic_load(w) >= want) return 1;
    if ((stop_on_broken && dpm_group_broken(&q->fault)) ||
        !dpm_spin_step(i, &start, DPM_GROUP_SPIN_NS))
      break;
  }
  if (atomic_load(w) >= want) return 1;
  pthread_mutex_lock(&q->mu);
  atomic_fetch_add(&q->sleepers, 1);
  while (atomic_load(w) < want && !(stop_on_broken && dpm_group_broken(&q->fault)))
    if (until ? pthread_cond_timedwait(&q->cv, &q->mu, until) == ETIMEDOUT
              : pthread_cond_wait(&q->cv, &q->mu) != 0)
      break;
  atomic_fetch_sub(&q->sleepers, 1);
  pthread_mutex_unlock(&q->mu);
  return atomic_load(w) >= want;
}

void dpm_group_wake(dpm_group_queue *q) {
  if (!atomic_load(&q->sleepers)) return;
  pthread_mutex_lock(&q->mu);
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

dpm_status dpm_group_enter(dpm_group_queue *q, int rank, const char *op, char *msg) {
  if (!atomic_exchange(&q->inside[rank], 1)) return DPM_OK;
  return refuse(
      msg, "%s: rank %d is already inside a collective (one call per rank at a time)", op,
      q->rank_base + rank);
}

void dpm_group_exit(dpm_group_queue *q, int rank) { atomic_store(&q->inside[rank], 0); }

void dpm_group_break_locked(dpm_group_queue *q, dpm_status code, const char *msg) {
  if (dpm_group_fail(&q->fault, code, "%s", msg)) pthread_cond_broadcast(&q->cv);
}

void dpm_group_break(dpm_group_queue *q, dpm_status code, const char *msg) {
  pthread_mutex_lock(&q->mu);
  dpm_group_break_locked(q, code, msg);
  pthread_mutex_unlock(&q->mu);
}

dpm_status dpm_group_state(dpm_group_queue *q, const char *op, char *msg) {
  pthread_mutex_lock(&q->mu);
  dpm_group_fault_msg(&q->fault, op, msg, DPM_GROUP_ERR);
  pthread_mutex_unlock(&q->mu);
  return DPM_STATE;
}

dpm_status dpm_group_queue_failure(dpm_group_queue *q, dpm_err *err) {
  pthread_mutex_lock(&q->mu);
  dpm_status s = dpm_group_failure(&q->fault, err);
  pthread_mutex_unlock(&q->mu);
  return s;
}

/* Whether rank r's state in a job is below a state (ABSENT: not arrived;
 * LEFT: not left), for dpm_group_timeout_msg. */
typedef struct {
  const dpm_group_job *j;
  int state;
} queue_absence;

static int absent_of(void *ctx, int r) {
  const queue_absence *a = ctx;
  return atomic_load(&a->j->here[r]) < a->state;
}

/* Under mu: the timeout of job k's `op` (the ranks not at `state` in it)
 * breaks the group. */
static void time_out(dpm_group_queue *q, unsigned long k, int state, const char *op) {
  char m[DPM_GROUP_MSG];
  queue_absence a = {dpm_group_job_of(q, k), state};
  dpm_group_timeout_msg(m, op, k, q->timeout_ms, q->who, q->size, q->rank_base, absent_of,
                        &a);
  dpm_group_break_locked(q, DPM_TIMEOUT, m);
}

dpm_status dpm_group_arrive(dpm_group_queue *q, int rank, const dpm_group_call *call,
                            const char *op, const struct timespec *until,
                            unsigned long *job, int *last, char *msg) {
  unsigned long k = q->next[rank];
  dpm_group_job *j = dpm_group_job_of(q, k);
  *job = k;
  *last = 0;
  if (!dpm_group_await(q, &j->uses, k / (unsigned long)q->slots, until, 1)) {
    pthread_mutex_lock(&q->mu);
    if (dpm_group_broken(&q->fault)) {
      pthread_mutex_unlock(&q->mu);
      return dpm_group_state(q, op, msg);
    }
    char what[96]; /* the ranks that did not leave job k - slots */
    snprintf(what, sizeof what, "%s (the collective %d calls earlier not yet left)", op,
             q->slots);
    time_out(q, k - (unsigned long)q->slots, DPM_GROUP_LEFT, what);
    snprintf(msg, DPM_GROUP_ERR, "%s", q->fault.msg);
    pthread_mutex_unlock(&q->mu);
    return DPM_TIMEOUT;
  }
  q->next[rank] = k + 1;
  j->calls[rank] = *call;
  atomic_store(&j->here[rank], DPM_GROUP_ARRIVED);
  if (atomic_fetch_add(&j->arrived, 1) + 1 == q->size) {
    j->verdict = dpm_group_judge(j->calls, q->size, q->rank_base, q->world, j->msg);
    *last = 1;
  }
  return DPM_OK;
}

int dpm_group_publish_locked(dpm_group_queue *q, unsigned long k) {
  if (dpm_group_broken(&q->fault)) return 0;
  atomic_store(&dpm_group_job_of(q, k)->ready, k + 1);
  if (atomic_load(&q->sleepers)) pthread_cond_broadcast(&q->cv);
  return 1;
}

int dpm_group_publish(dpm_group_queue *q, unsigned long k) {
  pthread_mutex_lock(&q->mu);
  int done = dpm_group_publish_locked(q, k);
  pthread_mutex_unlock(&q->mu);
  return done;
}

dpm_status dpm_group_ready(dpm_group_queue *q, unsigned long k,
                           const struct timespec *until, const char *op, char *msg) {
  dpm_group_job *j = dpm_group_job_of(q, k);
  if (dpm_group_await(q, &j->ready, k + 1, until, 1)) return DPM_OK;
  pthread_mutex_lock(&q->mu);
  dpm_status s = DPM_OK;
  if (atomic_load(&j->ready) < k + 1) { /* never published now: give up */
    if (!dpm_group_broken(&q->fault)) {
      q->broken_job = k;
      time_out(q, k, DPM_GROUP_ARRIVED, op);
    }
    if (q->broken_job == k) {
      s = DPM_TIMEOUT;
      snprintf(msg, DPM_GROUP_ERR, "%s", q->fault.msg);
    } else {
      s = DPM_STATE;
      dpm_group_fault_msg(&q->fault, op, msg, DPM_GROUP_ERR);
    }
  }
  pthread_mutex_unlock(&q->mu);
  return s;
}

void dpm_group_leave(dpm_group_queue *q, unsigned long k, int rank) {
  dpm_group_job *j = dpm_group_job_of(q, k);
  atomic_store(&j->here[rank], DPM_GROUP_LEFT);
  if (atomic_fetch_add(&j->left, 1) + 1 < q->size) return;
  atomic_store(&j->arrived, 0);
  atomic_store(&j->left, 0);
  for (int r = 0; r < q->size; r++) atomic_store(&j->here[r], DPM_GROUP_ABSENT);
  atomic_fetch_add(&j->uses, 1);
  dpm_group_wake(q);
}
