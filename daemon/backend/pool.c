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

size_t dpm_pool_class_size(size_t bytes) {
  size_t s;
  return class_of(bytes, &s) < 0 ? 0 : s;
}

void dpm_pool_init(dpm_pool *p, dpm_pool_raw raw) {
  memset(p, 0, sizeof *p);
  p->raw = raw;
  p->pending_tail = &p->pending;
  pthread_mutex_init(&p->mu, NULL);
}

void dpm_pool_set_fences(dpm_pool *p, dpm_pool_fences fences) {
  pthread_mutex_lock(&p->mu);
  p->fences = fences;
  pthread_mutex_unlock(&p->mu);
}

/* The in-use table's bucket of a block address. */
static size_t bucket_of(const void *block) {
  uint64_t x = (uint64_t)(uintptr_t)block;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)(x & (DPM_POOL_BUCKETS - 1));
}

/* Under mu: a list node, from the spares or malloc (NULL: out of memory). */
static dpm_pool_block *node_new(dpm_pool *p) {
  dpm_pool_block *b = p->spare;
  if (b)
    p->spare = b->next;
  else
    b = malloc(sizeof *b);
  return b;
}

static void node_spare(dpm_pool *p, dpm_pool_block *b) {
  b->next = p->spare;
  p->spare = b;
}

/* Under mu: the in-use node of block, unlinked (NULL: not one of ours). */
static dpm_pool_block *untrack(dpm_pool *p, void *block) {
  for (dpm_pool_block **at = &p->used[bucket_of(block)]; *at; at = &(*at)->next)
    if ((*at)->p == block) {
      dpm_pool_block *b = *at;
      *at = b->next;
      p->stats.requested_in_use -= b->requested;
      return b;
    }
  return NULL;
}

/* Under mu: node b onto the free list of its class (or straight back to the
 * raw allocator when its size has no class). */
static void cache(dpm_pool *p, dpm_pool_block *b) {
  size_t size;
  int c = class_of(b->size, &size);
  if (c < 0) {
    p->raw.free(p->raw.arg, b->p, b->size);
    node_spare(p, b);
    return;
  }
  b->next = p->free[c];
  p->free[c] = b;
  p->stats.cached += size;
}

/* Under mu: the first free block of class c, unlinked (NULL: none). */
static dpm_pool_block *take(dpm_pool *p, int c) {
  dpm_pool_block *b = p->free[c];
  if (b) {
    p->free[c] = b->next;
    p->stats.cached -= b->size;
  }
  return b;
}

enum reap_mode {
  REAP_FIFO, /* oldest first, up to the first fence not done */
  REAP_ALL,  /* every pending block whose fence is done */
  REAP_WAIT  /* every pending block, waiting for its fence with `wait` */
};

/* Under mu: moves pending blocks whose fences are done to the cache,
 * releasing the fences. */
static void reap(dpm_pool *p, enum reap_mode mode) {
  const dpm_pool_fences *f = &p->fences;
  dpm_pool_block **at = &p->pending;
  while (*at) {
    dpm_pool_block *b = *at;
    int done = f->done && f->done(f->arg, b->fence);
    if (!done && mode == REAP_WAIT && f->wait) done = f->wait(f->arg, b->fence);
    if (!done) {
      if (mode == REAP_FIFO) break;
      at = &b->next;
      continue;
    }
    *at = b->next;
    if (!*at) p->pending_tail = at;
    p->stats.pending -= b->size;
    if (f->release) f->release(f->arg, b->fence);
    b->fence = NULL;
    cache(p, b);
  }
}

/* Under mu: every cached block back to the raw allocator. */
static void give_back(dpm_pool *p) {
  for (int c = 0; c < DPM_POOL_CLASSES; c++)
    for (dpm_pool_block *b; (b = take(p, c));) {
      p->raw.free(p->raw.arg, b->p, b->size);
      node_spare(p, b);
    }
}

void dpm_pool_fini(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  reap(p, REAP_WAIT);
  /* not done, or no fences to wait with: back regardless */
  for (dpm_pool_block *b; (b = p->pending);) {
    p->pending = b->next;
    p->stats.pending -= b->size;
    if (p->fences.release) p->fences.release(p->fences.arg, b->fence);
    p->raw.free(p->raw.arg, b->p, b->size);
    free(b);
  }
  p->pending_tail = &p->pending;
  give_back(p);
  for (int i = 0; i < DPM_POOL_BUCKETS; i++) /* blocks still in use: their nodes only */
    for (dpm_pool_block *b; (b = p->used[i]);) {
      p->used[i] = b->next;
      free(b);
    }
  for (dpm_pool_block *b; (b = p->spare);) {
    p->spare = b->next;
    free(b);
  }
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
}

