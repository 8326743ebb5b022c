/* Block-wise model update filtering: block state, the block update. */
#include "parallel/bmuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "common/err.h"

static const char *const suffix[DPM_BMUF_STATE] = {"_bmuf_g", "_bmuf_v", "_bmuf_prev"};

static uint64_t padded(uint64_t b) { return (b + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN; }

int dpm_bmuf_is_state(const char *name) {
  for (int k = 0; k < DPM_BMUF_STATE; k++) {
    size_t n = strlen(name), s = strlen(suffix[k]);
    if (n > s && !strcmp(name + n - s, suffix[k])) return 1;
  }
  return 0;
}

/* The plan's synced blobs that each replica keeps its own of inside a
 * block, and the computed params; before the block state is appended. */
static dpm_status lists(dpm_bmuf *b, const dpm_model *m, const dpm_plan *p,
                        int broadcast_computed, dpm_err *err) {
  if (!(b->local = calloc((size_t)p->n_synced + 1, sizeof *b->local)) ||
      !(b->computed = calloc((size_t)p->n_synced + 1, sizeof *b->computed)))
    return dpm_nomem(err);
  for (int i = 0; i < p->n_synced; i++) {
    dpm_blob_kind k = dpm_shapes_get(&m->shapes, p->synced[i])->kind;
    if (k == DPM_BLOB_PARAM || k == DPM_BLOB_COMPUTED || k == DPM_BLOB_OPTIM)
      b->local[b->n_local++] = p->synced[i];
    if (k == DPM_BLOB_COMPUTED && broadcast_computed && b->ranks > 1)
      b->computed[b->n_computed++] = p->synced[i];
  }
  return DPM_OK;
}

dpm_status dpm_bmuf_init(dpm_bmuf *b, const Dpm__ParallelSpec *par, const dpm_model *m,
                         int ranks, int broadcast_computed, dpm_plan *p, dpm_err *err) {
  memset(b, 0, sizeof *b);
  if (!par || par->mode != DPM__PARALLEL_MODE__PARALLEL_BMUF) return DPM_OK;
  const Dpm__BmufSpec *bs = par->bmuf;
  b->on = 1;
  b->ranks = ranks;
  b->local_steps = bs ? (int)bs->local_steps : 10;
  b->momentum =
      (float)(bs && bs->has_block_momentum ? bs->block_momentum : 1.0 - 1.0 / ranks);
  b->lr = (float)(bs ? bs->block_learning_rate : 1.0);
  b->nesterov = bs ? bs->nesterov : 0;
  b->n_state = b->nesterov ? 3 : 2;
  if (lists(b, m, p, broadcast_computed, err)) return err->code;
  /* the optimizer ops of the update net (between LearningRate and Iter):
     (param, grad, ...) */
  int n = m->update.n - 2;
  if (!(b->param = calloc((size_t)n + 1, sizeof *b->param)) ||
      !(b->grad = calloc((size_t)n + 1, sizeof *b->grad)) ||
      !(b->state = calloc((size_t)n * DPM_BMUF_STATE + 1, sizeof *b->state)))
    return dpm_nomem(err);
  char **grown = realloc(p->synced, ((size_t)p->n_synced + (size_t)n * b->n_state + 1) *
                                        sizeof *grown);
  if (!grown) return dpm_nomem(err);
  p->synced = grown;
  b->n = n; /* the state names are freed from here on */
  for (int i = 0; i < n; i++) {
    const dpm_node *op = &m->update.nodes[i + 1];
    b->param[i] = op->in[0];
    b->grad[i] = op->in[1];
    const dpm_shape *s = &dpm_shapes_get(&m->shapes, op->in[0])->shape;
    if (dpm_shape_numel(s) > b->max_numel) b->max_numel = dpm_shape_numel(s);
    for (int k = 0; k < b->n_state; k++) {
      size_t len = strlen(op->in[0]) + strlen(suffix[k]) + 1;
      char *name = malloc(len);
      if (!name) return dpm_nomem(err);
      snprintf(name, len, "%s%s", op->in[0], suffix[k]);
      b->state[i * DPM_BMUF_STATE + k] = name;
      if (!(p->synced[p->n_synced] = strdup(name))) return dpm_nomem(err);
      p->n_synced++;
      b->state_bytes += padded(dpm_shape_bytes(s));
    }
  }
  for (int i = 0; i < p->n_grads; i++)
    b->arena_span +=
        padded(dpm_shape_bytes(&dpm_shapes_get(&m->shapes, p->grads[i])->shape));
  b->arena_first = p->n_grads ? p->grads[0] : NULL;
  return DPM_OK;
}

dpm_status dpm_bmuf_replica(const dpm_bmuf *b, dpm_workspace *ws, int master,
                            float **host, dpm_err *err) {
  *host = NULL;
  if (!b->on) return DPM_OK;
  if (!(*host = dpm_alloc((size_t)b->max_numel * 4 * sizeof(float))))
    return dpm_nomem(err);
  for (int i = 0; i < b->n; i++) {
    dpm_blob *p = dpm_ws_find(ws, b->param[i]), *st;
    size_t bytes = dpm_shape_bytes(&p->t.shape);
    for (int k = 0; k < b->n_state; k++) {
      if (dpm_ws_ensure(ws, b->state[i * DPM_BMUF_STATE + k], DPM_BLOB_OPTIM, &p->t.shape,
                        &st))
        return dpm_nomem(err);
      if (!master) continue;
      if (k == DPM_BMUF_G)
        dpm_dev_copy(ws->dev, dpm_tensor_mem(&st->t), dpm_tensor_mem(&p->t), bytes);
      else
        dpm_dev_memset(ws->dev, dpm_tensor_mem(&st->t), 0, bytes);
    }
  }
  return DPM_OK;
}

/* Caffe2's block update of one param, elementwise, on host copies: sum
 * (the ranks' params summed), g, v, prev. */
static void update(const dpm_bmuf *b, int64_t n, const float *sum, float *g, float *v,
                   float *prev) {
  const float scale = (float)(1.0 / b->ranks), lr = b->lr, mu = b->momentum;
  for (int64_t k = 0; k < n; k++) {
    float avg = sum[k] * scale;  /* Scale(param, 1/N) */
    float G = (avg - g[k]) * lr; /* Sub(param, g); Scale(block_learning_rate) */
    float vk = v[k] * mu;        /* Scale(v, block_momentum) */
    vk = vk + G;                 /* Add(v, param) */
    float gk = g[k] + vk;        /* Add(g, v) */
    if (prev) {
      float d = (vk - prev[k]) * mu; /* Sub(v, prev); Scale(block_momentum) */
      gk = gk - d;                   /* Sub(g, prev) */
      prev[k] = vk;                  /* Copy(v, prev) */
    }
    v[k] = vk;
    g[k] = gk;
  }
}

dpm_status dpm_bmuf_block(const dpm_bmuf *b, dpm_workspace *ws, dpm_dev *dev,
                          dpm_comm *comm, int rank, float *host, dpm_err *err) {
  int reduce = b->ranks > 1 && b->arena_first;
  dpm_status s = DPM_OK;
  if (reduce) { /* params into the (dead) gradients, summed in one all-reduce */
    for (int i = 0; i < b->n; i++) {
      dpm_blob *p = dpm_ws_find(ws, b->param[i]), *g = dpm_ws_find(ws, b->grad[i]);
      size_t bytes = dpm_shape_bytes(&p->t.shape);
      dpm_dev_copy(dev, dpm_tensor_mem(&g->t), dpm_tensor_mem(&p->t), bytes);
    }
    dpm_blob *first = dpm_ws_find(ws, b->arena_first);
    dpm_dev_enter(dev);
    float *at = first->t.data; /* pointer only */
    s = dpm_comm_allreduce(comm, rank, at, b->arena_span / sizeof(float), err);
    dpm_dev_leave(dev);
    if (!s && !dpm_dev_host_visible(dev)) { /* queued on a stream: wait, take failures */
      dpm_dev_synchronize(dev);
      s = dpm_dev_failure(dev, err);
      if (!s) s = dpm_comm_failure(comm, err);
    }
    if (s) return s;
  }
  int64_t cap = b->max_numel;
  float *sum = host, *g = host + cap, *v = host + 2 * cap, *prev = host + 3 * cap;
  for (int i = 0; i < b->n; i++) {
    dpm_blob *p = dpm_ws_find(ws, b->param[i]);
    const dpm_blob *src = reduce ? dpm_ws_find(ws, b->grad[i]) : p;
    dpm_blob *st[DPM_BMUF_STATE] = {0};
    for (int k = 0; k < b->n_state; k++)
      st[k] = dpm_ws_find(ws, b->state[i * DPM_BMUF_STATE + k]);
    size_t bytes = dpm_shape_bytes(&p->t.shape);
    dpm_tensor_read(&src->t, sum, bytes);
    dpm_tensor_read(&st[DPM_BMUF_G]->t, g, bytes);
    dpm_tensor_read(&st[DPM_BMUF_V]->t, v, bytes);
    if (b->nesterov) dpm_tensor_read(&st[DPM_BMUF_PREV]->t, prev, bytes);
    update(b, dpm_shape_numel(&p->t.shape), sum, g, v, b->nesterov ? prev : NULL);
    dpm_tensor_write(&p->t, g, bytes);
    dpm_tensor_write(&st[DPM_BMUF_G]->t, g, bytes);
    dpm_tensor_write(&st[DPM_BMUF_V]->t, v, bytes);
    if (b->nesterov) dpm_tensor_write(&st[DPM_BMUF_PREV]->t, prev, bytes);
  }
  dpm_dev_enter(dev);
  for (int i = 0; i < b->n_computed && !s; i++) {
    dpm_blob *c = dpm_ws_find(ws, b->computed[i]);
    void *at = c->t.data; /* pointer only */
    s = dpm_comm_broadcast(comm, rank, 0, at, dpm_shape_bytes(&c->t.shape), err);
  }
  dpm_dev_leave(dev);
  return s;
}

void dpm_bmuf_fini(dpm_bmuf *b) {
  for (int i = 0; b->state && i < b->n * DPM_BMUF_STATE; i++) free(b->state[i]);
  free(b->state);
  free(b->param);
  free(b->grad);
  free(b->local);
  free(b->computed);
  memset(b, 0, sizeof *b);
}
