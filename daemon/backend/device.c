/* The registry of open devices and their pools (device.h). */
#include "backend/device.h"

#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda_load.h"
#include "common/err.h"

#define MAX_OPEN 256 /* devices one process opens */

struct dpm_dev {
  dpm_device id;
  const dpm_backend *be;
  void *state; /* the backend's */
  dpm_pool pool;
  /* The claim of an exclusive device (dpm_dev_claim), under claim_mu: who
   * holds it (holders claims of owner `holder`) and who waits, in order. */
  pthread_mutex_t claim_mu;
  pthread_cond_t claim_cv;
  uint64_t holder;
  int holders;
  struct claim_wait *first, *last;
};

/* A claim waiting for its device, on the waiter's stack. */
typedef struct claim_wait {
  uint64_t owner;
  struct claim_wait *prev, *next;
} claim_wait;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static dpm_dev *opened[MAX_OPEN];
static int n_opened;

const dpm_backend *dpm_backend_of(dpm_device_kind kind) {
  switch (kind) {
  case DPM_DEVICE_CPU:
    return &dpm_backend_cpu;
  case DPM_DEVICE_CUDA:
    return dpm_cuda_backend();
#ifdef DPM_TEST_BUILD
  case DPM_DEVICE_FENCED:
    return &dpm_backend_fenced;
#endif
  default:
    return NULL;
  }
}

int dpm_backend_load(dpm_device_kind kind, char *line, size_t n) {
  if (kind == DPM_DEVICE_CUDA) return dpm_cuda_load(line, n);
  if (line && n) *line = 0;
  const dpm_backend *be = dpm_backend_of(kind);
  dpm_err err = {0};
  return be ? be->probe(&err) : 0;
}

int dpm_backend_brings_comm(dpm_device_kind kind) { return kind == DPM_DEVICE_CUDA; }

static void *raw_alloc(void *arg, size_t bytes) {
  dpm_dev *dev = arg;
  return dev->be->alloc(dev->state, bytes);
}

static void raw_free(void *arg, void *p, size_t bytes) {
  dpm_dev *dev = arg;
  dev->be->free(dev->state, p, bytes);
}

/* Under registry_mu: opens d. */
static dpm_status open_dev(dpm_device d, dpm_dev **out, dpm_err *err) {
  char name[32];
  dpm_device_format(d, name, sizeof name);
  const dpm_backend *be = dpm_backend_of(d.kind);
  if (!be)
    return dpm_errf(err, DPM_UNSUPPORTED, "device %s: no %s backend in this build", name,
                    dpm_device_kind_name(d.kind));
  dpm_err why = {0};
  int count = be->probe(&why);
  if (d.index >= count)
    return dpm_errf(err, DPM_NOT_FOUND, "device %s: %s", name,
                    count ? "no such device here" : why.msg);
  if (n_opened == MAX_OPEN)
    return dpm_errf(err, DPM_NOMEM, "device %s: more than %d devices open", name,
                    MAX_OPEN);
  dpm_dev *dev = calloc(1, sizeof *dev);
  if (!dev) return dpm_nomem(err);
  dev->id = d;
  dev->be = be;
  if (be->open(d.index, &dev->state, err)) {
    free(dev);
    return dpm_err_prefix(err, "device %s: ", name);
  }
  dpm_pool_init(&dev->pool, (dpm_pool_raw){raw_alloc, raw_free, dev});
  pthread_mutex_init(&dev->claim_mu, NULL);
  pthread_cond_init(&dev->claim_cv, NULL);
  opened[n_opened++] = dev;
  *out = dev;
  return DPM_OK;
}

dpm_status dpm_dev_get(dpm_device d, dpm_dev **out, dpm_err *err) {
  *out = NULL;
  pthread_mutex_lock(&registry_mu);
  dpm_status s = DPM_OK;
  for (int i = 0; i < n_opened && !*out; i++)
    if (opened[i]->id.kind == d.kind && opened[i]->id.index == d.index) *out = opened[i];
  if (!*out) s = open_dev(d, out, err);
  pthread_mutex_unlock(&registry_mu);
  return s;
}

const dpm_backend *dpm_dev_backend(const dpm_dev *dev) { return dev->be; }
dpm_device dpm_dev_id(const dpm_dev *dev) { return dev->id; }
int dpm_dev_host_visible(const dpm_dev *dev) { return dev->be->host_visible; }

int dpm_dev_owns(dpm_dev *dev, const void *p) {
  return p && dev->be->owns ? dev->be->owns(dev->state, p) : 0;
}

dpm_dptr dpm_dev_alloc(dpm_dev *dev, size_t bytes, size_t *got) {
  void *p = dpm_pool_alloc(&dev->pool, bytes, got);
  if (p) dev->be->memset(dev->state, p, 0, *got);
  return dpm_dptr_wrap(p);
}

void dpm_dev_free(dpm_dev *dev, dpm_dptr p, size_t got) {
  dpm_pool_free(&dev->pool, dpm_dptr_raw(p), got);
}

void dpm_dev_to_device(dpm_dev *dev, dpm_dptr dst, const void *src, size_t bytes) {
  if (bytes) dev->be->copy(dev->state, dpm_dptr_raw(dst), src, bytes, DPM_COPY_H2D);
}

