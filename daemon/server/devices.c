/* Device discovery and the table of warm crews. */
#include "server/devices.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/device.h"
#include "common/err.h"
#include "common/escape.h"
#include "parallel/crew.h"
#include "train/trainer.h"

#define MAX_CPU 1024

typedef struct crew_entry { /* one device group's crew */
  struct crew_entry *next;
  char *key; /* the group's devices, "cpu:0,cpu:1", in the model's order */
  struct dpm_crew *crew;
} crew_entry;

struct dpmd_devices {
  int count[DPM_DEVICE_KIND_COUNT]; /* devices served, by kind */
  int n;                            /* all of them */
  char (*names)[16];                /* [n] "cpu:0" ... "cuda:0" ... "fenced:1" */
  char loaded[640];                 /* what loading the GPU plugin found */
  pthread_mutex_t mu;
  crew_entry *crews;
};

/* "cpu:0..cpu:3" (or "no fenced devices") into buf. */
static const char *served(const dpmd_devices *dv, dpm_device_kind k, char *buf,
                          size_t n) {
  const char *kind = dpm_device_kind_name(k);
  if (!dv->count[k])
    snprintf(buf, n, "no %s devices", kind);
  else
    snprintf(buf, n, "%s:0..%s:%d", kind, kind, dv->count[k] - 1);
  return buf;
}

dpm_status dpmd_devices_create(int cpu, int gpus_on, int fenced, dpmd_devices **out,
                               dpm_err *err) {
  *out = NULL;
  if (cpu < 1 || cpu > MAX_CPU)
    return dpm_errf(err, DPM_INVALID, "cpu devices: %d (1..%d)", cpu, MAX_CPU);
  if (fenced && !dpm_backend_of(DPM_DEVICE_FENCED))
    return dpm_errf(err, DPM_INVALID,
                    "devices.fenced: fenced devices exist in test builds "
                    "only");
  dpmd_devices *dv = calloc(1, sizeof *dv);
  if (!dv) return dpm_errf(err, DPM_NOMEM, "out of memory");
  int gpus = 0;
  if (gpus_on)
    gpus = dpm_backend_load(DPM_DEVICE_CUDA, dv->loaded, sizeof dv->loaded);
  else
    snprintf(dv->loaded, sizeof dv->loaded, "cuda: off (devices.cuda in the config)");
  if (!(dv->names = calloc((size_t)(cpu + gpus + fenced), sizeof *dv->names))) {
    free(dv);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  dv->count[DPM_DEVICE_CPU] = cpu;
  dv->count[DPM_DEVICE_CUDA] = gpus;
  dv->count[DPM_DEVICE_FENCED] = fenced;
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++)
    for (int i = 0; i < dv->count[k]; i++)
      dpm_device_format((dpm_device){(dpm_device_kind)k, i}, dv->names[dv->n++],
                        sizeof *dv->names);
  pthread_mutex_init(&dv->mu, NULL);
  *out = dv;
  return DPM_OK;
}

int dpmd_devices_count(const dpmd_devices *dv) { return dv->n; }
const char *dpmd_devices_loaded(const dpmd_devices *dv) { return dv->loaded; }
const char *dpmd_devices_name(const dpmd_devices *dv, int i) { return dv->names[i]; }

dpm_status dpmd_devices_check(const dpmd_devices *dv, char *const *names, size_t n,
                              dpm_device **out, dpm_err *err) {
  *out = NULL;
  if (n == 0) return dpm_errf(err, DPM_INVALID, "no devices");
  char seen[DPM_DEVICE_KIND_COUNT][DPM_MAX_DEVICE_INDEX + 1], b[80];
  memset(seen, 0, sizeof seen);
  /* a list that passes names distinct served devices: at most dv->n */
  dpm_device *devs = malloc((n < (size_t)dv->n ? n : (size_t)dv->n) * sizeof *devs + 1);
  if (!devs) return dpm_nomem(err);
  dpm_status s = DPM_OK;
  for (size_t i = 0; i < n && !s; i++) {
    dpm_device d;
    if (dpm_device_parse(names[i], &d))
      s = dpm_errf(err, DPM_INVALID, "device '%s': expected cpu:N or cuda:N%s",
                   dpm_escape(names[i], b, sizeof b), dpm_device_hint(names[i]));
    else if (d.kind == DPM_DEVICE_CUDA && !dv->count[d.kind])
      s = dpm_errf(err, DPM_UNSUPPORTED,
                   "device %s: this dpmd has no CUDA device (%s); it "
                   "serves cpu:0..cpu:%d",
                   names[i], dv->loaded, dv->count[DPM_DEVICE_CPU] - 1);
    else if (d.index >= dv->count[d.kind])
      s = dpm_errf(err, DPM_NOT_FOUND, "device %s: this dpmd serves %s", names[i],
                   served(dv, d.kind, b, sizeof b));
    else if (seen[d.kind][d.index]++)
      s = dpm_errf(err, DPM_INVALID, "device %s listed twice", names[i]);
    else
      devs[i] = d;
  }
  if (s) {
    free(devs);
    return s;
  }
  *out = devs;
  return DPM_OK;
}

/* "cpu:0,cpu:1": the group's key. */
static char *group_key(const dpm_device *devs, size_t n) {
  char name[32];
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(dpm_device_format(devs[i], name, sizeof name)) + 1;
  char *key = malloc(len), *p = key;
  for (size_t i = 0; key && i < n; i++)
    p += sprintf(p, "%s%s", i ? "," : "", dpm_device_format(devs[i], name, sizeof name));
  if (key && !n) *key = 0;
  return key;
}

dpm_status dpmd_devices_crew(dpmd_devices *dv, const dpm_device *devs, size_t n,
                             struct dpm_crew **out, dpm_err *err) {
  *out = NULL;
  char *key = group_key(devs, n);
  int *cores = calloc(n ? n : 1, sizeof *cores);
  crew_entry *e = NULL;
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&dv->mu);
  if (!key || !cores) {
    s = dpm_errf(err, DPM_NOMEM, "out of memory");
    goto done;
  }
  for (e = dv->crews; e && strcmp(e->key, key); e = e->next) {
  }
  if (!e) { /* first model on this group: its warm crew, pinned to its cores */
    dpm_device_cores(devs, (int)n, cores);
    if (!(e = calloc(1, sizeof *e))) {
      s = dpm_errf(err, DPM_NOMEM, "out of memory");
      goto done;
    }
    if ((s = dpm_crew_create_pinned((int)n, cores, &e->crew, err))) {
      free(e);
      e = NULL;
      goto done;
    }
    e->key = key;
    key = NULL;
    e->next = dv->crews;
    dv->crews = e;
  }
  *out = e->crew;
done:
  pthread_mutex_unlock(&dv->mu);
  free(key);
  free(cores);
  return s;
}

int dpmd_devices_crews(dpmd_devices *dv) {
  int c = 0;
  pthread_mutex_lock(&dv->mu);
  for (crew_entry *e = dv->crews; e; e = e->next) c++;
  pthread_mutex_unlock(&dv->mu);
  return c;
}

void dpmd_devices_destroy(dpmd_devices *dv) {
  if (!dv) return;
  for (crew_entry *e; (e = dv->crews);) {
    dv->crews = e->next;
    dpm_crew_destroy(e->crew);
    free(e->key);
    free(e);
  }
  pthread_mutex_destroy(&dv->mu);
  free(dv->names);
  free(dv);
}
