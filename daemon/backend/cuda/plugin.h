/* The seam between the host programs and the CUDA backend, which nvcc and
 * gcc build into build/libdpm_cuda.so (daemon/backend/cuda/) and which
 * dpmd, dpm-train and the tests load with dlopen (backend/cuda_load.h), so
 * that no program links CUDA: without a driver or a GPU they start as
 * before and refuse cuda:N with the driver's reason.
 *
 * The shared object exports one symbol, dpm_cuda_plugin_init. The host
 * calls it once with the table of host functions the plugin may use (the
 * plugin links nothing of the engine: -Wl,--no-undefined holds it to CUDA,
 * libc and this table), and gets back the plugin's table: the cuda
 * backend (backend.h), whose extras (stream, comm_create: the nccl
 * communicator of comm/comm.h, counts, release) are all the host uses.
 *
 * This header includes no CUDA header: the host side compiles without the
 * toolkit. ABI: DPM_CUDA_ABI changes whenever a struct here or a struct
 * these tables pass (dpm_op, dpm_ctx, dpm_tensor, dpm_kernel_def,
 * dpm_backend, dpm_comm_config, dpm_store_ops) changes layout; a plugin
 * of another ABI is refused at load.
 *
 * Ownership: the tables are static in the plugin; the plugin keeps the
 * host table's pointer for the life of the process (it is static on the
 * host). Threads: init runs once, under the loader's lock; the rest as
 * backend.h and comm.h say. */
#ifndef DPM_BACKEND_CUDA_PLUGIN_H
#define DPM_BACKEND_CUDA_PLUGIN_H

#include <stddef.h>

#include "backend/backend.h"
#include "comm/comm.h"

#define DPM_CUDA_ABI 8
#define DPM_CUDA_PLUGIN_INIT "dpm_cuda_plugin_init"
#define DPM_CUDA_PROBE "dpm_cuda_probe"

/* The driver probe (probe.c), exported by the plugin and by
 * build/libdpm_cuda_probe.so: the number of CUDA devices, or 0 with the
 * CUDA error in why (n bytes). */
typedef int (*dpm_cuda_probe_fn)(char *why, size_t n);

struct dpm_dev;

/* What the host lends the plugin. */
typedef struct dpm_cuda_host {
  int abi;                /* DPM_CUDA_ABI */
  const dpm_backend *cpu; /* fills run the CPU's kernels on the host, then copy */
  /* The backend state of an open device (what the plugin's open returned). */
  void *(*dev_state)(struct dpm_dev *dev);
} dpm_cuda_host;

/* What the plugin offers. */
typedef struct dpm_cuda_plugin {
  int abi;                    /* DPM_CUDA_ABI */
  const dpm_backend *backend; /* devices cuda:N, with the nccl communicator */
  /* "CUDA 13.0 runtime, driver: none" and the like, for the loader's line. */
  const char *(*describe)(void);
} dpm_cuda_plugin;

typedef const dpm_cuda_plugin *(*dpm_cuda_plugin_init_fn)(const dpm_cuda_host *host,
                                                          dpm_err *err);

#endif
