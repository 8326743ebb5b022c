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
#include <stdint.h>

#include "backend/backend.h"
#include "backend/dptr.h"
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

/* Zeroed device memory of at least `bytes` bytes from the device's pool
 * (a handle host code cannot dereference: backend/dptr.h); *got is what
 * dpm_dev_free needs back. A null handle (dpm_dptr_null) when out of
 * memory. */
dpm_dptr dpm_dev_alloc(dpm_dev *dev, size_t bytes, size_t *got);
void dpm_dev_free(dpm_dev *dev, dpm_dptr p, size_t got);

/* Copies (bytes may be 0): host -> device, device -> host, device ->
 * device, and a memset of device memory. When they return, host memory is
 * done with (src of an upload may be reused, dst of a download is filled);
 * on the device they are ordered before whatever is queued on it next. */
void dpm_dev_to_device(dpm_dev *dev, dpm_dptr dst, const void *src, size_t bytes);
void dpm_dev_to_host(dpm_dev *dev, void *dst, dpm_dptr src, size_t bytes);
void dpm_dev_copy(dpm_dev *dev, dpm_dptr dst, dpm_dptr src, size_t bytes);
void dpm_dev_memset(dpm_dev *dev, dpm_dptr dst, int value, size_t bytes);
void dpm_dev_synchronize(dpm_dev *dev);
/* The device's first failure (backend.h: failure), DPM_OK when none. */
dpm_status dpm_dev_failure(dpm_dev *dev, dpm_err *err);

/* Host code acting as the device runs between these (backend.h). The
 * device's kernels are its backend's (dpm_dev_backend(dev)->kernel). */
void dpm_dev_enter(dpm_dev *dev);
void dpm_dev_leave(dpm_dev *dev);
/* Runs fn(op), host code acting as dev for op, in dev's order
 * (backend.h: run_host; without one, between enter and leave). */
void dpm_dev_run_host(dpm_dev *dev, void (*fn)(const dpm_op *op), const dpm_op *op);

/* The backend's own state of the device (what its open made). */
void *dpm_dev_state(dpm_dev *dev);
/* The device's ordering handle for its backend's own communicator
 * (backend.h: stream), NULL where the backend has none. */
void *dpm_dev_stream(dpm_dev *dev);

dpm_pool_stats dpm_dev_stats(dpm_dev *dev);
/* Claims of exclusive devices (backend.h: exclusive): a job that queues
 * work on such devices (a trainer's step, eval, sync, checkpoint, create
 * and destroy) holds their claim meanwhile, so the work of two jobs never
 * interleaves on one device's stream. An owner names the job: claims of one
 * owner share a device (the shards of one fleet job in one process, which
 * wait for each other inside their runs); others wait, first come, first
 * served. dpm_dev_claim_set keeps, in place, the exclusive devices of
 * devs[0..n) once each, sorted by kind and index, and returns how many;
 * claiming such a set whole in that order, and releasing it whole before
 * claiming again, cannot deadlock within the process. dpm_dev_claim waits
 * for each device in turn; dpm_dev_release gives the set back. A claim is
 * no lock of the caller's thread: any thread may release it. A job whose
 * runs wait for other processes (a fleet shard) holds its devices while
 * it waits: two such jobs whose shards claim one device in opposite
 * orders on two hosts wait for each other until their collectives time
 * out, as one stream per device makes them on a GPU anyway. */
int dpm_dev_claim_set(dpm_dev **devs, int n);
void dpm_dev_claim(dpm_dev *const *set, int n, uint64_t owner);
void dpm_dev_release(dpm_dev *const *set, int n);
/* The devices opened so far (at most max), for metrics. */
int dpm_dev_opened(dpm_dev **out, int max);
/* Closes every device (their pools give their memory back). For the end of
 * a process and tests; no tensor may live on them any more. */
void dpm_dev_shutdown(void);

#endif
