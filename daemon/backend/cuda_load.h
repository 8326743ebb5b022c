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
 * plugin's backend, or where there is none one whose cuda:N are refused
 * with the reason (the driver's, or why the plugin did not load), and
 * NULL where neither probe nor plugin file was found (refused as "no cuda
 * backend in this build"). The probe stays loaded once it has run (it
 * initialised cudart, whose state lives as long as its library).
 *
 * Only daemon/backend/ includes this header: the rest of the daemon loads
 * through dpm_backend_load and uses the plugin through its backend's
 * operations (backend.h; scripts/check_cuda_seam.sh).
 *
 * Threads: any; the first call loads, under a lock; later calls return
 * what the first found. Errors: none fatal: the text in *line says what
 * was loaded and what the driver said. */
#ifndef DPM_BACKEND_CUDA_LOAD_H
#define DPM_BACKEND_CUDA_LOAD_H

#include <stddef.h>

#include "backend/cuda/plugin.h"

/* What the loader found, one of four. */
typedef enum {
  DPM_CUDA_READY,         /* the plugin loaded and has devices */
  DPM_CUDA_NO_GPU,        /* no driver or GPU: the probe's (or plugin's) reason */
  DPM_CUDA_PLUGIN_FAILED, /* the probe or the plugin is there but does not load or
                           * initialise (dlerror, init's error), or the probe found
                           * a GPU and the plugin is missing */
  DPM_CUDA_NO_PLUGIN,     /* no probe or plugin file where the loader looks */
} dpm_cuda_state;

/* Loads and probes; returns the number of cuda devices usable (0 unless
 * DPM_CUDA_READY). line (n bytes) gets one line for the log:
 * "cuda: 8 devices (CUDA 13.0 runtime, driver 13.0)", "cuda: no device:
 * ... (cudaErrorInsufficientDriver)", "cuda: plugin failed: cannot load
 * ...: <dlerror>", "cuda: no plugin: no libdpm_cuda_probe.so in DIR, DIR,
 * DIR". */
int dpm_cuda_load(char *line, size_t n);
/* Which of the four dpm_cuda_load found (loading first if it has not). */
dpm_cuda_state dpm_cuda_load_state(void);
/* The loaded plugin, or NULL. */
const dpm_cuda_plugin *dpm_cuda_plugin_get(void);
/* dpm_backend_of(DPM_DEVICE_CUDA): the plugin's backend; without it, a
 * backend without devices whose refusal is the loader's reason (no GPU, or
 * the plugin failed); NULL when no plugin file was found. */
const dpm_backend *dpm_cuda_backend(void);

#endif
