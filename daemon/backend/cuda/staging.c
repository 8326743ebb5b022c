/* Host <-> device copies of a cuda device through staging blocks (cuda.h):
 * a pool of pinned host blocks (cudaHostAlloc) and a pool of device blocks
 * (cudaMallocAsync on the copy stream, or cudaMalloc), both caching
 * allocators (backend/pool.h, the plugin's own copy) whose stream-ordered
 * frees are fenced by CUDA events, taken from a free list of the device's
 * (made with cudaEventDisableTiming, given back by the pools once done).
 *
 * Upload, per chunk of at most STAGING_CHUNK bytes: src is copied into a
 * pinned block on the host, sent to a device block on the copy stream
 * (overlapping what the compute stream is running), event e1 is recorded
 * on the copy stream, the compute stream waits for e1 and copies the
 * device block into dst, and event e2 is recorded on the compute stream.
 * The pinned block is freed behind e1, the device block behind e2: the
 * copy into dst is ordered after every kernel queued before it and before
 * every kernel queued after it, and the host never waits. When no device
 * block is to be had (the device is out of memory, or more than
 * STAGING_DEVICE_PENDING bytes of device blocks already wait on the compute
 * stream), src is copied into dst on the compute stream itself (ordered
 * the same, not overlapped; the runtime stages pageable memory before the
 * call returns); when no pinned block is to be had, src is sent to the
 * device block from pageable memory the same way. So every pinned block
 * of an upload is fenced on the copy stream.
 *
 * Download, per chunk: a copy into a pinned block on the compute stream,
 * a wait for that stream (cuda_wait: the NCCL watches run meanwhile), and
 * a copy out of the block on the host; after a failure of the device the
 * destination is zeroed instead (the failure is reported by the device's
 * check).
 *
 * Fences: an event is done once cudaEventQuery says so; an error there is
 * the device's sticky failure (recorded) and counts as done, since a
 * faulted context runs nothing more. The pinned pool may wait for its
 * fences (cudaEventSynchronize: the copy stream runs only these uploads,
 * and waits for nothing else) when cudaHostAlloc fails; the device pool's
 * fences are on the compute stream, behind collectives whose hangs only
 * cuda_wait's watches resolve, so it never waits and falls back instead.
 *
 * Ownership: the staging state is the device's (cuda_staging_new at open,
 * cuda_staging_free at close, after the streams were synchronized); the
 * blocks are the pools', the events the free list's or a pool's.
 * Threads: the device's worker; each pool and the event list have a mutex
 * of their own (a pool calls release under its mutex, which then takes the
 * list's). Not to be called while a graph capture is open on the compute
 * stream. Errors: every CUDA call goes through CUDA_OK (the device's
 * sticky failure); out of memory is not a failure (a fallback is taken). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/pool.h"

#define STAGING_CHUNK ((size_t)64 << 20)
#define STAGING_DEVICE_PENDING ((size_t)1 << 30)

struct cuda_staging {
  cuda_dev *dev;
  dpm_pool host, device;
  pthread_mutex_t ev_mu;
  cudaEvent_t *events; /* free ones */
  int n_events, cap_events;
};

/* ---- events ---------------------------------------------------------------- */

/* A free event, or a new one; NULL when none could be made (recorded). */
static cudaEvent_t event_get(cuda_staging *s) {
  cudaEvent_t e = NULL;
  pthread_mutex_lock(&s->ev_mu);
  if (s->n_events) e = s->events[--s->n_events];
  pthread_mutex_unlock(&s->ev_mu);
  if (!e && !CUDA_OK(s->dev, cudaEventCreateWithFlags(&e, cudaEventDisableTiming)))
    e = NULL;
  return e;
}

