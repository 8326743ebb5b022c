/* The model registry (registry.h): an array of (name, model), searched by
 * name; max_models keeps it short. */
#include "server/models/registry.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
  const char *name; /* the model's own */
  struct dpmd_model *model;
} entry;

struct dpmd_registry {
  entry *e;
  int n, cap;
};

dpm_status dpmd_registry_create(dpmd_registry **out, dpm_err *err) {
  if (!(*out = calloc(1, sizeof **out))) return dpm_errf(err, DPM_NOMEM, "out of memory");
  return DPM_OK;
}

void dpmd_registry_destroy(dpmd_registry *r) {
  if (!r) return;
  free(r->e);
  free(r);
}

struct dpmd_model *dpmd_registry_find(const dpmd_registry *r, const char *name) {
  for (int i = 0; name && i < r->n; i++)
    if (strcmp(r->e[i].name, name) == 0) return r->e[i].model;
  return NULL;
}

dpm_status dpmd_registry_reserve(dpmd_registry *r, dpm_err *err) {
  if (r->n < r->cap) return DPM_OK;
  int cap = r->cap ? 2 * r->cap : 8;
  entry *e = realloc(r->e, (size_t)cap * sizeof *e);
  if (!e) return dpm_errf(err, DPM_NOMEM, "out of memory");
  r->e = e;
  r->cap = cap;
  return DPM_OK;
}

void dpmd_registry_add(dpmd_registry *r, const char *name, struct dpmd_model *m) {
  r->e[r->n++] = (entry){name, m}; /* reserved: r->n < r->cap */
}

void dpmd_registry_remove(dpmd_registry *r, const struct dpmd_model *m) {
  for (int i = 0; i < r->n; i++)
    if (r->e[i].model == m) {
      r->e[i] = r->e[--r->n];
      return;
    }
}

int dpmd_registry_count(const dpmd_registry *r) { return r->n; }

struct dpmd_model *dpmd_registry_at(const dpmd_registry *r, int i) {
  return r->e[i].model;
}
