/* The caching allocator (pool.h). */
#include "backend/pool.h"

#include <stdlib.h>
#include <string.h>

#define SMALL_STEP 64    /* classes 64, 128, ... 4096 */
#define SMALL_MAX 4096
#define SMALL_CLASSES (SMALL_MAX / SMALL_STEP)

/* Class index and size of a request: 64-byte steps up to 4 KiB, then 2^k x
 * {1, 1.25, 1.5, 1.75}. */
static int class_of(size_t bytes, size_t *size) {
  if (bytes <= SMALL_MAX) {
    size_t k = bytes ? (bytes + SMALL_STEP - 1) / SMALL_STEP : 1;
    *size = k * SMALL_STEP;
    return (int)k - 1;
  }
  int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e < bytes <= 2^(e+1) */
  size_t base = (size_t)1 << e, quarter = base / 4;
  size_t q = (bytes - base + quarter - 1) / quarter; /* 1..4 */
  *size = base + q * quarter;
  /* 4096 < bytes: e >= 12; classes for e follow the small ones */
  int idx = SMALL_CLASSES + (e - 12) * 4 + (int)q - 1;
  return idx < DPM_POOL_CLASSES ? idx : -1;
}

/* The size of class c (the inverse of class_of). */
static size_t size_of_class(int c) {
  if (c < SMALL_CLASSES) return (size_t)(c + 1) * SMALL_STEP;
  size_t base = (size_t)1 << (12 + (c - SMALL_CLASSES) / 4);
  return base + (size_t)((c - SMALL_CLASSES) % 4 + 1) * (base / 4);
}

size_t dpm_pool_class_size(size_t bytes) {
  size_t s;
  return class_of(bytes, &s) < 0 ? 0 : s;
}

void dpm_pool_init(dpm_pool *p, dpm_pool_raw raw) {
  memset(p, 0, sizeof *p);
  p->raw = raw;
  pthread_mutex_init(&p->mu, NULL);
}

/* Under mu: every cached block back to the raw allocator. */
static void give_back(dpm_pool *p) {
  for (int c = 0; c < DPM_POOL_CLASSES; c++) {
    size_t size = size_of_class(c);
    while (p->free[c]) {
      dpm_pool_block *b = p->free[c];
      p->free[c] = b->next;
      p->raw.free(p->raw.arg, b->p, size);
      p->stats.cached -= size;
      b->next = p->spare;
      p->spare = b;
    }
  }
}

void dpm_pool_fini(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  give_back(p);
  for (dpm_pool_block *b; (b = p->spare);) {
    p->spare = b->next;
    free(b);
  }
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
}

void *dpm_pool_alloc(dpm_pool *p, size_t bytes, size_t *got) {
  size_t size;
  int c = class_of(bytes, &size);
  if (c < 0) return NULL;
  pthread_mutex_lock(&p->mu);
  void *block = NULL;
  dpm_pool_block *b = p->free[c];
  if (b) { /* a hit: the node goes to the spares */
    p->free[c] = b->next;
    block = b->p;
    b->next = p->spare;
    p->spare = b;
    p->stats.cached -= size;
  } else {
    block = p->raw.alloc(p->raw.arg, size);
    if (!block && p->stats.cached) { /* the cache holds memory of other classes */
      give_back(p);
      block = p->raw.alloc(p->raw.arg, size);
    }
    if (block) p->stats.raw_allocs++;
  }
  if (block) {
    p->stats.requests++;
    p->stats.in_use += size;
    if (p->stats.in_use > p->stats.peak) p->stats.peak = p->stats.in_use;
    *got = size;
  }
  pthread_mutex_unlock(&p->mu);
  return block;
}

void dpm_pool_free(dpm_pool *p, void *block, size_t got) {
  if (!block) return;
  size_t size;
  int c = class_of(got, &size);
  pthread_mutex_lock(&p->mu);
  dpm_pool_block *b = p->spare;
  if (b)
    p->spare = b->next;
  else
    b = malloc(sizeof *b);
  p->stats.in_use -= size;
  if (!b || c < 0) { /* no node to keep it by: straight back */
    p->raw.free(p->raw.arg, block, size);
    free(b);
  } else {
    b->p = block;
    b->next = p->free[c];
    p->free[c] = b;
    p->stats.cached += size;
  }
  pthread_mutex_unlock(&p->mu);
}

void dpm_pool_trim(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  give_back(p);
  pthread_mutex_unlock(&p->mu);
}

dpm_pool_stats dpm_pool_stats_of(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  dpm_pool_stats s = p->stats;
  pthread_mutex_unlock(&p->mu);
  return s;
}
