/* Backends: where a device's tensors live and how its kernels run.
 *
 * One const table per device kind (common/device.h): cpu, fenced (test
 * builds: the CPU kernels over memory host code cannot touch), cuda (a
 * shared object loaded at start, later). Everything the engine does with a
 * device goes through its table: raw memory (under the caching allocator,
 * backend/pool.h), copies between host and device and within a device, a
 * memset, an ordering handle with synchronise (a CUDA stream; nothing on
 * CPU), and the kernel of each op. Only backends and kernels touch device
 * bytes; the trainer, readers' staging, checkpoints, get-blob, sync and
 * predictor extraction copy through here (backend/device.h).
 *
 * Ownership: tables are static and immutable; a backend's per-device state
 * (open/close) belongs to the device registry (backend/device.h).
 * Threads: every function may be called from any thread; calls for one
 * device that must be ordered are ordered by the caller (a device worker),
 * or by the backend's stream. */
#ifndef DPM_BACKEND_H
#define DPM_BACKEND_H

#include <stddef.h>

#include "common/device.h"
#include "engine/op.h"

typedef enum { DPM_COPY_H2D, DPM_COPY_D2H, DPM_COPY_D2D } dpm_copy_kind;

/* A kernel: runs op (shapes accepted by its infer; outputs allocated on the
 * op's device). Never fails. */
typedef void (*dpm_kernel)(const dpm_op *op);

typedef struct dpm_backend {
  const char *name;     /* "cpu" */
  dpm_device_kind kind;
  /* Device memory is host memory that host code may read and write in
   * place (cpu): the engine then skips staging copies. */
  int host_visible;
  /* Devices of this kind on this machine (0: none); why in err when none. */
  int (*probe)(dpm_err *err);
  /* Per-device state for device `index` (< probe), into *state. */
  dpm_status (*open)(int index, void **state, dpm_err *err);
  void (*close)(void *state);
  /* Raw memory, DPM_ALIGN aligned; NULL when out of memory. Only the pool
   * calls these. */
  void *(*alloc)(void *state, size_t bytes);
  void (*free)(void *state, void *p, size_t bytes);
  void (*copy)(void *state, void *dst, const void *src, size_t bytes, dpm_copy_kind kind);
  void (*memset)(void *state, void *dst, int value, size_t bytes);
  /* Waits for everything queued on the device's ordering handle. */
  void (*synchronize)(void *state);
  /* The kernel of def on this backend; NULL: the op is not supported here
   * (refused when a net is bound, naming op and device). */
  dpm_kernel (*kernel)(const dpm_op_def *def);
  /* Runs part `part` of op (dpm_op_def.parts: work sharing, parallel/share.h)
   * the way its kernel would run all of it. */
  void (*run_part)(void *state, const dpm_op *op, int part);
  /* Host code acting as the device (the local communicator's data movement
   * on buffers of this device) runs between enter and leave. */
  void (*enter)(void *state);
  void (*leave)(void *state);
} dpm_backend;

extern const dpm_backend dpm_backend_cpu;
extern const dpm_backend dpm_backend_fenced;

/* The backend of a device kind, or NULL when this build has none. */
const dpm_backend *dpm_backend_of(dpm_device_kind kind);

#endif