static void event_put(cuda_staging *s, cudaEvent_t e) {
  pthread_mutex_lock(&s->ev_mu);
  if (s->n_events == s->cap_events) {
    int cap = s->cap_events ? 2 * s->cap_events : 16;
    cudaEvent_t *grown = realloc(s->events, (size_t)cap * sizeof *grown);
    if (grown) {
      s->events = grown;
      s->cap_events = cap;
    }
  }
  if (s->n_events < s->cap_events) {
    s->events[s->n_events++] = e;
    e = NULL;
  }
  pthread_mutex_unlock(&s->ev_mu);
  if (e) cudaEventDestroy(e); /* no room to keep it */
}

static int fence_done(void *arg, void *fence) {
  cuda_staging *s = arg;
  cudaError_t e = cudaEventQuery((cudaEvent_t)fence);
  if (e == cudaErrorNotReady) return 0;
  if (e != cudaSuccess) {
    cudaGetLastError();
    CUDA_OK(s->dev, e);
  }
  return 1;
}

static int fence_wait(void *arg, void *fence) {
  cuda_staging *s = arg;
  CUDA_OK(s->dev, cudaEventSynchronize((cudaEvent_t)fence));
  return 1;
}

static void fence_release(void *arg, void *fence) { event_put(arg, (cudaEvent_t)fence); }

/* ---- raw memory of the pools ----------------------------------------------- */

static atomic_ulong blocks; /* cuda_staging_blocks */

unsigned long cuda_staging_blocks(void) { return atomic_load(&blocks); }

static void *host_alloc(void *arg, size_t bytes) {
  (void)arg;
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError(); /* out of pinned memory is not a failure: a fallback follows */
    return NULL;
  }
  atomic_fetch_add(&blocks, 1);
  return p;
}

static void host_free(void *arg, void *p, size_t bytes) {
  cuda_staging *s = arg;
  (void)bytes;
  CUDA_OK(s->dev, cudaFreeHost(p));
}

static void *device_alloc(void *arg, size_t bytes) {
  cuda_staging *s = arg;
  void *p = NULL;
  cudaError_t e = s->dev->async_alloc ? cudaMallocAsync(&p, bytes, s->dev->copy)
                                      : cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* out of memory: the upload goes without a device block */
    return NULL;
  }
  atomic_fetch_add(&blocks, 1);
  return p;
}

static void device_free(void *arg, void *p, size_t bytes) {
  cuda_staging *s = arg;
  (void)bytes;
  if (s->dev->async_alloc)
    CUDA_OK(s->dev, cudaFreeAsync(p, s->dev->copy));
  else
    CUDA_OK(s->dev, cudaFree(p));
}

/* ---- life ------------------------------------------------------------------ */

cuda_staging *cuda_staging_new(cuda_dev *dev) {
  cuda_staging *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->dev = dev;
  pthread_mutex_init(&s->ev_mu, NULL);
  dpm_pool_init(&s->host, (dpm_pool_raw){host_alloc, host_free, s});
  dpm_pool_set_fences(&s->host,
                      (dpm_pool_fences){fence_done, fence_release, fence_wait, s});
  dpm_pool_init(&s->device, (dpm_pool_raw){device_alloc, device_free, s});
  dpm_pool_set_fences(&s->device, (dpm_pool_fences){fence_done, fence_release, NULL, s});
  return s;
}

void cuda_staging_free(cuda_staging *s) {
  if (!s) return;
  cuda_dev *dev = s->dev;
  cuda_use(dev);
  /* every fence is done once both streams are idle (the pools then give
   * every block back, pending ones included, and release the events) */
  if (dev->copy) CUDA_OK(dev, cudaStreamSynchronize(dev->copy));
  if (dev->compute) cuda_wait(dev);
  dpm_pool_fini(&s->host);
  dpm_pool_fini(&s->device);
  if (dev->async_alloc && dev->copy) CUDA_OK(dev, cudaStreamSynchronize(dev->copy));
  for (int i = 0; i < s->n_events; i++) cudaEventDestroy(s->events[i]);
  free(s->events);
  pthread_mutex_destroy(&s->ev_mu);
  free(s);
}

/* ---- copies ---------------------------------------------------------------- */

/* Frees block into pool behind an event recorded on the compute stream
 * now; without one (the device failed), after waiting for the stream. */
