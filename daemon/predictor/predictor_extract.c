/* ExtractPredictorNet: the model's test net cut down to the ops that compute
 * the outputs from the inputs, packed as a PredictorDef with the parameters
 * it reads, and written atomically. */
#include "predictor/predictor_extract.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/file.h"
#include "engine/dtype_wire.h"
#include "engine/strmap.h"

/* Fusions written back as the op the fused kernel absorbed: an in-place op
 * on out[0] right after the node (engine/fuse.c). */
static const struct {
  unsigned flag;
  dpm_op_id op;
} unfusions[] = {
    {DPM_FUSE_RELU, DPM_OP_RELU},
};

/* Training ops whose first output a predictor computes with a simpler op
 * from the first input alone, when their other outputs are not asked for:
 * SoftmaxWithLoss(logits, label) -> [softmax, loss] becomes
 * Softmax(logits) -> softmax, so a predictor needs no label. */
static const struct {
  dpm_op_id op, inference_op;
} inference_forms[] = {
    {DPM_OP_SOFTMAX_WITH_LOSS, DPM_OP_SOFTMAX},
};

const char *dpm_strip_scope(const char *name) {
  const char *slash = strrchr(name, '/');
  return slash ? slash + 1 : name;
}

/* ---- allocations of the message being built, freed together ------------ */

typedef struct pool {
  void **p;
  size_t n, cap;
} pool;

static void *pool_alloc(pool *pl, size_t count, size_t size) {
  if (pl->n == pl->cap) {
    size_t cap = pl->cap ? pl->cap * 2 : 64;
    void **q = realloc(pl->p, cap * sizeof *q);
    if (!q) return NULL;
    pl->p = q;
    pl->cap = cap;
  }
  void *x = calloc(count ? count : 1, size);
  if (x) pl->p[pl->n++] = x;
  return x;
}

static void pool_fini(pool *pl) {
  for (size_t i = 0; i < pl->n; i++) free(pl->p[i]);
  free(pl->p);
  memset(pl, 0, sizeof *pl);
}

/* ---- the extraction ----------------------------------------------------- */

typedef struct extractor {
  const dpm_model *m;
  const dpm_workspace *ws;
  const char *const *in, *const *out; /* the caller's lists */
  int n_in, n_out;
  dpm_err *err;
  dpm_net net;        /* the test net with fusions expanded */
  dpm_shapes t1, t2;  /* its shapes at batch 1 and 2 */
  dpm_strmap needed;  /* blob -> index of the output needing it; -1: not needed */
  char *keep;         /* per node of net: part of the predictor */
  dpm_strmap params;  /* parameter -> position in param */
  const char **param; /* parameters read, in order of first use */
  int n_param;
  dpm_strmap stripped; /* stripped name -> position in names */
  const char **names;  /* the original of each stripped name */
  int n_names;
  pool pool; /* the message */
} extractor;

static int is_input(const extractor *x, const char *name) {
  for (int i = 0; i < x->n_in; i++)
    if (!strcmp(x->in[i], name)) return 1;
  return 0;
}

static int is_param(const extractor *x, const char *name) {
  const dpm_blobinfo *b = dpm_shapes_get(&x->m->shapes, name);
  return b && (b->kind == DPM_BLOB_PARAM || b->kind == DPM_BLOB_COMPUTED);
}

static int reads(const dpm_node *n, const char *name) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] && !strcmp(n->in[k], name)) return 1;
  return 0;
}

static dpm_status use_param(extractor *x, const char *name) {
  if (dpm_strmap_get(&x->params, name) >= 0) return DPM_OK;
  if (x->n_param % 32 == 0) {
    const char **p = realloc(x->param, (size_t)(x->n_param + 32) * sizeof *p);
    if (!p) return dpm_nomem(x->err);
    x->param = p;
  }
  if (dpm_strmap_put(&x->params, name, x->n_param)) return dpm_nomem(x->err);
  x->param[x->n_param++] = name;
  return DPM_OK;
}

static int is_output(const extractor *x, const char *name) {
  for (int i = 0; name && i < x->n_out; i++)
    if (!strcmp(x->out[i], name)) return 1;
  return 0;
}

/* The inference form of src (see inference_forms), or NULL. */
static const dpm_op_def *inference_form(const extractor *x, const dpm_node *src) {
  for (size_t f = 0; f < sizeof inference_forms / sizeof *inference_forms; f++) {
    if (src->def->id != inference_forms[f].op) continue;
    for (int k = 1; k < src->n_out; k++)
      if (is_output(x, src->out[k])) return NULL;
    return dpm_op_get(inference_forms[f].inference_op);
  }
  return NULL;
}

