/* Operator arguments: the schema checks behind every setter (typed values
 * from specs, predictor files and the engine; text from schema defaults and
 * tests), one path for all. */
#include "engine/op.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/suggest.h"

static const char *const blob_kind_names[] = {
    [DPM_BLOB_ACT] = "activation",  [DPM_BLOB_DATA] = "data",
    [DPM_BLOB_PARAM] = "param",     [DPM_BLOB_COMPUTED] = "computed",
    [DPM_BLOB_GRAD] = "gradient",   [DPM_BLOB_OPTIM] = "optimizer",
    [DPM_BLOB_COUNTER] = "counter",
};
_Static_assert(sizeof blob_kind_names / sizeof *blob_kind_names == DPM_BLOB_KIND_COUNT,
               "blob kinds");

const char *dpm_blob_kind_name(dpm_blob_kind k) { return blob_kind_names[k]; }

int dpm_op_nargs(const dpm_op_def *def) {
  int n = 0;
  while (def->args && def->args[n].name) n++;
  return n;
}

int dpm_op_arg_index(const dpm_op_def *def, const char *name) {
  for (int i = 0; def->args && def->args[i].name; i++)
    if (!strcmp(def->args[i].name, name)) return i;
  return -1;
}

/* ---- values ---------------------------------------------------------------- */

/* A value to set, of one of the kinds a spec or predictor file holds. */
typedef enum { VAL_INT, VAL_FLOAT, VAL_STRING, VAL_INTS, VAL_FLOATS } val_kind;

typedef struct value {
  val_kind kind;
  int64_t i;         /* VAL_INT */
  double f;          /* VAL_FLOAT */
  const char *s;     /* VAL_STRING: a string, or the text of any value */
  size_t n;          /* VAL_INTS, VAL_FLOATS: elements (any number) */
  const int64_t *iv; /* VAL_INTS */
  const double *fv;  /* VAL_FLOATS */
} value;

/* Elements of a list; a scalar (text too) is one. */
static size_t count(const value *v) {
  return v->kind == VAL_INTS || v->kind == VAL_FLOATS ? v->n : 1;
}

/* Element k < count(v) as a scalar value. */
static value element(const value *v, size_t k) {
  if (v->kind == VAL_INTS) return (value){.kind = VAL_INT, .i = v->iv[k]};
  if (v->kind == VAL_FLOATS) return (value){.kind = VAL_FLOAT, .f = v->fv[k]};
  return *v;
}

/* The value as text ("5", "0.10000000000000001", "2,-3"), truncated to n:
 * what messages quote, and what a number is to a string argument. */
static const char *value_text(const value *v, char *buf, size_t n) {
  if (v->kind == VAL_STRING) return v->s;
  size_t k = 0;
  buf[0] = 0;
  for (size_t e = 0; e < count(v) && k < n; e++) {
    value x = element(v, e);
    int w = x.kind == VAL_INT ? snprintf(buf + k, n - k, "%s%" PRId64, e ? "," : "", x.i)
                              : snprintf(buf + k, n - k, "%s%.17g", e ? "," : "", x.f);
    if (w < 0) break;
    k += (size_t)w;
  }
  return buf;
}

static int parse_int(const char *t, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(t, &end, 10);
  if (errno || end == t || *end) return 0;
  *v = x;
  return 1;
}

/* Refuses what strtod reports as out of range, subnormal results included. */
static int parse_float(const char *t, double *v) {
  char *end;
  errno = 0;
  double x = strtod(t, &end);
  if (errno || end == t || *end) return 0;
  *v = x;
  return 1;
}

/* A scalar as an integer: text that strtoll takes whole, or a double that
 * "%.17g" prints without fraction or exponent (below 1e17). */
static int to_int(const value *x, int64_t *out) {
  switch (x->kind) {
  case VAL_INT:
    *out = x->i;
    return 1;
  case VAL_FLOAT:
    if (x->f != trunc(x->f) || !(fabs(x->f) < 1e17)) return 0;
    *out = (int64_t)x->f;
    return 1;
  default:
    return parse_int(x->s, out);
  }
}

