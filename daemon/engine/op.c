/* Operator argument schema handling, shared by the graph builder and tests. */
#include "engine/op.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int parse_int(const char *t, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(t, &end, 10);
  if (errno || end == t || *end) return 0;
  *v = x;
  return 1;
}

static int parse_float(const char *t, double *v) {
  char *end;
  errno = 0;
  double x = strtod(t, &end);
  if (errno || end == t || *end) return 0;
  *v = x;
  return 1;
}

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

static dpm_status parse_list(const dpm_arg_def *a, const char *text, dpm_arg *v,
                             dpm_err *err) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  v->n = 0;
  for (char *save, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (v->n == DPM_ARG_MAX_LIST)
      return dpm_errf(err, DPM_SPEC, "argument '%s' has more than %d elements", a->name,
                      DPM_ARG_MAX_LIST);
    int ok = a->type == DPM_ARG_INTS ? parse_int(tok, &v->v[v->n])
                                     : parse_float(tok, &v->fv[v->n]);
    if (a->type == DPM_ARG_INTS) v->fv[v->n] = (double)v->v[v->n];
    if (!ok)
      return dpm_errf(err, DPM_SPEC, "argument '%s' expects a list of %s, got '%s'",
                      a->name, a->type == DPM_ARG_INTS ? "integers" : "numbers", text);
    if (bounds(a, v->fv[v->n], err)) return err->code;
    v->n++;
  }
  return DPM_OK;
}

static dpm_status parse_typed(const dpm_arg_def *a, const char *text, dpm_arg *v,
                              dpm_err *err) {
  memset(v, 0, sizeof *v);
  switch (a->type) {
  case DPM_ARG_INT:
    if (!parse_int(text, &v->i))
      return dpm_errf(err, DPM_SPEC, "argument '%s' expects an integer, got '%s'",
                      a->name, text);
    v->f = (double)v->i;
    return bounds(a, v->f, err);
  case DPM_ARG_FLOAT:
    if (!parse_float(text, &v->f))
      return dpm_errf(err, DPM_SPEC, "argument '%s' expects a number, got '%s'", a->name,
                      text);
    return bounds(a, v->f, err);
  case DPM_ARG_BOOL:
    if (!strcmp(text, "true") || !strcmp(text, "1"))
      v->i = 1;
    else if (!strcmp(text, "false") || !strcmp(text, "0"))
      v->i = 0;
    else
      return dpm_errf(err, DPM_SPEC, "argument '%s' expects true or false, got '%s'",
                      a->name, text);
    v->f = (double)v->i;
    return DPM_OK;
  case DPM_ARG_STRING:
    if (strlen(text) >= sizeof v->s)
      return dpm_errf(err, DPM_SPEC, "argument '%s' is too long", a->name);
    if (a->choices && (v->i = choice_index(a->choices, text)) < 0)
      return dpm_errf(err, DPM_SPEC, "argument '%s' must be one of %s, got '%s'", a->name,
                      a->choices, text);
    snprintf(v->s, sizeof v->s, "%s", text);
    return DPM_OK;
  case DPM_ARG_INTS:
  case DPM_ARG_FLOATS:
    return parse_list(a, text, v, err);
  }
  return dpm_errf(err, DPM_INTERNAL, "argument '%s' has no type", a->name);
}

static dpm_status parse_value(const dpm_arg_def *a, const char *text, dpm_arg *v,
                              dpm_err *err) {
  dpm_status s = parse_typed(a, text, v, err);
  v->set = s == DPM_OK;
  return s;
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
    if (args[i].def && parse_value(&args[i], args[i].def, &node->arg[i], err)) {
      if (!err) return DPM_INTERNAL;
      dpm_err_prefix(err, "op %s default: ", node->def->name);
      return err->code = DPM_INTERNAL;
    }
  }
  return DPM_OK;
}

dpm_status dpm_node_set_arg(dpm_node *node, const char *name, const char *text,
                            dpm_err *err) {
  int k = dpm_op_arg_index(node->def, name);
  if (k < 0)
    return dpm_errf(err, DPM_SPEC, "unknown argument '%s' for %s", name, node->def->name);
  return parse_value(&node->def->args[k], text, &node->arg[k], err);
}

dpm_status dpm_node_set_args(dpm_node *node, const char *kv, dpm_err *err) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", kv ? kv : "");
  for (char *save, *tok = strtok_r(buf, " ", &save); tok;
       tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) return dpm_errf(err, DPM_SPEC, "expected name=value, got '%s'", tok);
    *eq = 0;
    dpm_status s = dpm_node_set_arg(node, tok, eq + 1, err);
    if (s) return s;
  }
  return DPM_OK;
}

dpm_status dpm_expect_dtype(const dpm_shape *s, dpm_dtype t, const char *what,
                            dpm_err *err) {
  if (s->dtype == t) return DPM_OK;
  return dpm_errf(err, DPM_SHAPE, "%s must be %s, got %s", what, dpm_dtype_name(t),
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