/* Casts of a low-precision model (engine/precision.h), dropped from a
 * predictor: a reader of a Cast's output reads its input instead, so the
 * predictor is the f32 model of the same spec, on the f32 masters. */
typedef struct {
  const char **from, **to; /* [n]: a Cast's output, the blob it stands for */
  int n;
} uncast;

/* The blob a predictor op reads for test-net blob `name`. */
static const char *uncast_name(const uncast *u, const char *name) {
  for (int j = u->n - 1; name && j >= 0; j--)
    if (!strcmp(u->from[j], name)) return u->to[j];
  return name;
}

/* Forget the stand-ins of blob `name`, which an op writes. */
static void uncast_written(uncast *u, const char *name) {
  for (int j = 0; name && j < u->n; j++)
    if (!strcmp(u->from[j], name)) u->from[j] = "";
}

static dpm_status expand_node(extractor *x, const dpm_node *src);

/* The test net with each fused node followed by the op it absorbed,
 * training ops in their inference form, and no Casts (uncast above). */
static dpm_status expand(extractor *x) {
  const dpm_net *test = &x->m->test;
  uncast u = {.from = calloc((size_t)test->n + 1, sizeof *u.from),
              .to = calloc((size_t)test->n + 1, sizeof *u.to)};
  dpm_status s = u.from && u.to ? DPM_OK : dpm_nomem(x->err);
  for (int i = 0; i < test->n && !s; i++) {
    const dpm_node *src = &test->nodes[i];
    if (src->def->id == DPM_OP_CAST) {
      const char *in = uncast_name(&u, src->in[0]);
      uncast_written(&u, src->out[0]);
      u.from[u.n] = src->out[0];
      u.to[u.n++] = in;
      continue;
    }
    dpm_node copy = *src;
    for (int k = 0; k < src->n_in; k++) copy.in[k] = (char *)uncast_name(&u, src->in[k]);
    for (int k = 0; k < src->n_out; k++) uncast_written(&u, src->out[k]);
    s = expand_node(x, &copy);
  }
  free(u.from);
  free(u.to);
  return s;
}

/* One test-net node, expanded as above. */
static dpm_status expand_node(extractor *x, const dpm_node *src) {
  const dpm_op_def *inf = inference_form(x, src);
  if (inf) {
    dpm_node *n = dpm_net_add(&x->net, inf, 1, (const char *const *)src->in, 1,
                              (const char *const *)src->out, x->err);
    if (!n) return x->err->code;
    n->index = src->index;
    n->line = src->line;
    n->is_test = 1;
    return DPM_OK;
  }
  dpm_node *n = dpm_net_add_copy(&x->net, src, x->err);
  if (!n) return x->err->code;
  n->fuse = 0;
  n->is_test = 1;
  unsigned left = src->fuse;
  for (size_t u = 0; u < sizeof unfusions / sizeof *unfusions; u++) {
    if (!(left & unfusions[u].flag)) continue;
    left &= ~unfusions[u].flag;
    const dpm_op_def *def = dpm_op_get(unfusions[u].op);
    if (!src->out[0])
      return dpm_errf(x->err, DPM_INTERNAL, "cannot expand fused %s", src->def->name);
    const char *io[] = {src->out[0]};
    dpm_node *r = dpm_net_add(&x->net, def, 1, io, 1, io, x->err);
    if (!r) return x->err->code;
    r->index = src->index;
    r->line = src->line;
    r->is_test = 1;
  }
  if (left)
    return dpm_errf(x->err, DPM_INTERNAL,
                    "op %s carries fusion %#x, which a predictor "
                    "cannot express",
                    src->def->name, left);
  return DPM_OK;
}

static dpm_status check_names(extractor *x, const char *what, const char *const *v,
                              int n) {
  for (int i = 0; i < n; i++) {
    if (!v || !v[i] || !v[i][0])
      return dpm_errf(x->err, DPM_INVALID, "%s #%d has no name", what, i + 1);
    for (int j = 0; j < i; j++)
      if (!strcmp(v[i], v[j]))
        return dpm_errf(x->err, DPM_INVALID, "%s '%s' is listed twice", what, v[i]);
  }
  return DPM_OK;
}