void dpm_dev_to_host(dpm_dev *dev, void *dst, dpm_dptr src, size_t bytes) {
  if (bytes) dev->be->copy(dev->state, dst, dpm_dptr_raw(src), bytes, DPM_COPY_D2H);
}

void dpm_dev_copy(dpm_dev *dev, dpm_dptr dst, dpm_dptr src, size_t bytes) {
  if (bytes)
    dev->be->copy(dev->state, dpm_dptr_raw(dst), dpm_dptr_raw(src), bytes, DPM_COPY_D2D);
}

void dpm_dev_memset(dpm_dev *dev, dpm_dptr dst, int value, size_t bytes) {
  if (bytes) dev->be->memset(dev->state, dpm_dptr_raw(dst), value, bytes);
}

void dpm_dev_synchronize(dpm_dev *dev) { dev->be->synchronize(dev->state); }

dpm_status dpm_dev_failure(dpm_dev *dev, dpm_err *err) {
  return dev->be->failure ? dev->be->failure(dev->state, err) : DPM_OK;
}

void *dpm_dev_state(dpm_dev *dev) { return dev->state; }

void *dpm_dev_stream(dpm_dev *dev) {
  return dev->be->stream ? dev->be->stream(dev->state) : NULL;
}

void dpm_dev_enter(dpm_dev *dev) { dev->be->enter(dev->state); }
void dpm_dev_leave(dpm_dev *dev) { dev->be->leave(dev->state); }

void dpm_dev_run_host(dpm_dev *dev, void (*fn)(const dpm_op *op), const dpm_op *op) {
  if (dev->be->run_host) {
    dev->be->run_host(dev->state, fn, op);
    return;
  }
  dpm_dev_enter(dev);
  fn(op);
  dpm_dev_leave(dev);
}

dpm_pool_stats dpm_dev_stats(dpm_dev *dev) { return dpm_pool_stats_of(&dev->pool); }

static int by_id(const void *a, const void *b) {
  dpm_device x = (*(dpm_dev *const *)a)->id, y = (*(dpm_dev *const *)b)->id;
  if (x.kind != y.kind) return x.kind < y.kind ? -1 : 1;
  return (x.index > y.index) - (x.index < y.index);
}

int dpm_dev_claim_set(dpm_dev **devs, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < k && !seen; j++) seen = devs[j] == devs[i];
    if (devs[i]->be->exclusive && !seen) devs[k++] = devs[i];
  }
  qsort(devs, (size_t)k, sizeof *devs, by_id);
  return k;
}

/* Under claim_mu: whether owner may hold dev now: it holds it already, or
 * nobody does and no claim of another owner waits before w (NULL: a claim
 * that has not queued). */
static int claim_free(const dpm_dev *dev, uint64_t owner, const claim_wait *w) {
  if (dev->holders) return dev->holder == owner;
  return !dev->first || dev->first == w;
}

static void claim_one(dpm_dev *dev, uint64_t owner) {
  pthread_mutex_lock(&dev->claim_mu);
  if (!claim_free(dev, owner, NULL)) {
    claim_wait w = {owner, dev->last, NULL};
    *(dev->last ? &dev->last->next : &dev->first) = &w;
    dev->last = &w;
    while (!claim_free(dev, owner, &w)) pthread_cond_wait(&dev->claim_cv, &dev->claim_mu);
    *(w.prev ? &w.prev->next : &dev->first) = w.next;
    *(w.next ? &w.next->prev : &dev->last) = w.prev;
    pthread_cond_broadcast(&dev->claim_cv); /* a new first waiter, or joiners */
  }
  dev->holder = owner;
  dev->holders++;
  pthread_mutex_unlock(&dev->claim_mu);
}

void dpm_dev_claim(dpm_dev *const *set, int n, uint64_t owner) {
  for (int i = 0; i < n; i++) claim_one(set[i], owner);
}

void dpm_dev_release(dpm_dev *const *set, int n) {
  for (int i = n - 1; i >= 0; i--) {
    dpm_dev *dev = set[i];
    pthread_mutex_lock(&dev->claim_mu);
    if (--dev->holders == 0) pthread_cond_broadcast(&dev->claim_cv);
    pthread_mutex_unlock(&dev->claim_mu);
  }
}

int dpm_dev_opened(dpm_dev **out, int max) {
  pthread_mutex_lock(&registry_mu);
  int n = n_opened < max ? n_opened : max;
  for (int i = 0; i < n; i++) out[i] = opened[i];
  pthread_mutex_unlock(&registry_mu);
  return n;
}

void dpm_dev_shutdown(void) {
  /* the backends' warm communicator groups, before their devices close */
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++) {
    const dpm_backend *be = dpm_backend_of((dpm_device_kind)k);
    if (be && be->release) be->release();
  }
  pthread_mutex_lock(&registry_mu);
  for (int i = 0; i < n_opened; i++) {
    dpm_pool_fini(&opened[i]->pool);
    opened[i]->be->close(opened[i]->state);
    pthread_mutex_destroy(&opened[i]->claim_mu);
    pthread_cond_destroy(&opened[i]->claim_cv);
    free(opened[i]);
  }
  n_opened = 0;
  pthread_mutex_unlock(&registry_mu);
}
