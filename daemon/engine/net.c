/* Nets, shape tables and whole-net shape inference. */
#include "engine/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

dpm_node *dpm_net_add(dpm_net *net, const dpm_op_def *def, int n_in,
                      const char *const *in, int n_out, const char *const *out,
                      dpm_err *err) {
  if (n_in > DPM_OP_MAX_IO || n_out > DPM_OP_MAX_IO) {
    dpm_errf(err, DPM_SPEC, "%s: more than %d inputs or outputs", def->name,
             DPM_OP_MAX_IO);
    return NULL;
  }
  if (net->n == net->cap) {
    int cap = net->cap ? net->cap * 2 : 32;
    dpm_node *p = realloc(net->nodes, (size_t)cap * sizeof *p);
    if (!p) {
      dpm_nomem(err);
      return NULL;
    }
    net->nodes = p;
    net->cap = cap;
  }
  dpm_node *n = &net->nodes[net->n];
  memset(n, 0, sizeof *n);
  n->def = def;
  n->index = -1;
  for (int i = 0; i < n_in; i++) n->in[i] = in[i] ? strdup(in[i]) : NULL;
  for (int i = 0; i < n_out; i++) n->out[i] = out[i] ? strdup(out[i]) : NULL;
  n->n_in = n_in;
  n->n_out = n_out;
  net->n++; /* counted now so fini frees the names even if defaults fail */
  for (int i = 0; i < n_in; i++)
    if (in[i] && !n->in[i]) goto nomem;
  for (int i = 0; i < n_out; i++)
    if (out[i] && !n->out[i]) goto nomem;
  if (dpm_node_set_defaults(n, err)) return NULL;
  return n;
nomem:
  dpm_nomem(err);
  return NULL;
}

dpm_node *dpm_net_add_copy(dpm_net *net, const dpm_node *src, dpm_err *err) {
  dpm_node *n = dpm_net_add(net, src->def, src->n_in, (const char *const *)src->in,
                            src->n_out, (const char *const *)src->out, err);
  if (!n) return NULL;
  memcpy(n->arg, src->arg, sizeof n->arg);
  n->index = src->index;
  n->line = src->line;
  n->is_test = src->is_test;
  n->fuse = src->fuse;
  return n;
}

static void node_fini(dpm_node *n) {
  for (int k = 0; k < n->n_in; k++) free(n->in[k]);
  for (int k = 0; k < n->n_out; k++) free(n->out[k]);
}

void dpm_net_remove(dpm_net *net, int i) {
  node_fini(&net->nodes[i]);
  memmove(&net->nodes[i], &net->nodes[i + 1],
          (size_t)(net->n - i - 1) * sizeof *net->nodes);
  net->n--;
}

void dpm_net_fini(dpm_net *net) {
  for (int i = 0; i < net->n; i++) node_fini(&net->nodes[i]);
  free(net->nodes);
  memset(net, 0, sizeof *net);
}

char *dpm_node_where(const dpm_node *n, const char *source, char *buf, size_t len) {
  char at[160] = "";
  if (n->line) snprintf(at, sizeof at, "%s:%u: ", source ? source : "spec", n->line);
  if (n->index < 0)
    snprintf(buf, len, "%s%s", at, n->def->name);
  else if (n->def->flags & DPM_OP_HIDDEN)
    snprintf(buf, len, "%sop #%d, gradient %s", at, n->index + 1, n->def->name);
  else
    snprintf(buf, len, "%sop #%d (%s)", at, n->index + 1, n->def->name);
  return buf;
}

dpm_blobinfo *dpm_shapes_get(const dpm_shapes *t, const char *name) {
  int i = dpm_strmap_get(&t->index, name);
  return i < 0 ? NULL : &t->v[i];
}