/* Inputs: f32 blobs of the test net, not parameters, batch first. */
static dpm_status check_inputs(extractor *x) {
  for (int i = 0; i < x->n_in; i++) {
    const char *name = x->in[i];
    const dpm_blobinfo *a = dpm_shapes_get(&x->t1, name),
                       *b = dpm_shapes_get(&x->t2, name);
    if (!a || !b)
      return dpm_errf(x->err, DPM_INVALID,
                      "input '%s' is not a blob of the model's test net", name);
    if (is_param(x, name))
      return dpm_errf(x->err, DPM_INVALID, "input '%s' is a parameter, not an input",
                      name);
    if (a->shape.dtype != DPM_F32)
      return dpm_errf(x->err, DPM_INVALID, "input '%s' is %s; predictor inputs are f32",
                      name, dpm_dtype_name(a->shape.dtype));
    int batched = a->shape.ndim >= 1 && a->shape.ndim == b->shape.ndim &&
                  a->shape.d[0] == 1 && b->shape.d[0] == 2;
    for (int d = 1; batched && d < a->shape.ndim; d++)
      batched = a->shape.d[d] == b->shape.d[d];
    if (!batched) {
      char s[64];
      return dpm_errf(x->err, DPM_INVALID,
                      "input '%s' (%s at batch 1) has no batch dimension", name,
                      dpm_shape_str(&a->shape, s, sizeof s));
    }
  }
  return DPM_OK;
}

static dpm_status check_outputs(extractor *x) {
  for (int i = 0; i < x->n_out; i++) {
    const dpm_blobinfo *a = dpm_shapes_get(&x->t1, x->out[i]);
    if (!a)
      return dpm_errf(x->err, DPM_INVALID,
                      "output '%s' is not a blob of the model's test net", x->out[i]);
    if (a->shape.dtype != DPM_F32)
      return dpm_errf(x->err, DPM_INVALID, "output '%s' is %s; predictor outputs are f32",
                      x->out[i], dpm_dtype_name(a->shape.dtype));
  }
  return DPM_OK;
}

/* Mark the nodes the outputs need, walking backwards (see the header). */
static dpm_status walk(extractor *x) {
  dpm_strmap *need = &x->needed;
  for (int j = 0; j < x->n_out; j++)
    if (!is_param(x, x->out[j]) && dpm_strmap_get(need, x->out[j]) < 0 &&
        dpm_strmap_put(need, x->out[j], j))
      return dpm_nomem(x->err);
  for (int i = x->net.n - 1; i >= 0; i--) {
    const dpm_node *n = &x->net.nodes[i];
    int want = -1;
    for (int k = 0; k < n->n_out; k++) {
      const char *o = n->out[k];
      int w = o ? dpm_strmap_get(need, o) : -1;
      if (w < 0 || (is_input(x, o) && !reads(n, o))) continue; /* the input starts here */
      if (want < 0) want = w;
    }
    if (want < 0) { /* not kept: inputs it produces are given from here on */
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] && is_input(x, n->out[k]) && dpm_strmap_get(need, n->out[k]) >= 0 &&
            dpm_strmap_put(need, n->out[k], -1))
          return dpm_nomem(x->err);
      continue;
    }
    x->keep[i] = 1;
    for (int k = 0; k < n->n_out; k++) {
      const char *o = n->out[k];
      if (!o) continue;
      if (is_input(x, o) && !reads(n, o)) {
        char where[256];
        return dpm_errf(x->err, DPM_INVALID,
                        "%s overwrites input '%s', and output '%s' needs that op",
                        dpm_node_where(n, x->m->source, where, sizeof where), o,
                        x->out[want]);
      }
      if (dpm_strmap_put(need, o, -1)) return dpm_nomem(x->err);
    }
    for (int k = 0; k < n->n_in; k++) {
      const char *in = n->in[k];
      if (!in) continue;
      if (!is_param(x, in) && dpm_strmap_get(need, in) < 0 &&
          dpm_strmap_put(need, in, want))
        return dpm_nomem(x->err);
    }
  }
  /* What is still needed must be given: report the first output lacking a
   * blob (by output position, then name, so the message is stable). */
  const char *missing = NULL;
  int by = INT_MAX;
  for (size_t s = 0; s < need->cap; s++) {
    const char *name = need->keys[s];
    int w = name ? need->vals[s] : -1;
    if (w < 0 || is_input(x, name)) continue;
    if (w < by || (w == by && strcmp(name, missing) < 0)) missing = name, by = w;
  }
  if (missing)
    return dpm_errf(x->err, DPM_INVALID, "output '%s' needs '%s', which is not an input",
                    x->out[by], missing);
  /* The parameters read, in the order the ops first read them. */
  for (int i = 0; i < x->net.n; i++)
    for (int k = 0; x->keep[i] && k < x->net.nodes[i].n_in; k++) {
      const char *in = x->net.nodes[i].in[k];
      if (in && is_param(x, in) && use_param(x, in)) return x->err->code;
    }
  for (int j = 0; j < x->n_out; j++)
    if (is_param(x, x->out[j]) && use_param(x, x->out[j])) return x->err->code;
  return DPM_OK;
}