/* Under mu: a miss of class c (its size `size`): a node holding a new block
 * from the raw allocator; when that fails, a block of the class freed
 * behind a fence that completed out of order, or the raw allocator again
 * after the cache was given back, and with `wait`, after every pending
 * block was waited for (one of class c is served at once). NULL: none of
 * that worked. */
static dpm_pool_block *miss(dpm_pool *p, int c, size_t size) {
  dpm_pool_block *hit;
  dpm_pool_block *b = node_new(p);
  if (!b) return NULL;
  b->size = size;
  b->fence = NULL;
  b->p = p->raw.alloc(p->raw.arg, size);
  if (!b->p && p->pending) {
    reap(p, REAP_ALL);
    if ((hit = take(p, c))) {
      node_spare(p, b);
      return hit;
    }
  }
  if (!b->p && p->stats.cached) { /* the cache holds memory of other classes */
    give_back(p);
    b->p = p->raw.alloc(p->raw.arg, size);
  }
  if (!b->p && p->pending && p->fences.wait) {
    reap(p, REAP_WAIT);
    if ((hit = take(p, c))) {
      node_spare(p, b);
      return hit;
    }
    if (p->stats.cached) {
      give_back(p);
      b->p = p->raw.alloc(p->raw.arg, size);
    }
  }
  if (!b->p) {
    node_spare(p, b);
    return NULL;
  }
  p->stats.raw_allocs++;
  return b;
}

void *dpm_pool_alloc(dpm_pool *p, size_t bytes, size_t *got) {
  size_t size;
  int c = class_of(bytes, &size);
  if (c < 0) return NULL;
  pthread_mutex_lock(&p->mu);
  if (p->pending) reap(p, REAP_FIFO);
  dpm_pool_block *b = take(p, c); /* a hit: the node moves to the in-use table */
  if (!b) b = miss(p, c, size);
  void *block = NULL;
  if (b) {
    block = b->p;
    b->requested = bytes;
    size_t i = bucket_of(block);
    b->next = p->used[i];
    p->used[i] = b;
    p->stats.requested_in_use += bytes;
    p->stats.requests++;
    p->stats.in_use += size;
    if (p->stats.in_use > p->stats.peak) p->stats.peak = p->stats.in_use;
    *got = size;
  }
  pthread_mutex_unlock(&p->mu);
  return block;
}

/* Under mu: the node of a block given back, out of the in-use table and no
 * longer counted in use; a new node for a block the pool did not hand out
 * (counted at got's class size, as handed out); NULL when out of memory. */
static dpm_pool_block *given_back(dpm_pool *p, void *block, size_t got) {
  dpm_pool_block *b = untrack(p, block);
  if (!b) {
    size_t size;
    if (class_of(got, &size) < 0) size = got;
    p->stats.in_use -= size;
    if (!(b = node_new(p))) return NULL;
    b->p = block;
    b->size = size;
    b->fence = NULL;
    return b;
  }
  p->stats.in_use -= b->size;
  return b;
}

void dpm_pool_free(dpm_pool *p, void *block, size_t got) {
  if (!block) return;
  pthread_mutex_lock(&p->mu);
  dpm_pool_block *b = given_back(p, block, got);
  if (b)
    cache(p, b);
  else /* no node to keep it by: straight back */
    p->raw.free(p->raw.arg, block, dpm_pool_class_size(got));
  pthread_mutex_unlock(&p->mu);
}

void dpm_pool_free_after(dpm_pool *p, void *block, size_t got, void *fence) {
  if (!fence) {
    dpm_pool_free(p, block, got);
    return;
  }
  if (!block) return;
  pthread_mutex_lock(&p->mu);
  const dpm_pool_fences *f = &p->fences;
  dpm_pool_block *b = given_back(p, block, got);
  if (b) {
    b->fence = fence;
    b->next = NULL;
    *p->pending_tail = b;
    p->pending_tail = &b->next;
    p->stats.pending += b->size;
  } else { /* no node to keep it by: back once the work is done, else lost */
    if (f->wait && f->wait(f->arg, fence))
      p->raw.free(p->raw.arg, block, dpm_pool_class_size(got));
    if (f->release) f->release(f->arg, fence);
  }
  pthread_mutex_unlock(&p->mu);
}

void dpm_pool_trim(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->pending) reap(p, REAP_ALL);
  give_back(p);
  pthread_mutex_unlock(&p->mu);
}

dpm_pool_stats dpm_pool_stats_of(dpm_pool *p) {
  pthread_mutex_lock(&p->mu);
  dpm_pool_stats s = p->stats;
  pthread_mutex_unlock(&p->mu);
  return s;
}
