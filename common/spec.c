/* The spec schema: dpm_ynode tree (ytree.c) -> Dpm__ModelSpec. Each section
 * is a table of keys saying how to read the value and where it goes in the
 * message; operators (forward) and devices have their own readers. */
#include "common/spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/checked_spec.h"
#include "common/device.h"
#include "common/shards.h"
#include "common/suggest.h"
#include "common/validate.h"
#include "common/workcount.h"
#include "common/ytree.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define AT(msg, off, type) ((type *)((char *)(msg) + (off)))

/* ---- context and errors ---------------------------------------------- */

typedef struct {
  const char *src; /* source name for messages */
  dpm_err *err;    /* where errors go (may be NULL) */
  char where[80];  /* "op #3 (FC): " while inside forward, else "" */
} spec_ctx;

static dpm_status spec_fail(spec_ctx *c, const dpm_ynode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static dpm_status spec_fail(spec_ctx *c, const dpm_ynode *n, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpm_yerr(c->err, c->src, n, "%s%s", c->where, msg);
}

static dpm_status spec_nomem(spec_ctx *c) {
  return dpm_errf(c->err, DPM_NOMEM, "%s: out of memory", c->src);
}

/* "'abc'", "'64' (a quoted string)", "a list", ... for "got ..." */
static const char *spec_got(const dpm_ynode *v, char *buf, size_t cap) {
  dpm_ynode_describe(v, buf, cap);
  if (v && v->kind == DPM_YNODE_SCALAR && v->quoted) {
    size_t l = strlen(buf);
    if (l + 20 < cap) memcpy(buf + l, " (a quoted string)", 19);
  }
  return buf;
}

/* ---- scalar literals ------------------------------------------------- */

static size_t spec_digits(const char *s, size_t i, size_t len) {
  size_t j = i;
  while (j < len && s[j] >= '0' && s[j] <= '9') j++;
  return j - i;
}

/* A plain scalar written as [-+]?[0-9]+. */
static int spec_is_int_lit(const dpm_ynode *v) {
  if (!v || v->kind != DPM_YNODE_SCALAR || v->quoted || v->len == 0) return 0;
  size_t i = (v->str[0] == '-' || v->str[0] == '+') ? 1 : 0;
  size_t d = spec_digits(v->str, i, v->len);
  return d > 0 && i + d == v->len;
}

/* A plain scalar written as a decimal number: [-+]?(D+(.D*)?|.D+)([eE][-+]?D+)? */
static int spec_is_num_lit(const dpm_ynode *v) {
  if (!v || v->kind != DPM_YNODE_SCALAR || v->quoted || v->len == 0) return 0;
  const char *s = v->str;
  size_t len = v->len, i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  size_t whole = spec_digits(s, i, len), frac = 0;
  i += whole;
  if (i < len && s[i] == '.') {
    frac = spec_digits(s, i + 1, len);
    i += 1 + frac;
  }
  if (whole == 0 && frac == 0) return 0;
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < len && (s[i] == '-' || s[i] == '+')) i++;
    size_t e = spec_digits(s, i, len);
    if (e == 0) return 0;
    i += e;
  }
  return i == len;
}

/* Magnitude and sign of an integer literal; 0 if the magnitude overflows. */
static int spec_int_parts(const dpm_ynode *v, int *neg, uint64_t *mag) {
  const char *s = v->str;
  *neg = s[0] == '-';
  if (s[0] == '-' || s[0] == '+') s++;
  errno = 0;
  unsigned long long x = strtoull(s, NULL, 10);
  if (errno == ERANGE) return 0;
  *mag = x;
  if (*mag == 0) *neg = 0; /* -0 is 0 */
  return 1;
}

/* ---- typed readers ----------------------------------------------------- */

/* Every reader rejects null values and non-scalars with the key's name. */
static dpm_status spec_scalar(spec_ctx *c, const char *key, const dpm_ynode *v,
                              const char *what) {
  char got[80];
  if (v->kind != DPM_YNODE_SCALAR)
    return spec_fail(c, v, "'%s' must be %s, got %s", key, what,
                     spec_got(v, got, sizeof got));
  if (dpm_ynode_is_null(v)) return spec_fail(c, v, "'%s' has no value", key);
  return DPM_OK;
}

/* A non-empty string without NUL bytes, malloc'd into *out. */
static dpm_status spec_read_str(spec_ctx *c, const char *key, const dpm_ynode *v,
                                char **out) {
  dpm_status st = spec_scalar(c, key, v, "a string");
  if (st != DPM_OK) return st;
  if (v->len == 0) return spec_fail(c, v, "'%s' must not be empty", key);
  if (strlen(v->str) != v->len)
    return spec_fail(c, v, "'%s' contains a NUL character", key);
  if (!(*out = strdup(v->str))) return spec_nomem(c);
  return DPM_OK;
}

static dpm_status spec_read_uint(spec_ctx *c, const char *key, const dpm_ynode *v,
                                 uint64_t lo, uint64_t hi, uint64_t *out) {
  char got[80];
  dpm_status st = spec_scalar(c, key, v, "an integer");
  if (st != DPM_OK) return st;
  if (!spec_is_int_lit(v))
    return spec_fail(c, v, "'%s' must be an integer, got %s", key,
                     spec_got(v, got, sizeof got));
  int neg;
  uint64_t mag;
  int fits = spec_int_parts(v, &neg, &mag);
  if (fits && neg)
    return spec_fail(c, v, "'%s' must be >= %llu, got %s", key, (unsigned long long)lo,
                     spec_got(v, got, sizeof got));
  if (!fits || mag > hi)
    return spec_fail(c, v, "'%s' must be <= %llu, got %s", key, (unsigned long long)hi,
                     spec_got(v, got, sizeof got));
  if (mag < lo)
    return spec_fail(c, v, "'%s' must be >= %llu, got %s", key, (unsigned long long)lo,
                     spec_got(v, got, sizeof got));
  *out = mag;
  return DPM_OK;
}

/* Bounds of a number: lo/hi, each inclusive unless its *_open flag is set. */
typedef struct {
  double lo, hi;
  unsigned char lo_open, hi_open;
} spec_range;

static dpm_status spec_read_num(spec_ctx *c, const char *key, const dpm_ynode *v,
                                const spec_range *r, double *out) {
  char got[80];
  dpm_status st = spec_scalar(c, key, v, "a number");
  if (st != DPM_OK) return st;
  if (!spec_is_num_lit(v))
    return spec_fail(c, v, "'%s' must be a number, got %s", key,
                     spec_got(v, got, sizeof got));
  double x = strtod(v->str, NULL);
  if (!isfinite(x))
    return spec_fail(c, v, "'%s' is out of range, got %s", key,
                     spec_got(v, got, sizeof got));
  int lo_bad = r->lo_open ? !(x > r->lo) : !(x >= r->lo);
  int hi_bad = r->hi_open ? !(x < r->hi) : !(x <= r->hi);
  if (lo_bad || hi_bad) {
    char want[64];
    if (isinf(r->hi))
      snprintf(want, sizeof want, "%s %g", r->lo_open ? ">" : ">=", r->lo);
    else if (isinf(r->lo))
      snprintf(want, sizeof want, "%s %g", r->hi_open ? "<" : "<=", r->hi);
    else
      snprintf(want, sizeof want, "in %c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi,
               r->hi_open ? ')' : ']');
    return spec_fail(c, v, "'%s' must be %s, got %s", key, want,
                     spec_got(v, got, sizeof got));
  }
  *out = x;
  return DPM_OK;
}

static dpm_status spec_read_bool(spec_ctx *c, const char *key, const dpm_ynode *v,
                                 protobuf_c_boolean *out) {
  char got[80];
  dpm_status st = spec_scalar(c, key, v, "true or false");
  if (st != DPM_OK) return st;
  if (!v->quoted && dpm_ynode_is(v, "true"))
    *out = 1;
  else if (!v->quoted && dpm_ynode_is(v, "false"))
    *out = 0;
  else
    return spec_fail(c, v, "'%s' must be true or false, got %s", key,
                     spec_got(v, got, sizeof got));
  return DPM_OK;
}

typedef struct {
  const char *name; /* as written in YAML */
  int value;        /* protobuf enum value */
} spec_choice;

static dpm_status spec_read_enum(spec_ctx *c, const char *key, const dpm_ynode *v,
                                 const spec_choice *ch, int *out) {
  char got[80], list[160];
  dpm_status st = spec_scalar(c, key, v, "a name");
  if (st != DPM_OK) return st;
  size_t o = 0;
  list[0] = '\0';
  for (const spec_choice *p = ch; p->name; p++) {
    if (dpm_ynode_is(v, p->name)) {
      *out = p->value;
      return DPM_OK;
    }
    int w = snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", p->name);
    if (w > 0 && (size_t)w < sizeof list - o) o += (size_t)w;
  }
  return spec_fail(c, v, "'%s' must be one of: %s; got %s", key, list,
                   spec_got(v, got, sizeof got));
}

static void spec_free_strs(char **a, size_t n) {
  if (!a) return;
  for (size_t i = 0; i < n; i++) free(a[i]);
  free(a);
}

