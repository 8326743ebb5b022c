/* Reverse-mode autodiff: gradient nodes from the losses back, with blob
 * versions tracked so in-place ops are differentiated correctly. */
#include "engine/autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

typedef struct {
  char **v;
  int n, cap;
} namelist;

typedef struct {
  const dpm_net *fwd;
  dpm_shapes *t;
  const char *source;
  dpm_net *out;
  dpm_strmap idx; /* blob name -> dense index */
  int nb;
  int *cur, *curq; /* per blob: current version, requires-grad */
  int *lastver;    /* per blob: version after the whole forward net */
  int (*vin)[DPM_OP_MAX_IO], (*vout)[DPM_OP_MAX_IO], (*rq)[DPM_OP_MAX_IO];
  namelist *contrib; /* per blob: pending gradient contributions */
  namelist temp;     /* names to free at the end */
  int fwd_node;      /* node whose gradient is being emitted */
} ad;

static int push(namelist *l, const char *s) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 4;
    char **p = realloc(l->v, (size_t)cap * sizeof *p);
    if (!p) return -1;
    l->v = p;
    l->cap = cap;
  }
  if (!(l->v[l->n] = strdup(s))) return -1;
  l->n++;
  return 0;
}

static void clear(namelist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  l->n = 0;
}

static int name_index(ad *a, const char *name) {
  int i = dpm_strmap_get(&a->idx, name);
  if (i < 0 && !dpm_strmap_put(&a->idx, name, a->nb)) i = a->nb++;
  return i;
}

/* Index every blob, then simulate the forward net for versions and
 * requires-grad flags. */
static dpm_status forward_pass(ad *a, dpm_err *err) {
  const dpm_net *f = a->fwd;
  for (int i = 0; i < a->t->n; i++)
    if (name_index(a, a->t->v[i].name) < 0) return dpm_nomem(err);
  for (int i = 0; i < f->n; i++) {
    for (int k = 0; k < f->nodes[i].n_in; k++)
      if (f->nodes[i].in[k] && name_index(a, f->nodes[i].in[k]) < 0)
        return dpm_nomem(err);
    for (int k = 0; k < f->nodes[i].n_out; k++)
      if (f->nodes[i].out[k] && name_index(a, f->nodes[i].out[k]) < 0)
        return dpm_nomem(err);
  }
  int n = f->n + 1;
  a->cur = calloc((size_t)a->nb, sizeof *a->cur);
  a->curq = calloc((size_t)a->nb, sizeof *a->curq);
  a->lastver = calloc((size_t)a->nb, sizeof *a->lastver);
  a->contrib = calloc((size_t)a->nb, sizeof *a->contrib);
  a->vin = calloc((size_t)n, sizeof *a->vin);
  a->vout = calloc((size_t)n, sizeof *a->vout);
  a->rq = calloc((size_t)n, sizeof *a->rq);
  if (!a->cur || !a->curq || !a->lastver || !a->contrib || !a->vin || !a->vout || !a->rq)
    return dpm_nomem(err);
  for (int i = 0; i < a->t->n; i++)
    if (a->t->v[i].kind == DPM_BLOB_PARAM)
      a->curq[dpm_strmap_get(&a->idx, a->t->v[i].name)] = 1;
  for (int i = 0; i < f->n; i++) {
    const dpm_node *nd = &f->nodes[i];
    int needs = 0;
    for (int k = 0; k < nd->n_in; k++) {
      if (!nd->in[k]) continue;
      int j = dpm_strmap_get(&a->idx, nd->in[k]);
      const dpm_blobinfo *b = dpm_shapes_get(a->t, nd->in[k]);
      a->vin[i][k] = a->cur[j];
      a->rq[i][k] = a->curq[j] && b && dpm_dtype_is_float(b->shape.dtype);
      needs |= a->rq[i][k];
    }
    int diff = nd->def->grad && !(nd->def->flags & DPM_OP_NO_GRAD);
    for (int k = 0; k < nd->n_out; k++) {
      if (!nd->out[k]) continue;
      int j = dpm_strmap_get(&a->idx, nd->out[k]);
      a->vout[i][k] = ++a->cur[j];
      a->curq[j] = diff && needs;
    }
  }
  memcpy(a->lastver, a->cur, (size_t)a->nb * sizeof *a->cur);
  return DPM_OK;
}

/* First forward node after `after` that writes `name`. */
static int writer_after(const ad *a, int after, const char *name) {
  for (int i = after + 1; i < a->fwd->n; i++)
    for (int k = 0; k < a->fwd->nodes[i].n_out; k++)
      if (a->fwd->nodes[i].out[k] && !strcmp(a->fwd->nodes[i].out[k], name)) return i;
  return -1;
}

/* A gradient node may read a forward blob only at the version its forward
 * node saw; an in-place op after it would have overwritten that value. */
