/* The group core (group.h). No engine symbols: the cuda plugin compiles
 * this file into itself. Stateless but for a fault's fields. */
#include "comm/group.h"

#include <stdarg.h>
#include <stdio.h>

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
