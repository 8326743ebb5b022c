/* The devices dpmd serves, found at start, and their warm crews: worker
 * threads created once per device group (a list such as cpu:0,cpu:1) and
 * lent to every model that trains on it (parallel/crew.h), so a second
 * model on the same devices starts without creating threads, and models on
 * other devices run in parallel with it. Each model makes its own
 * communicator (train/trainer.h).
 *
 * CPU devices are "cpu:0" .. "cpu:N-1" (N from the config), and in test
 * builds fenced devices "fenced:0" .. (backend/fenced: memory host code
 * cannot touch). CUDA devices are "cuda:0" .. every GPU the cuda plugin
 * finds at start (backend/cuda_load.h); without the plugin, a driver or a
 * GPU, a model asking for one is refused with DPM_UNSUPPORTED and the
 * reason the plugin gave. Each device's state (streams, handles, memory,
 * algorithm cache) opens on first use and stays warm for later models.
 *
 * Threads: dpmd_devices_check and dpmd_devices_crew may be called from any
 * thread (a mutex guards the crew table); crews live until destroy. */
#ifndef DPMD_DEVICES_H
#define DPMD_DEVICES_H

#include <stddef.h>

#include "common/device.h"
#include "dpm/status.h"

struct dpm_crew;
typedef struct dpmd_devices dpmd_devices;

/* cpu:0..cpu-1, the GPUs the cuda plugin finds when cuda is 1 (it loads
 * the plugin), and, in test builds, fenced:0..fenced-1 (else fenced must
 * be 0: DPM_INVALID). */
dpm_status dpmd_devices_create(int cpu, int gpus_on, int fenced, dpmd_devices **out,
                               dpm_err *err);
/* The one line loading the cuda plugin gave ("cuda: 8 devices (...)",
 * "cuda: no usable CUDA driver or device: ..."), for the log. */
const char *dpmd_devices_loaded(const dpmd_devices *dv);
/* The device names, for version/ping ("cpu:0", ...). */
int dpmd_devices_count(const dpmd_devices *dv);
const char *dpmd_devices_name(const dpmd_devices *dv, int i);
/* Checks a model's device list as a client sent it: canonical names
 * (DPM_INVALID), each once (DPM_INVALID), served here (DPM_UNSUPPORTED for
 * cuda without a GPU, DPM_NOT_FOUND). Each name is parsed once, into *out
 * (n devices, malloc'd: the caller frees it; NULL on failure), which the
 * spec's check takes (common/checked_spec.h) instead of parsing them
 * again. */
dpm_status dpmd_devices_check(const dpmd_devices *dv, char *const *names, size_t n,
                              dpm_device **out, dpm_err *err);
/* The crew of a device group (a checked spec's devices, in the model's
 * order), created on first use with rank r pinned to the core of devs[r];
 * every later model on the same group shares it. */
dpm_status dpmd_devices_crew(dpmd_devices *dv, const dpm_device *devs, size_t n,
                             struct dpm_crew **out, dpm_err *err);
/* How many crews exist (for metrics and tests). */
int dpmd_devices_crews(dpmd_devices *dv);
void dpmd_devices_destroy(dpmd_devices *dv);

#endif
