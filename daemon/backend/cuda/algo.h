/* The device's algorithm cache (algo.c): choices that are costly to make
 * and depend only on a problem's shape and math flags, made once per
 * device and reused by every later step and every model on the device.
 * Today: cuDNN convolution algorithms (conv.c) and cuBLASLt matmul
 * heuristics (fc.c).
 *
 * A key is a kind and up to CUDA_ALGO_KEY_LEN integers (shapes, arguments,
 * flags, limits); a value is up to CUDA_ALGO_VAL_BYTES bytes, copied in
 * and out. The cache holds at most CUDA_ALGO_CACHE_MAX entries and never
 * evicts: once full, a caller chooses again each time without caching.
 *
 * Ownership: the device state owns the cache (cuda_algo_cache_new at open,
 * cuda_algo_cache_free at close). Threads: every call may come from any
 * thread; the cache has its own mutex (models on one device may bind and
 * run concurrently). A choice made by two threads at once is stored once,
 * the second put being ignored. */
#ifndef DPM_BACKEND_CUDA_ALGO_H
#define DPM_BACKEND_CUDA_ALGO_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda.h"

#define CUDA_ALGO_KEY_LEN 20
#define CUDA_ALGO_VAL_BYTES 160
#define CUDA_ALGO_CACHE_MAX 1024

enum {
  CUDA_ALGO_CONV_FWD = 1,
  CUDA_ALGO_CONV_BWD_DATA,
  CUDA_ALGO_CONV_BWD_FILTER,
  CUDA_ALGO_LT_MATMUL,
};

typedef struct cuda_algo_key {
  int64_t kind;                 /* CUDA_ALGO_* */
  int64_t v[CUDA_ALGO_KEY_LEN]; /* unused tail: 0 */
} cuda_algo_key;

/* Copies the value stored for key into val (size <= CUDA_ALGO_VAL_BYTES
 * bytes) and returns 1, or returns 0 when none is stored. */
int cuda_algo_get(cuda_algo_cache *c, const cuda_algo_key *key, void *val, size_t size);
/* Stores size bytes of val for key unless the key is stored already or the
 * cache is full. */
void cuda_algo_put(cuda_algo_cache *c, const cuda_algo_key *key, const void *val,
                   size_t size);

#endif
