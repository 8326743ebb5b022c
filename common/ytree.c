/* YAML text -> dpm_ynode tree, with libyaml's event API (see ytree.h). */
#include "common/ytree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct {
  yaml_parser_t parser; /* libyaml state */
  const char *src;      /* source name for messages */
  const char *text;     /* the input, for reader-error positions */
  size_t len;           /* its length */
  size_t nodes;         /* nodes built so far (bounded) */
  dpm_err *err;         /* where errors go */
} ytree_build;

static dpm_status ytree_err_at(ytree_build *b, size_t line0, size_t col0, const char *fmt,
                               ...) __attribute__((format(printf, 4, 5)));

static dpm_status ytree_err_at(ytree_build *b, size_t line0, size_t col0, const char *fmt,
                               ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpm_errf(b->err, DPM_SPEC, "%s:%zu:%zu: %s", b->src, line0 + 1, col0 + 1, msg);
}

static dpm_status ytree_err_mark(ytree_build *b, yaml_mark_t m, const char *msg) {
  return ytree_err_at(b, m.line, m.column, "%s", msg);
}

/* Translates a failed yaml_parser_parse() into err. */
static dpm_status ytree_parser_error(ytree_build *b) {
  yaml_parser_t *p = &b->parser;
  const char *problem = p->problem ? p->problem : "invalid YAML";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return dpm_errf(b->err, DPM_NOMEM, "%s: out of memory parsing YAML", b->src);
  case YAML_READER_ERROR: {
    /* Reader errors carry a byte offset, not a mark: count lines here. */
    size_t off = p->problem_offset < b->len ? p->problem_offset : b->len;
    size_t line = 0, col = 0;
    for (size_t i = 0; i < off; i++) {
      unsigned char c = (unsigned char)b->text[i];
      if (c == '\n')
        line++, col = 0;
      else if ((c & 0xC0) != 0x80)
        col++;
    }
    if (p->problem_value >= 0)
      return ytree_err_at(b, line, col, "%s (byte 0x%02X)", problem,
                          (unsigned)p->problem_value & 0xFFu);
    return ytree_err_at(b, line, col, "%s", problem);
  }
  case YAML_SCANNER_ERROR:
  case YAML_PARSER_ERROR:
    if (p->context)
      return ytree_err_at(b, p->problem_mark.line, p->problem_mark.column,
                          "%s (%s at line %zu)", problem, p->context,
                          p->context_mark.line + 1);
    return ytree_err_at(b, p->problem_mark.line, p->problem_mark.column, "%s", problem);
  default:
    return ytree_err_at(b, p->problem_mark.line, p->problem_mark.column, "%s", problem);
  }
}

static dpm_status ytree_next(ytree_build *b, yaml_event_t *ev) {
  if (!yaml_parser_parse(&b->parser, ev)) {
    memset(ev, 0, sizeof *ev);
    return ytree_parser_error(b);
  }
  return DPM_OK;
}

void dpm_ytree_free(dpm_ynode *node) {
  if (!node) return;
  size_t n = node->kind == DPM_YNODE_MAP ? 2 * node->n : node->n;
  if (node->items)
    for (size_t i = 0; i < n; i++) dpm_ytree_free(node->items[i]);
  free(node->items);
  free(node->str);
  free(node);
}

static dpm_ynode *ytree_new(ytree_build *b, dpm_ynode_kind kind, yaml_mark_t m) {
  dpm_ynode *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->kind = kind;
  n->line = (uint32_t)(m.line + 1);
  n->col = (uint32_t)(m.column + 1);
  b->nodes++;
  return n;
}

/* Appends child to a sequence's items, growing the array by doubling. */
static int ytree_push(dpm_ynode *seq, size_t *cap, dpm_ynode *child) {
  if (seq->n >= *cap) {
    size_t ncap = *cap ? 2 * *cap : 8;
    dpm_ynode **items = realloc(seq->items, ncap * sizeof *items);
    if (!items) return 0;
    seq->items = items;
    *cap = ncap;
  }
  seq->items[seq->n++] = child;
  return 1;
}

static dpm_status ytree_node(ytree_build *b, yaml_event_t *ev, int depth,
                             dpm_ynode **out);

