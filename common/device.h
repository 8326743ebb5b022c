/* Device names: "cpu:N", "cuda:N", "fenced:N", in one canonical form everywhere (the
 * spec front end, dpmd, dpm-train, the trainer).
 *
 * Canonical: the kind, a colon, and N in decimal without sign, spaces or
 * leading zeros ("cpu:0", "cuda:12"; not "cpu:+1", "cpu:00", "cpu: 1"),
 * N <= DPM_MAX_DEVICE_INDEX. Pure functions: any thread. */
#ifndef DPM_COMMON_DEVICE_H
#define DPM_COMMON_DEVICE_H

#include <stddef.h>

#define DPM_MAX_DEVICE_INDEX 4095 /* N in KIND:N */
#define DPM_MAX_DEVICES 4096      /* devices of one model */

/* fenced: test builds only (daemon/backend/fenced/): CPU kernels over
 * memory host code cannot touch. */
typedef enum {
  DPM_DEVICE_CPU,
  DPM_DEVICE_CUDA,
  DPM_DEVICE_FENCED,
  DPM_DEVICE_KIND_COUNT
} dpm_device_kind;

typedef struct dpm_device {
  dpm_device_kind kind;
  int index;
} dpm_device;

/* The kind's name ("cpu", "cuda"). */
const char *dpm_device_kind_name(dpm_device_kind k);
/* Parses a canonical name into *out. Returns 0, or -1 (out untouched). */
int dpm_device_parse(const char *s, dpm_device *out);
/* For a name that dpm_device_parse refused: a phrase to append to the
 * error that says what was meant ("; GPUs are cuda:N (gpu is only the
 * scope of blob names, gpu_0/fc1_w)"), or "" when there is nothing to add.
 * Never quotes s. */
const char *dpm_device_hint(const char *s);
/* "KIND:N" into buf (at least 16 bytes); returns buf. */
char *dpm_device_format(dpm_device d, char *buf, size_t n);
/* The scope of the replica on d in blob names, as Caffe2 named them:
 * "cpu_1", "gpu_1" (CUDA), "fenced_1", into buf; returns buf. "cpu_1/fc1_w" is that
 * replica's fc1_w. */
char *dpm_device_scope(dpm_device d, char *buf, size_t n);

#endif
