/* Step plans: ordering backward, gradient reduction and updates. */
#include "parallel/plan.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/err.h"
#include "engine/exec.h"

static int reads(const dpm_node *n, const char *blob) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] && !strcmp(n->in[k], blob)) return 1;
  return 0;
}

static int writes(const dpm_node *n, const char *blob) {
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] && !strcmp(n->out[k], blob)) return 1;
  return 0;
}

/* One optimizer op of the update net: where its gradient is final, and
 * where it may run on one device (also after the last reader of its param). */
typedef struct {
  const dpm_node *node;
  int order; /* position in the update net, for a stable sort */
  int grad_ready, param_free;
} update_op;

static int by_ready(const void *a, const void *b) {
  const update_op *x = a, *y = b;
  if (x->grad_ready != y->grad_ready) return x->grad_ready - y->grad_ready;
  return x->order - y->order;
}

static dpm_status add(dpm_plan *p, const dpm_node *n, dpm_err *err) {
  return dpm_net_add_copy(&p->step, n, err) ? DPM_OK : err->code;
}

/* A collective over grads [from, to) (or any names). */
static dpm_status collective(dpm_plan *p, dpm_op_id op, char **names, int from, int to,
                             dpm_err *err) {
  const char *const *v = (const char *const *)names + from;
  return dpm_net_add(&p->step, dpm_op_get(op), to - from, v, to - from, v, err)
             ? DPM_OK
             : err->code;
}

static dpm_status buckets(dpm_plan *p, const dpm_model *m, size_t limit, dpm_err *err) {
  if (!(p->bucket_end = calloc((size_t)p->n_grads + 1, sizeof *p->bucket_end)))
    return dpm_nomem(err);
  size_t bytes = 0;
  int start = 0;
  for (int i = 0; i < p->n_grads; i++) {
    bytes += dpm_shape_bytes(&dpm_shapes_get(&m->shapes, p->grads[i])->shape);
    if (bytes >= limit || i + 1 - start == DPM_OP_MAX_IO || i + 1 == p->n_grads) {
      p->bucket_end[p->n_buckets++] = i + 1;
      start = i + 1;
      bytes = 0;
    }
  }
  return DPM_OK;
}

static dpm_status synced_blobs(dpm_plan *p, const dpm_model *m, dpm_err *err) {
  if (!(p->synced = calloc((size_t)m->shapes.n + 1, sizeof *p->synced)))
    return dpm_nomem(err);
  for (int i = 0; i < m->shapes.n; i++) {
    dpm_blob_kind k = m->shapes.v[i].kind;
    if (k == DPM_BLOB_PARAM || k == DPM_BLOB_COMPUTED || k == DPM_BLOB_OPTIM ||
        k == DPM_BLOB_COUNTER)
      if (!(p->synced[p->n_synced++] = strdup(m->shapes.v[i].name)))
        return dpm_nomem(err);
  }
  return DPM_OK;
}

/* The update ops (update net minus LearningRate first and Iter last). An
 * op is free to run once backward has read its param for the last time,
 * and its working copy when it writes one (DPM_FUSE_WORKING_COPY). */
static update_op *optimizer_ops(const dpm_model *m, int *n) {
  *n = m->update.n - 2;
  update_op *u = calloc((size_t)*n + 1, sizeof *u);
  for (int i = 0; u && i < *n; i++) {
    const dpm_node *op = &m->update.nodes[i + 1];
    const char *copy = (op->fuse & DPM_FUSE_WORKING_COPY) ? op->out[op->n_out - 1] : NULL;
    u[i] = (update_op){.node = op, .order = i, .grad_ready = m->n_forward - 1};
    for (int j = m->n_forward; j < m->train.n; j++) {
      if (writes(&m->train.nodes[j], op->in[1])) u[i].grad_ready = j;
      if (reads(&m->train.nodes[j], op->in[0]) ||
          (copy && reads(&m->train.nodes[j], copy)))
        u[i].param_free = j;
    }
    if (u[i].param_free < u[i].grad_ready) u[i].param_free = u[i].grad_ready;
  }
  return u;
}

static dpm_status computed_broadcast(dpm_plan *p, const dpm_model *m, dpm_err *err) {
  char *names[DPM_OP_MAX_IO];
  int n = 0;
  dpm_status s = DPM_OK;
  for (int i = 0; i < m->shapes.n && !s; i++) {
    if (m->shapes.v[i].kind != DPM_BLOB_COMPUTED) continue;
    names[n++] = m->shapes.v[i].name;
    if (n == DPM_OP_MAX_IO) s = collective(p, DPM_OP_BROADCAST, names, 0, n, err), n = 0;
  }
  return !s && n ? collective(p, DPM_OP_BROADCAST, names, 0, n, err) : s;
}

