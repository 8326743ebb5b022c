/* Gradient memory sharing: lifetimes over the step net, an arena laid out
 * greedy by size. */
#include "parallel/memshare.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "engine/tensor.h"

/* One blob the net touches: where it is first written and last used, and
 * whether a read came first (its value lives across steps). */
typedef struct {
  const char *name; /* the net's */
  int first_write, last, read_first;
} life;

typedef struct {
  dpm_strmap index; /* name -> position in v */
  life *v;
  int n;
} lives;

/* A candidate: its life and size, and where it goes. */
typedef struct {
  const life *l;
  int order; /* position in order of first write */
  uint64_t bytes, offset;
} place;

static int touch(lives *l, const char *name, int at, int write) {
  int i = dpm_strmap_get(&l->index, name);
  if (i < 0) {
    if (dpm_strmap_put(&l->index, name, l->n)) return -1;
    i = l->n++;
    l->v[i] = (life){.name = name, .first_write = -1, .last = -1};
  }
  life *b = &l->v[i];
  if (write && b->first_write < 0) b->first_write = at;
  if (!write && b->first_write < 0) b->read_first = 1;
  b->last = at;
  return 0;
}

static int kept(const char *name, const char *const *keep, int n_keep) {
  for (int i = 0; i < n_keep; i++)
    if (!strcmp(keep[i], name)) return 1;
  return 0;
}

static uint64_t aligned(uint64_t b) { return (b + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN; }

static int larger_first(const void *a, const void *b) {
  const place *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return x->order - y->order;
}

static int by_offset(const void *a, const void *b) {
  const place *x = *(place *const *)a, *y = *(place *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int by_order(const void *a, const void *b) {
  return ((const place *)a)->order - ((const place *)b)->order;
}

/* p[i]'s offset: the smallest gap among p[0, i) whose lifetimes overlap
 * its own that holds it, else above them all. `near` is scratch for i. */
static uint64_t best_offset(place *p, int i, place **near) {
  int n = 0;
  for (int j = 0; j < i; j++)
    if (p[j].l->first_write <= p[i].l->last && p[i].l->first_write <= p[j].l->last)
      near[n++] = &p[j];
  qsort(near, (size_t)n, sizeof *near, by_offset);
  uint64_t at = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
  for (int k = 0; k < n; k++) {
    if (near[k]->offset >= at) {
      uint64_t gap = near[k]->offset - at;
      if (gap >= p[i].bytes && gap < best_gap) best = at, best_gap = gap;
    }
    if (near[k]->offset + near[k]->bytes > at) at = near[k]->offset + near[k]->bytes;
  }
  return best != UINT64_MAX ? best : at;
}

dpm_status dpm_memshare_plan(const dpm_net *net, const dpm_shapes *t,
                             const char *const *keep, int n_keep, dpm_memshare *out,
                             dpm_err *err) {
  memset(out, 0, sizeof *out);
  int most = 0;
  for (int i = 0; i < net->n; i++) most += net->nodes[i].n_in + net->nodes[i].n_out;
  lives l = {.v = calloc((size_t)most + 1, sizeof *l.v)};
  place *p = calloc((size_t)most + 1, sizeof *p);
  place **near = calloc((size_t)most + 1, sizeof *near);
  int bad = !l.v || !p || !near, n = 0;
  /* an op reads its inputs before it writes its outputs */
  for (int i = 0; i < net->n && !bad; i++) {
    const dpm_node *nd = &net->nodes[i];
    for (int k = 0; k < nd->n_in && !bad; k++)
      if (nd->in[k]) bad = touch(&l, nd->in[k], i, 0);
    for (int k = 0; k < nd->n_out && !bad; k++)
      if (nd->out[k]) bad = touch(&l, nd->out[k], i, 1);
  }
  for (int i = 0; i < l.n && !bad; i++) {
    const life *b = &l.v[i];
    const dpm_blobinfo *info = dpm_shapes_get(t, b->name);
    if (!info || b->read_first || b->first_write < 0 || kept(b->name, keep, n_keep) ||
        (info->kind != DPM_BLOB_ACT && info->kind != DPM_BLOB_GRAD))
      continue;
    p[n] = (place){.l = b, .order = n, .bytes = aligned(dpm_shape_bytes(&info->shape))};
    out->before += p[n++].bytes;
  }
  qsort(p, (size_t)n, sizeof *p, larger_first);
  for (int i = 0; i < n && !bad; i++) {
    p[i].offset = best_offset(p, i, near);
    if (p[i].offset + p[i].bytes > out->after) out->after = p[i].offset + p[i].bytes;
  }
  /* l.v is in order of first use, so `order` is the order of first write */
  qsort(p, (size_t)n, sizeof *p, by_order);
  out->names = calloc((size_t)n + 1, sizeof *out->names);
  out->offset = calloc((size_t)n + 1, sizeof *out->offset);
  out->first = calloc((size_t)n + 1, sizeof *out->first);
  out->last = calloc((size_t)n + 1, sizeof *out->last);
  bad |= !out->names || !out->offset || !out->first || !out->last;
  for (int i = 0; i < n && !bad; i++, out->n++) {
    if (!(out->names[i] = strdup(p[i].l->name))) bad = 1;
    out->offset[i] = p[i].offset;
    out->first[i] = p[i].l->first_write;
    out->last[i] = p[i].l->last;
  }
  free(near);
  free(p);
  free(l.v);
  dpm_strmap_fini(&l.index);
  if (!bad) return DPM_OK;
  dpm_memshare_fini(out);
  return dpm_nomem(err);
}

int dpm_memshare_find(const dpm_memshare *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->names[i], name)) return i;
  return -1;
}

void dpm_memshare_fini(dpm_memshare *m) {
  for (int i = 0; i < m->n; i++) free(m->names[i]);
  free(m->names);
  free(m->offset);
  free(m->first);
  free(m->last);
  memset(m, 0, sizeof *m);
}