/* A list of strings, or one string standing for a list of one. */
static dpm_status spec_read_strs(spec_ctx *c, const char *key, const dpm_ynode *v,
                                 char ***out, size_t *n) {
  char got[80];
  if (v->kind == DPM_YNODE_MAP)
    return spec_fail(c, v, "'%s' must be a list of strings, got %s", key,
                     spec_got(v, got, sizeof got));
  const dpm_ynode *one = v;
  size_t count = v->kind == DPM_YNODE_SEQ ? v->n : 1;
  char **a = calloc(count ? count : 1, sizeof *a);
  if (!a) return spec_nomem(c);
  for (size_t i = 0; i < count; i++) {
    const dpm_ynode *item = v->kind == DPM_YNODE_SEQ ? v->items[i] : one;
    dpm_status st;
    if (item->kind != DPM_YNODE_SCALAR)
      st = spec_fail(c, item, "'%s' items must be strings, got %s", key,
                     spec_got(item, got, sizeof got));
    else
      st = spec_read_str(c, key, item, &a[i]);
    if (st != DPM_OK) {
      spec_free_strs(a, i);
      return st;
    }
  }
  *out = a;
  *n = count;
  return DPM_OK;
}

/* A list of unsigned integers in [lo, hi], stored as uint32 or uint64. */
static dpm_status spec_read_uints(spec_ctx *c, const char *key, const dpm_ynode *v,
                                  uint64_t lo, uint64_t hi, int wide, void **out,
                                  size_t *n) {
  char got[80];
  if (v->kind != DPM_YNODE_SEQ)
    return spec_fail(c, v, "'%s' must be a list of integers, got %s", key,
                     spec_got(v, got, sizeof got));
  void *a = calloc(v->n ? v->n : 1, wide ? sizeof(uint64_t) : sizeof(uint32_t));
  if (!a) return spec_nomem(c);
  for (size_t i = 0; i < v->n; i++) {
    uint64_t x;
    dpm_status st = spec_read_uint(c, key, v->items[i], lo, hi, &x);
    if (st != DPM_OK) {
      free(a);
      return st;
    }
    if (wide)
      ((uint64_t *)a)[i] = x;
    else
      ((uint32_t *)a)[i] = (uint32_t)x;
  }
  *out = a;
  *n = v->n;
  return DPM_OK;
}

/* A list of numbers, each within r. */
static dpm_status spec_read_nums(spec_ctx *c, const char *key, const dpm_ynode *v,
                                 const spec_range *r, double **out, size_t *n) {
  char got[80];
  if (v->kind != DPM_YNODE_SEQ)
    return spec_fail(c, v, "'%s' must be a list of numbers, got %s", key,
                     spec_got(v, got, sizeof got));
  double *a = calloc(v->n ? v->n : 1, sizeof *a);
  if (!a) return spec_nomem(c);
  for (size_t i = 0; i < v->n; i++) {
    dpm_status st = spec_read_num(c, key, v->items[i], r, &a[i]);
    if (st != DPM_OK) {
      free(a);
      return st;
    }
  }
  *out = a;
  *n = v->n;
  return DPM_OK;
}

/* A new, initialised message of type d (free with free_unpacked). */
static void *spec_new(const ProtobufCMessageDescriptor *d) {
  ProtobufCMessage *m = malloc(d->sizeof_message);
  if (m) d->message_init(m);
  return m;
}

/* ---- section tables ---------------------------------------------------- */

typedef enum {
  SF_STR,    /* char *, non-empty */
  SF_U32,    /* has_ + uint32_t in [ilo, UINT32_MAX] */
  SF_U64,    /* has_ + uint64_t in [ilo, UINT64_MAX] */
  SF_NUM,    /* has_ + double within range */
  SF_BOOL,   /* has_ + protobuf_c_boolean */
  SF_ENUM,   /* has_ + enum, one of choices */
  SF_STRS,   /* n_ + char ** */
  SF_U32S,   /* n_ + uint32_t *, each >= ilo */
  SF_U64S,   /* n_ + uint64_t *, each >= ilo */
  SF_NUMS,   /* n_ + double *, each within range */
  SF_SUB,    /* message pointer, read with section sub */
  SF_CUSTOM, /* read by fn */
} spec_kind;

typedef struct spec_section spec_section;
typedef struct spec_field spec_field;
typedef dpm_status (*spec_read_fn)(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                   void *msg);

struct spec_field {
  const char *key;            /* YAML key */
  spec_kind kind;             /* how to read it */
  size_t off;                 /* value (or array, message) offset in msg */
  size_t aux;                 /* has_ or n_ offset; 0 if none */
  uint64_t ilo;               /* integers: smallest accepted */
  spec_range range;           /* SF_NUM: accepted values */
  const spec_choice *choices; /* SF_ENUM: NULL-terminated */
  const spec_section *sub;    /* SF_SUB */
  spec_read_fn fn;            /* SF_CUSTOM */
  int required;               /* missing key is an error */
};

struct spec_section {
  const char *path;                       /* "input", "update.lr"; "" at top */
  const ProtobufCMessageDescriptor *desc; /* message type of the section */
  const spec_field *fields;               /* its keys */
  size_t n_fields;
  size_t has_line_off, line_off; /* where the mapping's line goes; 0 if none */
  dpm_status (*check)(spec_ctx *c, const dpm_ynode *map, void *msg);
};

#define ANY_NUM                                                                          \
  { -INFINITY, INFINITY, 0, 0 }