dpm_status dpm_plan_build(const dpm_model *m, int devices, int reduce, dpm_net_type type,
                          size_t bucket_bytes, int broadcast_computed, int gathered,
                          const dpm_backend *be, dpm_plan *p, dpm_err *err) {
  memset(p, 0, sizeof *p);
  if (gathered) type = DPM_NET_SIMPLE; /* no reduction starts inside backward */
  int n_opt;
  update_op *u = optimizer_ops(m, &n_opt);
  if (!u) return dpm_nomem(err);
  qsort(u, (size_t)n_opt, sizeof *u, by_ready);
  dpm_status s = DPM_OK;
  if (!(p->grads = calloc((size_t)n_opt + 1, sizeof *p->grads))) s = dpm_nomem(err);
  for (int i = 0; i < n_opt && !s; i++, p->n_grads++)
    if (!(p->grads[i] = strdup(u[i].node->in[1]))) s = dpm_nomem(err);
  if (!s)
    s = buckets(p, m, reduce && type == DPM_NET_DAG ? bucket_bytes : (size_t)-1, err);
  if (!s) s = synced_blobs(p, m, err);
  const dpm_node *lr = &m->update.nodes[0], *iter = &m->update.nodes[m->update.n - 1];
  int dag = reduce && type == DPM_NET_DAG, b = 0, last_train = -1;
  /* One device updates each param as soon as its gradient is final, unless
   * the backend fuses the updates into one launch (run_many): then they
   * run together after backward. */
  const dpm_kernel_def *opt = n_opt && be ? be->kernel(u[0].node->def->id) : NULL;
  int early = !reduce && !(opt && opt->run_many) && !gathered;
  for (int j = 0; j < m->train.n && !s; j++) {
    s = add(p, &m->train.nodes[j], err);
    last_train = p->step.n - 1;
    if (!s && j == m->n_forward - 1) s = add(p, lr, err);
    for (int i = 0; early && i < n_opt && !s; i++)
      if (u[i].param_free == j) s = add(p, u[i].node, err);
    for (; dag && b < p->n_buckets - 1 && !s && u[p->bucket_end[b] - 1].grad_ready == j;
         b++)
      s = collective(p, DPM_OP_ALLREDUCE_START, p->grads, b ? p->bucket_end[b - 1] : 0,
                     p->bucket_end[b], err);
  }
  /* The last bucket is ready only when backward ends: nothing is left to
   * overlap, so it is reduced in place, after the started ones. */
  int first_wait = p->step.n; /* the first collective that waits for the peers */
  p->reduce_at = p->step.n;
  for (b = 0; reduce && b < p->n_buckets && !s; b++)
    s = collective(p,
                   dag && b < p->n_buckets - 1 ? DPM_OP_ALLREDUCE_WAIT : DPM_OP_ALLREDUCE,
                   p->grads, b ? p->bucket_end[b - 1] : 0, p->bucket_end[b], err);
  p->update_at = p->step.n;
  for (int i = 0; !early && i < n_opt && !s; i++) s = add(p, u[i].node, err);
  p->update_end = p->step.n;
  if (!s && reduce && broadcast_computed) s = computed_broadcast(p, m, err);
  if (!s) s = add(p, iter, err);
  p->n_forward = m->n_forward;
  p->shared_op = p->help_at = -1;
  const dpm_kernel_def *last =
      be && last_train >= 0 ? be->kernel(p->step.nodes[last_train].def->id) : NULL;
  if (!s && devices > 1 && p->n_buckets && last && last->parts && last->run_part &&
      !gathered) {
    p->shared_op = last_train; /* backward's last op, which splits */
    p->help_at = first_wait;
  }
  free(u);
  if (s) dpm_plan_fini(p);
  return s;
}

void dpm_plan_fini(dpm_plan *p) {
  for (int i = 0; i < p->n_grads; i++) free(p->grads[i]);
  for (int i = 0; i < p->n_synced; i++) free(p->synced[i]);
  free(p->grads);
  free(p->synced);
  free(p->bucket_end);
  dpm_net_fini(&p->step);
  memset(p, 0, sizeof *p);
}
