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
 * Stream-ordered frees: a block handed to work still in flight (a copy or
 * kernel queued on a stream) is given back with dpm_pool_free_after and a
 * fence (a CUDA event recorded after that work). It waits on the pool's
 * pending list, oldest first, and joins its class's free list once the
 * fence is done. The fences are the pool user's (dpm_pool_set_fences):
 * `done` polls one; `release` hands it back when the pool no longer needs
 * it (an event back to its owner's free list); `wait` (optional) blocks
 * until it is done. Polling happens at each dpm_pool_alloc while blocks
 * are pending, from the oldest, up to the first fence not done (fences are
 * expected to complete in the order of their frees: events recorded on one
 * stream), so that a step costs a poll or two however many blocks are
 * pending. When the raw allocator fails, every pending block is polled
 * (fences that completed out of order: one of the class is served), the
 * cache is given back and the raw allocator asked again, and with `wait`,
 * the pending blocks are waited for, one of the class served or all given
 * back and the raw allocator asked again; without `wait` the pool fails as
 * it would without pending blocks.
 *
 * Stats: bytes in use (handed out, by class size), peak in use, bytes
 * cached (free, kept), bytes pending (freed behind a fence not yet seen
 * done), the bytes requested by the blocks in use (in_use -
 * requested_in_use is what the classes waste), and counts of requests and
 * of raw allocations; a steady-state step shows its requests rising while
 * raw allocations stay.
 *
 * Ownership: blocks in use are tracked by address (a host-side node each,
 * moved between the in-use table, the free lists and the pending list: a
 * hit allocates nothing); the pool owns the nodes, the raw allocator's
 * memory while it is cached or pending, and the fences of pending blocks.
 *
 * Threads: every function takes the pool's mutex; a pool may be shared by
 * the threads that allocate on one device. The fence callbacks run under
 * that mutex (they must not call back into the pool). */
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

/* The fences of dpm_pool_free_after (see above). */
typedef struct dpm_pool_fences {
  int (*done)(void *arg, void *fence);     /* nonzero: the fenced work completed */
  void (*release)(void *arg, void *fence); /* optional: the pool is done with fence */
  int (*wait)(void *arg, void *fence); /* optional: blocks; nonzero when it completed */
  void *arg;
} dpm_pool_fences;

typedef struct dpm_pool_stats {
  uint64_t in_use, peak;     /* bytes handed out (class sizes), and the most at once */
  uint64_t cached;           /* bytes of free blocks kept for reuse */
  uint64_t pending;          /* bytes freed behind fences not yet seen done */
  uint64_t requested_in_use; /* bytes asked for by the blocks in use (<= in_use) */
  uint64_t requests;         /* dpm_pool_alloc calls that succeeded */
  uint64_t raw_allocs;       /* of them, served by the raw allocator (a miss) */
} dpm_pool_stats;

#define DPM_POOL_CLASSES 192  /* 64 B .. 2^52 B */
#define DPM_POOL_BUCKETS 2048 /* of the in-use table */

typedef struct dpm_pool_block {
  void *p;
  struct dpm_pool_block *next;
  size_t size;      /* class size */
  size_t requested; /* in use: the bytes asked for */
  void *fence;      /* pending: what it waits for */
} dpm_pool_block;

typedef struct dpm_pool {
  dpm_pool_raw raw;
  dpm_pool_fences fences;
  pthread_mutex_t mu;
  dpm_pool_block *free[DPM_POOL_CLASSES];  /* cached blocks by class */
  dpm_pool_block *used[DPM_POOL_BUCKETS];  /* blocks in use, by address */
  dpm_pool_block *pending, **pending_tail; /* oldest first */
  dpm_pool_block *spare;                   /* list nodes to reuse */
  dpm_pool_stats stats;
} dpm_pool;

void dpm_pool_init(dpm_pool *p, dpm_pool_raw raw);
/* Sets the fence interface (before any dpm_pool_free_after). */
void dpm_pool_set_fences(dpm_pool *p, dpm_pool_fences fences);
/* Returns every cached block to the raw allocator, and every pending one
 * after waiting for its fence with `wait` when there is one (without it,
 * the caller must have waited for the fenced work: the blocks are given
 * back regardless), releasing the fences. Blocks still in use are the
 * caller's to have freed first (their memory is not given back). */
void dpm_pool_fini(dpm_pool *p);
/* The class size a request of `bytes` gets (>= bytes, >= 64). */
size_t dpm_pool_class_size(size_t bytes);
/* A block of at least `bytes` bytes (its class size in *got, which
 * dpm_pool_free needs back); NULL when the raw allocator fails even after
 * the cache (and with `wait`, the pending blocks) was given back, or when
 * no host memory is left to track the block. Contents are undefined. */
void *dpm_pool_alloc(dpm_pool *p, size_t bytes, size_t *got);
/* Gives a block back (got as dpm_pool_alloc returned it). NULL is ignored. */
void dpm_pool_free(dpm_pool *p, void *block, size_t got);
/* Gives a block back once `fence` is done: until then it is pending, not
 * reused. A NULL fence is dpm_pool_free. */
void dpm_pool_free_after(dpm_pool *p, void *block, size_t got, void *fence);
/* Moves every pending block whose fence is done (in any order) to the
 * cache, then returns the cache to the raw allocator. Pending blocks whose
 * fences are not done stay pending. */
void dpm_pool_trim(dpm_pool *p);
dpm_pool_stats dpm_pool_stats_of(dpm_pool *p);

#endif