static dpm_status check_versions(ad *a, const dpm_node *g, dpm_err *err) {
  int i = a->fwd_node;
  const dpm_node *f = &a->fwd->nodes[i];
  for (int k = 0; k < g->n_in; k++) {
    const char *name = g->in[k];
    if (!name) continue;
    int want = -1; /* outputs first: an in-place op's input value is gone */
    for (int m = 0; m < f->n_out && want < 0; m++)
      if (f->out[m] && !strcmp(f->out[m], name)) want = a->vout[i][m];
    for (int m = 0; m < f->n_in && want < 0; m++)
      if (f->in[m] && !strcmp(f->in[m], name)) want = a->vin[i][m];
    if (want < 0) continue;
    int j = dpm_strmap_get(&a->idx, name);
    if (a->lastver[j] == want) continue;
    int w = writer_after(a, i, name);
    if (w < 0) continue; /* cannot happen: lastver moved, so someone wrote it */
    char here[256], there[256];
    dpm_node_where(f, a->source, here, sizeof here);
    dpm_node_where(&a->fwd->nodes[w], a->source, there, sizeof there);
    return dpm_errf(err, DPM_SPEC,
                    "%s writes '%s' in place, but the gradient of %s needs its "
                    "earlier value; give that output another name",
                    there, name, here);
  }
  return DPM_OK;
}

dpm_status dpm_grad_emit(dpm_grad *g, dpm_op_id op, int n_in, const char *const *in,
                         int n_out, const char *const *out, dpm_err *err) {
  ad *a = g->impl;
  const dpm_op_def *def = dpm_op_get(op);
  dpm_node *n = dpm_net_add(a->out, def, n_in, in, n_out, out, err);
  if (!n) return err->code;
  if (def->args && def->args == g->fwd->def->args)
    memcpy(n->arg, g->fwd->arg, sizeof n->arg);
  n->index = g->fwd->index;
  n->line = g->fwd->line;
  n->is_test = g->fwd->is_test;
  return a->fwd ? check_versions(a, n, err) : DPM_OK;
}

dpm_node *dpm_grad_last(dpm_grad *g) {
  ad *a = g->impl;
  return &a->out->nodes[a->out->n - 1];
}

/* Sum a blob's pending contributions into one name (kept in a->temp). */
static dpm_status resolve(ad *a, int j, const char *name, const char **grad,
                          dpm_err *err) {
  namelist *c = &a->contrib[j];
  *grad = NULL;
  if (c->n == 0) return DPM_OK;
  char base[300];
  snprintf(base, sizeof base, "%s_grad", name);
  if (c->n > 1) {
    for (int m = 1; m < c->n; m++) /* an existing "<name>_grad" goes first */
      if (!strcmp(c->v[m], base)) {
        char *s = c->v[0];
        c->v[0] = c->v[m];
        c->v[m] = s;
      }
    const char *out[] = {base};
    dpm_node *n = dpm_net_add(a->out, dpm_op_get(DPM_OP_SUM), c->n,
                              (const char *const *)c->v, 1, out, err);
    if (!n) return err->code;
    if (push(&a->temp, base)) return dpm_nomem(err);
  } else if (push(&a->temp, c->v[0])) {
    return dpm_nomem(err);
  }
  *grad = a->temp.v[a->temp.n - 1];
  clear(c);
  return DPM_OK;
}

static dpm_status backward_node(ad *a, int i, dpm_err *err) {
  const dpm_node *f = &a->fwd->nodes[i];
  dpm_grad g = {.fwd = f, .impl = a};
  int any_out = 0, any_in = 0;
  for (int k = 0; k < f->n_out; k++) {
    if (!f->out[k]) continue;
    if (resolve(a, dpm_strmap_get(&a->idx, f->out[k]), f->out[k], &g.gout[k], err))
      return err->code;
    any_out |= g.gout[k] != NULL;
  }
  if (!any_out || !f->def->grad || (f->def->flags & DPM_OP_NO_GRAD)) return DPM_OK;
  for (int k = 0; k < f->n_in; k++) {
    if (!a->rq[i][k]) continue;
    char name[300];
    snprintf(name, sizeof name, "%s_grad", f->in[k]);
    int clash = a->contrib[dpm_strmap_get(&a->idx, f->in[k])].n > 0;
    for (int m = 0; m < f->n_out; m++)
      clash |= g.gout[m] && !strcmp(g.gout[m], name) && !(f->def->flags & DPM_OP_INPLACE);
    for (int m = 0; m < k; m++) clash |= g.gin[m] && !strcmp(g.gin[m], name);
    if (clash) snprintf(name, sizeof name, "%s_grad_%d_%d", f->in[k], i, k);
    if (push(&a->temp, name)) return dpm_nomem(err);
    g.gin[k] = a->temp.v[a->temp.n - 1];
    any_in = 1;
  }
  if (!any_in) return DPM_OK;
  a->fwd_node = i;
  if (f->def->grad(&g, err)) return err->code;
  for (int k = 0; k < f->n_in; k++)
    if (g.gin[k] && push(&a->contrib[dpm_strmap_get(&a->idx, f->in[k])], g.gin[k]))
      return dpm_nomem(err);
  return DPM_OK;
}

