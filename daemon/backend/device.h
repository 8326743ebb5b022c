/* Open devices: a backend, its per-device state and its caching allocator,
 * opened once per process and kept (warm) until dpm_dev_shutdown.
 *
 * A tensor records the device it lives on (engine/tensor.h; NULL: plain
 * host memory, as readers and the predictor runtime use). Everything that
 * crosses between host and device goes through the copies here; only
 * kernels and backend code touch device bytes.
 *
 * Threads: every function may be called from any thread (the registry and
 * each pool have their own lock); a device's work is ordered by its worker.
 * Errors: dpm_dev_get says why a device cannot be used (no backend for its
 * kind in this build, no such device, the backend's own error). */
#ifndef DPM_BACKEND_DEVICE_H
#define DPM_BACKEND_DEVICE_H

#include <stddef.h>

#include "backend/backend.h"
#include "backend/pool.h"

typedef struct dpm_dev dpm_dev;

/* Device d, opened on first use; the same handle afterwards. */
dpm_status dpm_dev_get(dpm_device d, dpm_dev **out, dpm_err *err);
const dpm_backend *dpm_dev_backend(const dpm_dev *dev);
dpm_device dpm_dev_id(const dpm_dev *dev);
int dpm_dev_host_visible(const dpm_dev *dev);
/* Whether p points into dev's memory (backend.h: owns); 0 for a
 * host-visible device, whose memory is the host's. */
int dpm_dev_owns(dpm_dev *dev, const void *p);

/* Zeroed device memory of at least `bytes` bytes from the device's pool;
 * *got is what dpm_dev_free needs back. NULL when out of memory. */
void *dpm_dev_alloc(dpm_dev *dev, size_t bytes, size_t *got);
void dpm_dev_free(dpm_dev *dev, void *p, size_t got);

/* Copies (bytes may be 0): host -> device, device -> host, device ->
 * device, and a memset of device memory. When they return, host memory is
 * done with (src of an upload may be reused, dst of a download is filled);
 * on the device they are ordered before whatever is queued on it next. */
void dpm_dev_to_device(dpm_dev *dev, void *dst, const void *src, size_t bytes);
void dpm_dev_to_host(dpm_dev *dev, void *dst, const void *src, size_t bytes);
void dpm_dev_copy(dpm_dev *dev, void *dst, const void *src, size_t bytes);
void dpm_dev_memset(dpm_dev *dev, void *dst, int value, size_t bytes);
void dpm_dev_synchronize(dpm_dev *dev);
/* The device's first failure (backend.h: failure), DPM_OK when none. */
dpm_status dpm_dev_failure(dpm_dev *dev, dpm_err *err);

/* Host code acting as the device runs between these (backend.h). The
 * device's kernels are its backend's (dpm_dev_backend(dev)->kernel). */
void dpm_dev_enter(dpm_dev *dev);
void dpm_dev_leave(dpm_dev *dev);

/* The backend's own state of the device (what its open made). */
void *dpm_dev_state(dpm_dev *dev);

dpm_pool_stats dpm_dev_stats(dpm_dev *dev);
/* The devices opened so far (at most max), for metrics. */
int dpm_dev_opened(dpm_dev **out, int max);
/* Closes every device (their pools give their memory back). For the end of
 * a process and tests; no tensor may live on them any more. */
void dpm_dev_shutdown(void);

#endif
