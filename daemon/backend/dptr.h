/* Device memory as host code holds it: dpm_dptr, a handle rather than a
 * pointer, like the Linux kernel's __user pointers.
 *
 * Host code that dereferences one (*d, d[i], d->x), indexes it, does
 * arithmetic on it, or hands it where a pointer goes (memcpy, float *,
 * void *) fails to compile (tests/compile_fail/). The only ways across are
 * the device's copies (backend/device.h: dpm_dev_to_host, dpm_dev_to_device,
 * dpm_dev_copy, dpm_dev_memset) and a tensor's (engine/tensor.h:
 * dpm_tensor_read, dpm_tensor_write); offsets are dpm_dptr_at. The fenced
 * backend catches at run time what a cast past this would still do.
 *
 * dpm_dptr_raw, the address inside, is for backends, kernels, the
 * engine's binding of tensors to memory (tensor.c, workspace.c, exec.c)
 * and its collectives' buffers handed to the communicator (collective.c);
 * scripts/check_device_bytes.sh refuses it anywhere else in the daemon.
 * Pure values: any thread. */
#ifndef DPM_BACKEND_DPTR_H
#define DPM_BACKEND_DPTR_H

#include <stddef.h>

typedef struct dpm_dptr {
  void *raw_; /* the device address: dpm_dptr_raw, backend side only */
} dpm_dptr;

/* Memory of a device (or, for a host-visible one, host memory) as a handle. */
static inline dpm_dptr dpm_dptr_wrap(void *p) { return (dpm_dptr){p}; }
/* The address inside: backends, kernels and the engine's binding only. */
static inline void *dpm_dptr_raw(dpm_dptr d) { return d.raw_; }
static inline int dpm_dptr_null(dpm_dptr d) { return d.raw_ == NULL; }
/* The memory `offset` bytes into d (within the same allocation). */
static inline dpm_dptr dpm_dptr_at(dpm_dptr d, size_t offset) {
  return (dpm_dptr){(char *)d.raw_ + offset};
}

#endif
