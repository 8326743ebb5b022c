/* Spec -> nets: forward ops with their parameters, autodiff, the update,
 * init and test nets; everything validated and shape-inferred. */
#include "engine/model.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autodiff.h"
#include "engine/fuse.h"
#include "engine/rng.h"

/* Parameter initialisers: spec name -> fill op and how `value` is passed. */
static const struct {
  const char *init;
  dpm_op_id op;
  const char *fmt; /* args from value v (printed once or twice) */
  int twice;
} fills[] = {
    {"xavier", DPM_OP_XAVIER_FILL, "", 0},
    {"msra", DPM_OP_MSRA_FILL, "", 0},
    {"gaussian", DPM_OP_GAUSSIAN_FILL, "std=%.9g", 0},
    {"uniform", DPM_OP_UNIFORM_FILL, "min=-%.9g max=%.9g", 1},
    {"constant", DPM_OP_CONSTANT_FILL, "value=%.9g", 0},
};

/* Optimizers: op, per-parameter state suffixes, whether it reads `iter`. */
static const struct {
  Dpm__Optimizer kind;
  dpm_op_id op;
  const char *state[2];
  int n_state, reads_iter;
} optimizers[] = {
    {DPM__OPTIMIZER__OPT_SGD, DPM_OP_SGD, {NULL}, 0, 0},
    {DPM__OPTIMIZER__OPT_MOMENTUM_SGD, DPM_OP_MOMENTUM_SGD, {"_momentum"}, 1, 0},
    {DPM__OPTIMIZER__OPT_ADAM, DPM_OP_ADAM, {"_m1", "_m2"}, 2, 1},
};

static const char *const lr_policies[] = {
    [DPM__LR_POLICY__LR_FIXED] = "fixed",
    [DPM__LR_POLICY__LR_STEP] = "step",
    [DPM__LR_POLICY__LR_MULTISTEP] = "multistep",
    [DPM__LR_POLICY__LR_EXP] = "exp",
    [DPM__LR_POLICY__LR_INV] = "inv",
    [DPM__LR_POLICY__LR_POLY] = "poly",
};

#define ITER "iter"
#define LR "lr"

typedef struct {
  dpm_model *m;
  const Dpm__ModelSpec *spec;
  dpm_err *err;
  size_t scratch;
} builder;

static dpm_status nomem(dpm_err *err) {
  return dpm_errf(err, DPM_NOMEM, "out of memory");
}

static dpm_status op_fail(builder *b, int index, unsigned line, const char *type) {
  char at[200] = "";
  if (line) snprintf(at, sizeof at, "%s:%u: ", b->m->source, line);
  return dpm_err_prefix(b->err, "%sop #%d (%s): ", at, index + 1, type);
}

/* Append printf text at buf[*k]; -1 when it does not fit. */
static int put(char *buf, size_t n, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put(char *buf, size_t n, size_t *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *k, n - *k, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= n - *k) return -1;
  *k += (size_t)w;
  return 0;
}

int dpm_argument_text(const Dpm__Argument *a, char *buf, size_t n) {
  size_t k = 0;
  if (!n) return -1;
  buf[0] = 0;
  switch (a->value_case) {
  case DPM__ARGUMENT__VALUE_I:
    return put(buf, n, &k, "%" PRId64, a->i);
  case DPM__ARGUMENT__VALUE_F:
    return put(buf, n, &k, "%.17g", a->f);
  case DPM__ARGUMENT__VALUE_S:
    return a->s ? put(buf, n, &k, "%s", a->s) : -1;
  case DPM__ARGUMENT__VALUE_INTS:
    if (!a->ints) return -1;
    for (size_t i = 0; i < a->ints->n_v; i++)
      if (put(buf, n, &k, i ? ",%" PRId64 : "%" PRId64, a->ints->v[i])) return -1;
    return 0;
  case DPM__ARGUMENT__VALUE_FLOATS:
    if (!a->floats) return -1;
    for (size_t i = 0; i < a->floats->n_v; i++)
      if (put(buf, n, &k, i ? ",%.17g" : "%.17g", a->floats->v[i])) return -1;
    return 0;
  default:
    return -1;
  }
}

static dpm_node *add(builder *b, dpm_net *net, dpm_op_id op, int n_in,
                     const char *const *in, int n_out, const char *const *out,
                     const char *args) {
  dpm_node *n = dpm_net_add(net, dpm_op_get(op), n_in, in, n_out, out, b->err);
  if (n && args && dpm_node_set_args(n, args, b->err)) return NULL;
  return n;
}

