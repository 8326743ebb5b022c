/* Loading the CUDA plugin (build/libdpm_cuda.so, backend/cuda/plugin.h).
 *
 * dpm_cuda_load runs once per process. From the folder of the running
 * program (build/), one folder up (build/asan-bin/ and the like) or
 * ../lib/dpm/ (make install), it first asks the driver probe
 * (libdpm_cuda_probe.so: cudart alone) how many GPUs there are; only where
 * there are some does it dlopen the plugin, whose cuBLASLt alone keeps
 * ~150 MB resident. $DPM_CUDA_LIB names a plugin to load whatever the
 * probe would say. A process calls it at start (dpmd, dpm-train, the
 * tests; the predictor runtime when a predictor is moved to a GPU) and
 * logs its one line; after it, dpm_backend_of(DPM_DEVICE_CUDA) is the
 * plugin's backend, or where the probe found no GPU one whose cuda:N are
 * refused with the driver's reason, and NULL without a plugin (refused as
 * "no cuda backend in this build").
 *
 * Threads: any; the first call loads, under a lock; later calls return
 * what the first found. Errors: none fatal: the text in *line says what
 * was loaded and what the driver said. */
#ifndef DPM_BACKEND_CUDA_LOAD_H
#define DPM_BACKEND_CUDA_LOAD_H

#include <stddef.h>

#include "backend/cuda/plugin.h"

/* Loads and probes; returns the number of cuda devices usable (0 when the
 * plugin is missing, or there is no driver or GPU). line (n bytes) gets
 * one line for the log: "cuda: 8 devices (CUDA 13.0 runtime, driver 13.0)",
 * "cuda: no device: ... (cudaErrorInsufficientDriver)", "cuda: no plugin
 * (make CUDA=0 or libdpm_cuda.so not found)". */
int dpm_cuda_load(char *line, size_t n);
/* The loaded plugin, or NULL. */
const dpm_cuda_plugin *dpm_cuda_plugin_get(void);
/* dpm_backend_of(DPM_DEVICE_CUDA): the plugin's backend; where the probe
 * found no device, a backend without devices whose refusal is the probe's
 * reason; NULL without either. */
const dpm_backend *dpm_cuda_backend(void);

#endif
