/* Fusion of in-place Relu and ReluGradient into their neighbours, of the
 * f32 Casts of bf16 parameter gradients into the ops computing them, and of
 * the working copies' Casts into the optimizers. */
#include "engine/fuse.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/cast.h"

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Relu(y) -> y right after an op that writes y and can apply Relu itself. */
static int relu_after(const dpm_node *a, const dpm_node *b) {
  return (a->def->fusable & DPM_FUSE_RELU) && !(a->fuse & DPM_FUSE_RELU) &&
         b->def->id == DPM_OP_RELU && same(b->in[0], a->out[0]) &&
         same(b->out[0], a->out[0]);
}

/* ReluGradient(y, dy) -> dy right after a gradient op writing dy whose
 * input 0 is y (the Relu output) and that can mask by it. */
static int relu_grad_after(const dpm_node *a, const dpm_node *b) {
  return (a->def->fusable & DPM_FUSE_RELU_GRAD) && !(a->fuse & DPM_FUSE_RELU_GRAD) &&
         b->def->id == DPM_OP_RELU_GRADIENT && same(b->in[0], a->in[0]) &&
         same(b->in[1], a->out[0]) && same(b->out[0], a->out[0]);
}

void dpm_net_fuse(dpm_net *net, int *n_forward) {
  for (int i = 0; i + 1 < net->n; i++) {
    dpm_node *a = &net->nodes[i], *b = &net->nodes[i + 1];
    unsigned f = relu_after(a, b)        ? DPM_FUSE_RELU
                 : relu_grad_after(a, b) ? DPM_FUSE_RELU_GRAD
                                         : 0;
    if (!f || a->is_test != b->is_test) continue;
    a->fuse |= f;
    dpm_net_remove(net, i + 1);
    if (i + 1 < *n_forward) (*n_forward)--;
  }
}

/* Nodes of net that read blob `name`. */
static int readers(const dpm_net *net, const char *name) {
  int r = 0;
  for (int i = 0; i < net->n; i++)
    for (int k = 0; k < net->nodes[i].n_in; k++) r += same(net->nodes[i].in[k], name);
  return r;
}

/* The index in (at, at + 2] of a Cast bf16 -> f32 of blob `name`, the
 * blob's only reader, or -1. */
static int f32_cast_of(const dpm_net *net, int at, const char *name) {
  for (int j = at + 1; j <= at + 2 && j < net->n; j++) {
    const dpm_node *c = &net->nodes[j];
    if (c->def->id == DPM_OP_CAST && same(c->in[0], name) &&
        dpm_cast_type(c, CAST_ARG_FROM) == DPM_BF16 &&
        dpm_cast_type(c, CAST_ARG_TO) == DPM_F32 && readers(net, name) == 1)
      return j;
  }
  return -1;
}

dpm_status dpm_net_fuse_grad_casts(dpm_net *net, dpm_shapes *t) {
  for (int i = 0; i < net->n; i++) {
    dpm_node *a = &net->nodes[i];
    if (!(a->def->fusable & DPM_FUSE_GRAD_F32) || (!a->out[0] && !a->out[1])) continue;
    int cast[2] = {-1, -1};
    for (int k = 0; k < 2; k++)
      if (a->out[k]) cast[k] = f32_cast_of(net, i, a->out[k]);
    if ((a->out[0] && cast[0] < 0) || (a->out[1] && cast[1] < 0)) continue;
    /* a writes the Casts' outputs; each Cast, about to go, takes a's bf16
     * name, which leaves the table */
    for (int k = 0; k < 2; k++) {
      if (cast[k] < 0) continue;
      dpm_node *c = &net->nodes[cast[k]];
      char *bf16 = a->out[k];
      a->out[k] = c->out[0];
      c->out[0] = bf16;
      if (dpm_shapes_remove(t, bf16)) return DPM_NOMEM;
    }
    a->fuse |= DPM_FUSE_GRAD_F32;
    int hi = cast[0] > cast[1] ? cast[0] : cast[1], lo = cast[0] + cast[1] - hi;
    dpm_net_remove(net, hi);
    if (lo >= 0) dpm_net_remove(net, lo);
  }
  return DPM_OK;
}

/* The index in net[0, n) of a Cast f32 -> bf16 of blob `param`, the only
 * node there that reads it, or -1. */
static int working_cast(const dpm_net *net, int n, const char *param) {
  int at = -1, readers = 0;
  for (int i = 0; i < n; i++) {
    const dpm_node *c = &net->nodes[i];
    for (int k = 0; k < c->n_in; k++) readers += same(c->in[k], param);
    if (c->def->id == DPM_OP_CAST && same(c->in[0], param) &&
        dpm_cast_type(c, CAST_ARG_FROM) == DPM_F32 &&
        dpm_cast_type(c, CAST_ARG_TO) == DPM_BF16)
      at = i;
  }
  return readers == 1 ? at : -1;
}

dpm_status dpm_net_fuse_working_copies(dpm_net *train, int *n_forward, dpm_net *update,
                                       dpm_net *refresh, dpm_err *err) {
  for (int u = 0; u < update->n; u++) {
    dpm_node *o = &update->nodes[u];
    if (!(o->def->fusable & DPM_FUSE_WORKING_COPY) || o->n_out >= o->def->max_out) continue;
    int at = working_cast(train, *n_forward, o->in[0]);
    if (at < 0) continue;
    char *copy = strdup(train->nodes[at].out[0]);
    if (!copy) return dpm_nomem(err);
    if (!dpm_net_add_copy(refresh, &train->nodes[at], err)) {
      free(copy);
      return err->code;
    }
    o->out[o->n_out++] = copy;
    o->fuse |= DPM_FUSE_WORKING_COPY;
    dpm_net_remove(train, at);
    (*n_forward)--;
  }
  return DPM_OK;
}
