/* The precision rewrite (precision.h). */
#include "engine/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/cast.h"
#include "ops/precision.h"

/* A Cast made: `src` at write count `version` (dpm_blobinfo.version) as
 * type `to`, in blob `dst`. */
struct dpm_precision_cast {
  char *src, *dst;
  int version;
  dpm_dtype to;
};

void dpm_precision_init(dpm_precision *p, dpm_dtype low) {
  *p = (dpm_precision){.low = low};
}

void dpm_precision_fini(dpm_precision *p) {
  for (int i = 0; i < p->n; i++) {
    free(p->casts[i].src);
    free(p->casts[i].dst);
  }
  free(p->casts);
  *p = (dpm_precision){0};
}

/* The blob holding src as type `to`, made by an earlier Cast and still
 * current, or NULL. */
static const char *reuse(const dpm_precision *p, const dpm_shapes *t, const char *src,
                         dpm_dtype to) {
  const dpm_blobinfo *b = dpm_shapes_get(t, src);
  for (int i = 0; i < p->n; i++)
    if (p->casts[i].to == to && !strcmp(p->casts[i].src, src) &&
        p->casts[i].version == b->version)
      return p->casts[i].dst;
  return NULL;
}

/* A name for src as type `to` that no blob has: src_<to>, src_<to>_2, ... */
static void fresh_name(const dpm_shapes *t, const char *src, dpm_dtype to, char *buf,
                       size_t cap) {
  snprintf(buf, cap, "%s_%s", src, dpm_dtype_name(to));
  for (int k = 2; dpm_shapes_get(t, buf); k++)
    snprintf(buf, cap, "%s_%s_%d", src, dpm_dtype_name(to), k);
}

static dpm_status remember(dpm_precision *p, const char *src, int version,
                           const char *dst, dpm_dtype to, dpm_err *err) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    dpm_precision_cast *c = realloc(p->casts, (size_t)cap * sizeof *c);
    if (!c) return dpm_nomem(err);
    p->casts = c;
    p->cap = cap;
  }
  dpm_precision_cast *c = &p->casts[p->n];
  *c = (dpm_precision_cast){
      .src = strdup(src), .dst = strdup(dst), .version = version, .to = to};
  if (!c->src || !c->dst) {
    free(c->src);
    free(c->dst);
    return dpm_nomem(err);
  }
  p->n++;
  return DPM_OK;
}

/* The type node n's floating inputs are to have, or DPM_DTYPE_COUNT for
 * none (they keep theirs). */
static dpm_dtype target(const dpm_precision *p, const dpm_node *n, const dpm_shape *in) {
  switch (dpm_op_precision(n->def->id)) {
  case DPM_PREC_LOW:
    return p->low;
  case DPM_PREC_FP32:
    return DPM_F32;
  case DPM_PREC_PASS: {
    dpm_dtype seen = DPM_DTYPE_COUNT;
    for (int k = 0; k < n->n_in; k++) {
      if (!n->in[k] || !dpm_dtype_is_float(in[k].dtype)) continue;
      if (seen != DPM_DTYPE_COUNT && in[k].dtype != seen) return DPM_F32;
      seen = in[k].dtype;
    }
    return DPM_DTYPE_COUNT;
  }
  default: /* a Cast, or an op without a row */
    return DPM_DTYPE_COUNT;
  }
}

/* Append Cast(src -> dst) to net, inferred into t; the node index at the
 * rewritten op's line. */
static dpm_status add_cast(dpm_net *net, dpm_shapes *t, const char *src, dpm_dtype from,
                           const char *dst, dpm_dtype to, unsigned line,
                           const char *source, dpm_err *err) {
  const char *in[] = {src}, *out[] = {dst};
  dpm_node *c = dpm_net_add(net, dpm_op_get(DPM_OP_CAST), 1, in, 1, out, err);
  if (!c || dpm_node_set_string(c, "from", dpm_cast_choice(from), err) ||
      dpm_node_set_string(c, "to", dpm_cast_choice(to), err))
    return err->code;
  c->line = line;
  return dpm_node_infer(c, t, DPM_BLOB_ACT, source, err);
}