/* The stripped form of name, refusing two blobs that strip alike. */
static dpm_status strip(extractor *x, const char *name, char **out) {
  const char *s = dpm_strip_scope(name);
  if (!*s)
    return dpm_errf(x->err, DPM_INVALID, "blob '%s' has an empty name without its scope",
                    name);
  int i = dpm_strmap_get(&x->stripped, s);
  if (i >= 0 && strcmp(x->names[i], name))
    return dpm_errf(x->err, DPM_INVALID, "blobs '%s' and '%s' both strip to '%s'",
                    x->names[i], name, s);
  if (i < 0) {
    if (x->n_names % 64 == 0) {
      const char **p = realloc(x->names, (size_t)(x->n_names + 64) * sizeof *p);
      if (!p) return dpm_nomem(x->err);
      x->names = p;
    }
    if (dpm_strmap_put(&x->stripped, s, x->n_names)) return dpm_nomem(x->err);
    x->names[x->n_names++] = name;
  }
  *out = (char *)s; /* protobuf-c fields are not const; packing only reads */
  return DPM_OK;
}

static dpm_status strip_list(extractor *x, const char *const *v, int n, char ***out) {
  if (!(*out = pool_alloc(&x->pool, (size_t)n, sizeof **out))) return dpm_nomem(x->err);
  for (int i = 0; i < n; i++)
    if (strip(x, v[i], &(*out)[i])) return x->err->code;
  return DPM_OK;
}

/* One node argument as a typed Argument. */
static dpm_status argument(extractor *x, const dpm_arg_def *def, const dpm_arg *v,
                           Dpm__Argument **out) {
  Dpm__Argument *a = pool_alloc(&x->pool, 1, sizeof *a);
  if (!a) return dpm_nomem(x->err);
  dpm__argument__init(a);
  a->name = (char *)def->name;
  switch (def->type) {
  case DPM_ARG_INT:
  case DPM_ARG_BOOL:
    a->value_case = DPM__ARGUMENT__VALUE_I;
    a->i = v->i;
    break;
  case DPM_ARG_FLOAT:
    a->value_case = DPM__ARGUMENT__VALUE_F;
    a->f = v->f;
    break;
  case DPM_ARG_STRING:
    a->value_case = DPM__ARGUMENT__VALUE_S;
    a->s = (char *)v->s;
    break;
  case DPM_ARG_INTS: {
    Dpm__IntList *l = pool_alloc(&x->pool, 1, sizeof *l);
    int64_t *e = pool_alloc(&x->pool, (size_t)v->n, sizeof *e);
    if (!l || !e) return dpm_nomem(x->err);
    dpm__int_list__init(l);
    memcpy(e, v->v, (size_t)v->n * sizeof *e);
    l->n_v = (size_t)v->n;
    l->v = e;
    a->value_case = DPM__ARGUMENT__VALUE_INTS;
    a->ints = l;
    break;
  }
  case DPM_ARG_FLOATS: {
    Dpm__FloatList *l = pool_alloc(&x->pool, 1, sizeof *l);
    double *e = pool_alloc(&x->pool, (size_t)v->n, sizeof *e);
    if (!l || !e) return dpm_nomem(x->err);
    dpm__float_list__init(l);
    memcpy(e, v->fv, (size_t)v->n * sizeof *e);
    l->n_v = (size_t)v->n;
    l->v = e;
    a->value_case = DPM__ARGUMENT__VALUE_FLOATS;
    a->floats = l;
    break;
  }
  }
  *out = a;
  return DPM_OK;
}

/* A node as an Operator: every input and output (parameters and hidden
 * outputs included), every argument that is set. */