static void free_behind(cuda_staging *s, dpm_pool *pool, void *block, size_t got) {
  cudaEvent_t e = event_get(s);
  if (e && CUDA_OK(s->dev, cudaEventRecord(e, s->dev->compute))) {
    dpm_pool_free_after(pool, block, got, e);
    return;
  }
  if (e) event_put(s, e);
  cuda_wait(s->dev);
  dpm_pool_free(pool, block, got);
}

/* One chunk of cuda_upload. */
static void upload_chunk(cuda_staging *s, char *dst, const char *src, size_t n) {
  cuda_dev *dev = s->dev;
  size_t hg = 0, dg = 0;
  void *db = NULL;
  if (dpm_pool_stats_of(&s->device).pending < STAGING_DEVICE_PENDING)
    db = dpm_pool_alloc(&s->device, n, &dg);
  if (!db) { /* straight into dst, in order on the compute stream (the runtime stages src)
              */
    CUDA_OK(dev, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, dev->compute));
    return;
  }
  void *hb = dpm_pool_alloc(&s->host, n, &hg);
  if (hb) memcpy(hb, src, n);
  CUDA_OK(dev, cudaMemcpyAsync(db, hb ? hb : src, n, cudaMemcpyHostToDevice, dev->copy));
  cudaEvent_t e1 = event_get(s);
  if (!e1 || !CUDA_OK(dev, cudaEventRecord(e1, dev->copy)) ||
      !CUDA_OK(dev, cudaStreamWaitEvent(dev->compute, e1, 0))) {
    /* the device failed: no copy into dst; the blocks back once the copy is idle */
    if (e1) event_put(s, e1);
    CUDA_OK(dev, cudaStreamSynchronize(dev->copy));
    dpm_pool_free(&s->host, hb, hg);
    dpm_pool_free(&s->device, db, dg);
    return;
  }
  /* e1 fences the pinned block; without one (src sent from pageable memory)
   * it goes back to the list at once: the wait above took its state */
  if (hb)
    dpm_pool_free_after(&s->host, hb, hg, e1);
  else
    event_put(s, e1);
  CUDA_OK(dev, cudaMemcpyAsync(dst, db, n, cudaMemcpyDeviceToDevice, dev->compute));
  free_behind(s, &s->device, db, dg);
}

void cuda_upload(cuda_dev *dev, void *dst, const void *src, size_t bytes) {
  cuda_use(dev);
  for (size_t off = 0; off < bytes; off += STAGING_CHUNK) {
    size_t n = bytes - off < STAGING_CHUNK ? bytes - off : STAGING_CHUNK;
    upload_chunk(dev->staging, (char *)dst + off, (const char *)src + off, n);
  }
}

void cuda_download(cuda_dev *dev, void *dst, const void *src, size_t bytes) {
  cuda_use(dev);
  cuda_staging *s = dev->staging;
  for (size_t off = 0; off < bytes; off += STAGING_CHUNK) {
    size_t n = bytes - off < STAGING_CHUNK ? bytes - off : STAGING_CHUNK, got = 0;
    char *to = (char *)dst + off;
    const char *from = (const char *)src + off;
    void *hb = dpm_pool_alloc(&s->host, n, &got);
    if (!hb) { /* no pinned memory: into pageable dst, once the stream is idle */
      if (cuda_wait(dev) &&
          CUDA_OK(dev,
                  cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToHost, dev->compute)) &&
          CUDA_OK(dev, cudaStreamSynchronize(dev->compute)))
        continue;
      memset(to, 0, n);
      continue;
    }
    int ok =
        CUDA_OK(dev, cudaMemcpyAsync(hb, from, n, cudaMemcpyDeviceToHost, dev->compute));
    ok = cuda_wait(dev) && ok;
    if (ok)
      memcpy(to, hb, n);
    else
      memset(to, 0, n);
    dpm_pool_free(&s->host, hb, got); /* the stream is idle: no fence */
  }
}