/* A scalar as a double: text that strtod takes whole, any integer, any
 * double strtod could give (not a subnormal one). */
static int to_float(const value *x, double *out) {
  switch (x->kind) {
  case VAL_INT:
    *out = (double)x->i;
    return 1;
  case VAL_FLOAT:
    *out = x->f;
    return fpclassify(x->f) != FP_SUBNORMAL;
  default:
    return parse_float(x->s, out);
  }
}

/* A scalar as a flag: "true"/"1", "false"/"0", or the numbers 1 and 0 (not
 * -0.0, which prints "-0"). */
static int to_bool(const value *x, int64_t *out) {
  int yes, no;
  switch (x->kind) {
  case VAL_INT:
    yes = x->i == 1, no = x->i == 0;
    break;
  case VAL_FLOAT:
    yes = x->f == 1.0, no = x->f == 0.0 && !signbit(x->f);
    break;
  default:
    yes = !strcmp(x->s, "true") || !strcmp(x->s, "1");
    no = !strcmp(x->s, "false") || !strcmp(x->s, "0");
  }
  *out = yes;
  return yes || no;
}

/* ---- setting one argument from a value ------------------------------------ */

static int choice_index(const char *choices, const char *s) {
  int idx = 0;
  size_t n = strlen(s);
  for (const char *p = choices; *p; idx++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, s, n)) return idx;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

static dpm_status bounds(const dpm_arg_def *a, double x, dpm_err *err) {
  if ((a->min != 0 || a->max != 0) && (x < a->min || x > a->max))
    return dpm_errf(err, DPM_SPEC, "argument '%s' = %g is outside [%g, %g]", a->name, x,
                    a->min, a->max);
  return DPM_OK;
}

/* The value's one element as x; 0 for a list of another length. */
static int scalar(const value *v, value *x) {
  if (count(v) != 1) return 0;
  *x = element(v, 0);
  return 1;
}

static dpm_status set_int(const dpm_arg_def *a, const value *v, dpm_arg *out,
                          dpm_err *err) {
  value x;
  char t[512];
  if (!scalar(v, &x) || !to_int(&x, &out->i))
    return dpm_errf(err, DPM_SPEC, "argument '%s' expects an integer, got '%s'", a->name,
                    value_text(v, t, sizeof t));
  out->f = (double)out->i;
  return bounds(a, out->f, err);
}

static dpm_status set_float(const dpm_arg_def *a, const value *v, dpm_arg *out,
                            dpm_err *err) {
  value x;
  char t[512];
  if (!scalar(v, &x) || !to_float(&x, &out->f))
    return dpm_errf(err, DPM_SPEC, "argument '%s' expects a number, got '%s'", a->name,
                    value_text(v, t, sizeof t));
  return bounds(a, out->f, err);
}

static dpm_status set_bool(const dpm_arg_def *a, const value *v, dpm_arg *out,
                           dpm_err *err) {
  value x;
  char t[512];
  if (!scalar(v, &x) || !to_bool(&x, &out->i))
    return dpm_errf(err, DPM_SPEC, "argument '%s' expects true or false, got '%s'",
                    a->name, value_text(v, t, sizeof t));
  out->f = (double)out->i;
  return DPM_OK;
}

static dpm_status set_string(const dpm_arg_def *a, const value *v, dpm_arg *out,
                             dpm_err *err) {
  char t[512];
  const char *s = value_text(v, t, sizeof t);
  if (strlen(s) >= sizeof out->s)
    return dpm_errf(err, DPM_SPEC, "argument '%s' is too long", a->name);
  if (a->choices && (out->i = choice_index(a->choices, s)) < 0)
    return dpm_errf(err, DPM_SPEC, "argument '%s' must be one of %s, got '%s'", a->name,
                    a->choices, s);
  snprintf(out->s, sizeof out->s, "%s", s);
  return DPM_OK;
}