#define F_STR(T, k, ...)                                                                 \
  { .key = #k, .kind = SF_STR, .off = offsetof(T, k), __VA_ARGS__ }
#define F_U32(T, k, lo, ...)                                                             \
  {                                                                                      \
    .key = #k, .kind = SF_U32, .off = offsetof(T, k), .aux = offsetof(T, has_##k),       \
    .ilo = lo, __VA_ARGS__                                                               \
  }
#define F_U64(T, k, lo, ...)                                                             \
  {                                                                                      \
    .key = #k, .kind = SF_U64, .off = offsetof(T, k), .aux = offsetof(T, has_##k),       \
    .ilo = lo, __VA_ARGS__                                                               \
  }
#define F_NUM(T, k, ...) F_NUM_AS(T, #k, k, __VA_ARGS__)
#define F_NUM_AS(T, key_, k, ...)                                                        \
  {                                                                                      \
    .key = key_, .kind = SF_NUM, .off = offsetof(T, k), .aux = offsetof(T, has_##k),     \
    .range = __VA_ARGS__                                                                 \
  }
#define F_BOOL(T, k)                                                                     \
  { .key = #k, .kind = SF_BOOL, .off = offsetof(T, k), .aux = offsetof(T, has_##k) }
#define F_ENUM(T, k, ch)                                                                 \
  {                                                                                      \
    .key = #k, .kind = SF_ENUM, .off = offsetof(T, k), .aux = offsetof(T, has_##k),      \
    .choices = ch                                                                        \
  }
#define F_STRS(T, k, ...)                                                                \
  {                                                                                      \
    .key = #k, .kind = SF_STRS, .off = offsetof(T, k), .aux = offsetof(T, n_##k),        \
    __VA_ARGS__                                                                          \
  }
#define F_UINTS(T, k, K, lo)                                                             \
  { .key = #k, .kind = K, .off = offsetof(T, k), .aux = offsetof(T, n_##k), .ilo = lo }
#define F_NUMS(T, k, ...)                                                                \
  {                                                                                      \
    .key = #k, .kind = SF_NUMS, .off = offsetof(T, k), .aux = offsetof(T, n_##k),        \
    .range = __VA_ARGS__                                                                 \
  }
#define F_SUB(T, k, s)                                                                   \
  { .key = #k, .kind = SF_SUB, .off = offsetof(T, k), .sub = &s }
#define F_FN(T, k, f, ...)                                                               \
  { .key = #k, .kind = SF_CUSTOM, .off = offsetof(T, k), .fn = f, __VA_ARGS__ }
#define SECTION(path_, T, fields_, check_)                                               \
  {                                                                                      \
    .path = path_, .desc = &T##__descriptor, .fields = fields_,                          \
    .n_fields = ARRAY_LEN(fields_), .check = check_                                      \
  }

static dpm_status spec_read_section(spec_ctx *c, const spec_section *s, const char *key,
                                    const dpm_ynode *map, void *msg);

/* Reads value v of field f into msg. */
static dpm_status spec_read_field(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                  void *msg) {
  dpm_status st = DPM_OK;
  uint64_t u = 0;
  switch (f->kind) {
  case SF_STR:
    return spec_read_str(c, f->key, v, AT(msg, f->off, char *));
  case SF_U32:
    st = spec_read_uint(c, f->key, v, f->ilo, UINT32_MAX, &u);
    if (st == DPM_OK) *AT(msg, f->off, uint32_t) = (uint32_t)u;
    break;
  case SF_U64:
    st = spec_read_uint(c, f->key, v, f->ilo, UINT64_MAX, &u);
    if (st == DPM_OK) *AT(msg, f->off, uint64_t) = u;
    break;
  case SF_NUM:
    st = spec_read_num(c, f->key, v, &f->range, AT(msg, f->off, double));
    break;
  case SF_BOOL:
    st = spec_read_bool(c, f->key, v, AT(msg, f->off, protobuf_c_boolean));
    break;
  case SF_ENUM: {
    int e = 0;
    st = spec_read_enum(c, f->key, v, f->choices, &e);
    /* protobuf-c enums are int-sized (PROTOBUF_C__FORCE_ENUM_TO_BE_INT_SIZE) */
    if (st == DPM_OK) memcpy(AT(msg, f->off, char), &e, sizeof e);
    break;
  }
  case SF_STRS:
    return spec_read_strs(c, f->key, v, AT(msg, f->off, char **),
                          AT(msg, f->aux, size_t));
  case SF_U32S:
  case SF_U64S:
    return spec_read_uints(
        c, f->key, v, f->ilo, f->kind == SF_U32S ? UINT32_MAX : UINT64_MAX,
        f->kind == SF_U64S, AT(msg, f->off, void *), AT(msg, f->aux, size_t));
  case SF_NUMS:
    return spec_read_nums(c, f->key, v, &f->range, AT(msg, f->off, double *),
                          AT(msg, f->aux, size_t));
  case SF_SUB: {
    void *sub = spec_new(f->sub->desc);
    if (!sub) return spec_nomem(c);
    *AT(msg, f->off, void *) = sub; /* owned by msg from here on */
    return spec_read_section(c, f->sub, f->key, v, sub);
  }
  case SF_CUSTOM:
    return f->fn(c, f, v, msg);
  }
  if (st == DPM_OK && f->aux) *AT(msg, f->aux, protobuf_c_boolean) = 1;
  return st;
}

static dpm_status spec_read_section(spec_ctx *c, const spec_section *s, const char *key,
                                    const dpm_ynode *map, void *msg) {
  char got[80];
  if (map->kind != DPM_YNODE_MAP)
    return spec_fail(c, map, "'%s' must be a mapping, got %s", key,
                     spec_got(map, got, sizeof got));
  for (size_t i = 0; i < map->n; i++) {
    const dpm_ynode *k = dpm_ymap_key(map, i);
    const spec_field *f = NULL;
    for (size_t j = 0; j < s->n_fields && !f; j++)
      if (dpm_ynode_is(k, s->fields[j].key)) f = &s->fields[j];
    if (!f) {
      char list[300], hint[DPM_SUGGEST_MAX_LEN + 32];
      size_t o = 0;
      list[0] = '\0';
      dpm_suggest sg;
      dpm_suggest_init(&sg, k->kind == DPM_YNODE_SCALAR ? k->str : NULL);
      for (size_t j = 0; j < s->n_fields; j++) {
        dpm_suggest_add(&sg, s->fields[j].key);
        int w =
            snprintf(list + o, sizeof list - o, "%s%s", j ? ", " : "", s->fields[j].key);
        if (w > 0 && (size_t)w < sizeof list - o) o += (size_t)w;
      }
      return spec_fail(c, k, "unknown key %s %s%s%s (expected one of: %s)",
                       dpm_ynode_describe(k, got, sizeof got),
                       *s->path ? "in " : "at top level", s->path,
                       dpm_suggest_phrase(&sg, hint, sizeof hint), list);
    }
    dpm_status st = spec_read_field(c, f, dpm_ymap_value(map, i), msg);
    if (st != DPM_OK) return st;
  }
  for (size_t j = 0; j < s->n_fields; j++)
    if (s->fields[j].required && !dpm_ymap_get(map, s->fields[j].key))
      return spec_fail(c, map, "missing key '%s'%s%s", s->fields[j].key,
                       *s->path ? " in " : "", s->path);
  if (s->line_off) {
    *AT(msg, s->has_line_off, protobuf_c_boolean) = 1;
    *AT(msg, s->line_off, uint32_t) = map->line;
  }
  return s->check ? s->check(c, map, msg) : DPM_OK;
}

/* ---- input ------------------------------------------------------------- */

static const spec_choice reader_choices[] = {
    {"idx", DPM__READER_KIND__READER_IDX},
    {"synthetic", DPM__READER_KIND__READER_SYNTHETIC},
    {"tar", DPM__READER_KIND__READER_TAR},
    {"lmdb", DPM__READER_KIND__READER_LMDB},
    {"folder", DPM__READER_KIND__READER_FOLDER},
    {NULL, 0}};
static const spec_choice bad_sample_choices[] = {
    {"fail", DPM__BAD_SAMPLE__BAD_SAMPLE_FAIL},
    {"skip", DPM__BAD_SAMPLE__BAD_SAMPLE_SKIP},
    {NULL, 0}};

/* shards: a list of file names, each of which may hold one brace range
 * (common/shards.h), expanded here; at most DPM_SPEC_MAX_SHARD_FILES in all. */
static dpm_status spec_read_shards(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                   void *msg) {
  char **pat = NULL, ***names = AT(msg, f->off, char **);
  size_t npat = 0, *n = AT(msg, f->aux, size_t);
  dpm_status st = spec_read_strs(c, f->key, v, &pat, &npat);
  for (size_t i = 0; st == DPM_OK && i < npat; i++) {
    char **one = NULL;
    size_t k = 0;
    dpm_err e = {0};
    if (dpm_shards_expand(pat[i], DPM_SPEC_MAX_SHARD_FILES - *n, &one, &k, &e)) {
      st = spec_fail(c, v->kind == DPM_YNODE_SEQ ? v->items[i] : v, "'%s': %s", f->key,
                     e.msg);
      break;
    }
    char **grown = realloc(*names, (*n + k) * sizeof *grown);
    if (!grown) {
      spec_free_strs(one, k);
      st = spec_nomem(c);
      break;
    }
    memcpy(grown + *n, one, k * sizeof *one);
    free(one);
    *names = grown;
    *n += k;
  }
  spec_free_strs(pat, npat);
  return st;
}

/* What each image reader needs: tar its shards, lmdb and folder a path;
 * the input section also needs an image section (spec_check_input). */
static dpm_status spec_check_image_source(spec_ctx *c, const dpm_ynode *map,
                                          const char *section, int reader,
                                          size_t n_shards, const char *path) {
  if (reader == DPM__READER_KIND__READER_TAR && !n_shards)
    return spec_fail(c, map, "missing key 'shards' in %s (reader tar)", section);
  if ((reader == DPM__READER_KIND__READER_LMDB ||
       reader == DPM__READER_KIND__READER_FOLDER) &&
      !path)
    return spec_fail(c, map, "missing key 'path' in %s (reader %s)", section,
                     reader == DPM__READER_KIND__READER_LMDB ? "lmdb" : "folder");
  return DPM_OK;
}

static dpm_status spec_check_image(spec_ctx *c, const dpm_ynode *map, void *msg) {
  Dpm__ImageSpec *im = msg;
  if (!im->has_crop) return spec_fail(c, map, "missing key 'crop' in input.image");
  if (im->channels != 1 && im->channels != 3)
    return spec_fail(c, dpm_ymap_get(map, "channels"),
                     "'channels' must be 1 (gray) or 3 (RGB), got %u", im->channels);
  if (im->area_min > im->area_max)
    return spec_fail(c, dpm_ymap_get(map, "area_min"),
                     "'area_min' %g is above area_max %g", im->area_min, im->area_max);
  if (im->aspect_min > im->aspect_max)
    return spec_fail(c, dpm_ymap_get(map, "aspect_min"),
                     "'aspect_min' %g is above aspect_max %g", im->aspect_min,
                     im->aspect_max);
  if (im->has_resize && im->resize < im->crop)
    return spec_fail(c, dpm_ymap_get(map, "resize"),
                     "'resize' %u must be at least crop %u", im->resize, im->crop);
  static const char *const keys[2] = {"mean", "std"};
  size_t counts[2] = {im->n_mean, im->n_std};
  for (int k = 0; k < 2; k++)
    if (counts[k] && counts[k] != 1 && counts[k] != im->channels)
      return spec_fail(c, dpm_ymap_get(map, keys[k]),
                       "'%s' must hold 1 or channels (%u) numbers, got %zu", keys[k],
                       im->channels, counts[k]);
  return DPM_OK;
}

static const spec_field image_fields[] = {
    F_U32(Dpm__ImageSpec, channels, 1),
    F_U32(Dpm__ImageSpec, crop, 1),
    F_U32(Dpm__ImageSpec, resize, 1),
    F_BOOL(Dpm__ImageSpec, random_crop),
    F_NUM(Dpm__ImageSpec, area_min, {0, 1, 1, 0}),
    F_NUM(Dpm__ImageSpec, area_max, {0, 1, 1, 0}),
    F_NUM(Dpm__ImageSpec, aspect_min, {0, INFINITY, 1, 0}),
    F_NUM(Dpm__ImageSpec, aspect_max, {0, INFINITY, 1, 0}),
    F_BOOL(Dpm__ImageSpec, mirror),
    F_NUMS(Dpm__ImageSpec, mean, {-65536, 65536, 0, 0}),
    F_NUMS(Dpm__ImageSpec, std, {0, 65536, 1, 0}),
    F_U32(Dpm__ImageSpec, decode_threads, 1),
    F_U64(Dpm__ImageSpec, max_pixels, 1),
};
static const spec_section image_section = {.path = "input.image",
                                           .desc = &dpm__image_spec__descriptor,
                                           .fields = image_fields,
                                           .n_fields = ARRAY_LEN(image_fields),
                                           .has_line_off =
                                               offsetof(Dpm__ImageSpec, has_line),
                                           .line_off = offsetof(Dpm__ImageSpec, line),
                                           .check = spec_check_image};

/* shard_id < num_shards, reported at shard_id (or num_shards) */
static dpm_status spec_check_shards(spec_ctx *c, const dpm_ynode *map, uint32_t shard_id,
                                    uint32_t num_shards) {
  if (shard_id < num_shards) return DPM_OK;
  const dpm_ynode *at = dpm_ymap_get(map, "shard_id");
  return spec_fail(c, at ? at : dpm_ymap_get(map, "num_shards"),
                   "'shard_id' must be less than num_shards (%u), got %u", num_shards,
                   shard_id);
}

static dpm_status spec_check_input(spec_ctx *c, const dpm_ynode *map, void *msg) {
  Dpm__InputSpec *in = msg;
  if (in->reader == DPM__READER_KIND__READER_IDX) {
    if (!in->images)
      return spec_fail(c, map, "missing key 'images' in input (reader idx)");
    if (!in->labels)
      return spec_fail(c, map, "missing key 'labels' in input (reader idx)");
  }
  if (dpm_reader_kind_is_image(in->reader)) {
    dpm_status st =
        spec_check_image_source(c, map, "input", in->reader, in->n_shards, in->path);
    if (st != DPM_OK) return st;
    if (!in->image)
      return spec_fail(c, map, "missing key 'image' in input (the crop, at least)");
  }
  const dpm_ynode *outs = dpm_ymap_get(map, "outputs");
  if (!outs) { /* default: [data, label] */
    in->outputs = calloc(2, sizeof *in->outputs);
    if (!in->outputs) return spec_nomem(c);
    in->n_outputs = 2;
    in->outputs[0] = strdup("data");
    in->outputs[1] = strdup("label");
    if (!in->outputs[0] || !in->outputs[1]) return spec_nomem(c);
  } else if (in->n_outputs != 2) {
    return spec_fail(c, outs,
                     "'outputs' must name exactly 2 blobs (data, label), got %zu",
                     in->n_outputs);
  } else if (strcmp(in->outputs[0], in->outputs[1]) == 0) {
    return spec_fail(c, outs, "'outputs' must name 2 different blobs");
  }
  return spec_check_shards(c, map, in->shard_id, in->num_shards);
}

static const spec_field input_fields[] = {
    F_ENUM(Dpm__InputSpec, reader, reader_choices),
    F_STR(Dpm__InputSpec, images),
    F_STR(Dpm__InputSpec, labels),
    F_U32(Dpm__InputSpec, batch_size, 1),
    F_NUM(Dpm__InputSpec, scale, ANY_NUM),
    F_BOOL(Dpm__InputSpec, shuffle),
    F_U64(Dpm__InputSpec, seed, 0),
    F_STRS(Dpm__InputSpec, outputs),
    F_U32(Dpm__InputSpec, shard_id, 0),
    F_U32(Dpm__InputSpec, num_shards, 1),
    F_U32(Dpm__InputSpec, prefetch, 1),
    F_U32(Dpm__InputSpec, num_examples, 1),
    F_UINTS(Dpm__InputSpec, shape, SF_U32S, 1),
    F_U32(Dpm__InputSpec, num_classes, 1),
    F_FN(Dpm__InputSpec, shards, spec_read_shards,
         .aux = offsetof(Dpm__InputSpec, n_shards)),
    F_STR(Dpm__InputSpec, path),
    F_SUB(Dpm__InputSpec, image, image_section),
    F_ENUM(Dpm__InputSpec, on_bad_sample, bad_sample_choices),
};
static const spec_section input_section = {.path = "input",
                                           .desc = &dpm__input_spec__descriptor,
                                           .fields = input_fields,
                                           .n_fields = ARRAY_LEN(input_fields),
                                           .has_line_off =
                                               offsetof(Dpm__InputSpec, has_line),
                                           .line_off = offsetof(Dpm__InputSpec, line),
                                           .check = spec_check_input};

/* ---- update ------------------------------------------------------------ */

static const spec_choice optimizer_choices[] = {
    {"sgd", DPM__OPTIMIZER__OPT_SGD},
    {"momentum_sgd", DPM__OPTIMIZER__OPT_MOMENTUM_SGD},
    {"adam", DPM__OPTIMIZER__OPT_ADAM},
    {NULL, 0}};
static const spec_choice policy_choices[] = {{"fixed", DPM__LR_POLICY__LR_FIXED},
                                             {"step", DPM__LR_POLICY__LR_STEP},
                                             {"multistep", DPM__LR_POLICY__LR_MULTISTEP},
                                             {"exp", DPM__LR_POLICY__LR_EXP},
                                             {"inv", DPM__LR_POLICY__LR_INV},
                                             {"poly", DPM__LR_POLICY__LR_POLY},
                                             {"cosine", DPM__LR_POLICY__LR_COSINE},
                                             {NULL, 0}};

static dpm_status spec_check_lr(spec_ctx *c, const dpm_ynode *map, void *msg) {
  Dpm__LrSpec *lr = msg;
  const dpm_ynode *sv = dpm_ymap_get(map, "stepvalues");
  for (size_t i = 1; i < lr->n_stepvalues; i++)
    if (lr->stepvalues[i] <= lr->stepvalues[i - 1])
      return spec_fail(c, sv->items[i], "'stepvalues' must be increasing");
  if (lr->policy == DPM__LR_POLICY__LR_MULTISTEP && lr->n_stepvalues == 0)
    return spec_fail(c, sv ? sv : map,
                     "lr policy multistep needs a non-empty 'stepvalues'");
  if ((lr->policy == DPM__LR_POLICY__LR_POLY ||
       lr->policy == DPM__LR_POLICY__LR_COSINE) &&
      lr->max_iter == 0) {
    const dpm_ynode *mi = dpm_ymap_get(map, "max_iter");
    return spec_fail(c, mi ? mi : map, "lr policy %s needs 'max_iter' >= 1",
                     lr->policy == DPM__LR_POLICY__LR_POLY ? "poly" : "cosine");
  }
  const dpm_ynode *alias = dpm_ymap_get(map, "warmup_start");
  if (alias && dpm_ymap_get(map, "start_multiplier"))
    return spec_fail(c, alias,
                     "'warmup_start' is another name for 'start_multiplier': give one");
  return DPM_OK;
}

static const spec_field lr_fields[] = {
    F_NUM_AS(Dpm__LrSpec, "base", base_lr, {0, INFINITY, 0, 0}),
    F_ENUM(Dpm__LrSpec, policy, policy_choices),
    F_U64(Dpm__LrSpec, stepsize, 1),
    F_NUM(Dpm__LrSpec, gamma, {0, INFINITY, 1, 0}),
    F_NUM(Dpm__LrSpec, power, ANY_NUM),
    F_UINTS(Dpm__LrSpec, stepvalues, SF_U64S, 1),
    F_U64(Dpm__LrSpec, max_iter, 0),
    F_U64(Dpm__LrSpec, warmup_iters, 0),
    F_NUM(Dpm__LrSpec, start_multiplier, {0, 1, 0, 0}),
    F_NUM_AS(Dpm__LrSpec, "warmup_start", start_multiplier, {0, 1, 0, 0}), /* alias */
    F_NUM(Dpm__LrSpec, final_multiplier, {0, 1, 0, 0}),
};
static const spec_section lr_section =
    SECTION("update.lr", dpm__lr_spec, lr_fields, spec_check_lr);

static const spec_field update_fields[] = {
    F_ENUM(Dpm__UpdateSpec, optimizer, optimizer_choices),
    F_NUM(Dpm__UpdateSpec, momentum, {0, 1, 0, 1}),
    F_BOOL(Dpm__UpdateSpec, nesterov),
    F_NUM(Dpm__UpdateSpec, weight_decay, {0, INFINITY, 0, 0}),
    F_BOOL(Dpm__UpdateSpec, weight_decay_bias),
    F_NUM(Dpm__UpdateSpec, beta1, {0, 1, 0, 1}),
    F_NUM(Dpm__UpdateSpec, beta2, {0, 1, 0, 1}),
    F_NUM(Dpm__UpdateSpec, epsilon, {0, INFINITY, 1, 0}),
    F_SUB(Dpm__UpdateSpec, lr, lr_section),
    F_U32(Dpm__UpdateSpec, accumulate_steps, 1),
    F_NUM(Dpm__UpdateSpec, clip_grad_norm, {0, INFINITY, 0, 1}),
};

static dpm_status spec_check_update(spec_ctx *c, const dpm_ynode *map, void *msg) {
  const Dpm__UpdateSpec *up = msg;
  if (up->accumulate_steps > DPM_SPEC_MAX_ACCUMULATE)
    return spec_fail(c, dpm_ymap_get(map, "accumulate_steps"),
                     "'accumulate_steps' must be 1..%u, got %u", DPM_SPEC_MAX_ACCUMULATE,
                     up->accumulate_steps);
  return DPM_OK;
}

static const spec_section update_section = {.path = "update",
                                            .desc = &dpm__update_spec__descriptor,
                                            .fields = update_fields,
                                            .n_fields = ARRAY_LEN(update_fields),
                                            .has_line_off =
                                                offsetof(Dpm__UpdateSpec, has_line),
                                            .line_off = offsetof(Dpm__UpdateSpec, line),
                                            .check = spec_check_update};

/* ---- precision --------------------------------------------------------- */

int dpm_spec_loss_scale(const char *text, double *scale) {
  *scale = 1;
  if (!text || !strcmp(text, "none")) return DPM_LOSS_SCALE_NONE;
  if (!strcmp(text, "dynamic")) {
    *scale = DPM_LOSS_SCALE_INIT;
    return DPM_LOSS_SCALE_DYNAMIC;
  }
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !isfinite(v) || v <= 0) return -1;
  *scale = v;
  return DPM_LOSS_SCALE_STATIC;
}

/* loss_scale: none, dynamic or a positive number, kept as written. */
static dpm_status spec_read_loss_scale(spec_ctx *c, const spec_field *f,
                                       const dpm_ynode *v, void *msg) {
  char got[80];
  double scale;
  dpm_status st = spec_scalar(c, f->key, v, "none, dynamic or a positive number");
  if (st != DPM_OK) return st;
  if (dpm_spec_loss_scale(v->str, &scale) < 0)
    return spec_fail(c, v,
                     "'loss_scale' must be none, dynamic or a positive number, got %s",
                     spec_got(v, got, sizeof got));
  char **out = AT(msg, f->off, char *);
  if (!(*out = strdup(v->str))) return spec_nomem(c);
  return DPM_OK;
}

static const spec_choice compute_choices[] = {{"fp32", DPM__COMPUTE_TYPE__COMPUTE_FP32},
                                              {"bf16", DPM__COMPUTE_TYPE__COMPUTE_BF16},
                                              {"fp16", DPM__COMPUTE_TYPE__COMPUTE_FP16},
                                              {NULL, 0}};
/* Masters stay fp32: a bf16 master loses updates smaller than 2^-8 of the
 * weight unless it is rounded stochastically (docs/SPEC.md). */
static const spec_choice master_choices[] = {{"fp32", DPM__MASTER_TYPE__MASTER_FP32},
                                             {NULL, 0}};

static const spec_choice allreduce_choices[] = {
    {"fp32", DPM__ALLREDUCE_TYPE__ALLREDUCE_FP32},
    {"bf16", DPM__ALLREDUCE_TYPE__ALLREDUCE_BF16},
    {NULL, 0}};

static const spec_field precision_fields[] = {
    F_ENUM(Dpm__PrecisionSpec, compute, compute_choices),
    F_ENUM(Dpm__PrecisionSpec, master, master_choices),
    F_FN(Dpm__PrecisionSpec, loss_scale, spec_read_loss_scale),
    F_U32(Dpm__PrecisionSpec, growth_interval, 1),
    F_U32(Dpm__PrecisionSpec, max_skipped, 1),
    F_ENUM(Dpm__PrecisionSpec, allreduce, allreduce_choices),
};
static const spec_section precision_section = {
    .path = "precision",
    .desc = &dpm__precision_spec__descriptor,
    .fields = precision_fields,
    .n_fields = ARRAY_LEN(precision_fields),
    .has_line_off = offsetof(Dpm__PrecisionSpec, has_line),
    .line_off = offsetof(Dpm__PrecisionSpec, line)};

/* ---- eval -------------------------------------------------------------- */

static dpm_status spec_check_eval(spec_ctx *c, const dpm_ynode *map, void *msg) {
  Dpm__EvalSpec *ev = msg;
  if (ev->reader == DPM__READER_KIND__READER_IDX) {
    if (!ev->images) return spec_fail(c, map, "missing key 'images' in eval");
    if (!ev->labels) return spec_fail(c, map, "missing key 'labels' in eval");
    return DPM_OK;
  }
  if (!dpm_reader_kind_is_image(ev->reader))
    return spec_fail(c, dpm_ymap_get(map, "reader"),
                     "'reader' in eval must be idx, tar, lmdb or folder");
  return spec_check_image_source(c, map, "eval", ev->reader, ev->n_shards, ev->path);
}

static const spec_field eval_fields[] = {
    F_STR(Dpm__EvalSpec, images),
    F_STR(Dpm__EvalSpec, labels),
    F_U32(Dpm__EvalSpec, batch_size, 1),
    F_ENUM(Dpm__EvalSpec, reader, reader_choices),
    F_FN(Dpm__EvalSpec, shards, spec_read_shards,
         .aux = offsetof(Dpm__EvalSpec, n_shards)),
    F_STR(Dpm__EvalSpec, path),
};
static const spec_section eval_section = {.path = "eval",
                                          .desc = &dpm__eval_spec__descriptor,
                                          .fields = eval_fields,
                                          .n_fields = ARRAY_LEN(eval_fields),
                                          .has_line_off =
                                              offsetof(Dpm__EvalSpec, has_line),
                                          .line_off = offsetof(Dpm__EvalSpec, line),
                                          .check = spec_check_eval};

/* ---- parallel ---------------------------------------------------------- */

static const spec_choice net_type_choices[] = {
    {"dag", DPM__NET_TYPE__NET_DAG}, {"simple", DPM__NET_TYPE__NET_SIMPLE}, {NULL, 0}};

static const spec_field rendezvous_fields[] = {
    F_STR(Dpm__Rendezvous, store),
    F_STR(Dpm__Rendezvous, interface),
    F_U32(Dpm__Rendezvous, timeout_ms, 1),
};
static const spec_section rendezvous_section =
    SECTION("parallel.rendezvous", dpm__rendezvous, rendezvous_fields, NULL);

/* Parses "0" or "3-7" (decimal ids <= DPM_MAX_DEVICE_INDEX) into [a, b]. */
static int spec_device_range(const char *s, unsigned *a, unsigned *b) {
  size_t len = strlen(s), d1 = spec_digits(s, 0, len);
  if (d1 == 0 || d1 > 4) return 0;
  *a = *b = (unsigned)strtoul(s, NULL, 10);
  if (d1 < len) {
    if (s[d1] != '-') return 0;
    size_t d2 = spec_digits(s, d1 + 1, len);
    if (d2 == 0 || d2 > 4 || d1 + 1 + d2 != len) return 0;
    *b = (unsigned)strtoul(s + d1 + 1, NULL, 10);
  }
  return 1;
}

/* devices: [cpu:0, cuda:0-7, ...] (or one string), ranges expanded,
 * each device once, written back as KIND:N. */
static dpm_status spec_read_devices(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                    void *msg) {
  Dpm__ParallelSpec *p = msg;
  char **raw = NULL, **dev = NULL, got[80];
  size_t n_raw = 0, n = 0;
  dpm_status st = spec_read_strs(c, f->key, v, &raw, &n_raw);
  if (st != DPM_OK) return st;
  if (n_raw == 0) {
    st = spec_fail(c, v, "'devices' must not be empty (leave it out for all)");
    goto out;
  }
  dev = calloc(DPM_MAX_DEVICES, sizeof *dev);
  if (!dev) {
    st = spec_nomem(c);
    goto out;
  }
  for (size_t i = 0; i < n_raw; i++) {
    const dpm_ynode *item = v->kind == DPM_YNODE_SEQ ? v->items[i] : v;
    const char *colon = strchr(raw[i], ':');
    int kind = DPM_DEVICE_KIND_COUNT;
    unsigned a, b;
    if (colon)
      for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++)
        if (strlen(dpm_device_kind_name(k)) == (size_t)(colon - raw[i]) &&
            memcmp(dpm_device_kind_name(k), raw[i], (size_t)(colon - raw[i])) == 0)
          kind = k;
    if (!colon || !spec_device_range(colon + 1, &a, &b)) {
      st = spec_fail(c, item, "a device must look like cpu:0, cuda:3 or cuda:0-7; got %s",
                     spec_got(item, got, sizeof got));
      goto out;
    }
    if (kind == DPM_DEVICE_KIND_COUNT) {
      st = spec_fail(c, item, "unknown device kind in %s (choices: cpu, cuda, fenced)%s",
                     spec_got(item, got, sizeof got), dpm_device_hint(raw[i]));
      goto out;
    }
    if (b > DPM_MAX_DEVICE_INDEX || a > b) {
      st = spec_fail(c, item, "bad device index in %s (0..%d, low-high)",
                     spec_got(item, got, sizeof got), DPM_MAX_DEVICE_INDEX);
      goto out;
    }
    for (unsigned id = a; id <= b; id++) {
      char name[32];
      snprintf(name, sizeof name, "%s:%u", dpm_device_kind_name(kind), id);
      for (size_t j = 0; j < n; j++)
        if (strcmp(dev[j], name) == 0) {
          st = spec_fail(c, item, "device '%s' is listed twice", name);
          goto out;
        }
      if (n == DPM_MAX_DEVICES) {
        st = spec_fail(c, item, "more than %d devices", DPM_MAX_DEVICES);
        goto out;
      }
      if (!(dev[n] = strdup(name))) {
        st = spec_nomem(c);
        goto out;
      }
      n++;
    }
  }
  char **shrunk = realloc(dev, n * sizeof *dev);
  p->devices = shrunk ? shrunk : dev;
  p->n_devices = n;
  dev = NULL;
out:
  spec_free_strs(raw, n_raw);
  spec_free_strs(dev, n);
  return st;
}

static const spec_choice mode_choices[] = {{"sync", DPM__PARALLEL_MODE__PARALLEL_SYNC},
                                           {"bmuf", DPM__PARALLEL_MODE__PARALLEL_BMUF},
                                           {NULL, 0}};

/* parallel.bmuf (Caffe2's Parallelize_BMUF arguments, dpm.proto BmufSpec). */
static const spec_field bmuf_fields[] = {
    F_NUM(Dpm__BmufSpec, block_momentum, {0, 1, 0, 1}),
    F_NUM(Dpm__BmufSpec, block_learning_rate, {0, INFINITY, 1, 0}),
    F_BOOL(Dpm__BmufSpec, nesterov),
    F_U32(Dpm__BmufSpec, local_steps, 1),
};
static const spec_section bmuf_section =
    SECTION("parallel.bmuf", dpm__bmuf_spec, bmuf_fields, NULL);

static const spec_field parallel_fields[] = {
    F_FN(Dpm__ParallelSpec, devices, spec_read_devices),
    F_ENUM(Dpm__ParallelSpec, net_type, net_type_choices),
    F_BOOL(Dpm__ParallelSpec, broadcast_computed_params),
    F_BOOL(Dpm__ParallelSpec, optimize_gradient_memory),
    F_U64(Dpm__ParallelSpec, bucket_bytes, 0),
    F_BOOL(Dpm__ParallelSpec, allow_tf32),
    F_BOOL(Dpm__ParallelSpec, deterministic),
    F_BOOL(Dpm__ParallelSpec, cuda_graphs),
    F_BOOL(Dpm__ParallelSpec, combine_spatial_bn),
    F_ENUM(Dpm__ParallelSpec, mode, mode_choices),
    F_SUB(Dpm__ParallelSpec, bmuf, bmuf_section),
    F_STRS(Dpm__ParallelSpec, shards),
    F_STRS(Dpm__ParallelSpec, keep_blobs),
    F_SUB(Dpm__ParallelSpec, rendezvous, rendezvous_section),
};
static const spec_section parallel_section =
    SECTION("parallel", dpm__parallel_spec, parallel_fields, NULL);

/* ---- forward ----------------------------------------------------------- */

/* One operator argument, typed by how its value is written (spec.h). */
static dpm_status spec_read_arg(spec_ctx *c, const dpm_ynode *k, const dpm_ynode *v,
                                Dpm__Argument *a) {
  char got[80];
  if (dpm_ynode_is_null(k) || k->len == 0 || strlen(k->str) != k->len)
    return spec_fail(c, k, "argument names must be non-empty strings");
  if (!(a->name = strdup(k->str))) return spec_nomem(c);
  const char *name = a->name;
  if (v->kind == DPM_YNODE_MAP)
    return spec_fail(c, v,
                     "argument '%s' must be a scalar or a list of numbers, got "
                     "a mapping",
                     name);
  if (v->kind == DPM_YNODE_SCALAR) {
    int neg;
    uint64_t mag;
    if (dpm_ynode_is_null(v)) return spec_fail(c, v, "argument '%s' has no value", name);
    if (spec_is_int_lit(v)) {
      if (!spec_int_parts(v, &neg, &mag) || mag > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return spec_fail(c, v, "argument '%s': integer out of range, got %s", name,
                         spec_got(v, got, sizeof got));
      a->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
      a->value_case = DPM__ARGUMENT__VALUE_I;
    } else if (spec_is_num_lit(v)) {
      a->f = strtod(v->str, NULL);
      if (!isfinite(a->f))
        return spec_fail(c, v, "argument '%s': number out of range, got %s", name,
                         spec_got(v, got, sizeof got));
      a->value_case = DPM__ARGUMENT__VALUE_F;
    } else if (!v->quoted && (dpm_ynode_is(v, "true") || dpm_ynode_is(v, "false"))) {
      a->i = dpm_ynode_is(v, "true");
      a->value_case = DPM__ARGUMENT__VALUE_I;
    } else {
      if (strlen(v->str) != v->len)
        return spec_fail(c, v, "argument '%s' contains a NUL character", name);
      if (!(a->s = strdup(v->str))) return spec_nomem(c);
      a->value_case = DPM__ARGUMENT__VALUE_S;
    }
    return DPM_OK;
  }
  /* A list: all integer literals -> ints, numbers -> floats. */
  int all_int = 1;
  for (size_t i = 0; i < v->n; i++) {
    const dpm_ynode *it = v->items[i];
    if (!spec_is_num_lit(it))
      return spec_fail(c, it, "argument '%s': list items must be numbers, got %s", name,
                       spec_got(it, got, sizeof got));
    all_int &= spec_is_int_lit(it);
  }
  size_t n = v->n;
  if (all_int) {
    Dpm__IntList *l = spec_new(&dpm__int_list__descriptor);
    if (!l) return spec_nomem(c);
    a->ints = l;
    a->value_case = DPM__ARGUMENT__VALUE_INTS;
    if (n && !(l->v = calloc(n, sizeof *l->v))) return spec_nomem(c);
    l->n_v = n;
    for (size_t i = 0; i < n; i++) {
      int neg;
      uint64_t mag;
      if (!spec_int_parts(v->items[i], &neg, &mag) ||
          mag > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return spec_fail(c, v->items[i], "argument '%s': integer out of range, got %s",
                         name, spec_got(v->items[i], got, sizeof got));
      l->v[i] = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
  } else {
    Dpm__FloatList *l = spec_new(&dpm__float_list__descriptor);
    if (!l) return spec_nomem(c);
    a->floats = l;
    a->value_case = DPM__ARGUMENT__VALUE_FLOATS;
    if (n && !(l->v = calloc(n, sizeof *l->v))) return spec_nomem(c);
    l->n_v = n;
    for (size_t i = 0; i < n; i++) {
      l->v[i] = strtod(v->items[i]->str, NULL);
      if (!isfinite(l->v[i]))
        return spec_fail(c, v->items[i], "argument '%s': number out of range, got %s",
                         name, spec_got(v->items[i], got, sizeof got));
    }
  }
  return DPM_OK;
}

static dpm_status spec_read_op(spec_ctx *c, size_t index, const dpm_ynode *m,
                               Dpm__Operator *op) {
  char got[80];
  snprintf(c->where, sizeof c->where, "op #%zu: ", index + 1);
  if (m->kind != DPM_YNODE_MAP)
    return spec_fail(c, m,
                     "an operator must be a mapping {op: TYPE, in: ..., out: "
                     "...}, got %s",
                     spec_got(m, got, sizeof got));
  op->has_line = op->has_column = 1;
  op->line = m->line;
  op->column = m->col;
  const dpm_ynode *type = dpm_ymap_get(m, "op");
  if (!type) return spec_fail(c, m, "missing key 'op'");
  dpm_status st = spec_read_str(c, "op", type, &op->type);
  if (st != DPM_OK) return st;
  char type_txt[33]; /* printable excerpt of the type for messages */
  size_t t = 0;
  for (; t < sizeof type_txt - 1 && op->type[t]; t++)
    type_txt[t] = (op->type[t] >= 0x20 && op->type[t] < 0x7F) ? op->type[t] : '?';
  type_txt[t] = '\0';
  snprintf(c->where, sizeof c->where, "op #%zu (%s): ", index + 1, type_txt);

  size_t n_args = 0;
  for (size_t i = 0; i < m->n; i++) {
    const dpm_ynode *k = dpm_ymap_key(m, i);
    if (!dpm_ynode_is(k, "op") && !dpm_ynode_is(k, "in") && !dpm_ynode_is(k, "out"))
      n_args++;
  }
  if (n_args && !(op->arg = calloc(n_args, sizeof *op->arg))) return spec_nomem(c);
  for (size_t i = 0; i < m->n; i++) {
    const dpm_ynode *k = dpm_ymap_key(m, i), *v = dpm_ymap_value(m, i);
    if (dpm_ynode_is(k, "op")) continue;
    if (dpm_ynode_is(k, "in")) {
      st = spec_read_strs(c, "in", v, &op->input, &op->n_input);
    } else if (dpm_ynode_is(k, "out")) {
      st = spec_read_strs(c, "out", v, &op->output, &op->n_output);
      if (st == DPM_OK && op->n_output == 0)
        st = spec_fail(c, v, "'out' must name at least one blob");
    } else {
      Dpm__Argument *a = spec_new(&dpm__argument__descriptor);
      if (!a) return spec_nomem(c);
      op->arg[op->n_arg++] = a;
      st = spec_read_arg(c, k, v, a);
    }
    if (st != DPM_OK) return st;
  }
  if (!dpm_ymap_get(m, "out")) return spec_fail(c, m, "missing key 'out'");
  return DPM_OK;
}

static dpm_status spec_read_forward(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                    void *msg) {
  Dpm__ModelSpec *spec = msg;
  char got[80];
  (void)f;
  if (v->kind != DPM_YNODE_SEQ)
    return spec_fail(c, v, "'forward' must be a list of operators, got %s",
                     spec_got(v, got, sizeof got));
  if (v->n == 0) return spec_fail(c, v, "'forward' must not be empty");
  if (!(spec->forward = calloc(v->n, sizeof *spec->forward))) return spec_nomem(c);
  for (size_t i = 0; i < v->n; i++) {
    Dpm__Operator *op = spec_new(&dpm__operator__descriptor);
    if (!op) return spec_nomem(c);
    spec->forward[spec->n_forward++] = op;
    dpm_status st = spec_read_op(c, i, v->items[i], op);
    if (st != DPM_OK) return st;
  }
  c->where[0] = '\0';
  return DPM_OK;
}

/* ---- top level --------------------------------------------------------- */

/* name: a model name (common/validate.h): it names the model's directory
 * in the daemon's state dir. */
static dpm_status spec_read_name(spec_ctx *c, const spec_field *f, const dpm_ynode *v,
                                 void *msg) {
  char **name = AT(msg, f->off, char *), got[80];
  dpm_status st = spec_read_str(c, "name", v, name);
  if (st != DPM_OK) return st;
  if (!dpm_model_name_valid(*name))
    return spec_fail(c, v,
                     "'name' must be 1-%d characters of A-Z a-z 0-9 . _ - "
                     "not starting with '.', got %s",
                     DPM_SPEC_MAX_NAME, spec_got(v, got, sizeof got));
  return DPM_OK;
}

/* checkpoint_every: N (iterations) or "Ns" (seconds); 0 turns it off. */
static dpm_status spec_read_checkpoint(spec_ctx *c, const spec_field *f,
                                       const dpm_ynode *v, void *msg) {
  char got[80];
  (void)f;
  dpm_status st =
      spec_scalar(c, "checkpoint_every", v, "a number of iterations or seconds");
  if (st != DPM_OK) return st;
  Dpm__CheckpointPolicy *p = spec_new(&dpm__checkpoint_policy__descriptor);
  if (!p) return spec_nomem(c);
  ((Dpm__ModelSpec *)msg)->checkpoint = p;
  if (dpm_checkpoint_every_parse(v->str, p))
    return spec_fail(
        c, v, "'checkpoint_every' must be iterations (1000) or seconds (600s), got %s",
        spec_got(v, got, sizeof got));
  return DPM_OK;
}

static dpm_status spec_check_model(spec_ctx *c, const dpm_ynode *map, void *msg) {
  Dpm__ModelSpec *spec = msg;
  if (spec->n_losses == 0)
    return spec_fail(c, dpm_ymap_get(map, "losses"),
                     "'losses' must name at least one blob");
  /* bmuf's one all-reduce sums parameters, which a bf16 wire would round */
  if (spec->precision &&
      spec->precision->allreduce == DPM__ALLREDUCE_TYPE__ALLREDUCE_BF16 &&
      spec->parallel && spec->parallel->mode == DPM__PARALLEL_MODE__PARALLEL_BMUF) {
    const dpm_ynode *pr = dpm_ymap_get(map, "precision");
    const dpm_ynode *at = pr ? dpm_ymap_get(pr, "allreduce") : NULL;
    return spec_fail(c, at ? at : pr,
                     "'allreduce' bf16 rounds what the shards sum, and parallel.mode "
                     "bmuf sums parameters, not gradients (each block would round "
                     "them to 8 bits): use fp32 with bmuf");
  }
  return DPM_OK;
}

static const spec_field model_fields[] = {
    F_FN(Dpm__ModelSpec, name, spec_read_name, .required = 1),
    F_SUB(Dpm__ModelSpec, input, input_section),
    F_FN(Dpm__ModelSpec, forward, spec_read_forward, .required = 1),
    F_STRS(Dpm__ModelSpec, losses, .required = 1),
    F_SUB(Dpm__ModelSpec, update, update_section),
    F_SUB(Dpm__ModelSpec, eval, eval_section),
    F_SUB(Dpm__ModelSpec, parallel, parallel_section),
    F_SUB(Dpm__ModelSpec, precision, precision_section),
    {.key = "checkpoint_every",
     .kind = SF_CUSTOM,
     .off = offsetof(Dpm__ModelSpec, checkpoint),
     .fn = spec_read_checkpoint},
};
static const spec_section model_section =
    SECTION("", dpm__model_spec, model_fields, spec_check_model);

/* ---- the schema, described (spec.h) ------------------------------------- */

/* The protobuf field at offset off of message type d, or NULL. */
static const ProtobufCFieldDescriptor *spec_pb_field(const ProtobufCMessageDescriptor *d,
                                                     size_t off) {
  for (unsigned i = 0; i < d->n_fields; i++)
    if (d->fields[i].offset == off) return &d->fields[i];
  return NULL;
}

static void spec_choice_list(const spec_choice *ch, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (const spec_choice *p = ch; p->name; p++) {
    int w = snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", p->name);
    if (w > 0 && (size_t)w < cap - o) o += (size_t)w;
  }
}

static void spec_range_text(const spec_range *r, char *buf, size_t cap) {
  if (isinf(r->lo) && isinf(r->hi))
    snprintf(buf, cap, "number");
  else if (isinf(r->hi))
    snprintf(buf, cap, "number %s %g", r->lo_open ? ">" : ">=", r->lo);
  else if (isinf(r->lo))
    snprintf(buf, cap, "number %s %g", r->hi_open ? "<" : "<=", r->hi);
  else
    snprintf(buf, cap, "number in %c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi,
             r->hi_open ? ')' : ']');
}

#define SPEC_STR_(x) #x
#define SPEC_STR(x) SPEC_STR_(x)

/* What a key of kind SF_CUSTOM takes, by its reader. */
static const char *spec_custom_type(const spec_field *f) {
  if (f->fn == spec_read_name)
    return "a model name: 1-" SPEC_STR(
        DPM_SPEC_MAX_NAME) " characters of A-Z a-z 0-9 . _ -, "
                           "not starting with '.'";
  if (f->fn == spec_read_forward) return "a list of operators (see Operators)";
  if (f->fn == spec_read_devices)
    return "a list of devices (or one): cpu:N, cuda:N, or a range cuda:0-7; one kind, "
           "each once";
  if (f->fn == spec_read_checkpoint)
    return "iterations (1000) or seconds (600s); 0 turns it off";
  if (f->fn == spec_read_loss_scale)
    return "none (default), dynamic, or a positive number (a static scale)";
  if (f->fn == spec_read_shards)
    return "a list of files (or one); a name may hold one range {000000..000146}";
  return "see the text";
}

static void spec_default(const spec_field *f, const ProtobufCFieldDescriptor *pf,
                         char *buf, size_t cap) {
  buf[0] = '\0';
  if (!pf || !pf->default_value) return;
  const void *d = pf->default_value;
  switch (pf->type) {
  case PROTOBUF_C_TYPE_UINT32:
    snprintf(buf, cap, "%u", *(const uint32_t *)d);
    break;
  case PROTOBUF_C_TYPE_UINT64:
    snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)d);
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    snprintf(buf, cap, "%g", *(const double *)d);
    break;
  case PROTOBUF_C_TYPE_BOOL:
    snprintf(buf, cap, "%s", *(const protobuf_c_boolean *)d ? "true" : "false");
    break;
  case PROTOBUF_C_TYPE_ENUM:
    for (const spec_choice *p = f->choices; p && p->name; p++)
      if (p->value == *(const int *)d) snprintf(buf, cap, "%s", p->name);
    break;
  case PROTOBUF_C_TYPE_STRING:
    snprintf(buf, cap, "%s", (const char *)d); /* the characters themselves */
    break;
  default:
    break;
  }
}

static void spec_describe_section(const spec_section *s, dpm_spec_key_fn fn, void *ctx) {
  const spec_section *subs[16];
  size_t n_subs = 0;
  for (size_t i = 0; i < s->n_fields; i++) {
    const spec_field *f = &s->fields[i];
    dpm_spec_key k = {.section = s->path, .key = f->key, .required = f->required};
    for (size_t j = 0; j < i; j++)
      if (s->fields[j].off == f->off) k.alias = s->fields[j].key;
    switch (f->kind) {
    case SF_STR:
      snprintf(k.type, sizeof k.type, "a string");
      break;
    case SF_U32:
    case SF_U64:
      snprintf(k.type, sizeof k.type, "an integer >= %llu", (unsigned long long)f->ilo);
      break;
    case SF_NUM:
      spec_range_text(&f->range, k.type, sizeof k.type);
      break;
    case SF_BOOL:
      snprintf(k.type, sizeof k.type, "true or false");
      break;
    case SF_ENUM: {
      char list[160];
      spec_choice_list(f->choices, list, sizeof list);
      snprintf(k.type, sizeof k.type, "one of: %s", list);
      break;
    }
    case SF_STRS:
      snprintf(k.type, sizeof k.type, "a list of strings (or one)");
      break;
    case SF_U32S:
    case SF_U64S:
      snprintf(k.type, sizeof k.type, "a list of integers >= %llu",
               (unsigned long long)f->ilo);
      break;
    case SF_NUMS: {
      char r[64];
      spec_range_text(&f->range, r, sizeof r);
      snprintf(k.type, sizeof k.type, "a list of numbers, each a %s", r);
      break;
    }
    case SF_SUB:
      snprintf(k.type, sizeof k.type, "a mapping (see %s)", f->sub->path);
      if (n_subs < sizeof subs / sizeof *subs) subs[n_subs++] = f->sub;
      break;
    case SF_CUSTOM:
      snprintf(k.type, sizeof k.type, "%s", spec_custom_type(f));
      break;
    }
    if (f->kind != SF_SUB)
      spec_default(f, spec_pb_field(s->desc, f->off), k.def, sizeof k.def);
    fn(ctx, &k);
  }
  for (size_t i = 0; i < n_subs; i++) spec_describe_section(subs[i], fn, ctx);
}

void dpm_spec_describe(dpm_spec_key_fn fn, void *ctx) {
  spec_describe_section(&model_section, fn, ctx);
}

/* The YAML read into a spec, every key typed, nothing validated yet. */
static dpm_status spec_parse_text(const char *text, size_t len, const char *source,
                                  Dpm__ModelSpec **out, dpm_err *err) {
  spec_ctx c = {.src = source ? source : "<spec>", .err = err};
  dpm_ynode *root = NULL;
  Dpm__ModelSpec *spec = NULL;
  char got[80];
  dpm_status st;
  if (!out || (!text && len))
    return dpm_errf(err, DPM_INVALID, "dpm_spec_parse: NULL argument");
  *out = NULL;
  if (len > DPM_SPEC_MAX_BYTES)
    return dpm_errf(err, DPM_SPEC, "%s: spec is larger than %u MiB", c.src,
                    DPM_SPEC_MAX_BYTES >> 20);
  if ((st = dpm_ytree_parse(text, len, source, &root, err)) != DPM_OK) return st;
  if (dpm_ynode_is_null(root)) {
    st = spec_fail(&c, root, "empty spec: no keys");
    goto done;
  }
  if (root->kind != DPM_YNODE_MAP) {
    st = spec_fail(&c, root,
                   "a spec must be a mapping with keys name, forward, losses, "
                   "...; got %s",
                   spec_got(root, got, sizeof got));
    goto done;
  }
  if (!(spec = spec_new(&dpm__model_spec__descriptor))) {
    st = spec_nomem(&c);
    goto done;
  }
  if ((st = spec_read_section(&c, &model_section, "spec", root, spec)) != DPM_OK)
    goto done;
  if (source && !(spec->source = strdup(source))) st = spec_nomem(&c);
done:
  dpm_ytree_free(root);
  if (st != DPM_OK) {
    dpm_spec_free(spec);
    return st;
  }
  *out = spec;
  return DPM_OK;
}

dpm_status dpm_spec_parse(const char *text, size_t len, const char *source,
                          Dpm__ModelSpec **out, dpm_err *err) {
  dpm_status st = spec_parse_text(text, len, source, out, err);
  if (st == DPM_OK && (st = dpm_spec_validate(*out, err)) != DPM_OK) {
    dpm_spec_free(*out);
    *out = NULL;
  }
  return st;
}

/* The bytes of the file at path into *out (*out_len of them; NULL when
 * none; the caller frees), at most DPM_SPEC_MAX_BYTES. */
static dpm_status spec_read_file(const char *path, char **out, size_t *out_len,
                                 dpm_err *err) {
  char ebuf[128];
  FILE *f = fopen(path, "rb");
  if (!f)
    return dpm_errf(err, DPM_IO, "%s: cannot open: %s", path,
                    strerror_r(errno, ebuf, sizeof ebuf));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) &&
      sb.st_size > (off_t)DPM_SPEC_MAX_BYTES) {
    fclose(f);
    return dpm_errf(err, DPM_SPEC, "%s: spec is larger than %u MiB", path,
                    DPM_SPEC_MAX_BYTES >> 20);
  }
  /* Read up to one byte past the limit (st_size may be 0 for pipes). */
  size_t cap = 0, len = 0;
  char *buf = NULL;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? 2 * cap : 64 * 1024;
      if (ncap > DPM_SPEC_MAX_BYTES + 1) ncap = DPM_SPEC_MAX_BYTES + 1;
      if (ncap == cap) break; /* limit reached */
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        fclose(f);
        return dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);
      }
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  int saved = errno;
  fclose(f);
  if (bad) {
    free(buf);
    return dpm_errf(err, DPM_IO, "%s: cannot read: %s", path,
                    strerror_r(saved, ebuf, sizeof ebuf));
  }
  if (len > DPM_SPEC_MAX_BYTES) {
    free(buf);
    return dpm_errf(err, DPM_SPEC, "%s: spec is larger than %u MiB", path,
                    DPM_SPEC_MAX_BYTES >> 20);
  }
  *out = buf;
  *out_len = len;
  return DPM_OK;
}

dpm_status dpm_spec_load(const char *path, Dpm__ModelSpec **out, dpm_err *err) {
  if (!path || !out) return dpm_errf(err, DPM_INVALID, "dpm_spec_load: NULL argument");
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  dpm_status st = spec_read_file(path, &buf, &len, err);
  if (st == DPM_OK) st = dpm_spec_parse(buf ? buf : "", len, path, out, err);
  free(buf);
  return st;
}

dpm_status dpm_spec_load_checked(const char *path, dpm_checked_spec **out, dpm_err *err) {
  if (!path || !out)
    return dpm_errf(err, DPM_INVALID, "dpm_spec_load_checked: NULL argument");
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  Dpm__ModelSpec *spec = NULL;
  dpm_status st = spec_read_file(path, &buf, &len, err);
  if (st == DPM_OK) st = spec_parse_text(buf ? buf : "", len, path, &spec, err);
  free(buf);
  if (st == DPM_OK && (st = dpm_spec_check(spec, NULL, out, err)) != DPM_OK)
    dpm_spec_free(spec);
  return st;
}

void dpm_spec_free(Dpm__ModelSpec *spec) {
  if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
}

/* ---- hash -------------------------------------------------------------- */

typedef struct {
  ProtobufCBuffer base; /* protobuf-c calls base.append with packed bytes */
  uint64_t h;           /* FNV-1a state */
} spec_hash_buf;

static void spec_hash_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  spec_hash_buf *hb = (spec_hash_buf *)b;
  for (size_t i = 0; i < len; i++) {
    hb->h ^= data[i];
    hb->h *= 0x100000001b3ull;
  }
}

