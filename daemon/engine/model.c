/* Spec -> nets: forward ops with their parameters, autodiff, the update,
 * init and test nets; everything validated and shape-inferred. */
#include "engine/model.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/suggest.h"
#include "engine/autodiff.h"
#include "engine/fuse.h"
#include "engine/precision.h"
#include "engine/rng.h"

/* Parameter initialisers: spec name -> fill op, and the float arguments
 * that take the param's value v: neg_arg = -v, then value_arg = v. */
static const struct {
  const char *init;
  dpm_op_id op;
  const char *neg_arg, *value_arg;
} fills[] = {
    {"xavier", DPM_OP_XAVIER_FILL, NULL, NULL},
    {"msra", DPM_OP_MSRA_FILL, NULL, NULL},
    {"gaussian", DPM_OP_GAUSSIAN_FILL, NULL, "std"},
    {"uniform", DPM_OP_UNIFORM_FILL, "min", "max"},
    {"constant", DPM_OP_CONSTANT_FILL, NULL, "value"},
};

/* A spec field an op argument is set from, `field` bytes into its message:
 * a double; a flag (an int argument, 0 or 1); or the weight decay, a double
 * that a parameter which is not decayed (param_decays) gets as 0. Lists end
 * with {NULL}. */
typedef enum { ARG_F64, ARG_FLAG, ARG_DECAY } spec_arg_kind;
typedef struct {
  const char *arg;
  size_t field;
  spec_arg_kind kind;
} spec_arg;
#define UPDATE_F64(name)                                                                 \
  { #name, offsetof(Dpm__UpdateSpec, name), ARG_F64 }
#define UPDATE_FLAG(name)                                                                \
  { #name, offsetof(Dpm__UpdateSpec, name), ARG_FLAG }
#define UPDATE_DECAY                                                                     \
  { "weight_decay", offsetof(Dpm__UpdateSpec, weight_decay), ARG_DECAY }
/* clang-format off */
static const spec_arg sgd_args[] = {UPDATE_DECAY, {NULL}};
static const spec_arg momentum_args[] = {
    UPDATE_DECAY, UPDATE_F64(momentum), UPDATE_FLAG(nesterov), {NULL}};
static const spec_arg adam_args[] = {
    UPDATE_DECAY, UPDATE_F64(beta1), UPDATE_F64(beta2), UPDATE_F64(epsilon), {NULL}};

/* Optimizers: op, per-parameter state suffixes, whether it reads `iter`, and
 * its arguments from the update section, in order. */
static const struct {
  Dpm__Optimizer kind;
  dpm_op_id op;
  const char *state[2];
  int n_state, reads_iter;
  const spec_arg *args;
} optimizers[] = {
    {DPM__OPTIMIZER__OPT_SGD, DPM_OP_SGD, {NULL}, 0, 0, sgd_args},
    {DPM__OPTIMIZER__OPT_MOMENTUM_SGD, DPM_OP_MOMENTUM_SGD, {"_momentum"}, 1, 0,
     momentum_args},
    {DPM__OPTIMIZER__OPT_ADAM, DPM_OP_ADAM, {"_m1", "_m2"}, 2, 1, adam_args},
};
/* clang-format on */

/* LearningRate's arguments from the lr section, besides policy and
 * stepvalues. */
static const struct {
  const char *arg;
  size_t field;
  int is_count; /* a uint64 field; else a double */
} lr_fields[] = {
    {"base_lr", offsetof(Dpm__LrSpec, base_lr), 0},
    {"stepsize", offsetof(Dpm__LrSpec, stepsize), 1},
    {"gamma", offsetof(Dpm__LrSpec, gamma), 0},
    {"power", offsetof(Dpm__LrSpec, power), 0},
    {"max_iter", offsetof(Dpm__LrSpec, max_iter), 1},
    {"warmup_iters", offsetof(Dpm__LrSpec, warmup_iters), 1},
    {"start_multiplier", offsetof(Dpm__LrSpec, start_multiplier), 0},
    {"final_multiplier", offsetof(Dpm__LrSpec, final_multiplier), 0},
};

static const char *const lr_policies[] = {
    [DPM__LR_POLICY__LR_FIXED] = "fixed",
    [DPM__LR_POLICY__LR_STEP] = "step",
    [DPM__LR_POLICY__LR_MULTISTEP] = "multistep",
    [DPM__LR_POLICY__LR_EXP] = "exp",
    [DPM__LR_POLICY__LR_INV] = "inv",
    [DPM__LR_POLICY__LR_POLY] = "poly",
    [DPM__LR_POLICY__LR_COSINE] = "cosine",
};

#define ITER "iter"
#define LR "lr"

typedef struct {
  dpm_model *m;
  const Dpm__ModelSpec *spec;
  dpm_err *err;
  unsigned char *weight; /* [n_weight], indexed like m->shapes.v: 1 for a param
                            whose def is a weight (dpm_param_def.is_weight) */
  int n_weight;
  dpm_precision *prec; /* precision.compute bf16/fp16: the rewrite; NULL: f32 */
} builder;

static dpm_status op_fail(builder *b, int index, unsigned line, const char *type) {
  char at[200] = "";
  if (line) snprintf(at, sizeof at, "%s:%u: ", b->m->source, line);
  return dpm_err_prefix(b->err, "%sop #%d (%s): ", at, index + 1, type);
}

dpm_status dpm_node_set_argument(dpm_node *n, const Dpm__Argument *a, dpm_err *err) {
  switch (a->value_case) {
  case DPM__ARGUMENT__VALUE_I:
    return dpm_node_set_int(n, a->name, a->i, err);
  case DPM__ARGUMENT__VALUE_F:
    return dpm_node_set_float(n, a->name, a->f, err);
  case DPM__ARGUMENT__VALUE_S:
    if (a->s) return dpm_node_set_string(n, a->name, a->s, err);
    break;
  case DPM__ARGUMENT__VALUE_INTS:
    if (a->ints) return dpm_node_set_ints(n, a->name, a->ints->v, a->ints->n_v, err);
    break;
  case DPM__ARGUMENT__VALUE_FLOATS:
    if (a->floats)
      return dpm_node_set_floats(n, a->name, a->floats->v, a->floats->n_v, err);
    break;
  default:
    break;
  }
  return dpm_errf(err, DPM_SPEC, "argument '%s' has no value", a->name);
}

/* Append op `op` over the given names to net, arguments at their defaults. */
static dpm_node *add(builder *b, dpm_net *net, dpm_op_id op, int n_in,
                     const char *const *in, int n_out, const char *const *out) {
  return dpm_net_add(net, dpm_op_get(op), n_in, in, n_out, out, b->err);
}

/* The init net's fill of blob, seeded by the spec's seed and the blob's name. */
static dpm_status fill(builder *b, const char *blob, const dpm_shape *s, const char *init,
                       double value, int dtype_i64) {
  size_t f = 0;
  while (f < sizeof fills / sizeof *fills && strcmp(fills[f].init, init)) f++;
  if (f == sizeof fills / sizeof *fills)
    return dpm_errf(b->err, DPM_INTERNAL, "no fill for init '%s'", init);
  uint64_t seed = b->spec->input ? b->spec->input->seed : 1;
  for (const char *p = blob; *p; p++)
    seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
  const char *out[] = {blob};
  dpm_err *err = b->err;
  dpm_node *n = add(b, &b->m->init, fills[f].op, 0, NULL, 1, out);
  if (!n || dpm_node_set_ints(n, "shape", s->d, (size_t)s->ndim, err) ||
      dpm_node_set_int(n, "seed", (int64_t)(seed >> 1), err) ||
      (fills[f].neg_arg && dpm_node_set_float(n, fills[f].neg_arg, -value, err)) ||
      (fills[f].value_arg && dpm_node_set_float(n, fills[f].value_arg, value, err)) ||
      (dtype_i64 && dpm_node_set_string(n, "dtype", "i64", err)))
    return err->code;
  return DPM_OK;
}

/* Record that param `name` (declared) is a weight. */
static dpm_status mark_weight(builder *b, const char *name) {
  int i = (int)(dpm_shapes_get(&b->m->shapes, name) - b->m->shapes.v);
  if (i >= b->n_weight) {
    unsigned char *w = realloc(b->weight, (size_t)i + 1);
    if (!w) return DPM_NOMEM;
    memset(w + b->n_weight, 0, (size_t)(i + 1 - b->n_weight));
    b->weight = w;
    b->n_weight = i + 1;
  }
  b->weight[i] = 1;
  return DPM_OK;
}

/* Declare the params of spec op node n (its data inputs already inferred). */
static dpm_status add_params(builder *b, dpm_node *n, int n_data, int index) {
  const dpm_op_def *def = n->def;
  dpm_shape data[DPM_OP_MAX_IO], ps[DPM_OP_MAX_IO];
  memset(ps, 0, sizeof ps);
  dpm_node_input_shapes(n, &b->m->shapes, data);
  if (def->param_shapes(n, data, ps, b->err)) return op_fail(b, index, n->line, def->name);
  for (int p = 0, n_par = dpm_node_nparams(n); p < n_par; p++) {
    const dpm_param_def *pd = &def->params[p];
    const char *name = n->in[n_data + p];
    if (dpm_shape_check(&ps[p], NULL, b->err)) {
      dpm_err_prefix(b->err, "parameter '%s': ", name);
      return op_fail(b, index, n->line, def->name);
    }
    if (dpm_shapes_get(&b->m->shapes, name))
      return dpm_errf(b->err, DPM_SPEC,
                      "parameter '%s' already exists; name the output differently", name);
    if (dpm_shapes_set(&b->m->shapes, name, &ps[p], pd->kind)) return dpm_nomem(b->err);
    if (pd->is_weight && mark_weight(b, name)) return dpm_nomem(b->err);
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

/* "; did you mean 'Relu'?" for an op type no spec may use, or "". */
static const char *spec_op_hint(const char *type, char *buf, size_t cap) {
  int n;
  const dpm_op_def *const *all = dpm_op_all(&n);
  dpm_suggest sg;
  dpm_suggest_init(&sg, type);
  for (int k = 0; k < n; k++)
    if (!(all[k]->flags & DPM_OP_HIDDEN)) dpm_suggest_add(&sg, all[k]->name);
  return dpm_suggest_phrase(&sg, buf, cap);
}

static dpm_status forward_op(builder *b, int i) {
  const Dpm__Operator *o = b->spec->forward[i];
  unsigned line = o->has_line ? o->line : 0;
  const dpm_op_def *def = dpm_op_find(o->type);
  if (!def || (def->flags & DPM_OP_HIDDEN)) {
    char hint[DPM_SUGGEST_MAX_LEN + 32];
    dpm_errf(b->err, DPM_SPEC, "unknown op '%s'%s", o->type,
             spec_op_hint(o->type, hint, sizeof hint));
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
  for (int a = 0; def->aux && def->aux[a]; a++, nn++) {
    snprintf(names[nn], 256, "%s%s", o->output[0], def->aux[a]);
    out[n_out++] = names[nn];
  }
  int n_par = 0;
  while (def->params && def->params[n_par].suffix) n_par++;
  if (n_in + n_par > DPM_OP_MAX_IO || n_out > DPM_OP_MAX_IO) {
    dpm_errf(b->err, DPM_SPEC, "too many inputs or outputs");
    return op_fail(b, i, line, o->type);
  }
  dpm_node *n = dpm_net_add(&b->m->train, def, n_in, in, n_out, out, b->err);
  if (!n) return b->err->code;
  n->index = i;
  n->line = line;
  for (size_t a = 0; a < o->n_arg; a++)
    if (dpm_node_set_argument(n, o->arg[a], b->err)) return op_fail(b, i, line, o->type);
  if (dpm_node_check_required(n, b->err)) return op_fail(b, i, line, o->type);
  /* The params follow the data inputs; which ones depends on the arguments. */
  n_par = dpm_node_nparams(n);
  for (int p = 0; p < n_par; p++, n_in++) {
    char name[256];
    snprintf(name, sizeof name, "%s%s", o->output[0], def->params[p].suffix);
    if (!(n->in[n_in] = strdup(name))) return dpm_nomem(b->err);
    n->n_in = n_in + 1;
  }
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
  if (b->prec) /* infers n with its Casts */
    return dpm_precision_node(b->prec, &b->m->train, &b->m->shapes, b->m->source, b->err);
  return dpm_node_infer(n, &b->m->shapes, DPM_BLOB_ACT, b->m->source, b->err);
}

static dpm_status declare_inputs(builder *b, const int64_t chw[3], int batch) {
  const Dpm__InputSpec *in = b->spec->input;
  const char *data = in && in->n_outputs >= 1 ? in->outputs[0] : "data";
  const char *label = in && in->n_outputs >= 2 ? in->outputs[1] : "label";
  if (!(b->m->data = strdup(data)) || !(b->m->label = strdup(label)))
    return dpm_nomem(b->err);
  int64_t d[4] = {batch, chw[0], chw[1], chw[2]};
  dpm_shape ds = dpm_shape_make(DPM_F32, 4, d), ls = dpm_shape_make(DPM_I32, 1, d);
  if (dpm_shape_check(&ds, NULL, b->err))
    return dpm_err_prefix(b->err, "%s: input '%s': ", b->m->source, data);
  if (dpm_shapes_set(&b->m->shapes, data, &ds, DPM_BLOB_DATA) ||
      dpm_shapes_set(&b->m->shapes, label, &ls, DPM_BLOB_DATA))
    return dpm_nomem(b->err);
  return DPM_OK;
}

/* A count of the spec (uint64) as an int argument; one above INT64_MAX is
 * refused as its text was. */
static dpm_status set_count(dpm_node *n, const char *arg, uint64_t v, dpm_err *err) {
  if (v > INT64_MAX)
    return dpm_errf(err, DPM_SPEC, "argument '%s' expects an integer, got '%" PRIu64 "'",
                    arg, v);
  return dpm_node_set_int(n, arg, (int64_t)v, err);
}

/* The stepvalues list as int64s: an element above INT64_MAX is refused as its
 * text was; a list longer than DPM_ARG_MAX_LIST, by the setter. */
static dpm_status set_stepvalues(dpm_node *n, const Dpm__LrSpec *lr, dpm_err *err) {
  int64_t v[DPM_ARG_MAX_LIST + 1];
  size_t k = 0;
  for (; k < lr->n_stepvalues && k < DPM_ARG_MAX_LIST + 1; k++) {
    if (k < DPM_ARG_MAX_LIST && lr->stepvalues[k] > INT64_MAX)
      return dpm_errf(err, DPM_SPEC,
                      "argument 'stepvalues' expects a list of integers, got '%" PRIu64
                      "'",
                      lr->stepvalues[k]);
    v[k] = (int64_t)lr->stepvalues[k];
  }
  return dpm_node_set_ints(n, "stepvalues", v, k, err);
}

/* LearningRate's arguments from the spec's lr section (policy valid). */
static dpm_status learning_rate(const Dpm__LrSpec *lr, dpm_node *n, dpm_err *err) {
  if (dpm_node_set_string(n, "policy", lr_policies[lr->policy], err)) return err->code;
  for (size_t f = 0; f < sizeof lr_fields / sizeof *lr_fields; f++) {
    const char *field = (const char *)lr + lr_fields[f].field;
    dpm_status s =
        lr_fields[f].is_count
            ? set_count(n, lr_fields[f].arg, *(const uint64_t *)field, err)
            : dpm_node_set_float(n, lr_fields[f].arg, *(const double *)field, err);
    if (s) return s;
  }
  return lr->n_stepvalues ? set_stepvalues(n, lr, err) : DPM_OK;
}

/* Whether the update's weight decay applies to param i: to weights always,
 * to the other params (biases, SpatialBN's scale and shift) only with
 * weight_decay_bias. */
static int param_decays(const builder *b, const Dpm__UpdateSpec *u, int i) {
  return u->weight_decay_bias || (i < b->n_weight && b->weight[i]);
}

/* Optimizer o's arguments from the spec's update section, for a param that
 * is decayed or not. */
static dpm_status optimizer_args(size_t o, const Dpm__UpdateSpec *u, int decays,
                                 dpm_node *n, dpm_err *err) {
  for (const spec_arg *a = optimizers[o].args; a->arg; a++) {
    const char *field = (const char *)u + a->field;
    dpm_status s =
        a->kind == ARG_FLAG
            ? dpm_node_set_int(n, a->arg, *(const protobuf_c_boolean *)field != 0, err)
            : dpm_node_set_float(
                  n, a->arg,
                  a->kind == ARG_DECAY && !decays ? 0.0 : *(const double *)field, err);
    if (s) return s;
  }
  return DPM_OK;
}

static dpm_status update_net(builder *b) {
  static const Dpm__UpdateSpec default_update = DPM__UPDATE_SPEC__INIT;
  static const Dpm__LrSpec default_lr = DPM__LR_SPEC__INIT;
  dpm_model *m = b->m;
  const Dpm__UpdateSpec *u = b->spec->update ? b->spec->update : &default_update;
  const Dpm__LrSpec *lrs = u->lr ? u->lr : &default_lr;
  size_t o = 0;
  while (o < sizeof optimizers / sizeof *optimizers && optimizers[o].kind != u->optimizer)
    o++;
  if (o == sizeof optimizers / sizeof *optimizers)
    return dpm_errf(b->err, DPM_SPEC, "%s: update: unknown optimizer", m->source);
  dpm_shape scalar64 = dpm_shape_scalar(DPM_I64), scalar = dpm_shape_scalar(DPM_F32);
  if (dpm_shapes_set(&m->shapes, ITER, &scalar64, DPM_BLOB_COUNTER) ||
      dpm_shapes_set(&m->shapes, LR, &scalar, DPM_BLOB_COUNTER))
    return dpm_nomem(b->err);
  if (fill(b, ITER, &scalar64, "constant", 0, 1)) return b->err->code;
  if ((unsigned)lrs->policy >= sizeof lr_policies / sizeof *lr_policies)
    return dpm_errf(b->err, DPM_SPEC, "unknown lr policy");
  const char *iter[] = {ITER}, *lr[] = {LR};
  dpm_node *n = add(b, &m->update, DPM_OP_LEARNING_RATE, 1, iter, 1, lr);
  if (!n || learning_rate(lrs, n, b->err)) goto fail;
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
      if (dpm_shapes_set(&m->shapes, state[s], &ps, DPM_BLOB_OPTIM))
        return dpm_nomem(b->err);
      if (fill(b, state[s], &ps, "constant", 0, 0)) return b->err->code;
    }
    in[n_in++] = LR;
    if (optimizers[o].reads_iter) in[n_in++] = ITER;
    n = add(b, &m->update, optimizers[o].op, n_in, in, 1 + optimizers[o].n_state, out);
    if (!n || optimizer_args(o, u, param_decays(b, u, i), n, b->err)) goto fail;
  }
  if (!add(b, &m->update, DPM_OP_ITER, 1, iter, 1, iter)) goto fail;
  return dpm_net_infer(&m->update, &m->shapes, DPM_BLOB_OPTIM, m->source, b->err);
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
  if (!(m->losses = calloc(s->n_losses, sizeof *m->losses))) return dpm_nomem(b->err);
  for (size_t i = 0; i < s->n_losses; i++, m->n_losses++)
    if (!(m->losses[i] = strdup(s->losses[i]))) return dpm_nomem(b->err);
  /* The first Accuracy with top_k 1, else the first (top-1 and top-5 in
   * either order report top-1). */
  int pick = -1;
  for (int i = 0; i < m->n_forward; i++) {
    const dpm_node *n = &m->train.nodes[i];
    if (n->def->id != DPM_OP_ACCURACY) continue;
    if (pick < 0 || (n->arg[0].i == 1 && m->train.nodes[pick].arg[0].i != 1)) pick = i;
  }
  if (pick >= 0 && !(m->accuracy = strdup(m->train.nodes[pick].out[0])))
    return dpm_nomem(b->err);
  return DPM_OK;
}

/* The type precision.compute names: f32 (the default) or a 16-bit one. */
static dpm_dtype compute_type(const Dpm__ModelSpec *spec) {
  static const dpm_dtype types[] = {
      [DPM__COMPUTE_TYPE__COMPUTE_FP32] = DPM_F32,
      [DPM__COMPUTE_TYPE__COMPUTE_BF16] = DPM_BF16,
      [DPM__COMPUTE_TYPE__COMPUTE_FP16] = DPM_F16,
  };
  unsigned c = spec->precision ? (unsigned)spec->precision->compute : 0;
  return c < sizeof types / sizeof *types ? types[c] : DPM_DTYPE_COUNT;
}

dpm_status dpm_model_build(const Dpm__ModelSpec *spec, const int64_t chw[3], int batch,
                           float loss_scale, dpm_model *m, dpm_err *err) {
  memset(m, 0, sizeof *m);
  builder b = {.m = m, .spec = spec, .err = err};
  dpm_precision prec;
  dpm_dtype compute = compute_type(spec);
  if (compute == DPM_DTYPE_COUNT)
    return dpm_errf(err, DPM_SPEC, "%s: precision: unknown compute type %d",
                    spec->source ? spec->source : "spec", (int)spec->precision->compute);
  if (spec->precision && spec->precision->master != DPM__MASTER_TYPE__MASTER_FP32)
    return dpm_errf(err, DPM_SPEC, "%s: precision: master weights must be fp32",
                    spec->source ? spec->source : "spec");
  if (compute != DPM_F32) {
    dpm_precision_init(&prec, compute);
    b.prec = &prec;
  }
  m->compute = compute;
  m->batch = batch;
  m->input_scale = spec->input ? spec->input->scale : 1.0;
  memcpy(m->chw, chw, sizeof m->chw);
  if (!(m->source = strdup(spec->source ? spec->source : "spec")) ||
      !(m->name = strdup(spec->name ? spec->name : "model")))
    return dpm_model_fini(m), dpm_nomem(err);
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
  /* the blobs it drops are autodiff's, after the n_param_grad that
     param_grad and the weight flags index */
  if (!s && dpm_net_fuse_grad_casts(&m->train, &m->shapes)) s = dpm_nomem(err);
  if (!s) dpm_net_fuse(&m->train, &m->n_forward);
  if (!s) s = update_net(&b);
  if (!s)
    s = dpm_net_fuse_working_copies(&m->train, &m->n_forward, &m->update, &m->refresh, err);
  if (!s) {
    int n = m->test.n;
    dpm_net_fuse(&m->test, &n);
  }
  free(b.weight);
  if (b.prec) dpm_precision_fini(b.prec);
  if (s) dpm_model_fini(m);
  return s;
}

dpm_status dpm_model_test_shapes(const dpm_model *m, int batch, dpm_shapes *t,
                                 dpm_err *err) {
  for (int i = 0; i < m->shapes.n; i++) {
    const dpm_blobinfo *b = &m->shapes.v[i];
    if (b->kind == DPM_BLOB_PARAM || b->kind == DPM_BLOB_COMPUTED)
      if (dpm_shapes_set(t, b->name, &b->shape, b->kind)) return dpm_nomem(err);
  }
  int64_t d[4] = {batch, m->chw[0], m->chw[1], m->chw[2]};
  dpm_shape ds = dpm_shape_make(DPM_F32, 4, d), ls = dpm_shape_make(DPM_I32, 1, d);
  if (dpm_shapes_set(t, m->data, &ds, DPM_BLOB_DATA) ||
      dpm_shapes_set(t, m->label, &ls, DPM_BLOB_DATA))
    return dpm_nomem(err);
  return dpm_net_infer(&m->test, t, DPM_BLOB_ACT, m->source, err);
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
  dpm_net_fini(&m->refresh);
  dpm_shapes_fini(&m->shapes);
  memset(m, 0, sizeof *m);
}