/* Items of a list value, at most max: a list's elements, a scalar alone, or
 * the comma-separated items of text (cut in `text`, its copy; empty items
 * skipped). Returns how many. */
static size_t items(const value *v, char *text, value *item, size_t max) {
  size_t n = 0;
  if (v->kind != VAL_STRING) {
    for (; n < count(v) && n < max; n++) item[n] = element(v, n);
    return n;
  }
  for (char *save, *tok = strtok_r(text, ",", &save); tok && n < max;
       tok = strtok_r(NULL, ",", &save))
    item[n++] = (value){.kind = VAL_STRING, .s = tok};
  return n;
}

/* INTS and FLOATS: each item converted and bounded in turn. */
static dpm_status set_list(const dpm_arg_def *a, const value *v, dpm_arg *out,
                           dpm_err *err) {
  char *text = v->kind == VAL_STRING ? strdup(v->s) : NULL, t[512];
  if (v->kind == VAL_STRING && !text) return dpm_nomem(err);
  value item[DPM_ARG_MAX_LIST + 1];
  size_t n = items(v, text, item, DPM_ARG_MAX_LIST + 1);
  int ints = a->type == DPM_ARG_INTS;
  dpm_status s = DPM_OK;
  for (size_t k = 0; k < n && !s; k++) {
    if (out->n == DPM_ARG_MAX_LIST) {
      s = dpm_errf(err, DPM_SPEC, "argument '%s' has more than %d elements", a->name,
                   DPM_ARG_MAX_LIST);
      break;
    }
    int ok =
        ints ? to_int(&item[k], &out->v[out->n]) : to_float(&item[k], &out->fv[out->n]);
    if (ints) out->fv[out->n] = (double)out->v[out->n];
    if (!ok)
      s = dpm_errf(err, DPM_SPEC, "argument '%s' expects a list of %s, got '%s'", a->name,
                   ints ? "integers" : "numbers", value_text(v, t, sizeof t));
    else if (!(s = bounds(a, out->fv[out->n], err)))
      out->n++;
  }
  free(text);
  return s;
}

typedef dpm_status (*arg_setter)(const dpm_arg_def *a, const value *v, dpm_arg *out,
                                 dpm_err *err);
static const arg_setter setters[] = {
    [DPM_ARG_INT] = set_int,   [DPM_ARG_FLOAT] = set_float,
    [DPM_ARG_BOOL] = set_bool, [DPM_ARG_STRING] = set_string,
    [DPM_ARG_INTS] = set_list, [DPM_ARG_FLOATS] = set_list,
};
_Static_assert(sizeof setters / sizeof *setters == DPM_ARG_FLOATS + 1, "argument types");

/* out <- v checked against a; on failure out is unset. */
static dpm_status set_arg(const dpm_arg_def *a, const value *v, dpm_arg *out,
                          dpm_err *err) {
  memset(out, 0, sizeof *out);
  dpm_status s = setters[a->type](a, v, out, err);
  out->set = s == DPM_OK;
  return s;
}

static dpm_status set_named(dpm_node *node, const char *name, const value *v,
                            dpm_err *err) {
  int k = dpm_op_arg_index(node->def, name);
  if (k < 0) {
    dpm_suggest sg;
    char hint[DPM_SUGGEST_MAX_LEN + 32];
    dpm_suggest_init(&sg, name);
    for (int i = 0; node->def->args && node->def->args[i].name; i++)
      dpm_suggest_add(&sg, node->def->args[i].name);
    return dpm_errf(err, DPM_SPEC, "unknown argument '%s' for %s%s", name,
                    node->def->name, dpm_suggest_phrase(&sg, hint, sizeof hint));
  }
  return set_arg(&node->def->args[k], v, &node->arg[k], err);
}

/* ---- the node's arguments ---------------------------------------------------- */

int dpm_node_nparams(const dpm_node *n) {
  const dpm_param_def *p = n->def->params;
  int k = 0;
  for (; p && p[k].suffix; k++) {
    int a = p[k].omit_arg ? dpm_op_arg_index(n->def, p[k].omit_arg) : -1;
    if (a >= 0 && n->arg[a].i) break;
  }
  return k;
}

