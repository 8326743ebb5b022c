/* Open-addressing string map with FNV-1a hashing and linear probing. */
#include "engine/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static size_t slot(const dpm_strmap *m, const char *key) {
  size_t i = hash(key) & (m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
  return i;
}

int dpm_strmap_get(const dpm_strmap *m, const char *key) {
  if (!m->cap) return -1;
  size_t i = slot(m, key);
  return m->keys[i] ? m->vals[i] : -1;
}

static int grow(dpm_strmap *m) {
  dpm_strmap bigger = {.cap = m->cap ? m->cap * 2 : 64};
  bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
  bigger.vals = calloc(bigger.cap, sizeof *bigger.vals);
  if (!bigger.keys || !bigger.vals) {
    free(bigger.keys);
    free(bigger.vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = slot(&bigger, m->keys[i]);
    bigger.keys[j] = m->keys[i];
    bigger.vals[j] = m->vals[i];
  }
  bigger.n = m->n;
  free(m->keys);
  free(m->vals);
  *m = bigger;
  return 0;
}

int dpm_strmap_put(dpm_strmap *m, const char *key, int val) {
  if ((m->n + 1) * 2 > m->cap && grow(m)) return -1;
  size_t i = slot(m, key);
  if (!m->keys[i]) {
    if (!(m->keys[i] = strdup(key))) return -1;
    m->n++;
  }
  m->vals[i] = val;
  return 0;
}

void dpm_strmap_fini(dpm_strmap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}