static dpm_status seed_losses(ad *a, const char *const *losses, int n, float scale,
                              dpm_err *err) {
  for (int l = 0; l < n; l++) {
    const dpm_blobinfo *b = dpm_shapes_get(a->t, losses[l]);
    int j = dpm_strmap_get(&a->idx, losses[l]);
    if (!b)
      return dpm_errf(err, DPM_SPEC, "loss '%s' is not computed by the net", losses[l]);
    for (int k = 0; k < l; k++)
      if (strcmp(losses[k], losses[l]) == 0)
        return dpm_errf(err, DPM_SPEC, "loss '%s' is listed twice", losses[l]);
    if (b->shape.dtype != DPM_F32 || dpm_shape_numel(&b->shape) != 1) {
      char got[64];
      return dpm_errf(err, DPM_SPEC, "loss '%s' must be a f32 scalar, got %s", losses[l],
                      dpm_shape_str(&b->shape, got, sizeof got));
    }
    if (!a->curq[j])
      return dpm_errf(err, DPM_SPEC, "loss '%s' does not depend on any parameter",
                      losses[l]);
    char name[300];
    snprintf(name, sizeof name, "%s_grad", losses[l]);
    const char *out[] = {name};
    dpm_node *nd =
        dpm_net_add(a->out, dpm_op_get(DPM_OP_CONSTANT_FILL), 0, NULL, 1, out, err);
    if (!nd || dpm_node_set_ints(nd, "shape", b->shape.d, (size_t)b->shape.ndim, err) ||
        dpm_node_set_float(nd, "value", scale, err))
      return err->code;
    if (push(&a->contrib[j], name)) return dpm_nomem(err);
  }
  return DPM_OK;
}

static dpm_status param_grads(ad *a, char ***param_grad, dpm_err *err) {
  char **pg = calloc((size_t)a->t->n + 1, sizeof *pg);
  if (!pg) return dpm_nomem(err);
  *param_grad = pg;
  int nparams = a->t->n; /* grads appended to t later are not params */
  for (int i = 0; i < nparams; i++) {
    if (a->t->v[i].kind != DPM_BLOB_PARAM) continue;
    char name[300];
    snprintf(name, sizeof name, "%s", a->t->v[i].name);
    const char *g;
    if (resolve(a, dpm_strmap_get(&a->idx, name), name, &g, err)) return err->code;
    if (g && !(pg[i] = strdup(g))) return dpm_nomem(err);
  }
  return DPM_OK;
}

dpm_status dpm_autodiff(const dpm_net *fwd, dpm_shapes *t, const char *const *losses,
                        int n_losses, float loss_scale, const char *source, dpm_net *out,
                        char ***param_grad, dpm_err *err) {
  ad a = {.fwd = fwd, .t = t, .source = source, .out = out};
  *param_grad = NULL;
  dpm_status s = forward_pass(&a, err);
  if (!s) s = seed_losses(&a, losses, n_losses, loss_scale, err);
  for (int i = fwd->n - 1; i >= 0 && !s; i--) s = backward_node(&a, i, err);
  if (!s) s = param_grads(&a, param_grad, err);
  if (!s) s = dpm_net_infer(out, t, DPM_BLOB_GRAD, source, err);
  for (int j = 0; a.contrib && j < a.nb; j++) {
    clear(&a.contrib[j]);
    free(a.contrib[j].v);
  }
  clear(&a.temp);
  free(a.temp.v);
  free(a.contrib);
  free(a.cur);
  free(a.curq);
  free(a.lastver);
  free(a.vin);
  free(a.vout);
  free(a.rq);
  dpm_strmap_fini(&a.idx);
  if (s && *param_grad) {
    for (int i = 0; i < t->n; i++) free((*param_grad)[i]);
    free(*param_grad);
    *param_grad = NULL;
  }
  return s;
}

dpm_status dpm_autodiff_node(const dpm_node *fwd, const char *const *gout,
                             const char *const *gin, dpm_net *out, dpm_err *err) {
  ad a = {.out = out};
  dpm_grad g = {.fwd = fwd, .impl = &a};
  memcpy(g.gout, gout, (size_t)fwd->n_out * sizeof *gout);
  memcpy(g.gin, gin, (size_t)fwd->n_in * sizeof *gin);
  if (!fwd->def->grad || (fwd->def->flags & DPM_OP_NO_GRAD))
    return dpm_errf(err, DPM_UNSUPPORTED, "%s has no gradient", fwd->def->name);
  return fwd->def->grad(&g, err);
}
