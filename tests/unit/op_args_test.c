/* Typed argument setters (engine/op.h): every kind of value against every
 * argument type gives what the value's text gives (the same value, or the
 * same error), doubles are kept to the bit, and the checks name the
 * argument as they always have. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>

#include "engine/op.h"
#include "test.h"

/* One argument of each type, bounded and not. */
static const dpm_arg_def every_type[] = {
    {"i", DPM_ARG_INT, NULL, NULL, 0, 0},
    {"ib", DPM_ARG_INT, NULL, NULL, -5, 100},
    {"f", DPM_ARG_FLOAT, NULL, NULL, 0, 0},
    {"fb", DPM_ARG_FLOAT, NULL, NULL, 0, 1},
    {"b", DPM_ARG_BOOL, NULL, NULL, 0, 0},
    {"s", DPM_ARG_STRING, NULL, "xavier|msra", 0, 0},
    {"is", DPM_ARG_INTS, NULL, NULL, 0, 0},
    {"isb", DPM_ARG_INTS, NULL, NULL, 1, 1e12},
    {"fs", DPM_ARG_FLOATS, NULL, NULL, 0, 0},
    {"fsb", DPM_ARG_FLOATS, NULL, NULL, -1, 1},
    {NULL},
};
static const dpm_op_def every_type_op = {.name = "EveryType", .args = every_type};

/* A value as a spec holds it, and its text: "%" PRId64, "%.17g", joined by
 * commas, or the string itself. */
typedef struct {
  char kind; /* 'i' 'f' 's' 'I' 'F' */
  int64_t i;
  double f;
  const char *s;
  size_t n;
  int64_t iv[10];
  double fv[10];
} typed;

static void text_of(const typed *v, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  if (v->kind == 's') snprintf(buf, len, "%s", v->s);
  if (v->kind == 'i') snprintf(buf, len, "%" PRId64, v->i);
  if (v->kind == 'f') snprintf(buf, len, "%.17g", v->f);
  for (size_t e = 0; v->kind == 'I' && e < v->n; e++)
    k += (size_t)snprintf(buf + k, len - k, e ? ",%" PRId64 : "%" PRId64, v->iv[e]);
  for (size_t e = 0; v->kind == 'F' && e < v->n; e++)
    k += (size_t)snprintf(buf + k, len - k, e ? ",%.17g" : "%.17g", v->fv[e]);
}

static dpm_status set_typed(dpm_node *n, const char *name, const typed *v, dpm_err *e) {
  switch (v->kind) {
  case 'i':
    return dpm_node_set_int(n, name, v->i, e);
  case 'f':
    return dpm_node_set_float(n, name, v->f, e);
  case 'I':
    return dpm_node_set_ints(n, name, v->iv, v->n, e);
  case 'F':
    return dpm_node_set_floats(n, name, v->fv, v->n, e);
  default:
    return dpm_node_set_string(n, name, v->s, e);
  }
}

