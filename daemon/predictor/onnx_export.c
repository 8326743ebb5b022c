/* ONNX export (predictor/onnx_export.h): a PredictorDef's ops rebuilt as a
 * dpm_net for their shapes, then written op by op as ONNX nodes through a
 * table of emitters; every allocation of the ModelProto lives in one pool
 * freed after packing. */
#include "predictor/onnx_export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/file.h"
#include "dpm/predictor.h"
#include "engine/dtype_wire.h"
#include "engine/net.h"
#include "engine/strmap.h"
#include "predictor/predictor_extract.h"
#include "proto/dpm.pb-c.h"
#include "proto/onnx.pb-c.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "ONNX raw_data is little-endian; a big-endian host must swap");

/* ONNX TensorProto.DataType of each dpm dtype. */
static const int32_t onnx_dtype[DPM_DTYPE_COUNT] = {
    [DPM_F32] = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
    [DPM_I32] = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
    [DPM_I64] = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
    [DPM_F16] = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
    /* DPM_BF16: 0 (UNDEFINED); this build's onnx.proto has no BFLOAT16 */
};

typedef struct ox {
  dpm_err *err;
  Dpm__PredictorDef *d;
  dpm_net net;
  dpm_shapes s1, s2; /* shapes at batch 1 and 2 */
  dpm_strmap names;  /* every ONNX value name taken */
  dpm_strmap writes; /* blob -> how many ops write it */
  dpm_strmap cur;    /* blob -> index in curv */
  const char **curv; /* the ONNX name holding the blob now; NULL: hidden */
  int *seen;         /* per curv entry: writes so far */
  int n_cur, cap_cur;
  void **pool; /* every allocation of the message */
  size_t n_pool, cap_pool;
  Onnx__NodeProto **node;
  size_t n_node, cap_node;
  Onnx__TensorProto **init;
  size_t n_init, cap_init;
  int op; /* the op being written (1-based), for messages and names */
} ox;

static void *grow(void *v, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return v;
  size_t c = *cap ? *cap * 2 : 32;
  void *q = realloc(v, c * size);
  if (q) *cap = c;
  return q;
}

static void *alloc(ox *x, size_t count, size_t size) {
  void **p = grow(x->pool, &x->cap_pool, x->n_pool, sizeof *p);
  if (!p) return NULL;
  x->pool = p;
  void *m = calloc(count ? count : 1, size);
  if (m) x->pool[x->n_pool++] = m;
  return m;
}