dpm_status dpm_shapes_set(dpm_shapes *t, const char *name, const dpm_shape *s,
                          dpm_blob_kind kind) {
  dpm_blobinfo *b = dpm_shapes_get(t, name);
  if (b) {
    b->shape = *s;
    b->kind = kind;
    return DPM_OK;
  }
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 64;
    dpm_blobinfo *p = realloc(t->v, (size_t)cap * sizeof *p);
    if (!p) return DPM_NOMEM;
    t->v = p;
    t->cap = cap;
  }
  char *copy = strdup(name);
  if (!copy || dpm_strmap_put(&t->index, name, t->n)) {
    free(copy);
    return DPM_NOMEM;
  }
  t->v[t->n++] = (dpm_blobinfo){.name = copy, .shape = *s, .kind = kind};
  return DPM_OK;
}

dpm_status dpm_shapes_remove(dpm_shapes *t, const char *name) {
  int at = dpm_strmap_get(&t->index, name);
  if (at < 0) return DPM_OK;
  dpm_strmap index = {0}; /* the others at their new places, then swapped in */
  for (int i = 0, j = 0; i < t->n; i++)
    if (i != at && dpm_strmap_put(&index, t->v[i].name, j++)) {
      dpm_strmap_fini(&index);
      return DPM_NOMEM;
    }
  dpm_strmap_fini(&t->index);
  t->index = index;
  free(t->v[at].name);
  memmove(&t->v[at], &t->v[at + 1], (size_t)(t->n - at - 1) * sizeof *t->v);
  t->n--;
  return DPM_OK;
}

void dpm_shapes_fini(dpm_shapes *t) {
  for (int i = 0; i < t->n; i++) free(t->v[i].name);
  free(t->v);
  dpm_strmap_fini(&t->index);
  memset(t, 0, sizeof *t);
}

int dpm_node_input_shapes(const dpm_node *n, const dpm_shapes *t, dpm_shape *in) {
  for (int k = 0; k < n->n_in; k++) {
    memset(&in[k], 0, sizeof in[k]);
    if (!n->in[k]) continue;
    const dpm_blobinfo *b = dpm_shapes_get(t, n->in[k]);
    if (!b) return k;
    in[k] = b->shape;
  }
  return -1;
}

static dpm_status node_fail(const dpm_node *n, const char *source, dpm_err *err) {
  char where[256];
  dpm_node_where(n, source, where, sizeof where);
  return dpm_err_prefix(err, "%s: ", where);
}

dpm_status dpm_node_infer(const dpm_node *n, dpm_shapes *t, int kind, const char *source,
                          dpm_err *err) {
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  memset(out, 0, sizeof out);
  int missing = dpm_node_input_shapes(n, t, in);
  if (missing >= 0) {
    dpm_errf(err, DPM_SPEC, "input '%s' is not defined", n->in[missing]);
    return node_fail(n, source, err);
  }
  if (n->def->infer(n, in, out, err)) return node_fail(n, source, err);
  for (int k = 0; k < n->n_out; k++) {
    if (!n->out[k]) continue;
    if (dpm_shape_check(&out[k], NULL, err)) {
      dpm_err_prefix(err, "output '%s': ", n->out[k]);
      return node_fail(n, source, err);
    }
    dpm_blobinfo *b = dpm_shapes_get(t, n->out[k]);
    if (b && b->version > 0 && !dpm_shape_equal(&b->shape, &out[k])) {
      char a[64], c[64];
      dpm_errf(err, DPM_SHAPE, "output '%s' is %s but was %s before", n->out[k],
               dpm_shape_str(&out[k], a, sizeof a),
               dpm_shape_str(&b->shape, c, sizeof c));
      return node_fail(n, source, err);
    }
    dpm_blob_kind k2 = b ? b->kind : kind >= 0 ? (dpm_blob_kind)kind : DPM_BLOB_ACT;
    int version = b ? b->version : 0;
    if (dpm_shapes_set(t, n->out[k], &out[k], k2)) return dpm_nomem(err);
    dpm_shapes_get(t, n->out[k])->version = version + 1;
  }
  return DPM_OK;
}

dpm_status dpm_net_infer(const dpm_net *net, dpm_shapes *t, int kind, const char *source,
                         dpm_err *err) {
  for (int i = 0; i < net->n; i++)
    if (dpm_node_infer(&net->nodes[i], t, kind, source, err)) return err->code;
  return DPM_OK;
}
