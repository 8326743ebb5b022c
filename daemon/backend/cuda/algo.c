/* The device's algorithm cache (algo.h): an open-addressing hash table of
 * 2 * CUDA_ALGO_CACHE_MAX slots (linear probing, FNV-1a over the key's
 * bytes), filled up to CUDA_ALGO_CACHE_MAX entries and never shrunk, so a
 * probe always ends at a free slot. One mutex guards it; a lookup is a
 * hash and a few key compares, cheap enough for every op of every step.
 *
 * Ownership: cuda_algo_cache_new's caller (the backend's open, plugin.c) owns
 * the cache and frees it with cuda_algo_cache_free once no kernel of the
 * device runs. Threads: get and put from any thread. Errors: new returns
 * NULL when out of memory; get and put cannot fail (a full cache stores
 * nothing). */
#include "backend/cuda/algo.h"

#include <stdlib.h>
#include <string.h>

#define ALGO_SLOTS (2 * CUDA_ALGO_CACHE_MAX)

typedef struct algo_slot {
  int used;
  cuda_algo_key key;
  _Alignas(16) unsigned char val[CUDA_ALGO_VAL_BYTES];
} algo_slot;

struct cuda_algo_cache {
  pthread_mutex_t mu;
  int n; /* slots in use */
  algo_slot slot[ALGO_SLOTS];
};

cuda_algo_cache *cuda_algo_cache_new(void) {
  cuda_algo_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (pthread_mutex_init(&c->mu, NULL)) {
    free(c);
    return NULL;
  }
  return c;
}

void cuda_algo_cache_free(cuda_algo_cache *c) {
  if (!c) return;
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static size_t key_hash(const cuda_algo_key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return (size_t)(h % ALGO_SLOTS);
}

/* The slot holding key, or the free slot where it would go. Under mu. */
static algo_slot *find(cuda_algo_cache *c, const cuda_algo_key *k) {
  size_t i = key_hash(k);
  while (c->slot[i].used && memcmp(&c->slot[i].key, k, sizeof *k))
    i = (i + 1) % ALGO_SLOTS;
  return &c->slot[i];
}

int cuda_algo_get(cuda_algo_cache *c, const cuda_algo_key *key, void *val, size_t size) {
  if (!c || size > CUDA_ALGO_VAL_BYTES) return 0;
  pthread_mutex_lock(&c->mu);
  algo_slot *s = find(c, key);
  int hit = s->used;
  if (hit) memcpy(val, s->val, size);
  pthread_mutex_unlock(&c->mu);
  return hit;
}

void cuda_algo_put(cuda_algo_cache *c, const cuda_algo_key *key, const void *val,
                   size_t size) {
  if (!c || size > CUDA_ALGO_VAL_BYTES) return;
  pthread_mutex_lock(&c->mu);
  algo_slot *s = find(c, key);
  if (!s->used && c->n < CUDA_ALGO_CACHE_MAX) {
    s->used = 1;
    s->key = *key;
    memset(s->val, 0, sizeof s->val);
    memcpy(s->val, val, size);
    c->n++;
  }
  pthread_mutex_unlock(&c->mu);
}
