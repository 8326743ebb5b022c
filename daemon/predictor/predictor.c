/* The predictor runtime (include/dpm/predictor.h) on the engine: the file's
 * operators become a test-mode dpm_net, its parameters blobs of a private
 * workspace; shapes are inferred and the net bound again only when the batch
 * size changes. Loading checks the whole file first: every op, argument,
 * name and parameter, and shape inference at batch 1. The net runs on the
 * host, through the cpu backend's kernels (a context without a device), or
 * after dpm_predictor_set_device on a device: workspace and context on it,
 * parameters copied there once, inputs uploaded and outputs downloaded into
 * host buffers by the backend's copies (only backends touch device bytes). */
#include "dpm/predictor.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/device.h"
#include "common/device.h"
#include "common/err.h"
#include "common/file.h"
#include "engine/dtype_wire.h"
#include "engine/exec.h"
#include "engine/fuse.h"
#include "predictor/onnx_export.h"
#include "predictor/predictor_extract.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "predictor tensors are little-endian; a big-endian host must swap");

#define MAX_COUNT (1 << 20)        /* ops, params, inputs or outputs in a file */
#define MAX_DIM (1ll << 31)        /* one dimension */
#define MAX_EXAMPLE (1ll << 31)    /* floats in one example of an input */
#define MAX_FILE ((1ll << 31) - 1) /* protobuf's limit */

/* Where the net runs: its blobs, binding and context on one device (or the
 * host). dpm_predictor_set_device builds a new one beside the current one
 * and swaps them only when everything is in place. */
typedef struct placed {
  struct dpm_dev *dev; /* NULL: the host */
  dpm_workspace ws;    /* parameters, inputs and every activation, on dev */
  dpm_shapes shapes;   /* at `batch` */
  dpm_exec exec;       /* the net bound to ws at `batch` */
  dpm_ctx ctx;         /* dev; the kernels' scratch */
  int batch;           /* batch size bound; 0: none */
  dpm_tensor **in_t;   /* input blobs at `batch` */
  dpm_tensor **out_t;  /* output blobs */
} placed;

struct dpm_predictor {
  char *source; /* the file, for messages */
  char *name;   /* the model's name; "" if the file has none */
  int n_in, n_out;
  char **in_name, **out_name;
  dpm_shape *in_shape; /* one example of each input, as [1, ...] */
  dpm_net net;         /* the ops, test mode, fused */
  int n_param;         /* at->ws.blobs[0, n_param) are the parameters */
  placed *at;          /* where the net runs (ops point at its ctx: never moved) */
  double input_scale;  /* raw pixel -> input value */
  int ran;             /* the last run succeeded: outputs are valid */
  float **out_host;    /* on a device: the outputs of the last run, downloaded */
  size_t *out_cap;     /* bytes allocated at out_host[i] */
};