static dpm_status operator(extractor *x, const dpm_node *n, Dpm__Operator **out) {
  Dpm__Operator *o = pool_alloc(&x->pool, 1, sizeof *o);
  if (!o) return dpm_nomem(x->err);
  dpm__operator__init(o);
  o->type = (char *)n->def->name;
  for (int k = 0; k < n->n_in; k++)
    if (!n->in[k])
      return dpm_errf(x->err, DPM_INTERNAL, "%s has an unnamed input", n->def->name);
  for (int k = 0; k < n->n_out; k++)
    if (!n->out[k])
      return dpm_errf(x->err, DPM_INTERNAL, "%s has an unnamed output", n->def->name);
  if (strip_list(x, (const char *const *)n->in, n->n_in, &o->input) ||
      strip_list(x, (const char *const *)n->out, n->n_out, &o->output))
    return x->err->code;
  o->n_input = (size_t)n->n_in;
  o->n_output = (size_t)n->n_out;
  int nargs = dpm_op_nargs(n->def);
  if (!(o->arg = pool_alloc(&x->pool, (size_t)nargs, sizeof *o->arg)))
    return dpm_nomem(x->err);
  for (int k = 0; k < nargs; k++)
    if (n->arg[k].set && argument(x, &n->def->args[k], &n->arg[k], &o->arg[o->n_arg++]))
      return x->err->code;
  *out = o;
  return DPM_OK;
}

static dpm_status tensor(extractor *x, const char *name, Dpm__TensorProto **out) {
  const dpm_blob *b = dpm_ws_find(x->ws, name);
  const dpm_blobinfo *info = dpm_shapes_get(&x->m->shapes, name);
  if (!b)
    return dpm_errf(x->err, DPM_NOT_FOUND, "parameter '%s' is not in the workspace",
                    name);
  if (!dpm_shape_equal(&b->t.shape, &info->shape) || !b->t.data) { /* pointer only */
    char a[64], c[64];
    return dpm_errf(x->err, DPM_STATE,
                    "parameter '%s' is %s in the workspace; the model has %s", name,
                    b->t.data /* pointer only */ ? dpm_shape_str(&b->t.shape, a, sizeof a)
                                                 : "unallocated",
                    dpm_shape_str(&info->shape, c, sizeof c));
  }
  Dpm__TensorProto *tp = pool_alloc(&x->pool, 1, sizeof *tp);
  int64_t *dims = pool_alloc(&x->pool, (size_t)b->t.shape.ndim, sizeof *dims);
  if (!tp || !dims) return dpm_nomem(x->err);
  dpm__tensor_proto__init(tp);
  if (strip(x, name, &tp->name)) return x->err->code;
  tp->dtype = dpm_dtype_to_wire(b->t.shape.dtype);
  memcpy(dims, b->t.shape.d, (size_t)b->t.shape.ndim * sizeof *dims);
  tp->n_dims = (size_t)b->t.shape.ndim;
  tp->dims = dims;
  tp->has_data = 1;
  tp->data.len = dpm_shape_bytes(&b->t.shape);
  /* the parameter's bytes cross from its device through the backend */
  if (!(tp->data.data = pool_alloc(&x->pool, tp->data.len ? tp->data.len : 1, 1)))
    return dpm_nomem(x->err);
  dpm_tensor_read(&b->t, tp->data.data, tp->data.len);
  *out = tp;
  return DPM_OK;
}

static dpm_status message(extractor *x, Dpm__PredictorDef *d) {
  d->version = DPM_PREDICTOR_VERSION;
  d->name = x->m->name;
  d->has_input_scale = 1;
  d->input_scale = x->m->input_scale;
  int kept = 0;
  for (int i = 0; i < x->net.n; i++) kept += x->keep[i];
  if (!(d->op = pool_alloc(&x->pool, (size_t)kept, sizeof *d->op)))
    return dpm_nomem(x->err);
  for (int i = 0; i < x->net.n; i++)
    if (x->keep[i] && operator(x, &x->net.nodes[i], &d->op[d->n_op++]))
      return x->err->code;
  if (strip_list(x, x->in, x->n_in, &d->input) ||
      strip_list(x, x->out, x->n_out, &d->output))
    return x->err->code;
  d->n_input = (size_t)x->n_in;
  d->n_output = (size_t)x->n_out;
  d->input_shape = pool_alloc(&x->pool, (size_t)x->n_in, sizeof *d->input_shape);
  if (!d->input_shape) return dpm_nomem(x->err);
  for (int i = 0; i < x->n_in; i++) {
    const dpm_shape *s = &dpm_shapes_get(&x->t1, x->in[i])->shape;
    Dpm__IntList *l = pool_alloc(&x->pool, 1, sizeof *l);
    int64_t *v = pool_alloc(&x->pool, (size_t)s->ndim, sizeof *v);
    if (!l || !v) return dpm_nomem(x->err);
    dpm__int_list__init(l);
    memcpy(v, s->d + 1, (size_t)(s->ndim - 1) * sizeof *v);
    l->n_v = (size_t)(s->ndim - 1);
    l->v = v;
    d->input_shape[d->n_input_shape++] = l;
  }
  if (!(d->param = pool_alloc(&x->pool, (size_t)x->n_param, sizeof *d->param)))
    return dpm_nomem(x->err);
  for (int i = 0; i < x->n_param; i++)
    if (tensor(x, x->param[i], &d->param[d->n_param++])) return x->err->code;
  return DPM_OK;
}