static int ytree_key_equal(const dpm_ynode *a, const dpm_ynode *b) {
  return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* Builds the children of a sequence or mapping whose start event was seen.
 * For a mapping, keys and values alternate; node->n counts complete pairs,
 * and a pending key is kept in items[2n] until its value arrives. */
static dpm_status ytree_children(ytree_build *b, dpm_ynode *node, int depth) {
  size_t cap = 0;
  yaml_event_type_t end =
      node->kind == DPM_YNODE_MAP ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
  dpm_ynode *key = NULL; /* mapping: a key waiting for its value */
  dpm_status st;
  for (;;) {
    yaml_event_t ev;
    st = ytree_next(b, &ev);
    if (st != DPM_OK) goto fail;
    if (ev.type == end) {
      yaml_event_delete(&ev);
      dpm_ytree_free(key); /* never set: libyaml pairs every key */
      return DPM_OK;
    }
    dpm_ynode *child = NULL;
    st = ytree_node(b, &ev, depth + 1, &child);
    yaml_event_delete(&ev);
    if (st != DPM_OK) goto fail;
    if (node->kind == DPM_YNODE_SEQ) {
      if (!ytree_push(node, &cap, child)) {
        dpm_ytree_free(child);
        goto nomem;
      }
      continue;
    }
    if (!key) { /* a new key */
      if (child->kind != DPM_YNODE_SCALAR) {
        st = dpm_yerr(b->err, b->src, child, "mapping keys must be scalars");
        dpm_ytree_free(child);
        goto fail;
      }
      for (size_t i = 0; i < node->n; i++)
        if (ytree_key_equal(node->items[2 * i], child)) {
          char what[80];
          st = dpm_yerr(b->err, b->src, child, "duplicate key %s",
                        dpm_ynode_describe(child, what, sizeof what));
          dpm_ytree_free(child);
          goto fail;
        }
      if (node->n >= DPM_YTREE_MAX_KEYS) {
        st = dpm_yerr(b->err, b->src, child, "mapping has more than %d keys",
                      DPM_YTREE_MAX_KEYS);
        dpm_ytree_free(child);
        goto fail;
      }
      key = child;
      continue;
    }
    /* key + value: store both, then count the pair. */
    if (cap < 2 * node->n + 2) {
      size_t ncap = cap ? 2 * cap : 8;
      dpm_ynode **items = realloc(node->items, ncap * sizeof *items);
      if (!items) {
        dpm_ytree_free(child);
        goto nomem;
      }
      node->items = items;
      cap = ncap;
    }
    node->items[2 * node->n] = key;
    node->items[2 * node->n + 1] = child;
    node->n++;
    key = NULL;
  }
nomem:
  st = dpm_errf(b->err, DPM_NOMEM, "%s: out of memory", b->src);
fail:
  dpm_ytree_free(key);
  return st;
}

/* Builds the node that starts with event ev (which the caller deletes). */
static dpm_status ytree_node(ytree_build *b, yaml_event_t *ev, int depth,
                             dpm_ynode **out) {
  *out = NULL;
  const yaml_char_t *anchor = NULL, *tag = NULL;
  dpm_ynode_kind kind;
  switch (ev->type) {
  case YAML_ALIAS_EVENT:
    return ytree_err_mark(b, ev->start_mark, "anchors and aliases are not supported");
  case YAML_SCALAR_EVENT:
    anchor = ev->data.scalar.anchor;
    tag = ev->data.scalar.tag;
    kind = DPM_YNODE_SCALAR;
    break;
  case YAML_SEQUENCE_START_EVENT:
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
    kind = DPM_YNODE_SEQ;
    break;
  case YAML_MAPPING_START_EVENT:
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
    kind = DPM_YNODE_MAP;
    break;
  default: /* libyaml guarantees a node here; be safe anyway */
    return ytree_err_mark(b, ev->start_mark, "unexpected YAML event");
  }
  if (anchor)
    return ytree_err_mark(b, ev->start_mark, "anchors and aliases are not supported");
  if (tag) return ytree_err_mark(b, ev->start_mark, "YAML tags are not supported");
  if (depth > DPM_YTREE_MAX_DEPTH)
    return ytree_err_at(b, ev->start_mark.line, ev->start_mark.column,
                        "nesting deeper than %d levels", DPM_YTREE_MAX_DEPTH);
  if (b->nodes >= DPM_YTREE_MAX_NODES)
    return ytree_err_at(b, ev->start_mark.line, ev->start_mark.column,
                        "more than %u YAML nodes", DPM_YTREE_MAX_NODES);
  dpm_ynode *node = ytree_new(b, kind, ev->start_mark);
  if (!node) return dpm_errf(b->err, DPM_NOMEM, "%s: out of memory", b->src);
  if (kind == DPM_YNODE_SCALAR) {
    size_t len = ev->data.scalar.length;
    node->str = malloc(len + 1);
    if (!node->str) {
      dpm_ytree_free(node);
      return dpm_errf(b->err, DPM_NOMEM, "%s: out of memory", b->src);
    }
    if (len) memcpy(node->str, ev->data.scalar.value, len);
    node->str[len] = '\0';
    node->len = len;
    node->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    *out = node;
    return DPM_OK;
  }
  dpm_status st = ytree_children(b, node, depth);
  if (st != DPM_OK) {
    dpm_ytree_free(node);
    return st;
  }
  *out = node;
  return DPM_OK;
}

dpm_status dpm_ytree_parse(const char *text, size_t len, const char *source,
                           dpm_ynode **out, dpm_err *err) {
  ytree_build b = {
      .src = source ? source : "<spec>", .text = text, .len = text ? len : 0, .err = err};
  dpm_ynode *root = NULL;
  yaml_event_t ev;
  dpm_status st;
  *out = NULL;
  if (!yaml_parser_initialize(&b.parser))
    return dpm_errf(err, DPM_NOMEM, "%s: out of memory", b.src);
  yaml_parser_set_input_string(&b.parser, (const unsigned char *)(text ? text : ""),
                               b.len);
  if ((st = ytree_next(&b, &ev)) != DPM_OK) goto done; /* STREAM-START */
  yaml_event_delete(&ev);
  if ((st = ytree_next(&b, &ev)) != DPM_OK) goto done;
  if (ev.type == YAML_STREAM_END_EVENT) {
    yaml_event_delete(&ev);
    st = ytree_err_at(&b, 0, 0, "empty spec: no YAML document");
    goto done;
  }
  yaml_event_delete(&ev); /* DOCUMENT-START */
  if ((st = ytree_next(&b, &ev)) != DPM_OK) goto done;
  st = ytree_node(&b, &ev, 0, &root);
  yaml_event_delete(&ev);
  if (st != DPM_OK) goto done;
  if ((st = ytree_next(&b, &ev)) != DPM_OK) goto done; /* DOCUMENT-END */
  yaml_event_delete(&ev);
  if ((st = ytree_next(&b, &ev)) != DPM_OK) goto done;
  if (ev.type != YAML_STREAM_END_EVENT) {
    st = ytree_err_mark(&b, ev.start_mark, "multiple YAML documents are not supported");
    yaml_event_delete(&ev);
    goto done;
  }
  yaml_event_delete(&ev);
done:
  yaml_parser_delete(&b.parser);
  if (st != DPM_OK) {
    dpm_ytree_free(root);
    return st;
  }
  *out = root;
  return DPM_OK;
}

const dpm_ynode *dpm_ymap_get(const dpm_ynode *m, const char *key) {
  if (!m || m->kind != DPM_YNODE_MAP) return NULL;
  for (size_t i = 0; i < m->n; i++)
    if (dpm_ynode_is(dpm_ymap_key(m, i), key)) return dpm_ymap_value(m, i);
  return NULL;
}

int dpm_ynode_is(const dpm_ynode *node, const char *s) {
  return node && node->kind == DPM_YNODE_SCALAR && node->len == strlen(s) &&
         memcmp(node->str, s, node->len) == 0;
}

int dpm_ynode_is_null(const dpm_ynode *node) {
  if (!node || node->kind != DPM_YNODE_SCALAR || node->quoted) return 0;
  return node->len == 0 || dpm_ynode_is(node, "~") || dpm_ynode_is(node, "null") ||
         dpm_ynode_is(node, "Null") || dpm_ynode_is(node, "NULL");
}

const char *dpm_ynode_describe(const dpm_ynode *node, char *buf, size_t cap) {
  if (!node) {
    snprintf(buf, cap, "nothing");
  } else if (node->kind == DPM_YNODE_SEQ) {
    snprintf(buf, cap, "a list");
  } else if (node->kind == DPM_YNODE_MAP) {
    snprintf(buf, cap, "a mapping");
  } else if (dpm_ynode_is_null(node)) {
    snprintf(buf, cap, "null");
  } else {
    /* 'excerpt': printable ASCII kept, other bytes as \xNN, cut with ... */
    size_t o = 0, room = cap - 6; /* quote, "...", quote, NUL */
    buf[o++] = '\'';
    size_t i = 0;
    for (; i < node->len; i++) {
      unsigned char c = (unsigned char)node->str[i];
      char tmp[5];
      size_t w;
      if (c >= 0x20 && c < 0x7F)
        tmp[0] = (char)c, w = 1;
      else
        w = (size_t)snprintf(tmp, sizeof tmp, "\\x%02X", c);
      if (o + w > room) break;
      memcpy(buf + o, tmp, w);
      o += w;
    }
    if (i < node->len) {
      memcpy(buf + o, "...", 3);
      o += 3;
    }
    buf[o++] = '\'';
    buf[o] = '\0';
  }
  return buf;
}

dpm_status dpm_yerr(dpm_err *err, const char *source, const dpm_ynode *node,
                    const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpm_errf(err, DPM_SPEC, "%s:%u:%u: %s", source ? source : "<spec>",
                  node ? node->line : 1u, node ? node->col : 1u, msg);
}