static char *str(ox *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *str(ox *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n < 0 ? NULL : alloc(x, (size_t)n + 1, 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* ---- value names ---------------------------------------------------------- */

/* A name no other value has: "base__tag", "base__tag_2", ... */
static const char *fresh(ox *x, const char *base, const char *tag) {
  for (int k = 1;; k++) {
    char *s = k == 1 ? str(x, "%s__%s", base, tag) : str(x, "%s__%s_%d", base, tag, k);
    if (!s) return NULL;
    if (dpm_strmap_get(&x->names, s) >= 0) continue;
    return dpm_strmap_put(&x->names, s, 1) ? NULL : s;
  }
}

static int cur_index(ox *x, const char *blob) {
  int i = dpm_strmap_get(&x->cur, blob);
  if (i >= 0) return i;
  if (x->n_cur == x->cap_cur) {
    int cap = x->cap_cur ? x->cap_cur * 2 : 64;
    const char **v = realloc(x->curv, (size_t)cap * sizeof *v);
    if (!v) return -1;
    x->curv = v;
    int *w = realloc(x->seen, (size_t)cap * sizeof *w);
    if (!w) return -1;
    x->seen = w;
    x->cap_cur = cap;
  }
  if (dpm_strmap_put(&x->cur, blob, x->n_cur)) return -1;
  x->curv[x->n_cur] = blob;
  x->seen[x->n_cur] = 0;
  return x->n_cur++;
}

static int is_input(const ox *x, const char *blob) {
  for (size_t i = 0; i < x->d->n_input; i++)
    if (!strcmp(x->d->input[i], blob)) return 1;
  return 0;
}

/* The ONNX name a node reads for blob. */
static const char *use(ox *x, const char *blob) {
  int i = dpm_strmap_get(&x->cur, blob);
  if (i < 0) {
    dpm_errf(x->err, DPM_CORRUPT, "op #%d reads '%s', which nothing computed", x->op,
             blob);
    return NULL;
  }
  if (!x->curv[i])
    dpm_errf(x->err, DPM_UNSUPPORTED,
             "op #%d (%s) reads '%s', a hidden output, which ONNX export does not write",
             x->op, x->net.nodes[x->op - 1].def->name, blob);
  return x->curv[i];
}

/* The ONNX name of a new write of blob: the blob's own name for its last
 * write (unless it is a graph input), a fresh one before. */
static const char *define(ox *x, const char *blob) {
  int i = cur_index(x, blob);
  if (i < 0) return dpm_nomem(x->err), NULL;
  int last = ++x->seen[i] == dpm_strmap_get(&x->writes, blob) && !is_input(x, blob);
  char tag[24];
  snprintf(tag, sizeof tag, "%d", x->seen[i]);
  const char *name = last ? blob : fresh(x, blob, tag);
  if (!name) return dpm_nomem(x->err), NULL;
  return x->curv[i] = name;
}

/* ---- message pieces --------------------------------------------------------- */

static Onnx__NodeProto *node(ox *x, const char *op_type, int n_in, const char *const *in,
                             const char *out) {
  Onnx__NodeProto *n = alloc(x, 1, sizeof *n);
  char **iv = alloc(x, (size_t)n_in, sizeof *iv), **ov = alloc(x, 1, sizeof *ov);
  Onnx__NodeProto **v = grow(x->node, &x->cap_node, x->n_node, sizeof *v);
  if (!n || !iv || !ov || !v) return dpm_nomem(x->err), NULL;
  x->node = v;
  onnx__node_proto__init(n);
  for (int k = 0; k < n_in; k++) iv[k] = (char *)in[k];
  ov[0] = (char *)out;
  n->input = iv;
  n->n_input = (size_t)n_in;
  n->output = ov;
  n->n_output = 1;
  n->op_type = (char *)op_type;
  n->domain = "";
  if (!(n->name = str(x, "op%d_%s_%zu", x->op, op_type, x->n_node)))
    return dpm_nomem(x->err), NULL;
  return x->node[x->n_node++] = n;
}

static Onnx__AttributeProto *attr(ox *x, Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = alloc(x, 1, sizeof *a);
  Onnx__AttributeProto **v = alloc(x, n->n_attribute + 1, sizeof *v);
  if (!a || !v) return dpm_nomem(x->err), NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  if (n->n_attribute) memcpy(v, n->attribute, n->n_attribute * sizeof *v);
  v[n->n_attribute++] = a;
  n->attribute = v;
  return a;
}

static dpm_status attr_i(ox *x, Onnx__NodeProto *n, const char *name, int64_t i) {
  Onnx__AttributeProto *a = attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a) return x->err->code;
  a->has_i = 1;
  a->i = i;
  return DPM_OK;
}

static dpm_status attr_f(ox *x, Onnx__NodeProto *n, const char *name, float f) {
  Onnx__AttributeProto *a =
      attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!a) return x->err->code;
  a->has_f = 1;
  a->f = f;
  return DPM_OK;
}

/* An INTS attribute of n values, each v. */
static dpm_status attr_ints(ox *x, Onnx__NodeProto *n, const char *name, int count,
                            int64_t v) {
  Onnx__AttributeProto *a = attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *e = a ? alloc(x, (size_t)count, sizeof *e) : NULL;
  if (!e) return a ? dpm_nomem(x->err) : x->err->code;
  for (int k = 0; k < count; k++) e[k] = v;
  a->ints = e;
  a->n_ints = (size_t)count;
  return DPM_OK;
}

/* An initializer named name of dtype (ONNX) and dims, holding bytes. */
static dpm_status initializer(ox *x, const char *name, int32_t dtype, int ndim,
                              const int64_t *dims, const void *data, size_t bytes) {
  Onnx__TensorProto *t = alloc(x, 1, sizeof *t);
  int64_t *d = alloc(x, (size_t)ndim, sizeof *d);
  uint8_t *raw = alloc(x, bytes, 1);
  Onnx__TensorProto **v = grow(x->init, &x->cap_init, x->n_init, sizeof *v);
  if (!t || !d || !raw || !v) return dpm_nomem(x->err);
  x->init = v;
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = dtype;
  if (ndim) memcpy(d, dims, (size_t)ndim * sizeof *d);
  t->dims = d;
  t->n_dims = (size_t)ndim;
  if (bytes) memcpy(raw, data, bytes);
  t->has_raw_data = 1;
  t->raw_data.data = raw;
  t->raw_data.len = bytes;
  x->init[x->n_init++] = t;
  return DPM_OK;
}

/* A fresh INT64 [n] initializer holding v; its name in *out. */
static dpm_status const_i64(ox *x, const char *base, const char *tag, int n,
                            const int64_t *v, const char **out) {
  int64_t dim = n;
  if (!(*out = fresh(x, base, tag))) return dpm_nomem(x->err);
  return initializer(x, *out, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, &dim, v,
                     (size_t)n * sizeof *v);
}

/* ---- op emitters ------------------------------------------------------------ */

/* One op: its node, its input shapes, the ONNX names of its inputs (data
 * inputs then parameters) and of its one user output. */
typedef struct emit_ctx {
  const dpm_node *n;
  const dpm_shape *in;
  const char *const *iv;
  const char *out;
  const char *onnx; /* the table's ONNX op */
} emit_ctx;

static int64_t arg_i(const dpm_node *n, const char *name) {
  return n->arg[dpm_op_arg_index(n->def, name)].i;
}

static double arg_f(const dpm_node *n, const char *name) {
  return n->arg[dpm_op_arg_index(n->def, name)].f;
}

/* The same op over every input, no attributes. */
static dpm_status emit_plain(ox *x, const emit_ctx *c) {
  return node(x, c->onnx, c->n->n_in, c->iv, c->out) ? DPM_OK : x->err->code;
}

/* X flattened to [N, rest] into a fresh value, when it has more than two
 * dimensions; *out is the value to read. */
static dpm_status flatten_2d(ox *x, const emit_ctx *c, const char **out) {
  *out = c->iv[0];
  if (c->in[0].ndim <= 2) return DPM_OK;
  const char *t = fresh(x, c->out, "flat");
  Onnx__NodeProto *f = t ? node(x, "Flatten", 1, c->iv, t) : NULL;
  if (!t) return dpm_nomem(x->err);
  if (!f || attr_i(x, f, "axis", 1)) return x->err->code;
  *out = t;
  return DPM_OK;
}

static dpm_status emit_fc(ox *x, const emit_ctx *c) {
  const char *in[3] = {NULL, c->iv[1], c->iv[2]};
  if (flatten_2d(x, c, &in[0])) return x->err->code;
  Onnx__NodeProto *g = node(x, "Gemm", 3, in, c->out);
  return !g ? x->err->code : attr_i(x, g, "transB", 1);
}

static dpm_status emit_conv(ox *x, const emit_ctx *c) {
  Onnx__NodeProto *n = node(x, "Conv", c->n->n_in, c->iv, c->out);
  if (!n || attr_ints(x, n, "kernel_shape", 2, arg_i(c->n, "kernel")) ||
      attr_ints(x, n, "strides", 2, arg_i(c->n, "stride")) ||
      attr_ints(x, n, "pads", 4, arg_i(c->n, "pad")) ||
      attr_ints(x, n, "dilations", 2, 1) || attr_i(x, n, "group", arg_i(c->n, "group")))
    return x->err->code;
  return DPM_OK;
}

/* MaxPool and AveragePool: square windows, symmetric padding, floor;
 * AveragePool with global_pooling: GlobalAveragePool. */
static dpm_status emit_pool(ox *x, const emit_ctx *c) {
  if (c->n->def->id == DPM_OP_AVERAGE_POOL && arg_i(c->n, "global_pooling"))
    return node(x, "GlobalAveragePool", 1, c->iv, c->out) ? DPM_OK : x->err->code;
  Onnx__NodeProto *n = node(x, c->onnx, 1, c->iv, c->out);
  if (!n || attr_ints(x, n, "kernel_shape", 2, arg_i(c->n, "kernel")) ||
      attr_ints(x, n, "strides", 2, arg_i(c->n, "stride")) ||
      attr_ints(x, n, "pads", 4, arg_i(c->n, "pad")) || attr_i(x, n, "ceil_mode", 0))
    return x->err->code;
  if (c->n->def->id == DPM_OP_AVERAGE_POOL && attr_i(x, n, "count_include_pad", 0))
    return x->err->code;
  return DPM_OK;
}

static dpm_status emit_bn(ox *x, const emit_ctx *c) {
  Onnx__NodeProto *n = node(x, "BatchNormalization", 5, c->iv, c->out);
  if (!n || attr_f(x, n, "epsilon", (float)arg_f(c->n, "epsilon")) ||
      attr_i(x, n, "training_mode", 0))
    return x->err->code;
  return DPM_OK;
}

/* dpm's Softmax normalises over all dimensions after the first. */
static dpm_status emit_softmax(ox *x, const emit_ctx *c) {
  const char *flat;
  if (flatten_2d(x, c, &flat)) return x->err->code;
  const char *sm = c->in[0].ndim <= 2 ? c->out : fresh(x, c->out, "softmax");
  Onnx__NodeProto *n = sm ? node(x, "Softmax", 1, &flat, sm) : NULL;
  if (!sm) return dpm_nomem(x->err);
  if (!n || attr_i(x, n, "axis", 1)) return x->err->code;
  if (c->in[0].ndim <= 2) return DPM_OK;
  int64_t shape[DPM_MAX_DIMS] = {0}; /* 0: the input's batch */
  for (int k = 1; k < c->in[0].ndim; k++) shape[k] = c->in[0].d[k];
  const char *in[2] = {sm, NULL};
  if (const_i64(x, c->out, "shape", c->in[0].ndim, shape, &in[1])) return x->err->code;
  return node(x, "Reshape", 2, in, c->out) ? DPM_OK : x->err->code;
}

static dpm_status emit_flatten(ox *x, const emit_ctx *c) {
  Onnx__NodeProto *n = node(x, "Flatten", 1, c->iv, c->out);
  return !n ? x->err->code : attr_i(x, n, "axis", arg_i(c->n, "axis"));
}

static dpm_status emit_reshape(ox *x, const emit_ctx *c) {
  const dpm_arg *a = &c->n->arg[dpm_op_arg_index(c->n->def, "shape")];
  const char *in[2] = {c->iv[0], NULL};
  if (const_i64(x, c->out, "shape", a->n, a->v, &in[1])) return x->err->code;
  return node(x, "Reshape", 2, in, c->out) ? DPM_OK : x->err->code;
}

static dpm_status emit_concat(ox *x, const emit_ctx *c) {
  Onnx__NodeProto *n = node(x, "Concat", c->n->n_in, c->iv, c->out);
  return !n ? x->err->code : attr_i(x, n, "axis", arg_i(c->n, "axis"));
}

/* Y = X * scale, with scale rounded to float as dpm's kernels use it. */
static dpm_status emit_scale(ox *x, const emit_ctx *c) {
  float s = (float)arg_f(c->n, "scale");
  const char *in[2] = {c->iv[0], fresh(x, c->out, "scale")};
  if (!in[1]) return dpm_nomem(x->err);
  if (initializer(x, in[1], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, &s, sizeof s))
    return x->err->code;
  return node(x, "Mul", 2, in, c->out) ? DPM_OK : x->err->code;
}

/* Every op a predictor can hold, by dpm op; the rest have no ONNX form. */
static const struct {
  dpm_op_id op;
  const char *onnx;
  dpm_status (*emit)(ox *x, const emit_ctx *c);
} mapping[] = {
    {DPM_OP_FC, "Gemm", emit_fc},
    {DPM_OP_CONV, "Conv", emit_conv},
    {DPM_OP_MAX_POOL, "MaxPool", emit_pool},
    {DPM_OP_AVERAGE_POOL, "AveragePool", emit_pool},
    {DPM_OP_SPATIAL_BN, "BatchNormalization", emit_bn},
    {DPM_OP_RELU, "Relu", emit_plain},
    {DPM_OP_SIGMOID, "Sigmoid", emit_plain},
    {DPM_OP_TANH, "Tanh", emit_plain},
    {DPM_OP_SOFTMAX, "Softmax", emit_softmax},
    {DPM_OP_FLATTEN, "Flatten", emit_flatten},
    {DPM_OP_RESHAPE, "Reshape", emit_reshape},
    {DPM_OP_CONCAT, "Concat", emit_concat},
    {DPM_OP_ADD, "Add", emit_plain},
    {DPM_OP_SUM, "Sum", emit_plain},
    {DPM_OP_SCALE, "Mul", emit_scale},
    {DPM_OP_COPY, "Identity", emit_plain},
    {DPM_OP_STOP_GRADIENT, "Identity", emit_plain},
    {DPM_OP_DROPOUT, "Identity", emit_plain},
};

static int n_aux(const dpm_op_def *def) {
  int n = 0;
  while (def->aux && def->aux[n]) n++;
  return n;
}

static dpm_status emit_op(ox *x, int j) {
  const dpm_node *n = &x->net.nodes[j];
  x->op = j + 1;
  size_t m = 0;
  while (m < sizeof mapping / sizeof *mapping && mapping[m].op != n->def->id) m++;
  if (m == sizeof mapping / sizeof *mapping)
    return dpm_errf(x->err, DPM_UNSUPPORTED, "op #%d (%s) has no ONNX form", j + 1,
                    n->def->name);
  int users = n->n_out - n_aux(n->def);
  if (users != 1)
    return dpm_errf(x->err, DPM_UNSUPPORTED,
                    "op #%d (%s) has %d outputs; ONNX export writes ops of one", j + 1,
                    n->def->name, users);
  dpm_shape in[DPM_OP_MAX_IO];
  const char *iv[DPM_OP_MAX_IO];
  if (dpm_node_input_shapes(n, &x->s1, in) >= 0)
    return dpm_errf(x->err, DPM_CORRUPT, "op #%d (%s): an input has no shape", j + 1,
                    n->def->name);
  for (int k = 0; k < n->n_in; k++)
    if (!(iv[k] = use(x, n->in[k]))) return x->err->code;
  emit_ctx c = {.n = n, .in = in, .iv = iv, .onnx = mapping[m].onnx};
  if (!(c.out = define(x, n->out[0]))) return x->err->code;
  for (int k = 1; k < n->n_out; k++) { /* hidden outputs: not written */
    int i = cur_index(x, n->out[k]);
    if (i < 0) return dpm_nomem(x->err);
    x->curv[i] = NULL;
  }
  return mapping[m].emit(x, &c);
}

/* ---- the model ---------------------------------------------------------------- */

/* The net of the file's ops, and its shapes at batch 1 and 2. */
static dpm_status rebuild(ox *x) {
  const Dpm__PredictorDef *d = x->d;
  for (size_t j = 0; j < d->n_op; j++) {
    const Dpm__Operator *o = d->op[j];
    const dpm_op_def *def = dpm_op_find(o->type);
    if (!def)
      return dpm_errf(x->err, DPM_UNSUPPORTED, "op #%zu (%s) has no ONNX form", j + 1,
                      o->type);
    dpm_node *n =
        dpm_net_add(&x->net, def, (int)o->n_input, (const char *const *)o->input,
                    (int)o->n_output, (const char *const *)o->output, x->err);
    if (!n) return x->err->code;
    n->index = (int)j;
    n->is_test = 1;
    for (size_t a = 0; a < o->n_arg; a++)
      if (dpm_node_set_argument(n, o->arg[a], x->err))
        return dpm_err_prefix(x->err, "op #%zu (%s): ", j + 1, def->name);
    for (size_t k = 0; k < o->n_output; k++) {
      int w = dpm_strmap_get(&x->writes, o->output[k]);
      if (dpm_strmap_put(&x->writes, o->output[k], w < 0 ? 1 : w + 1))
        return dpm_nomem(x->err);
    }
  }
  dpm_shapes *t[2] = {&x->s1, &x->s2};
  for (int b = 0; b < 2; b++) {
    for (size_t i = 0; i < d->n_param; i++) {
      const Dpm__TensorProto *p = d->param[i];
      dpm_dtype dt;
      if (dpm_dtype_from_wire(p->dtype, &dt) || p->n_dims > DPM_MAX_DIMS)
        return dpm_errf(x->err, DPM_CORRUPT,
                        "parameter '%s' has an unknown dtype or rank", p->name);
      dpm_shape s = dpm_shape_make(dt, (int)p->n_dims, p->dims);
      if (dpm_shapes_set(t[b], p->name, &s, DPM_BLOB_PARAM)) return dpm_nomem(x->err);
    }
    for (size_t i = 0; i < d->n_input; i++) {
      const Dpm__IntList *l = d->input_shape[i];
      int64_t dims[DPM_MAX_DIMS] = {b + 1};
      if (l->n_v > DPM_MAX_DIMS - 1)
        return dpm_errf(x->err, DPM_CORRUPT, "input '%s' has too many dimensions",
                        d->input[i]);
      memcpy(dims + 1, l->v, l->n_v * sizeof *dims);
      dpm_shape s = dpm_shape_make(DPM_F32, (int)l->n_v + 1, dims);
      if (dpm_shapes_set(t[b], d->input[i], &s, DPM_BLOB_DATA)) return dpm_nomem(x->err);
    }
    if (dpm_net_infer(&x->net, t[b], DPM_BLOB_ACT, "predictor", x->err))
      return x->err->code == DPM_NOMEM ? DPM_NOMEM : (x->err->code = DPM_CORRUPT);
  }
  return DPM_OK;
}

/* A graph input or output: float, dims from batch 1 and 2 (a dimension that
 * follows the batch is the symbol "N"). */
static Onnx__ValueInfoProto *value_info(ox *x, const char *name) {
  const dpm_blobinfo *a = dpm_shapes_get(&x->s1, name), *b = dpm_shapes_get(&x->s2, name);
  Onnx__ValueInfoProto *v = alloc(x, 1, sizeof *v);
  Onnx__TypeProto *tp = alloc(x, 1, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = alloc(x, 1, sizeof *tt);
  Onnx__TensorShapeProto *sh = alloc(x, 1, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dims =
      alloc(x, (size_t)a->shape.ndim, sizeof *dims);
  if (!v || !tp || !tt || !sh || !dims) return dpm_nomem(x->err), NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int k = 0; k < a->shape.ndim; k++) {
    Onnx__TensorShapeProto__Dimension *dm = alloc(x, 1, sizeof *dm);
    if (!dm) return dpm_nomem(x->err), NULL;
    onnx__tensor_shape_proto__dimension__init(dm);
    if (a->shape.d[k] == 1 && b->shape.ndim == a->shape.ndim && b->shape.d[k] == 2) {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dm->dim_param = "N";
    } else {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dm->dim_value = a->shape.d[k];
    }
    dims[k] = dm;
  }
  sh->dim = dims;
  sh->n_dim = (size_t)a->shape.ndim;
  tt->has_elem_type = 1;
  tt->elem_type = onnx_dtype[a->shape.dtype];
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->name = (char *)name;
  v->type = tp;
  return v;
}

static dpm_status graph(ox *x, Onnx__GraphProto *g) {
  const Dpm__PredictorDef *d = x->d;
  /* every blob name is taken before fresh names are made */
  for (size_t i = 0; i < d->n_param; i++)
    if (dpm_strmap_put(&x->names, d->param[i]->name, 1)) return dpm_nomem(x->err);
  for (size_t i = 0; i < d->n_input; i++)
    if (dpm_strmap_put(&x->names, d->input[i], 1)) return dpm_nomem(x->err);
  for (size_t j = 0; j < d->n_op; j++)
    for (size_t k = 0; k < d->op[j]->n_output; k++)
      if (dpm_strmap_put(&x->names, d->op[j]->output[k], 1)) return dpm_nomem(x->err);
  for (size_t i = 0; i < d->n_param; i++) {
    const Dpm__TensorProto *p = d->param[i];
    const dpm_blobinfo *b = dpm_shapes_get(&x->s1, p->name);
    if (cur_index(x, p->name) < 0) return dpm_nomem(x->err);
    if (initializer(x, p->name, onnx_dtype[b->shape.dtype], b->shape.ndim, b->shape.d,
                    p->data.data, p->data.len))
      return x->err->code;
  }
  g->input = alloc(x, d->n_input, sizeof *g->input);
  g->output = alloc(x, d->n_output, sizeof *g->output);
  if (!g->input || !g->output) return dpm_nomem(x->err);
  for (size_t i = 0; i < d->n_input; i++) {
    if (cur_index(x, d->input[i]) < 0) return dpm_nomem(x->err);
    if (!(g->input[g->n_input++] = value_info(x, d->input[i]))) return x->err->code;
  }
  for (int j = 0; j < x->net.n; j++)
    if (emit_op(x, j)) return x->err->code;
  for (size_t i = 0; i < d->n_output; i++) {
    const char *o = d->output[i];
    int c = dpm_strmap_get(&x->cur, o);
    if (dpm_strmap_get(&x->writes, o) < 0 || is_input(x, o))
      return dpm_errf(x->err, DPM_UNSUPPORTED,
                      "output '%s' is an input or a parameter, not computed by an op; "
                      "ONNX export writes computed outputs only",
                      o);
    if (c < 0 || !x->curv[c] || strcmp(x->curv[c], o))
      return dpm_errf(x->err, DPM_UNSUPPORTED,
                      "output '%s' is a hidden output, which ONNX export does not write",
                      o);
    if (!(g->output[g->n_output++] = value_info(x, o))) return x->err->code;
  }
  g->node = x->node;
  g->n_node = x->n_node;
  g->initializer = x->init;
  g->n_initializer = x->n_init;
  return DPM_OK;
}

static dpm_status convert(ox *x, const uint8_t *def, size_t def_len, uint8_t **buf,
                          size_t *len) {
  if (!def || !buf || !len)
    return dpm_errf(x->err, DPM_INVALID, "no predictor or buffer");
  if (!(x->d = dpm__predictor_def__unpack(NULL, def_len, def)))
    return dpm_errf(x->err, DPM_CORRUPT, "the predictor is not a PredictorDef");
  if (!x->d->n_input || !x->d->n_output || x->d->n_input_shape != x->d->n_input)
    return dpm_errf(x->err, DPM_CORRUPT,
                    "the predictor has no inputs, outputs or shapes");
  if (rebuild(x)) return x->err->code;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = x->d->name && *x->d->name ? x->d->name : "dpm";
  if (graph(x, &g)) return x->err->code;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT,
                           *opsets[] = {&opset};
  opset.domain = "";
  opset.has_version = 1;
  opset.version = DPM_ONNX_OPSET;
  Onnx__StringStringEntryProto scale = ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                               *meta[] = {&scale};
  char scale_text[40];
  snprintf(scale_text, sizeof scale_text, "%.17g", x->d->input_scale);
  scale.key = "dpm.input_scale";
  scale.value = scale_text;
  Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
  mp.has_ir_version = 1;
  mp.ir_version = DPM_ONNX_IR_VERSION;
  mp.opset_import = opsets;
  mp.n_opset_import = 1;
  mp.producer_name = "dpm";
  mp.graph = &g;
  mp.metadata_props = meta;
  mp.n_metadata_props = 1;
  *len = onnx__model_proto__get_packed_size(&mp);
  if (!(*buf = malloc(*len ? *len : 1))) return dpm_nomem(x->err);
  onnx__model_proto__pack(&mp, *buf);
  return DPM_OK;
}

dpm_status dpm_onnx_from_predictor(const uint8_t *def, size_t def_len, uint8_t **buf,
                                   size_t *len, dpm_err *err) {
  dpm_err local = {0};
  ox x = {.err = err ? err : &local};
  if (buf) *buf = NULL;
  if (len) *len = 0;
  dpm_status s = convert(&x, def, def_len, buf, len);
  if (s && buf) {
    free(*buf);
    *buf = NULL;
  }
  for (size_t i = 0; i < x.n_pool; i++) free(x.pool[i]);
  free(x.pool);
  free(x.node);
  free(x.init);
  free(x.curv);
  free(x.seen);
  dpm_strmap_fini(&x.names);
  dpm_strmap_fini(&x.writes);
  dpm_strmap_fini(&x.cur);
  dpm_shapes_fini(&x.s1);
  dpm_shapes_fini(&x.s2);
  dpm_net_fini(&x.net);
  if (x.d) dpm__predictor_def__free_unpacked(x.d, NULL);
  return s;
}

dpm_status dpm_onnx_export(const dpm_model *m, const dpm_workspace *ws,
                           const char *const *inputs, int n_in,
                           const char *const *outputs, int n_out, const dpm_fs *fs,
                           const char *dir, dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (!dir || !dir[0]) return dpm_errf(err, DPM_INVALID, "no export directory given");
  uint8_t *def = NULL, *buf = NULL;
  size_t def_len = 0, len = 0;
  dpm_status s =
      dpm_predictor_extract(m, ws, inputs, n_in, outputs, n_out, &def, &def_len, err);
  if (!s) { /* the runtime's checks of the file: what the conversion relies on */
    dpm_predictor *check = NULL;
    s = dpm_predictor_load_buffer(def, def_len, "extracted predictor", &check, err);
    dpm_predictor_free(check);
    if (s) {
      if (s != DPM_NOMEM) err->code = s = DPM_INTERNAL;
      dpm_err_prefix(err, "the predictor does not load back: ");
    }
  }
  if (!s) s = dpm_onnx_from_predictor(def, def_len, &buf, &len, err);
  char *path = NULL;
  if (!s && asprintf(&path, "%s/%s", dir, DPM_ONNX_FILE) < 0) {
    path = NULL;
    s = dpm_nomem(err);
  }
  if (!s) s = dpm_file_write_buffer(fs, path, 1, buf, len, err);
  free(path);
  free(buf);
  free(def);
  return s;
}
