/* A string-keyed hash map (open addressing) to int values: the index behind
 * workspaces and shape tables. Keys are copied and owned by the map.
 * Not thread-safe. */
#ifndef DPM_STRMAP_H
#define DPM_STRMAP_H

#include <stddef.h>

typedef struct dpm_strmap {
  char **keys; /* slots; NULL = empty */
  int *vals;
  size_t cap, n; /* cap is a power of two (or 0) */
} dpm_strmap;

void dpm_strmap_fini(dpm_strmap *m);
/* Value of key, or -1 if absent. */
int dpm_strmap_get(const dpm_strmap *m, const char *key);
/* Insert or overwrite; returns 0, or -1 when out of memory. */
int dpm_strmap_put(dpm_strmap *m, const char *key, int val);

#endif
