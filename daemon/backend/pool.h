/* The caching allocator: what sits above every backend's raw alloc.
 *
 * A pool serves blocks in size classes (64-byte multiples up to 4 KiB,
 * then four classes per power of two, so a block wastes at most a fifth of
 * itself) and keeps freed blocks on a free list per class for the next
 * request of that class: once a model's tensors, scratch and arenas exist,
 * a step allocates nothing, and a second model on the same device reuses
 * what the first freed. Blocks are never touched by the pool (device
 * memory may not be host-addressable): the free lists live on the host.
 * Cached blocks go back to the backend only at dpm_pool_trim or fini.
 *
 * Stats: bytes in use (handed out, by class size), peak in use, bytes
 * cached (free, kept), and counts of requests and of raw allocations; a
 * steady-state step shows its requests rising while raw allocations stay.
 *
 * Threads: every function takes the pool's mutex; a pool may be shared by
 * the threads that allocate on one device. */
#ifndef DPM_BACKEND_POOL_H
#define DPM_BACKEND_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The raw allocator underneath: a backend's alloc and free on one device. */
typedef struct dpm_pool_raw {
  void *(*alloc)(void *arg, size_t bytes); /* NULL: out of memory */
  void (*free)(void *arg, void *p, size_t bytes);
  void *arg;
} dpm_pool_raw;

typedef struct dpm_pool_stats {
  uint64_t in_use, peak; /* bytes handed out (class sizes), and the most at once */
  uint64_t cached;       /* bytes of free blocks kept for reuse */
  uint64_t requests;     /* dpm_pool_alloc calls that succeeded */
  uint64_t raw_allocs;   /* of them, served by the raw allocator (a miss) */
} dpm_pool_stats;

#define DPM_POOL_CLASSES 192 /* 64 B .. 2^52 B */

typedef struct dpm_pool_block {
  void *p;
  struct dpm_pool_block *next;
} dpm_pool_block;

typedef struct dpm_pool {
  dpm_pool_raw raw;
  pthread_mutex_t mu;
  dpm_pool_block *free[DPM_POOL_CLASSES]; /* cached blocks by class */
  dpm_pool_block *spare;                  /* list nodes to reuse */
  dpm_pool_stats stats;
} dpm_pool;

void dpm_pool_init(dpm_pool *p, dpm_pool_raw raw);
/* Returns every cached block to the raw allocator. Blocks still in use are
 * the caller's to have freed first (they are not tracked one by one). */
void dpm_pool_fini(dpm_pool *p);
/* The class size a request of `bytes` gets (>= bytes, >= 64). */
size_t dpm_pool_class_size(size_t bytes);
/* A block of at least `bytes` bytes (its class size in *got, which
 * dpm_pool_free needs back); NULL when the raw allocator fails even after
 * the cache was given back. Contents are undefined. */
void *dpm_pool_alloc(dpm_pool *p, size_t bytes, size_t *got);
/* Gives a block back (got as dpm_pool_alloc returned it). NULL is ignored. */
void dpm_pool_free(dpm_pool *p, void *block, size_t got);
/* Returns the cached blocks to the raw allocator. */
void dpm_pool_trim(dpm_pool *p);
dpm_pool_stats dpm_pool_stats_of(dpm_pool *p);

#endif