static dpm_status fill(builder *b, const char *blob, const dpm_shape *s, const char *init,
                       double value, int dtype_i64) {
  size_t f = 0;
  while (f < sizeof fills / sizeof *fills && strcmp(fills[f].init, init)) f++;
  if (f == sizeof fills / sizeof *fills)
    return dpm_errf(b->err, DPM_INTERNAL, "no fill for init '%s'", init);
  char args[256], extra[128];
  size_t k = (size_t)snprintf(args, sizeof args, "shape=");
  for (int d = 0; d < s->ndim; d++)
    k += (size_t)snprintf(args + k, sizeof args - k, d ? ",%" PRId64 : "%" PRId64,
                          s->d[d]);
  if (!s->ndim) args[0] = 0;
  uint64_t seed = b->spec->input ? b->spec->input->seed : 1;
  for (const char *p = blob; *p; p++)
    seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(extra, sizeof extra, fills[f].fmt, value, value);
  snprintf(args + strlen(args), sizeof args - strlen(args), " seed=%" PRId64 " %s%s",
           (int64_t)(seed >> 1), extra, dtype_i64 ? " dtype=i64" : "");
  const char *out[] = {blob};
  return add(b, &b->m->init, fills[f].op, 0, NULL, 1, out, args) ? DPM_OK : b->err->code;
}

/* Declare the params of spec op node n (its data inputs already inferred). */
static dpm_status add_params(builder *b, dpm_node *n, int n_data, int index) {
  const dpm_op_def *def = n->def;
  dpm_shape data[DPM_OP_MAX_IO], ps[DPM_OP_MAX_IO];
  memset(ps, 0, sizeof ps);
  dpm_node_input_shapes(n, &b->m->shapes, data);
  if (def->param_shapes(n, data, ps, b->err)) return op_fail(b, index, n->line, def->name);
  for (int p = 0; def->params[p].suffix; p++) {
    const dpm_param_def *pd = &def->params[p];
    const char *name = n->in[n_data + p];
    if (dpm_shape_check(&ps[p], NULL, b->err)) {
      dpm_err_prefix(b->err, "parameter '%s': ", name);
      return op_fail(b, index, n->line, def->name);
    }
    if (dpm_shapes_get(&b->m->shapes, name))
      return dpm_errf(b->err, DPM_SPEC,
                      "parameter '%s' already exists; name the output differently", name);
    if (dpm_shapes_set(&b->m->shapes, name, &ps[p], pd->kind)) return nomem(b->err);
    const char *init = pd->init;
    double value = pd->value;
    int ia = pd->init_arg ? dpm_op_arg_index(def, pd->init_arg) : -1;
    int va = pd->value_arg ? dpm_op_arg_index(def, pd->value_arg) : -1;
    if (ia >= 0 && n->arg[ia].s[0]) init = n->arg[ia].s;
    if (va >= 0) value = n->arg[va].f;
    if (fill(b, name, &ps[p], init, value, 0)) return b->err->code;
  }
  return DPM_OK;
}