/* err <- code, "SOURCE: message". */
static dpm_status fail(const dpm_predictor *p, dpm_err *err, dpm_status code,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static dpm_status fail(const dpm_predictor *p, dpm_err *err, dpm_status code,
                       const char *fmt, ...) {
  char msg[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpm_errf(err, code, "%s: %s", p->source, msg);
}

static int count(const void *const *v) {
  int n = 0;
  while (v && v[n]) n++;
  return n;
}

/* ---- loading ------------------------------------------------------------ */

static dpm_status load_params(dpm_predictor *p, const Dpm__PredictorDef *d,
                              dpm_strmap *params, dpm_err *err) {
  for (size_t i = 0; i < d->n_param; i++) {
    const Dpm__TensorProto *t = d->param[i];
    const char *name = t->name;
    if (!name[0]) return fail(p, err, DPM_CORRUPT, "parameter #%zu has no name", i + 1);
    if (dpm_strmap_get(params, name) >= 0)
      return fail(p, err, DPM_CORRUPT, "parameter '%s' appears twice", name);
    dpm_dtype dtype;
    if (dpm_dtype_from_wire(t->dtype, &dtype))
      return fail(p, err, DPM_CORRUPT, "parameter '%s' has unknown dtype %u", name,
                  (unsigned)t->dtype);
    if (t->n_dims > DPM_MAX_DIMS)
      return fail(p, err, DPM_CORRUPT, "parameter '%s' has %zu dimensions, at most %d",
                  name, t->n_dims, DPM_MAX_DIMS);
    int64_t numel = 1;
    for (size_t k = 0; k < t->n_dims; k++) {
      if (t->dims[k] < 0 || t->dims[k] > MAX_DIM)
        return fail(p, err, DPM_CORRUPT, "parameter '%s' has dimension %lld", name,
                    (long long)t->dims[k]);
      numel *= t->dims[k];  /* each factor < 2^31: four of them cannot overflow... */
      if (numel > MAX_FILE) /* ...when cut as soon as it exceeds any file's size */
        return fail(p, err, DPM_CORRUPT, "parameter '%s' is larger than a file can hold",
                    name);
    }
    dpm_shape s = dpm_shape_make(dtype, (int)t->n_dims, t->dims);
    size_t bytes = dpm_shape_bytes(&s), len = t->has_data ? t->data.len : 0;
    if (len != bytes) {
      char b[64];
      return fail(p, err, DPM_CORRUPT,
                  "parameter '%s' holds %zu bytes of data; %s needs %zu", name, len,
                  dpm_shape_str(&s, b, sizeof b), bytes);
    }
    dpm_blob *blob;
    if (dpm_ws_ensure(&p->at->ws, name, DPM_BLOB_PARAM, &s, &blob) ||
        dpm_strmap_put(params, name, (int)i))
      return dpm_nomem(err);
    if (bytes) memcpy(blob->t.data, t->data.data, bytes);
    p->n_param++;
  }
  return DPM_OK;
}

/* Names of a list: present, unique, not parameters; copied into *out. */
static dpm_status load_names(dpm_predictor *p, const char *what, char *const *v, int n,
                             const dpm_strmap *params, char ***out, dpm_err *err) {
  if (!(*out = calloc((size_t)n + 1, sizeof **out))) return dpm_nomem(err);
  for (int i = 0; i < n; i++) {
    if (!v[i][0]) return fail(p, err, DPM_CORRUPT, "%s #%d has no name", what, i + 1);
    for (int j = 0; j < i; j++)
      if (!strcmp(v[i], v[j]))
        return fail(p, err, DPM_CORRUPT, "%s '%s' is listed twice", what, v[i]);
    if (params && dpm_strmap_get(params, v[i]) >= 0)
      return fail(p, err, DPM_CORRUPT, "%s '%s' is also a parameter", what, v[i]);
    if (!((*out)[i] = strdup(v[i]))) return dpm_nomem(err);
  }
  return DPM_OK;
}

static dpm_status load_inputs(dpm_predictor *p, const Dpm__PredictorDef *d,
                              const dpm_strmap *params, dpm_err *err) {
  if (load_names(p, "input", d->input, p->n_in, params, &p->in_name, err))
    return err->code;
  if (!(p->in_shape = calloc((size_t)p->n_in, sizeof *p->in_shape)))
    return dpm_nomem(err);
  for (int i = 0; i < p->n_in; i++) {
    const Dpm__IntList *l = d->input_shape[i];
    if (l->n_v > DPM_MAX_DIMS - 1)
      return fail(p, err, DPM_CORRUPT,
                  "input '%s' has %zu dimensions per example, at most %d", p->in_name[i],
                  l->n_v, DPM_MAX_DIMS - 1);
    int64_t dims[DPM_MAX_DIMS] = {1}, numel = 1;
    for (size_t k = 0; k < l->n_v; k++) {
      if (l->v[k] < 1 || l->v[k] > MAX_DIM)
        return fail(p, err, DPM_CORRUPT, "input '%s' has dimension %lld", p->in_name[i],
                    (long long)l->v[k]);
      dims[k + 1] = l->v[k];
      if ((numel *= l->v[k]) > MAX_EXAMPLE)
        return fail(p, err, DPM_CORRUPT,
                    "input '%s' has more than %lld values per example", p->in_name[i],
                    MAX_EXAMPLE);
    }
    p->in_shape[i] = dpm_shape_make(DPM_F32, (int)l->n_v + 1, dims);
  }
  return DPM_OK;
}

/* Argument `a` of op #j into node n. */
static dpm_status load_arg(dpm_predictor *p, int j, dpm_node *n, const Dpm__Argument *a,
                           unsigned *seen, dpm_err *err) {
  const char *op = n->def->name;
  int k = dpm_op_arg_index(n->def, a->name);
  if (k < 0)
    return fail(p, err, DPM_CORRUPT, "op #%d (%s): unknown argument '%s'", j, op,
                a->name);
  if (*seen & (1u << k))
    return fail(p, err, DPM_CORRUPT, "op #%d (%s): argument '%s' appears twice", j, op,
                a->name);
  *seen |= 1u << k;
  int finite = a->value_case != DPM__ARGUMENT__VALUE_F || isfinite(a->f);
  for (size_t i = 0; a->value_case == DPM__ARGUMENT__VALUE_FLOATS && i < a->floats->n_v;
       i++)
    finite &= isfinite(a->floats->v[i]) != 0;
  if (!finite)
    return fail(p, err, DPM_CORRUPT, "op #%d (%s): argument '%s' is not finite", j, op,
                a->name);
  dpm_err e = {0};
  if (dpm_node_set_argument(n, a, &e))
    return fail(p, err, DPM_CORRUPT, "op #%d (%s): %s", j, op, e.msg);
  return DPM_OK;
}

static dpm_status load_op(dpm_predictor *p, int j, const Dpm__Operator *o,
                          const dpm_strmap *params, dpm_err *err) {
  const dpm_op_def *def = dpm_op_find(o->type);
  if (!def) return fail(p, err, DPM_UNSUPPORTED, "op #%d: unknown op '%s'", j, o->type);
  if (def->flags & DPM_OP_HIDDEN)
    return fail(p, err, DPM_CORRUPT,
                "op #%d (%s) is a training op; a predictor holds forward ops only", j,
                def->name);
  /* The arguments first, into a node of no blobs: they decide the params. */
  dpm_node tmp = {.def = def, .index = j - 1, .is_test = 1};
  dpm_err e = {0};
  unsigned seen = 0;
  if (dpm_node_set_defaults(&tmp, &e))
    return fail(p, err, DPM_INTERNAL, "op #%d (%s): %s", j, def->name, e.msg);
  for (size_t a = 0; a < o->n_arg; a++)
    if (load_arg(p, j, &tmp, o->arg[a], &seen, err)) return err->code;
  if (dpm_node_check_required(&tmp, &e))
    return fail(p, err, DPM_CORRUPT, "op #%d (%s): %s", j, def->name, e.msg);
  int n_par = dpm_node_nparams(&tmp), n_aux = count((const void *const *)def->aux);
  int n_data = (int)o->n_input - n_par, n_user = (int)o->n_output - n_aux;
  if (o->n_input > DPM_OP_MAX_IO || o->n_output > DPM_OP_MAX_IO || n_data < def->min_in ||
      n_data > def->max_in || n_user < def->min_out || n_user > def->max_out)
    return fail(p, err, DPM_CORRUPT,
                "op #%d (%s) takes %d..%d inputs and %d parameters, %d..%d "
                "outputs and %d hidden ones; it has %zu inputs and %zu outputs",
                j, def->name, def->min_in, def->max_in, n_par, def->min_out, def->max_out,
                n_aux, o->n_input, o->n_output);
  for (size_t k = 0; k < o->n_input; k++) {
    if (!o->input[k][0])
      return fail(p, err, DPM_CORRUPT, "op #%d (%s): input %zu has no name", j, def->name,
                  k + 1);
    if ((int)k >= n_data && dpm_strmap_get(params, o->input[k]) < 0)
      return fail(p, err, DPM_CORRUPT, "op #%d (%s): input '%s' must be a parameter", j,
                  def->name, o->input[k]);
  }
  for (size_t k = 0; k < o->n_output; k++) {
    if (!o->output[k][0])
      return fail(p, err, DPM_CORRUPT, "op #%d (%s): output %zu has no name", j,
                  def->name, k + 1);
    if (dpm_strmap_get(params, o->output[k]) >= 0)
      return fail(p, err, DPM_CORRUPT, "op #%d (%s) writes parameter '%s'", j, def->name,
                  o->output[k]);
    for (size_t i = 0; i < k; i++)
      if (!strcmp(o->output[i], o->output[k]))
        return fail(p, err, DPM_CORRUPT, "op #%d (%s) writes '%s' twice", j, def->name,
                    o->output[k]);
    /* In place only where the kernel allows it; infer() then keeps the shape. */
    for (size_t i = 0; i < o->n_input && !(def->flags & DPM_OP_INPLACE); i++)
      if (!strcmp(o->input[i], o->output[k]))
        return fail(p, err, DPM_CORRUPT,
                    "op #%d (%s) cannot run in place ('%s' is input and output)", j,
                    def->name, o->output[k]);
  }
  dpm_node *n = dpm_net_add(&p->net, def, (int)o->n_input, (const char *const *)o->input,
                            (int)o->n_output, (const char *const *)o->output, err);
  if (!n)
    return err->code == DPM_NOMEM ? DPM_NOMEM
                                  : fail(p, err, DPM_INTERNAL, "%s", err->msg);
  n->index = j - 1;
  n->is_test = 1;
  memcpy(n->arg, tmp.arg, sizeof n->arg);
  return DPM_OK;
}

/* Shapes at batch `batch`: parameters and inputs declared, every op inferred.
 * With `params` (loading), each op's parameters must have the shapes its
 * param_shapes gives, and read[] marks the parameters some op reads. */
static dpm_status infer(dpm_predictor *p, int batch, dpm_shapes *t,
                        const dpm_strmap *params, char *read, dpm_err *err) {
  for (int i = 0; i < p->n_param; i++)
    if (dpm_shapes_set(t, p->at->ws.blobs[i]->name, &p->at->ws.blobs[i]->t.shape,
                       DPM_BLOB_PARAM))
      return dpm_nomem(err);
  for (int i = 0; i < p->n_in; i++) {
    dpm_shape s = p->in_shape[i];
    s.d[0] = batch;
    if (dpm_shapes_set(t, p->in_name[i], &s, DPM_BLOB_DATA)) return dpm_nomem(err);
  }
  for (int j = 0; j < p->net.n; j++) {
    const dpm_node *n = &p->net.nodes[j];
    dpm_shape in[DPM_OP_MAX_IO], ps[DPM_OP_MAX_IO];
    int missing = dpm_node_input_shapes(n, t, in);
    if (missing >= 0)
      return fail(p, err, DPM_CORRUPT,
                  "op #%d (%s): input '%s' is not an input, a parameter "
                  "or the output of an earlier op",
                  n->index + 1, n->def->name, n->in[missing]);
    if (params && n->def->params) {
      int n_par = dpm_node_nparams(n), n_data = n->n_in - n_par;
      dpm_err e = {0};
      memset(ps, 0, sizeof ps);
      if (n->def->param_shapes(n, in, ps, &e))
        return fail(p, err, DPM_CORRUPT, "op #%d (%s): %s", n->index + 1, n->def->name,
                    e.msg);
      for (int k = 0; k < n_par; k++)
        if (!dpm_shape_equal(&in[n_data + k], &ps[k])) {
          char a[64], b[64];
          return fail(p, err, DPM_CORRUPT,
                      "op #%d (%s): parameter '%s' is %s; the op expects %s",
                      n->index + 1, n->def->name, n->in[n_data + k],
                      dpm_shape_str(&in[n_data + k], a, sizeof a),
                      dpm_shape_str(&ps[k], b, sizeof b));
        }
    }
    for (int k = 0; read && k < n->n_in; k++) {
      int i = params ? dpm_strmap_get(params, n->in[k]) : -1;
      if (i >= 0) read[i] = 1;
    }
    dpm_err e = {0};
    if (dpm_node_infer(n, t, DPM_BLOB_ACT, NULL, &e)) {
      if (e.code == DPM_NOMEM) return dpm_nomem(err);
      if (params) return fail(p, err, DPM_CORRUPT, "%s", e.msg);
      return fail(p, err, DPM_SHAPE, "batch %d: %s", batch, e.msg);
    }
  }
  /* An op may write an input (in place), never change its shape: the run
   * copies exactly the caller's batch into it. */
  for (int i = 0; i < p->n_in; i++) {
    dpm_shape s = p->in_shape[i];
    s.d[0] = batch;
    const dpm_blobinfo *b = dpm_shapes_get(t, p->in_name[i]);
    if (!dpm_shape_equal(&b->shape, &s)) {
      char a[64], c[64];
      return fail(p, err, params ? DPM_CORRUPT : DPM_SHAPE,
                  "batch %d: an op makes input '%s' %s; it is %s", batch, p->in_name[i],
                  dpm_shape_str(&b->shape, a, sizeof a), dpm_shape_str(&s, c, sizeof c));
    }
  }
  return DPM_OK;
}

/* Everything about the file that does not depend on the batch size. */
static dpm_status check(dpm_predictor *p, const Dpm__PredictorDef *d,
                        const dpm_strmap *params, dpm_err *err) {
  dpm_shapes t = {0};
  char *read = calloc(d->n_param + 1, 1);
  if (!read) return dpm_nomem(err);
  dpm_status s = infer(p, 1, &t, params, read, err);
  for (int i = 0; i < p->n_out && !s; i++) {
    const dpm_blobinfo *b = dpm_shapes_get(&t, p->out_name[i]);
    if (!b)
      s = fail(p, err, DPM_CORRUPT,
               "output '%s' is not an input, a parameter or the output of "
               "an op",
               p->out_name[i]);
    else if (b->shape.dtype != DPM_F32)
      s = fail(p, err, DPM_UNSUPPORTED,
               "output '%s' is %s; this runtime returns f32 outputs", p->out_name[i],
               dpm_dtype_name(b->shape.dtype));
    else if (b->kind == DPM_BLOB_PARAM) /* an output may be a parameter */
      read[dpm_strmap_get(params, p->out_name[i])] = 1;
  }
  for (size_t i = 0; i < d->n_param && !s; i++)
    if (!read[i])
      s = fail(p, err, DPM_CORRUPT, "parameter '%s' is not read by any op",
               d->param[i]->name);
  free(read);
  dpm_shapes_fini(&t);
  return s;
}

/* A new placement on dev (NULL: the host) with nothing bound yet, into *out.
 * The parameters are loaded into the host's (load_params) or copied into a
 * device's by set_device. It is on the heap: the bound ops point at its
 * context. */
static dpm_status placed_new(const dpm_predictor *p, struct dpm_dev *dev, placed **out,
                             dpm_err *err) {
  placed *a = *out = calloc(1, sizeof *a);
  if (!a) return dpm_nomem(err);
  a->dev = a->ws.dev = a->ctx.dev = dev;
  a->ctx.rng[0] = 0x9e3779b97f4a7c15ull; /* Dropout does not draw in test mode */
  a->ctx.rng[1] = 1;
  if (!(a->in_t = calloc((size_t)p->n_in + 1, sizeof *a->in_t)) ||
      !(a->out_t = calloc((size_t)p->n_out + 1, sizeof *a->out_t)))
    return dpm_nomem(err);
  return DPM_OK;
}

static void placed_free(placed *a) {
  if (!a) return;
  dpm_exec_fini(&a->exec);
  dpm_ctx_fini(&a->ctx);
  dpm_shapes_fini(&a->shapes);
  dpm_ws_fini(&a->ws);
  free(a->in_t);
  free(a->out_t);
  free(a);
}

static dpm_status build(dpm_predictor *p, const Dpm__PredictorDef *d, dpm_err *err) {
  if (d->version != DPM_PREDICTOR_VERSION)
    return fail(p, err, DPM_UNSUPPORTED,
                "predictor version %u; this runtime reads version %d", d->version,
                DPM_PREDICTOR_VERSION);
  if (!d->has_input_scale || !(d->input_scale > 0) || !isfinite(d->input_scale))
    return fail(p, err, DPM_CORRUPT, "no valid input_scale (a positive number)");
  p->input_scale = d->input_scale;
  if (d->n_input < 1 || d->n_output < 1)
    return fail(p, err, DPM_CORRUPT,
                "a predictor needs at least one input and one output");
  if (d->n_input > MAX_COUNT || d->n_output > MAX_COUNT || d->n_op > MAX_COUNT ||
      d->n_param > MAX_COUNT)
    return fail(p, err, DPM_CORRUPT, "more than %d inputs, outputs, ops or parameters",
                MAX_COUNT);
  if (d->n_input_shape != d->n_input)
    return fail(p, err, DPM_CORRUPT, "%zu inputs but %zu input shapes", d->n_input,
                d->n_input_shape);
  p->n_in = (int)d->n_input;
  p->n_out = (int)d->n_output;
  if (placed_new(p, NULL, &p->at, err)) return err->code;
  if (!(p->name = strdup(d->name ? d->name : ""))) return dpm_nomem(err);
  dpm_strmap params = {0};
  dpm_status s = load_params(p, d, &params, err);
  if (!s) s = load_inputs(p, d, &params, err);
  if (!s) s = load_names(p, "output", d->output, p->n_out, NULL, &p->out_name, err);
  for (size_t j = 0; j < d->n_op && !s; j++)
    s = load_op(p, (int)j + 1, d->op[j], &params, err);
  if (!s) s = check(p, d, &params, err);
  dpm_strmap_fini(&params);
  if (s) return s;
  if (!(p->out_host = calloc((size_t)p->n_out, sizeof *p->out_host)) ||
      !(p->out_cap = calloc((size_t)p->n_out, sizeof *p->out_cap)))
    return dpm_nomem(err);
  int n = p->net.n;
  dpm_net_fuse(&p->net, &n);
  return DPM_OK;
}

dpm_status dpm_predictor_load_buffer(const void *data, size_t len, const char *source,
                                     dpm_predictor **out, dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (!out) return dpm_errf(err, DPM_INVALID, "no place for the predictor");
  *out = NULL;
  if (!data && len) return dpm_errf(err, DPM_INVALID, "no data");
  if (!source) source = "predictor";
  if ((unsigned long long)len > MAX_FILE)
    return dpm_errf(err, DPM_CORRUPT, "%s: %zu bytes is larger than a predictor can be",
                    source, len);
  static const uint8_t none;
  Dpm__PredictorDef *d = dpm__predictor_def__unpack(NULL, len, data ? data : &none);
  if (!d)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: not a predictor: %zu bytes do not parse as a "
                    "PredictorDef (truncated or garbage)",
                    source, len);
  dpm_predictor *p = calloc(1, sizeof *p);
  dpm_status s = p && (p->source = strdup(source)) ? build(p, d, err) : dpm_nomem(err);
  dpm__predictor_def__free_unpacked(d, NULL);
  if (s) {
    dpm_predictor_free(p);
    return s;
  }
  *out = p;
  return DPM_OK;
}

/* path as a regular file (a FIFO must not block the open: O_NONBLOCK, then
 * refused); DPM_NOT_FOUND when it does not exist. */
static dpm_status open_regular(const char *path, FILE **f, dpm_err *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return dpm_errf(err, errno == ENOENT ? DPM_NOT_FOUND : DPM_IO, "%s: %s", path,
                    strerror(errno));
  if (dpm_file_check_regular(fd, path, err)) return err->code;
  if (!(*f = fdopen(fd, "rb"))) {
    close(fd);
    return dpm_nomem(err);
  }
  return DPM_OK;
}

/* 1 if dir holds the file that an ONNX export writes (predictor/onnx_export.h). */
static int holds_onnx(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  int found =
      !fstatat(fd, DPM_ONNX_FILE, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
  close(fd);
  return found;
}

dpm_status dpm_predictor_load(const char *dir, dpm_predictor **out, dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (out) *out = NULL;
  if (!dir || !out)
    return dpm_errf(err, DPM_INVALID, "no directory or no place for the predictor");
  char *path = NULL;
  if (asprintf(&path, "%s/%s", dir, DPM_PREDICTOR_FILE) < 0) return dpm_nomem(err);
  dpm_status s = DPM_OK;
  uint8_t *buf = NULL;
  size_t len = 0;
  FILE *f = NULL;
  struct stat st;
  s = open_regular(path, &f, err);
  if (s == DPM_NOT_FOUND && holds_onnx(dir)) {
    s = dpm_errf(err, DPM_NOT_FOUND,
                 "%s holds an ONNX model (%s), not a dpm predictor (%s): dpm's "
                 "predictor runtime (dpmctl predict) runs dpm predictors only; use "
                 "onnxruntime for %s",
                 dir, DPM_ONNX_FILE, DPM_PREDICTOR_FILE, DPM_ONNX_FILE);
  } else if (s) {
    /* err is set */
  } else if (fstat(fileno(f), &st)) {
    s = dpm_errf(err, DPM_IO, "%s: %s", path, strerror(errno));
  } else if (st.st_size > MAX_FILE) {
    s = dpm_errf(err, DPM_CORRUPT, "%s: %lld bytes is larger than a predictor can be",
                 path, (long long)st.st_size);
  } else if (!(buf = malloc((size_t)st.st_size + 1))) {
    s = dpm_nomem(err);
  } else if ((len = fread(buf, 1, (size_t)st.st_size, f)) != (size_t)st.st_size ||
             ferror(f)) {
    s = dpm_errf(err, DPM_IO, "%s: read %zu of %lld bytes", path, len,
                 (long long)st.st_size);
  }
  if (f) fclose(f);
  if (!s) s = dpm_predictor_load_buffer(buf, len, path, out, err);
  free(buf);
  free(path);
  return s;
}

/* ---- running ------------------------------------------------------------ */

/* Infer shapes for `batch` and bind the net and the input/output blobs of
 * placement a. */
static dpm_status bind(dpm_predictor *p, placed *a, int batch, dpm_err *err) {
  a->batch = 0;
  dpm_shapes_fini(&a->shapes);
  if (infer(p, batch, &a->shapes, NULL, NULL, err)) return err->code;
  if (dpm_exec_bind(&a->exec, &p->net, &a->shapes, &a->ws, &a->ctx, err))
    return err->code;
  for (int i = 0; i < p->n_in; i++) {
    dpm_blob *b;
    dpm_shape s = p->in_shape[i];
    s.d[0] = batch; /* infer() kept it: an op writing an input must keep its shape */
    if (dpm_ws_ensure(&a->ws, p->in_name[i], DPM_BLOB_DATA, &s, &b))
      return dpm_nomem(err);
    a->in_t[i] = &b->t;
  }
  for (int i = 0; i < p->n_out; i++) {
    dpm_blob *b = dpm_ws_find(&a->ws, p->out_name[i]);
    if (!b) return fail(p, err, DPM_INTERNAL, "output '%s' has no blob", p->out_name[i]);
    a->out_t[i] = &b->t;
  }
  a->batch = batch;
  return DPM_OK;
}

/* The device's first failure (sticky: a fault in a kernel, a copy or a
 * library), named in err; DPM_OK on the host. */
static dpm_status device_failure(const dpm_predictor *p, struct dpm_dev *dev,
                                 dpm_err *err) {
  dpm_err e = {0};
  if (!dev || !dpm_dev_failure(dev, &e)) return DPM_OK;
  char name[24];
  dpm_device_format(dpm_dev_id(dev), name, sizeof name);
  return fail(p, err, e.code, "device %s: %s", name, e.msg);
}

/* On a device: output i of the run into its host buffer. */
static dpm_status download(dpm_predictor *p, int i, dpm_err *err) {
  const dpm_tensor *t = p->at->out_t[i];
  size_t bytes = dpm_shape_bytes(&t->shape);
  if (bytes > p->out_cap[i] || !p->out_host[i]) {
    size_t cap = bytes > DPM_ALIGN ? bytes : DPM_ALIGN;
    float *buf = realloc(p->out_host[i], cap);
    if (!buf) return dpm_nomem(err);
    p->out_host[i] = buf;
    p->out_cap[i] = cap;
  }
  dpm_tensor_read(t, p->out_host[i], bytes);
  return DPM_OK;
}

dpm_status dpm_predictor_run(dpm_predictor *p, const float *const *inputs, int batch,
                             dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (!p || !inputs) return dpm_errf(err, DPM_INVALID, "no predictor or no inputs");
  if (batch < 1)
    return fail(p, err, DPM_INVALID, "batch must be at least 1, got %d", batch);
  for (int i = 0; i < p->n_in; i++)
    if (!inputs[i]) return fail(p, err, DPM_INVALID, "input '%s' is NULL", p->in_name[i]);
  p->ran = 0;
  placed *a = p->at;
  if (batch != a->batch && bind(p, a, batch, err)) return err->code;
  for (int i = 0; i < p->n_in; i++) /* a copy onto the device, or a memcpy on the host */
    dpm_tensor_write(a->in_t[i], inputs[i], dpm_shape_bytes(&a->in_t[i]->shape));
  dpm_exec_run(&a->exec);
  if (a->dev) {
    for (int i = 0; i < p->n_out; i++)
      if (download(p, i, err)) return err->code;
    if (device_failure(p, a->dev, err)) return err->code;
  }
  p->ran = 1;
  return DPM_OK;
}

const float *dpm_predictor_output(const dpm_predictor *p, int i, int64_t dims[4],
                                  int *ndim) {
  if (ndim) *ndim = 0;
  if (!p || !p->ran || i < 0 || i >= p->n_out) return NULL;
  const dpm_shape *s = &p->at->out_t[i]->shape;
  if (ndim) *ndim = s->ndim;
  if (dims) memcpy(dims, s->d, (size_t)s->ndim * sizeof *dims);
  return p->at->dev ? p->out_host[i] : dpm_f32(p->at->out_t[i]);
}

/* ---- devices ------------------------------------------------------------ */

/* The device named by `device` into *dev (NULL: the host). */
static dpm_status open_device(const dpm_predictor *p, const char *device,
                              struct dpm_dev **dev, dpm_err *err) {
  *dev = NULL;
  dpm_device d;
  if (!device || !strcmp(device, "cpu")) return DPM_OK;
  if (dpm_device_parse(device, &d))
    return fail(p, err, DPM_INVALID, "'%s' is not a device (cpu or cuda:N)%s", device,
                dpm_device_hint(device));
  if (d.kind == DPM_DEVICE_CPU) return DPM_OK; /* cpu:N is the host too */
  char line[640] = "";
  int usable = dpm_backend_load(d.kind, line, sizeof line); /* loads once */
  dpm_err e = {0};
  if (!dpm_dev_get(d, dev, &e)) return DPM_OK;
  if (!usable && *line) /* say why there is none */
    return fail(p, err, e.code, "%s (%s)", e.msg, line);
  return fail(p, err, e.code, "%s", e.msg);
}

/* The parameters of the current placement copied into b's workspace, in
 * the same order (ws.blobs[0, n_param)), through host memory. */
static dpm_status copy_params(dpm_predictor *p, placed *b, dpm_err *err) {
  size_t most = 0;
  for (int i = 0; i < p->n_param; i++) {
    size_t bytes = dpm_shape_bytes(&p->at->ws.blobs[i]->t.shape);
    most = bytes > most ? bytes : most;
  }
  /* from a device: through host memory */
  void *bounce = p->at->dev && most ? malloc(most) : NULL;
  if (p->at->dev && most && !bounce) return dpm_nomem(err);
  dpm_status s = DPM_OK;
  for (int i = 0; i < p->n_param && !s; i++) {
    const dpm_blob *from = p->at->ws.blobs[i];
    size_t bytes = dpm_shape_bytes(&from->t.shape);
    dpm_blob *to;
    if (dpm_ws_ensure(&b->ws, from->name, DPM_BLOB_PARAM, &from->t.shape, &to)) {
      s = fail(p, err, DPM_NOMEM, "out of memory for parameter '%s'", from->name);
      break;
    }
    const void *src = from->t.data; /* pointer only: read here only on the host */
    if (p->at->dev) {
      dpm_tensor_read(&from->t, bounce, bytes);
      src = bounce;
    }
    dpm_tensor_write(&to->t, src, bytes);
  }
  free(bounce);
  return s;
}

dpm_status dpm_predictor_set_device(dpm_predictor *p, const char *device, dpm_err *err) {
  dpm_err local = {0};
  if (!err) err = &local;
  if (!p) return dpm_errf(err, DPM_INVALID, "no predictor");
  struct dpm_dev *dev;
  if (open_device(p, device, &dev, err)) return err->code;
  if (dev == p->at->dev) return DPM_OK;
  placed *b;
  dpm_status s = placed_new(p, dev, &b, err);
  if (!s) s = copy_params(p, b, err);
  /* Bound now, so that an op the device has no kernel for, or a lack of its
   * memory, is this call's failure rather than the next run's. */
  if (!s) s = bind(p, b, p->at->batch ? p->at->batch : 1, err);
  if (!s) s = device_failure(p, dev, err);
  if (s) {
    placed_free(b);
    return s;
  }
  placed_free(p->at);
  p->at = b;
  p->ran = 0;
  return DPM_OK;
}

/* ---- description -------------------------------------------------------- */

const char *dpm_predictor_name(const dpm_predictor *p) { return p ? p->name : NULL; }
int dpm_predictor_num_inputs(const dpm_predictor *p) { return p ? p->n_in : 0; }
int dpm_predictor_num_outputs(const dpm_predictor *p) { return p ? p->n_out : 0; }
int dpm_predictor_num_ops(const dpm_predictor *p) { return p ? p->net.n : 0; }

const char *dpm_predictor_input_name(const dpm_predictor *p, int i) {
  return p && i >= 0 && i < p->n_in ? p->in_name[i] : NULL;
}

const char *dpm_predictor_output_name(const dpm_predictor *p, int i) {
  return p && i >= 0 && i < p->n_out ? p->out_name[i] : NULL;
}

int dpm_predictor_input_shape(const dpm_predictor *p, int i, int64_t dims[3]) {
  if (!p || i < 0 || i >= p->n_in) return -1;
  const dpm_shape *s = &p->in_shape[i];
  if (dims) memcpy(dims, s->d + 1, (size_t)(s->ndim - 1) * sizeof *dims);
  return s->ndim - 1;
}

double dpm_predictor_input_scale(const dpm_predictor *p) { return p->input_scale; }

int64_t dpm_predictor_input_size(const dpm_predictor *p, int i) {
  if (!p || i < 0 || i >= p->n_in) return -1;
  return dpm_shape_span(&p->in_shape[i], 1, p->in_shape[i].ndim);
}

void dpm_predictor_free(dpm_predictor *p) {
  if (!p) return;
  placed_free(p->at);
  for (int i = 0; p->out_host && i < p->n_out; i++) free(p->out_host[i]);
  free(p->out_host);
  free(p->out_cap);
  dpm_net_fini(&p->net);
  for (int i = 0; p->in_name && i < p->n_in; i++) free(p->in_name[i]);
  for (int i = 0; p->out_name && i < p->n_out; i++) free(p->out_name[i]);
  free(p->in_name);
  free(p->out_name);
  free(p->in_shape);
  free(p->name);
  free(p->source);
  free(p);
}