/* The casts of the last node's inputs; the node moves after them. */
static dpm_status cast_inputs(dpm_precision *p, dpm_net *net, dpm_shapes *t,
                              const char *source, dpm_err *err) {
  int at = net->n - 1, added = 0;
  dpm_shape in[DPM_OP_MAX_IO];
  dpm_node_input_shapes(&net->nodes[at], t, in);
  dpm_dtype to = target(p, &net->nodes[at], in);
  if (to == DPM_DTYPE_COUNT) return DPM_OK;
  for (int k = 0; k < net->nodes[at].n_in; k++) {
    const char *src = net->nodes[at].in[k];
    if (!src || !dpm_dtype_is_float(in[k].dtype) || in[k].dtype == to) continue;
    char name[300];
    const char *dst = reuse(p, t, src, to);
    if (dst) {
      snprintf(name, sizeof name, "%s", dst);
    } else {
      fresh_name(t, src, to, name, sizeof name);
      unsigned line = net->nodes[at].line;
      dpm_status s = add_cast(net, t, src, in[k].dtype, name, to, line, source, err);
      if (!s) s = remember(p, src, dpm_shapes_get(t, src)->version, name, to, err);
      if (s) return s;
      added++;
    }
    char *copy = strdup(name);
    if (!copy) return dpm_nomem(err);
    free(net->nodes[at].in[k]);
    net->nodes[at].in[k] = copy;
  }
  if (added) { /* the op after its casts */
    dpm_node op = net->nodes[at];
    memmove(&net->nodes[at], &net->nodes[at + 1], (size_t)added * sizeof op);
    net->nodes[at + added] = op;
  }
  return DPM_OK;
}

/* An output of the net's last node (its inputs cast) that an earlier op
 * wrote with another floating type (an op in place on a blob of the other
 * type): the op writes a fresh blob instead, and a Cast after it writes the
 * blob back in its own type. Infers the node, then those Casts. */
static dpm_status infer_keeping_types(dpm_net *net, dpm_shapes *t, const char *source,
                                      dpm_err *err) {
  int at = net->n - 1;
  dpm_node *n = &net->nodes[at];
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  memset(out, 0, sizeof out);
  dpm_err ignored = {0};
  int renamed[DPM_OP_MAX_IO], nr = 0;
  char back[DPM_OP_MAX_IO][300];
  dpm_dtype to[DPM_OP_MAX_IO];
  /* shapes its infer rejects: left for dpm_node_infer to report */
  if (dpm_node_input_shapes(n, t, in) < 0 && !n->def->infer(n, in, out, &ignored))
    for (int k = 0; k < n->n_out; k++) {
      const dpm_blobinfo *b = n->out[k] ? dpm_shapes_get(t, n->out[k]) : NULL;
      if (!b || b->version == 0 || !dpm_dtype_is_float(b->shape.dtype) ||
          !dpm_dtype_is_float(out[k].dtype) || b->shape.dtype == out[k].dtype)
        continue;
      char name[300];
      fresh_name(t, n->out[k], out[k].dtype, name, sizeof name);
      char *copy = strdup(name);
      if (!copy) return dpm_nomem(err);
      snprintf(back[nr], sizeof back[nr], "%s", n->out[k]);
      to[nr] = b->shape.dtype;
      renamed[nr++] = k;
      free(n->out[k]);
      n->out[k] = copy;
    }
  if (dpm_node_infer(n, t, DPM_BLOB_ACT, source, err)) return err->code;
  for (int j = 0; j < nr; j++) {
    char src[300];
    snprintf(src, sizeof src, "%s", net->nodes[at].out[renamed[j]]);
    dpm_dtype from = dpm_shapes_get(t, src)->shape.dtype;
    if (add_cast(net, t, src, from, back[j], to[j], net->nodes[at].line, source, err))
      return err->code;
  }
  return DPM_OK;
}

dpm_status dpm_precision_node(dpm_precision *p, dpm_net *net, dpm_shapes *t,
                              const char *source, dpm_err *err) {
  if (cast_inputs(p, net, t, source, err)) return err->code;
  return infer_keeping_types(net, t, source, err);
}