static dpm_status forward_op(builder *b, int i) {
  const Dpm__Operator *o = b->spec->forward[i];
  unsigned line = o->has_line ? o->line : 0;
  const dpm_op_def *def = dpm_op_find(o->type);
  if (!def || (def->flags & DPM_OP_HIDDEN)) {
    dpm_errf(b->err, DPM_SPEC, "unknown op '%s'", o->type);
    return op_fail(b, i, line, o->type);
  }
  int nin = (int)o->n_input, nout = (int)o->n_output;
  if (nin < def->min_in || nin > def->max_in || nout < def->min_out ||
      nout > def->max_out) {
    dpm_errf(b->err, DPM_SPEC, "takes %d..%d inputs and %d..%d outputs, got %d and %d",
             def->min_in, def->max_in, def->min_out, def->max_out, nin, nout);
    return op_fail(b, i, line, o->type);
  }
  const char *in[DPM_OP_MAX_IO], *out[DPM_OP_MAX_IO];
  char names[DPM_OP_MAX_IO][256];
  int n_in = nin, n_out = nout, nn = 0;
  for (int k = 0; k < nin; k++) in[k] = o->input[k];
  for (int k = 0; k < nout; k++) out[k] = o->output[k];
  for (int p = 0; def->params && def->params[p].suffix; p++, nn++) {
    snprintf(names[nn], 256, "%s%s", o->output[0], def->params[p].suffix);
    in[n_in++] = names[nn];
  }
  for (int a = 0; def->aux && def->aux[a]; a++, nn++) {
    snprintf(names[nn], 256, "%s%s", o->output[0], def->aux[a]);
    out[n_out++] = names[nn];
  }
  if (n_in > DPM_OP_MAX_IO || n_out > DPM_OP_MAX_IO) {
    dpm_errf(b->err, DPM_SPEC, "too many inputs or outputs");
    return op_fail(b, i, line, o->type);
  }
  dpm_node *n = dpm_net_add(&b->m->train, def, n_in, in, n_out, out, b->err);
  if (!n) return b->err->code;
  n->index = i;
  n->line = line;
  for (size_t a = 0; a < o->n_arg; a++) {
    char text[512];
    if (dpm_argument_text(o->arg[a], text, sizeof text)) {
      dpm_errf(b->err, DPM_SPEC, "argument '%s' has no value or is too long",
               o->arg[a]->name);
      return op_fail(b, i, line, o->type);
    }
    if (dpm_node_set_arg(n, o->arg[a]->name, text, b->err))
      return op_fail(b, i, line, o->type);
  }
  if (dpm_node_check_required(n, b->err)) return op_fail(b, i, line, o->type);
  for (int k = 0; k < nout; k++) {
    for (int j = 0; j < nin && !(def->flags & DPM_OP_INPLACE); j++)
      if (!strcmp(in[j], out[k])) {
        dpm_errf(b->err, DPM_SPEC, "cannot run in place ('%s' is input and output)",
                 out[k]);
        return op_fail(b, i, line, o->type);
      }
    const dpm_blobinfo *bi = dpm_shapes_get(&b->m->shapes, out[k]);
    if (bi && (bi->kind == DPM_BLOB_PARAM || bi->kind == DPM_BLOB_COMPUTED)) {
      dpm_errf(b->err, DPM_SPEC, "output '%s' would overwrite a parameter", out[k]);
      return op_fail(b, i, line, o->type);
    }
  }
  for (int k = 0; k < nin; k++)
    if (!dpm_shapes_get(&b->m->shapes, in[k])) {
      dpm_errf(b->err, DPM_SPEC, "input '%s' is not defined", in[k]);
      return op_fail(b, i, line, o->type);
    }
  if (def->params && add_params(b, n, nin, i)) {
    if (!strstr(b->err->msg, "op #")) op_fail(b, i, line, o->type);
    return b->err->code;
  }
  return dpm_node_infer(n, &b->m->shapes, DPM_BLOB_ACT, &b->scratch, b->m->source,
                        b->err);
}

static dpm_status declare_inputs(builder *b, const int64_t chw[3], int batch) {
  const Dpm__InputSpec *in = b->spec->input;
  const char *data = in && in->n_outputs >= 1 ? in->outputs[0] : "data";
  const char *label = in && in->n_outputs >= 2 ? in->outputs[1] : "label";
  if (!(b->m->data = strdup(data)) || !(b->m->label = strdup(label)))
    return nomem(b->err);
  int64_t d[4] = {batch, chw[0], chw[1], chw[2]};
  dpm_shape ds = dpm_shape_make(DPM_F32, 4, d), ls = dpm_shape_make(DPM_I32, 1, d);
  if (dpm_shape_check(&ds, NULL, b->err))
    return dpm_err_prefix(b->err, "%s: input '%s': ", b->m->source, data);
  if (dpm_shapes_set(&b->m->shapes, data, &ds, DPM_BLOB_DATA) ||
      dpm_shapes_set(&b->m->shapes, label, &ls, DPM_BLOB_DATA))
    return nomem(b->err);
  return DPM_OK;
}

static dpm_status lr_args(builder *b, char *args, size_t n) {
  const Dpm__UpdateSpec *u = b->spec->update;
  const Dpm__LrSpec *lr = u ? u->lr : NULL;
  Dpm__LrSpec def = DPM__LR_SPEC__INIT;
  if (!lr) lr = &def;
  if ((unsigned)lr->policy >= sizeof lr_policies / sizeof *lr_policies)
    return dpm_errf(b->err, DPM_SPEC, "unknown lr policy");
  size_t k =
      (size_t)snprintf(args, n,
                       "base_lr=%.17g policy=%s stepsize=%" PRIu64
                       " gamma=%.17g power=%.17g max_iter=%" PRIu64
                       " warmup_iters=%" PRIu64 " warmup_start=%.17g",
                       lr->base_lr, lr_policies[lr->policy], lr->stepsize, lr->gamma,
                       lr->power, lr->max_iter, lr->warmup_iters, lr->warmup_start);
  for (size_t i = 0; i < lr->n_stepvalues && k < n; i++)
    k += (size_t)snprintf(args + k, n - k, i ? ",%" PRIu64 : " stepvalues=%" PRIu64,
                          lr->stepvalues[i]);
  return DPM_OK;
}