TEST(op_args_typed_values_set_as_their_text) {
  static const typed values[] = {
      {'i', .i = 0},
      {'i', .i = 1},
      {'i', .i = -1},
      {'i', .i = 5},
      {'i', .i = 101},
      {'i', .i = -6},
      {'i', .i = INT64_MAX},
      {'i', .i = INT64_MIN},
      {'f', .f = 0.0},
      {'f', .f = -0.0},
      {'f', .f = 1.0},
      {'f', .f = 2.0},
      {'f', .f = 0.5},
      {'f', .f = 0.1},
      {'f', .f = 1.0 / 3},
      {'f', .f = -3.0},
      {'f', .f = 1e16},
      {'f', .f = 99999999999999984.0},
      {'f', .f = 1e17},
      {'f', .f = 1e300},
      {'f', .f = DBL_MIN},
      {'f', .f = DBL_MIN / 4}, /* subnormal */
      {'f', .f = 5e-324},
      {'f', .f = INFINITY},
      {'f', .f = -INFINITY},
      {'f', .f = NAN},
      {'s', .s = "5"},
      {'s', .s = "0.5"},
      {'s', .s = "xavier"},
      {'s', .s = "true"},
      {'s', .s = "2,3"},
      {'s', .s = ""},
      {'s', .s = "abc"},
      {'s', .s = "a string of more than thirty-one bytes"},
      {'I', .n = 0},
      {'I', .n = 1, .iv = {5}},
      {'I', .n = 1, .iv = {1}},
      {'I', .n = 1, .iv = {0}},
      {'I', .n = 2, .iv = {2, 3}},
      {'I', .n = 2, .iv = {0, 7}},
      {'I', .n = 8, .iv = {1, 2, 3, 4, 5, 6, 7, 8}},
      {'I', .n = 9, .iv = {1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {'I', .n = 10, .iv = {1, 2, -3, 4, 5, 6, 7, 8, 9, 10}},
      {'F', .n = 0},
      {'F', .n = 1, .fv = {2.0}},
      {'F', .n = 1, .fv = {0.5}},
      {'F', .n = 1, .fv = {1.0}},
      {'F', .n = 2, .fv = {1.0, 0.25}},
      {'F', .n = 2, .fv = {2.5, 3}},
      {'F', .n = 2, .fv = {1e17, 0.1}},
      {'F', .n = 1, .fv = {5e-324}},
      {'F', .n = 9, .fv = {1, 2, 3, 4, 5, 6, 7, 8, 9}},
  };
  int compared = 0;
  for (size_t v = 0; v < sizeof values / sizeof *values; v++)
    for (int a = 0; every_type[a].name; a++) {
      const char *name = every_type[a].name;
      char text[512];
      text_of(&values[v], text, sizeof text);
      dpm_node typed_node = {.def = &every_type_op}, text_node = {.def = &every_type_op};
      dpm_err te = {0}, xe = {0};
      dpm_status ts = set_typed(&typed_node, name, &values[v], &te);
      dpm_status xs = dpm_node_set_string(&text_node, name, text, &xe);
      if (ts != xs || strcmp(te.msg, xe.msg) ||
          (!ts &&
           memcmp(&typed_node.arg[a], &text_node.arg[a], sizeof typed_node.arg[a]))) {
        dpm_test_fail(__FILE__, __LINE__,
                      "value #%zu '%s' into %s: typed %d \"%s\", text %d \"%s\"%s", v,
                      text, name, ts, te.msg, xs, xe.msg,
                      ts == xs ? ", values differ" : "");
        return;
      }
      CHECK_INT(typed_node.arg[a].set, ts == DPM_OK);
      compared++;
    }
  CHECK(compared > 500);
}

/* A double is stored as given: no digits are lost on the way. */
TEST(op_args_keep_doubles_exactly) {
  static const double v[] = {
      0.1,    1.0 / 3,           0.12345678901234567, 1e-300, nextafter(0.05, 1.0),
      2.5e-8, -7.000000000000001};
  for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
    dpm_node n = {.def = &every_type_op};
    CHECK_INT(dpm_node_set_float(&n, "f", v[k], NULL), DPM_OK);
    CHECK(memcmp(&n.arg[2].f, &v[k], sizeof v[k]) == 0);
    CHECK_INT(dpm_node_set_floats(&n, "fs", v, k + 1, NULL), DPM_OK);
    CHECK_INT(n.arg[8].n, (int)k + 1);
    CHECK(memcmp(n.arg[8].fv, v, (k + 1) * sizeof *v) == 0);
  }
}

static void expect(dpm_status s, const dpm_err *e, dpm_status code, const char *msg,
                   int line) {
  if (s != code || !strstr(e->msg, msg))
    dpm_test_fail(__FILE__, line, "status %d \"%s\", want %d \"%s\"", s, e->msg, code,
                  msg);
}
#define EXPECT(call, code, msg)                                                          \
  do {                                                                                   \
    dpm_err e_ = {0};                                                                    \
    dpm_node n_ = {.def = &every_type_op};                                               \
    dpm_status s_ = call(&n_, &e_);                                                      \
    expect(s_, &e_, code, msg, __LINE__);                                                \
    if (dpm_test_has_failed()) return;                                                   \
  } while (0)

static dpm_status unknown(dpm_node *n, dpm_err *e) {
  return dpm_node_set_int(n, "zz", 1, e);
}
static dpm_status out_of_bounds(dpm_node *n, dpm_err *e) {
  return dpm_node_set_int(n, "ib", 101, e);
}
static dpm_status list_out_of_bounds(dpm_node *n, dpm_err *e) {
  return dpm_node_set_floats(n, "fsb", (const double[]){0.5, -2}, 2, e);
}
static dpm_status too_many(dpm_node *n, dpm_err *e) {
  return dpm_node_set_ints(n, "is", (const int64_t[9]){0}, 9, e);
}
static dpm_status not_a_choice(dpm_node *n, dpm_err *e) {
  return dpm_node_set_int(n, "s", 5, e);
}
static dpm_status fraction(dpm_node *n, dpm_err *e) {
  return dpm_node_set_float(n, "i", 0.5, e);
}
static dpm_status subnormal(dpm_node *n, dpm_err *e) {
  return dpm_node_set_float(n, "f", 5e-324, e);
}
static dpm_status list_for_int(dpm_node *n, dpm_err *e) {
  return dpm_node_set_ints(n, "i", (const int64_t[]){2, 3}, 2, e);
}
static dpm_status flag(dpm_node *n, dpm_err *e) { return dpm_node_set_int(n, "b", 2, e); }
static dpm_status fraction_in_ints(dpm_node *n, dpm_err *e) {
  return dpm_node_set_floats(n, "is", (const double[]){1, 2.5}, 2, e);
}

TEST(op_args_refuse_with_the_argument_named) {
  EXPECT(unknown, DPM_SPEC, "unknown argument 'zz' for EveryType");
  EXPECT(out_of_bounds, DPM_SPEC, "argument 'ib' = 101 is outside [-5, 100]");
  EXPECT(list_out_of_bounds, DPM_SPEC, "argument 'fsb' = -2 is outside [-1, 1]");
  EXPECT(too_many, DPM_SPEC, "argument 'is' has more than 8 elements");
  EXPECT(not_a_choice, DPM_SPEC, "argument 's' must be one of xavier|msra, got '5'");
  EXPECT(fraction, DPM_SPEC, "argument 'i' expects an integer, got '0.5'");
  EXPECT(subnormal, DPM_SPEC,
         "argument 'f' expects a number, got '4.9406564584124654e-324'");
  EXPECT(list_for_int, DPM_SPEC, "argument 'i' expects an integer, got '2,3'");
  EXPECT(flag, DPM_SPEC, "argument 'b' expects true or false, got '2'");
  EXPECT(fraction_in_ints, DPM_SPEC,
         "argument 'is' expects a list of integers, got '1,2.5'");
}

/* Values of another kind convert as their text did: an integer for a float,
 * 2.0 or [2] for an integer, a scalar for a one-element list. */
TEST(op_args_convert_between_kinds) {
  dpm_node n = {.def = &every_type_op};
  CHECK_INT(dpm_node_set_int(&n, "fb", 1, NULL), DPM_OK);
  CHECK(n.arg[3].set && n.arg[3].f == 1.0);
  CHECK_INT(dpm_node_set_float(&n, "ib", 2.0, NULL), DPM_OK);
  CHECK(n.arg[1].i == 2 && n.arg[1].f == 2.0);
  CHECK_INT(dpm_node_set_ints(&n, "i", (const int64_t[]){-4}, 1, NULL), DPM_OK);
  CHECK_INT(n.arg[0].i, -4);
  CHECK_INT(dpm_node_set_float(&n, "b", 1.0, NULL), DPM_OK);
  CHECK_INT(n.arg[4].i, 1);
  CHECK_INT(dpm_node_set_int(&n, "isb", 7, NULL), DPM_OK);
  CHECK(n.arg[7].n == 1 && n.arg[7].v[0] == 7 && n.arg[7].fv[0] == 7.0);
  CHECK_INT(dpm_node_set_string(&n, "is", "4,5", NULL), DPM_OK);
  CHECK(n.arg[6].n == 2 && n.arg[6].v[1] == 5);
  CHECK_INT(dpm_node_set_string(&n, "s", "msra", NULL), DPM_OK);
  CHECK(n.arg[5].i == 1 && !strcmp(n.arg[5].s, "msra"));
  /* A refused value leaves the argument unset. */
  CHECK_INT(dpm_node_set_float(&n, "ib", 2.5, NULL), DPM_SPEC);
  CHECK_INT(n.arg[1].set, 0);
}