uint64_t dpm_spec_hash(const Dpm__ModelSpec *spec) {
  if (!spec) return 0;
  DPM_WORK_DONE(DPM_WORK_SPEC_HASH);
  spec_hash_buf hb = {.base = {.append = spec_hash_append}, .h = 0xcbf29ce484222325ull};
  /* Shallow copies with the position fields cleared (spec.h). */
  Dpm__ModelSpec top = *spec;
  Dpm__InputSpec in;
  Dpm__UpdateSpec up;
  Dpm__EvalSpec ev;
  Dpm__PrecisionSpec pr;
  top.source = NULL;
  top.name = NULL;       /* a model may be renamed ...          */
  top.parallel = NULL;   /* ... or moved to other devices (spec.h) */
  top.checkpoint = NULL; /* when to checkpoint is not the model */
  top.n_forward = 0;
  top.forward = NULL;
  if (spec->input) {
    in = *spec->input;
    in.has_line = 0;
    in.line = 0;
    in.has_shard_id = in.has_num_shards = 0; /* which slice a process reads */
    in.shard_id = 0;
    in.num_shards = 1;
    top.input = &in;
  }
  if (spec->update) {
    up = *spec->update;
    up.has_line = 0;
    up.line = 0;
    top.update = &up;
  }
  if (spec->eval) {
    ev = *spec->eval;
    ev.has_line = 0;
    ev.line = 0;
    top.eval = &ev;
  }
  if (spec->precision) { /* how it computes and how gradients travel, not what
                           the model holds: masters are fp32 */
    pr = *spec->precision;
    pr.has_line = pr.has_compute = pr.has_allreduce = 0;
    pr.line = 0;
    pr.compute = DPM__COMPUTE_TYPE__COMPUTE_FP32;
    pr.allreduce = DPM__ALLREDUCE_TYPE__ALLREDUCE_FP32;
    /* nothing else set: as if there were no section */
    top.precision = protobuf_c_message_get_packed_size(&pr.base) ? &pr : NULL;
  }
  protobuf_c_message_pack_to_buffer(&top.base, &hb.base);
  for (size_t i = 0; i < spec->n_forward; i++) {
    if (!spec->forward[i]) continue;
    Dpm__Operator op = *spec->forward[i];
    op.has_line = op.has_column = 0;
    op.line = op.column = 0;
    protobuf_c_message_pack_to_buffer(&op.base, &hb.base);
  }
  return hb.h;
}