static dpm_status update_net(builder *b) {
  dpm_model *m = b->m;
  const Dpm__UpdateSpec *u = b->spec->update;
  Dpm__UpdateSpec def = DPM__UPDATE_SPEC__INIT;
  if (!u) u = &def;
  size_t o = 0;
  while (o < sizeof optimizers / sizeof *optimizers && optimizers[o].kind != u->optimizer)
    o++;
  if (o == sizeof optimizers / sizeof *optimizers)
    return dpm_errf(b->err, DPM_SPEC, "%s: update: unknown optimizer", m->source);
  dpm_shape scalar64 = dpm_shape_scalar(DPM_I64), scalar = dpm_shape_scalar(DPM_F32);
  if (dpm_shapes_set(&m->shapes, ITER, &scalar64, DPM_BLOB_COUNTER) ||
      dpm_shapes_set(&m->shapes, LR, &scalar, DPM_BLOB_COUNTER))
    return nomem(b->err);
  if (fill(b, ITER, &scalar64, "constant", 0, 1)) return b->err->code;
  char args[512];
  if (lr_args(b, args, sizeof args)) return b->err->code;
  const char *iter[] = {ITER}, *lr[] = {LR};
  if (!add(b, &m->update, DPM_OP_LEARNING_RATE, 1, iter, 1, lr, args)) goto fail;
  char opt_args[256];
  switch (u->optimizer) {
  case DPM__OPTIMIZER__OPT_MOMENTUM_SGD:
    snprintf(opt_args, sizeof opt_args, "weight_decay=%.17g momentum=%.17g nesterov=%d",
             u->weight_decay, u->momentum, u->nesterov ? 1 : 0);
    break;
  case DPM__OPTIMIZER__OPT_ADAM:
    snprintf(opt_args, sizeof opt_args,
             "weight_decay=%.17g beta1=%.17g beta2=%.17g epsilon=%.17g", u->weight_decay,
             u->beta1, u->beta2, u->epsilon);
    break;
  default:
    snprintf(opt_args, sizeof opt_args, "weight_decay=%.17g", u->weight_decay);
  }
  for (int i = 0; i < m->n_param_grad; i++) {
    if (m->shapes.v[i].kind != DPM_BLOB_PARAM || !m->param_grad[i]) continue;
    char param[256], state[2][300];
    snprintf(param, sizeof param, "%s", m->shapes.v[i].name);
    dpm_shape ps = m->shapes.v[i].shape;
    const char *in[6] = {param, m->param_grad[i]}, *out[3] = {param};
    int n_in = 2;
    for (int s = 0; s < optimizers[o].n_state; s++) {
      snprintf(state[s], sizeof state[s], "%s%s", param, optimizers[o].state[s]);
      in[n_in++] = out[s + 1] = state[s];
      if (dpm_shapes_set(&m->shapes, state[s], &ps, DPM_BLOB_OPTIM)) return nomem(b->err);
      if (fill(b, state[s], &ps, "constant", 0, 0)) return b->err->code;
    }
    in[n_in++] = LR;
    if (optimizers[o].reads_iter) in[n_in++] = ITER;
    if (!add(b, &m->update, optimizers[o].op, n_in, in, 1 + optimizers[o].n_state, out,
             opt_args))
      goto fail;
  }
  if (!add(b, &m->update, DPM_OP_ITER, 1, iter, 1, iter, NULL)) goto fail;
  return dpm_net_infer(&m->update, &m->shapes, DPM_BLOB_OPTIM, &b->scratch, m->source,
                       b->err);
fail:
  return dpm_err_prefix(b->err, "%s: update: ", m->source);
}

static dpm_status test_net(builder *b) {
  for (int i = 0; i < b->m->n_forward; i++) {
    dpm_node *n = dpm_net_add_copy(&b->m->test, &b->m->train.nodes[i], b->err);
    if (!n) return b->err->code;
    n->is_test = 1;
  }
  return DPM_OK;
}

