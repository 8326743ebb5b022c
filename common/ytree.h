/* A small YAML document tree with source positions, built with libyaml's
 * event API: the generic half of the spec front end (spec.c is the schema).
 *
 * dpm_ytree_parse() reads exactly one YAML document into a tree of scalars,
 * sequences and mappings. Each node remembers its 1-based line and column
 * (libyaml marks plus one) so later checks can say "FILE:LINE:COL: ...".
 * The tree is deliberately plainer than YAML: anchors and aliases, explicit
 * tags, several documents, non-scalar mapping keys and duplicate keys are
 * rejected while building, and so are nesting deeper than DPM_YTREE_MAX_DEPTH,
 * more than DPM_YTREE_MAX_NODES nodes and mappings with more than
 * DPM_YTREE_MAX_KEYS keys (these bound time and memory on hostile input).
 * Scalars stay untyped strings; the schema decides what they mean.
 *
 * Ownership: the caller owns the tree returned in *out and frees it with
 * dpm_ytree_free(). Threads: no shared state; calls on different trees may
 * run in parallel. Errors: DPM_SPEC with "SOURCE:LINE:COL: message" in err,
 * DPM_NOMEM when memory runs out; *out is NULL on any error. */
#ifndef DPM_SPEC_YTREE_H
#define DPM_SPEC_YTREE_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

#define DPM_YTREE_MAX_DEPTH 64
#define DPM_YTREE_MAX_NODES (1u << 20)
#define DPM_YTREE_MAX_KEYS 1024

typedef enum { DPM_YNODE_SCALAR, DPM_YNODE_SEQ, DPM_YNODE_MAP } dpm_ynode_kind;

typedef struct dpm_ynode {
  dpm_ynode_kind kind;      /* scalar, sequence or mapping */
  uint32_t line, col;       /* 1-based start position in the source */
  int quoted;               /* scalar written quoted or as a block (| >) */
  char *str;                /* scalar: the value, NUL-terminated copy */
  size_t len;               /* scalar: length of str (it may hold a NUL) */
  size_t n;                 /* sequence: items; mapping: key/value pairs */
  struct dpm_ynode **items; /* sequence: n items; mapping: 2n, key then value */
} dpm_ynode;

/* Parses text[0..len) (UTF-8, or UTF-16 with a BOM) as one YAML document.
 * source names the text in error messages ("<spec>" if NULL). */
dpm_status dpm_ytree_parse(const char *text, size_t len, const char *source,
                           dpm_ynode **out, dpm_err *err);

/* Frees a tree from dpm_ytree_parse(); NULL is fine. */
void dpm_ytree_free(dpm_ynode *node);

/* Mapping access: the i-th key and value (i < node->n). */
static inline const dpm_ynode *dpm_ymap_key(const dpm_ynode *m, size_t i) {
  return m->items[2 * i];
}
static inline const dpm_ynode *dpm_ymap_value(const dpm_ynode *m, size_t i) {
  return m->items[2 * i + 1];
}
/* The value stored under key in mapping m, or NULL. */
const dpm_ynode *dpm_ymap_get(const dpm_ynode *m, const char *key);

/* True for a plain scalar meaning null: empty, ~, null, Null or NULL. */
int dpm_ynode_is_null(const dpm_ynode *node);
/* True if the scalar equals the C string s exactly (no embedded NUL). */
int dpm_ynode_is(const dpm_ynode *node, const char *s);

/* Describes a node for a message: "'abc'" (a printable excerpt of a
 * scalar, shortened with "..."), "null", "a list" or "a mapping". Writes
 * at most cap bytes (cap >= 16) and returns buf. */
const char *dpm_ynode_describe(const dpm_ynode *node, char *buf, size_t cap);

/* Sets err to DPM_SPEC and "SOURCE:LINE:COL: " + the formatted message, at
 * node's position (1:1 if node is NULL). Returns DPM_SPEC. */
dpm_status dpm_yerr(dpm_err *err, const char *source, const dpm_ynode *node,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