dpm_status dpm_node_check_required(const dpm_node *node, dpm_err *err) {
  const dpm_arg_def *args = node->def->args;
  for (int i = 0; args && args[i].name; i++)
    if (!node->arg[i].set)
      return dpm_errf(err, DPM_SPEC, "missing required argument '%s'", args[i].name);
  return DPM_OK;
}

dpm_status dpm_node_set_defaults(dpm_node *node, dpm_err *err) {
  const dpm_arg_def *args = node->def->args;
  for (int i = 0; args && args[i].name; i++) {
    memset(&node->arg[i], 0, sizeof node->arg[i]);
    value text = {.kind = VAL_STRING, .s = args[i].def};
    if (args[i].def && set_arg(&args[i], &text, &node->arg[i], err)) {
      if (!err) return DPM_INTERNAL;
      dpm_err_prefix(err, "op %s default: ", node->def->name);
      return err->code = DPM_INTERNAL;
    }
  }
  return DPM_OK;
}

dpm_status dpm_node_set_int(dpm_node *node, const char *name, int64_t v, dpm_err *err) {
  return set_named(node, name, &(value){.kind = VAL_INT, .i = v}, err);
}

dpm_status dpm_node_set_float(dpm_node *node, const char *name, double v, dpm_err *err) {
  return set_named(node, name, &(value){.kind = VAL_FLOAT, .f = v}, err);
}

dpm_status dpm_node_set_string(dpm_node *node, const char *name, const char *s,
                               dpm_err *err) {
  return set_named(node, name, &(value){.kind = VAL_STRING, .s = s}, err);
}

dpm_status dpm_node_set_ints(dpm_node *node, const char *name, const int64_t *v, size_t n,
                             dpm_err *err) {
  return set_named(node, name, &(value){.kind = VAL_INTS, .n = n, .iv = v}, err);
}

dpm_status dpm_node_set_floats(dpm_node *node, const char *name, const double *v,
                               size_t n, dpm_err *err) {
  return set_named(node, name, &(value){.kind = VAL_FLOATS, .n = n, .fv = v}, err);
}

dpm_status dpm_node_set_args(dpm_node *node, const char *kv, dpm_err *err) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", kv ? kv : "");
  for (char *save, *tok = strtok_r(buf, " ", &save); tok;
       tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) return dpm_errf(err, DPM_SPEC, "expected name=value, got '%s'", tok);
    *eq = 0;
    dpm_status s = dpm_node_set_string(node, tok, eq + 1, err);
    if (s) return s;
  }
  return DPM_OK;
}

/* ---- shape-inference helpers ------------------------------------------------- */

dpm_status dpm_expect_dtype(const dpm_shape *s, dpm_dtype t, const char *what,
                            dpm_err *err) {
  if (s->dtype == t) return DPM_OK;
  return dpm_errf(err, DPM_SHAPE, "%s must be %s, got %s", what, dpm_dtype_name(t),
                  dpm_dtype_name(s->dtype));
}

dpm_status dpm_expect_float(const dpm_shape *s, const char *what, dpm_err *err) {
  if (dpm_dtype_is_float(s->dtype)) return DPM_OK;
  return dpm_errf(err, DPM_SHAPE, "%s must be f32, bf16 or f16, got %s", what,
                  dpm_dtype_name(s->dtype));
}

dpm_status dpm_expect_ndim(const dpm_shape *s, int lo, int hi, const char *what,
                           dpm_err *err) {
  if (s->ndim >= lo && s->ndim <= hi) return DPM_OK;
  char b[64];
  if (lo == hi)
    return dpm_errf(err, DPM_SHAPE, "%s must have %d dimensions, got %s", what, lo,
                    dpm_shape_str(s, b, sizeof b));
  return dpm_errf(err, DPM_SHAPE, "%s must have %d to %d dimensions, got %s", what, lo,
                  hi, dpm_shape_str(s, b, sizeof b));
}