static dpm_status find_outputs(builder *b) {
  dpm_model *m = b->m;
  const Dpm__ModelSpec *s = b->spec;
  if (!s->n_losses) return dpm_errf(b->err, DPM_SPEC, "%s: no losses listed", m->source);
  if (!(m->losses = calloc(s->n_losses, sizeof *m->losses))) return nomem(b->err);
  for (size_t i = 0; i < s->n_losses; i++, m->n_losses++)
    if (!(m->losses[i] = strdup(s->losses[i]))) return nomem(b->err);
  for (int i = 0; i < m->n_forward && !m->accuracy; i++)
    if (m->train.nodes[i].def->id == DPM_OP_ACCURACY)
      if (!(m->accuracy = strdup(m->train.nodes[i].out[0]))) return nomem(b->err);
  return DPM_OK;
}

dpm_status dpm_model_build(const Dpm__ModelSpec *spec, const int64_t chw[3], int batch,
                           float loss_scale, dpm_model *m, dpm_err *err) {
  memset(m, 0, sizeof *m);
  builder b = {.m = m, .spec = spec, .err = err};
  m->batch = batch;
  m->input_scale = spec->input ? spec->input->scale : 1.0;
  memcpy(m->chw, chw, sizeof m->chw);
  if (!(m->source = strdup(spec->source ? spec->source : "spec")) ||
      !(m->name = strdup(spec->name ? spec->name : "model")))
    return dpm_model_fini(m), nomem(err);
  dpm_status s = declare_inputs(&b, chw, batch);
  if (!s && !spec->n_forward)
    s = dpm_errf(err, DPM_SPEC, "%s: forward is empty", m->source);
  for (size_t i = 0; i < spec->n_forward && !s; i++) s = forward_op(&b, (int)i);
  m->n_forward = m->train.n;
  if (!s) s = find_outputs(&b);
  if (!s) {
    dpm_net grad = {0};
    m->n_param_grad = m->shapes.n;
    s = dpm_autodiff(&m->train, &m->shapes, (const char *const *)m->losses, m->n_losses,
                     loss_scale, m->source, &grad, &m->param_grad, err);
    for (int i = 0; i < grad.n && !s; i++)
      if (!dpm_net_add_copy(&m->train, &grad.nodes[i], err)) s = err->code;
    dpm_net_fini(&grad);
  }
  if (!s) s = test_net(&b); /* from the unfused forward ops */
  if (!s) dpm_net_fuse(&m->train, &m->n_forward);
  if (!s) s = update_net(&b);
  if (!s) {
    int n = m->test.n;
    dpm_net_fuse(&m->test, &n);
  }
  if (s) dpm_model_fini(m);
  return s;
}

dpm_status dpm_model_test_shapes(const dpm_model *m, int batch, dpm_shapes *t,
                                 dpm_err *err) {
  for (int i = 0; i < m->shapes.n; i++) {
    const dpm_blobinfo *b = &m->shapes.v[i];
    if (b->kind == DPM_BLOB_PARAM || b->kind == DPM_BLOB_COMPUTED)
      if (dpm_shapes_set(t, b->name, &b->shape, b->kind)) return nomem(err);
  }
  int64_t d[4] = {batch, m->chw[0], m->chw[1], m->chw[2]};
  dpm_shape ds = dpm_shape_make(DPM_F32, 4, d), ls = dpm_shape_make(DPM_I32, 1, d);
  if (dpm_shapes_set(t, m->data, &ds, DPM_BLOB_DATA) ||
      dpm_shapes_set(t, m->label, &ls, DPM_BLOB_DATA))
    return nomem(err);
  size_t scratch = 0;
  return dpm_net_infer(&m->test, t, DPM_BLOB_ACT, &scratch, m->source, err);
}

void dpm_model_fini(dpm_model *m) {
  for (int i = 0; m->param_grad && i < m->n_param_grad; i++) free(m->param_grad[i]);
  for (int i = 0; i < m->n_losses; i++) free(m->losses[i]);
  free(m->param_grad);
  free(m->losses);
  free(m->accuracy);
  free(m->data);
  free(m->label);
  free(m->source);
  free(m->name);
  dpm_net_fini(&m->init);
  dpm_net_fini(&m->train);
  dpm_net_fini(&m->update);
  dpm_net_fini(&m->test);
  dpm_shapes_fini(&m->shapes);
  memset(m, 0, sizeof *m);
}