static dpm_status extract(extractor *x, uint8_t **buf, size_t *len) {
  dpm_err *err = x->err;
  if (!x->m || !x->ws || !buf || !len)
    return dpm_errf(err, DPM_INVALID, "no model, workspace or output buffer");
  if (x->n_in < 1 || x->n_out < 1)
    return dpm_errf(err, DPM_INVALID,
                    "a predictor needs at least one input and one output");
  if (check_names(x, "input", x->in, x->n_in) ||
      check_names(x, "output", x->out, x->n_out))
    return err->code;
  if (dpm_model_test_shapes(x->m, 1, &x->t1, err) ||
      dpm_model_test_shapes(x->m, 2, &x->t2, err))
    return dpm_err_prefix(err, "the test net does not take batches of 1 and 2: ");
  if (check_inputs(x) || check_outputs(x) || expand(x)) return err->code;
  if (!(x->keep = calloc((size_t)x->net.n + 1, 1))) return dpm_nomem(err);
  if (walk(x)) return err->code;
  Dpm__PredictorDef d = DPM__PREDICTOR_DEF__INIT;
  if (message(x, &d)) return err->code;
  *len = dpm__predictor_def__get_packed_size(&d);
  if (!(*buf = malloc(*len ? *len : 1))) return dpm_nomem(err);
  dpm__predictor_def__pack(&d, *buf);
  return DPM_OK;
}

dpm_status dpm_predictor_extract(const dpm_model *m, const dpm_workspace *ws,
                                 const char *const *inputs, int n_in,
                                 const char *const *outputs, int n_out, uint8_t **buf,
                                 size_t *len, dpm_err *err) {
  dpm_err local = {0};
  extractor x = {.m = m,
                 .ws = ws,
                 .in = inputs,
                 .out = outputs,
                 .n_in = n_in,
                 .n_out = n_out,
                 .err = err ? err : &local};
  if (buf) *buf = NULL;
  if (len) *len = 0;
  dpm_status s = extract(&x, buf, len);
  pool_fini(&x.pool);
  free(x.names);
  free(x.param);
  free(x.keep);
  dpm_strmap_fini(&x.stripped);
  dpm_strmap_fini(&x.params);
  dpm_strmap_fini(&x.needed);
  dpm_shapes_fini(&x.t1);
  dpm_shapes_fini(&x.t2);
  dpm_net_fini(&x.net);
  if (s && buf) {
    free(*buf);
    *buf = NULL;
  }
  return s;
}

/* ---- writing ------------------------------------------------------------ */

dpm_status dpm_predictor_export(const dpm_model *m, const dpm_workspace *ws,
                                const char *const *inputs, int n_in,
                                const char *const *outputs, int n_out, const dpm_fs *fs,
                                const char *dir, dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (!dir || !dir[0]) return dpm_errf(err, DPM_INVALID, "no predictor directory given");
  uint8_t *buf = NULL;
  size_t len = 0;
  dpm_status s =
      dpm_predictor_extract(m, ws, inputs, n_in, outputs, n_out, &buf, &len, err);
  if (s) return s;
  dpm_predictor *check = NULL;
  s = dpm_predictor_load_buffer(buf, len, "extracted predictor", &check, err);
  dpm_predictor_free(check);
  if (s) {
    if (s != DPM_NOMEM) err->code = s = DPM_INTERNAL;
    dpm_err_prefix(err, "the predictor does not load back: ");
  }
  char *path = NULL;
  if (!s && asprintf(&path, "%s/%s", dir, DPM_PREDICTOR_FILE) < 0) {
    path = NULL;
    s = dpm_nomem(err);
  }
  if (!s) s = dpm_file_write_buffer(fs, path, 1, buf, len, err);
  free(path);
  free(buf);
  return s;
}
