/* Device discovery and the table of warm crews. */
#include "server/devices.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/crew.h"

#define MAX_CPU 1024

struct dpmd_devices {
  int cpu;
  int timeout_ms;
  char (*names)[16];
  pthread_mutex_t mu;
  struct dpm_crew *crew[MAX_CPU + 1]; /* by group size */
};

dpm_status dpmd_devices_create(int cpu, int comm_timeout_ms, dpmd_devices **out,
                               dpm_err *err) {
  *out = NULL;
  if (cpu < 1 || cpu > MAX_CPU)
    return dpm_errf(err, DPM_INVALID, "cpu devices: %d (1..%d)", cpu, MAX_CPU);
  dpmd_devices *dv = calloc(1, sizeof *dv);
  if (!dv || !(dv->names = calloc((size_t)cpu, sizeof *dv->names))) {
    free(dv);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  dv->cpu = cpu;
  dv->timeout_ms = comm_timeout_ms;
  for (int i = 0; i < cpu; i++) snprintf(dv->names[i], sizeof dv->names[i], "cpu:%d", i);
  pthread_mutex_init(&dv->mu, NULL);
  *out = dv;
  return DPM_OK;
}

int dpmd_devices_count(const dpmd_devices *dv) { return dv->cpu; }
const char *dpmd_devices_name(const dpmd_devices *dv, int i) { return dv->names[i]; }

dpm_status dpmd_devices_check(const dpmd_devices *dv, char *const *names, size_t n,
                              dpm_err *err) {
  if (n == 0) return dpm_errf(err, DPM_INVALID, "no devices");
  char seen[MAX_CPU] = {0};
  for (size_t i = 0; i < n; i++) {
    int k, end = 0;
    if (strncmp(names[i], "cuda:", 5) == 0 || strncmp(names[i], "gpu:", 4) == 0)
      return dpm_errf(err, DPM_UNSUPPORTED,
                      "device %s: this dpmd has no CUDA backend; it serves cpu:0..cpu:%d",
                      names[i], dv->cpu - 1);
    if (sscanf(names[i], "cpu:%d%n", &k, &end) != 1 || names[i][end] || k < 0)
      return dpm_errf(err, DPM_INVALID, "device '%s': expected cpu:N", names[i]);
    if (k >= dv->cpu)
      return dpm_errf(err, DPM_NOT_FOUND, "device %s: this dpmd serves cpu:0..cpu:%d",
                      names[i], dv->cpu - 1);
    if (seen[k]++) return dpm_errf(err, DPM_INVALID, "device %s listed twice", names[i]);
  }
  return DPM_OK;
}

dpm_status dpmd_devices_crew(dpmd_devices *dv, int n, struct dpm_crew **out, dpm_err *err) {
  *out = NULL;
  if (n < 1 || n > dv->cpu)
    return dpm_errf(err, DPM_INVALID, "%d replicas; this dpmd serves %d cpu devices", n,
                    dv->cpu);
  pthread_mutex_lock(&dv->mu);
  dpm_status s = DPM_OK;
  if (!dv->crew[n]) s = dpm_crew_create(n, dv->timeout_ms, &dv->crew[n], err);
  *out = dv->crew[n];
  pthread_mutex_unlock(&dv->mu);
  return s;
}

int dpmd_devices_crews(dpmd_devices *dv) {
  int c = 0;
  pthread_mutex_lock(&dv->mu);
  for (int i = 0; i <= dv->cpu; i++) c += dv->crew[i] != NULL;
  pthread_mutex_unlock(&dv->mu);
  return c;
}

void dpmd_devices_destroy(dpmd_devices *dv) {
  if (!dv) return;
  for (int i = 0; i <= dv->cpu; i++) dpm_crew_destroy(dv->crew[i]);
  pthread_mutex_destroy(&dv->mu);
  free(dv->names);
  free(dv);
}
