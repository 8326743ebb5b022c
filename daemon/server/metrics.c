/* The metrics command's text (metrics.h). */
#include "server/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/device.h"
#include "io/datacache.h"
#include "server/devices.h"
#include "server/fleet/kv.h"
#include "server/models/model.h"

typedef struct text {
  char *buf;
  size_t len, cap;
  int failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && !t->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap + (size_t)n) * 2;
    char *b = realloc(t->buf, cap);
    if (!b) break;
    t->buf = b;
    t->cap = cap;
  }
  t->failed = 1;
}

static void head(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Per-model gauges: one family each, read from a model snapshot. */
typedef struct {
  const char *name, *help;
  int has_off, val_off; /* offsets into Dpm__ModelInfo; has_off < 0: always */
  int is_u64;
  double scale;     /* to the metric's unit */
  const char *type; /* NULL: gauge */
} family;

// clang-format off
#define F(n, h, field, u, k) {n, h, offsetof(Dpm__ModelInfo, has_##field), \
                              offsetof(Dpm__ModelInfo, field), u, k, NULL}
// clang-format on
static const family families[] = {
    F("dpm_model_iteration", "Completed training steps.", iter, 1, 1),
    F("dpm_model_loss", "Loss of the last step.", loss, 0, 1),
    F("dpm_model_images_per_second", "Training throughput of the last steps.",
      images_per_s, 0, 1),
    F("dpm_model_step_seconds", "Wall time of the last step.", step_ms, 0, 1e-3),
    F("dpm_model_tensor_bytes", "Bytes of tensors over all replicas.", tensor_bytes, 1,
      1),
    F("dpm_model_tensor_bytes_unshared",
      "Bytes of tensors over all replicas without parallel.optimize_gradient_memory.",
      tensor_bytes_unshared, 1, 1),
    F("dpm_model_memory_bytes", "Bytes counted against max_model_bytes.", memory_bytes, 1,
      1),
    F("dpm_model_grad_norm",
      "Global L2 norm of the last update's gradients (clipping, accumulation or a loss "
      "scale on).",
      grad_norm, 0, 1),
    F("dpm_model_loss_scale", "Loss scale for the next update (precision.loss_scale).",
      loss_scale, 0, 1),
    {"dpm_model_skipped_steps_total",
     "Updates skipped for gradients that were not finite (precision.loss_scale), since "
     "the model was built or last loaded.",
     offsetof(Dpm__ModelInfo, has_skipped_steps), offsetof(Dpm__ModelInfo, skipped_steps),
     1, 1, "counter"},
    {"dpm_model_skipped_samples_total",
     "Bad samples an image reader skipped (input.on_bad_sample: skip) since the model "
     "was built or last loaded.",
     offsetof(Dpm__ModelInfo, has_skipped_samples),
     offsetof(Dpm__ModelInfo, skipped_samples), 1, 1, "counter"},
};
#undef F

/* The groups of a backend's own communicator (the cuda plugin's NCCL): a
 * model on GPUs a previous one used takes that one's group, warm, and
 * creates none. Only where a loaded backend counts them. */
static void nccl_groups(text *t) {
  unsigned long inits = 0;
  int any = 0;
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++) {
    const dpm_backend *be = dpm_backend_of((dpm_device_kind)k);
    if (!be || !be->counts) continue;
    dpm_backend_counts c;
    be->counts(&c);
    inits += c.comm_inits;
    any = 1;
  }
  if (!any) return;
  head(t, "dpmd_nccl_inits_total", "counter",
       "NCCL groups created (a warm group taken again by a later model is not counted).");
  put(t, "dpmd_nccl_inits_total %lu\n", inits);
}

/* Each open device's caching allocator (backend/pool.h). */
static void device_memory(text *t) {
  dpm_dev *devs[64];
  int n = dpm_dev_opened(devs, 64);
  dpm_pool_stats st[64];
  char names[64][32];
  for (int i = 0; i < n; i++) {
    st[i] = dpm_dev_stats(devs[i]);
    dpm_device_format(dpm_dev_id(devs[i]), names[i], sizeof names[i]);
  }
  head(t, "dpmd_device_memory_bytes", "gauge",
       "Device memory held by the caching allocator: in use, and cached for reuse.");
  for (int i = 0; i < n; i++)
    put(t,
        "dpmd_device_memory_bytes{device=\"%s\",state=\"in_use\"} %llu\n"
        "dpmd_device_memory_bytes{device=\"%s\",state=\"cached\"} %llu\n",
        names[i], (unsigned long long)st[i].in_use, names[i],
        (unsigned long long)st[i].cached);
  head(t, "dpmd_device_memory_peak_bytes", "gauge",
       "The most device memory in use at once.");
  for (int i = 0; i < n; i++)
    put(t, "dpmd_device_memory_peak_bytes{device=\"%s\"} %llu\n", names[i],
        (unsigned long long)st[i].peak);
  head(t, "dpmd_device_allocations_total", "counter",
       "Allocations asked of the caching allocator, and those it passed to the device.");
  for (int i = 0; i < n; i++)
    put(t,
        "dpmd_device_allocations_total{device=\"%s\",source=\"cache\"} %llu\n"
        "dpmd_device_allocations_total{device=\"%s\",source=\"device\"} %llu\n",
        names[i], (unsigned long long)(st[i].requests - st[i].raw_allocs), names[i],
        (unsigned long long)st[i].raw_allocs);
}

/* The data cache (io/datacache.h): what it keeps, held by models or idle. */
static void data_cache(text *t, const dpmd *d) {
  dpm_data_cache_stats st;
  dpm_data_cache_stats_of(d->data, &st);
  head(t, "dpmd_data_cache_bytes", "gauge",
       "Decoded data sets kept for every model: held by a model, or idle.");
  put(t,
      "dpmd_data_cache_bytes{state=\"held\"} %llu\n"
      "dpmd_data_cache_bytes{state=\"idle\"} %llu\n",
      (unsigned long long)st.held_bytes, (unsigned long long)(st.bytes - st.held_bytes));
  head(t, "dpmd_data_cache_files", "gauge", "Data files in the cache: held, or idle.");
  put(t,
      "dpmd_data_cache_files{state=\"held\"} %llu\n"
      "dpmd_data_cache_files{state=\"idle\"} %llu\n",
      (unsigned long long)st.held_entries,
      (unsigned long long)(st.entries - st.held_entries));
  head(t, "dpmd_data_cache_limit_bytes", "gauge",
       "The data cache's bound (data_cache_bytes).");
  put(t, "dpmd_data_cache_limit_bytes %llu\n", (unsigned long long)st.max_bytes);
  head(t, "dpmd_data_cache_lookups_total", "counter",
       "Data files asked of the cache: found (hit), or read from disk (miss).");
  put(t,
      "dpmd_data_cache_lookups_total{result=\"hit\"} %llu\n"
      "dpmd_data_cache_lookups_total{result=\"miss\"} %llu\n",
      (unsigned long long)st.hits, (unsigned long long)st.misses);
  head(t, "dpmd_data_cache_evictions_total", "counter",
       "Data files dropped: idle over the bound, or changed on disk.");
  put(t, "dpmd_data_cache_evictions_total %llu\n", (unsigned long long)st.evictions);
}

char *dpmd_metrics_text(const dpmd *d, const dpmd_registry *models,
                        const char *(*command_name)(int command)) {
  int n_models = dpmd_registry_count(models);
  text t = {0};
  head(&t, "dpmd_uptime_seconds", "gauge", "Seconds since dpmd started.");
  put(&t, "dpmd_uptime_seconds %.3f\n", dpmd_now() - d->started);
  head(&t, "dpmd_models", "gauge", "Models by state.");
  for (int s = 0; s < DPMD_STATE_COUNT; s++) {
    int n = 0;
    for (int i = 0; i < n_models; i++)
      n += dpmd_model_state(dpmd_registry_at(models, i)) == (dpmd_state)s;
    put(&t, "dpmd_models{state=\"%s\"} %d\n", dpmd_state_name(s), n);
  }
  head(&t, "dpmd_device_crews", "gauge", "Warm device groups (worker threads).");
  put(&t, "dpmd_device_crews %d\n", dpmd_devices_crews(d->devices));
  device_memory(&t);
  nccl_groups(&t);
  data_cache(&t, d);
  head(&t, "dpmd_requests_total", "counter", "Requests answered, by command and status.");
  for (int c = 0; c < DPMD_MAX_COMMAND; c++)
    for (int s = 0; s < DPM_STATUS_COUNT; s++) {
      uint64_t k = dpmd_requests(d, c, (dpm_status)s);
      if (k)
        put(&t, "dpmd_requests_total{command=\"%s\",status=\"%s\"} %llu\n",
            command_name(c), dpm_status_name((dpm_status)s), (unsigned long long)k);
    }
  head(&t, "dpmd_dropped_messages_total", "counter",
       "Requests that could not be decoded.");
  put(&t, "dpmd_dropped_messages_total %llu\n", (unsigned long long)dpmd_dropped(d));
  dpmd_kv_usage kv = dpmd_kv_used(d->kv);
  head(&t, "dpmd_rendezvous_formations", "gauge",
       "Formations of fleet jobs in this daemon's rendezvous store.");
  put(&t, "dpmd_rendezvous_formations %d\n", kv.formations);
  head(&t, "dpmd_rendezvous_keys", "gauge", "Keys in the rendezvous store.");
  put(&t, "dpmd_rendezvous_keys %zu\n", kv.keys);
  head(&t, "dpmd_rendezvous_bytes", "gauge",
       "Bytes counted against the rendezvous store's bounds.");
  put(&t, "dpmd_rendezvous_bytes %zu\n", kv.bytes);
  Dpm__ModelInfo *info = calloc((size_t)n_models + 1, sizeof *info);
  dpmd_info_buf *buf = calloc((size_t)n_models + 1, sizeof *buf);
  if (!info || !buf) t.failed = 1;
  for (int i = 0; !t.failed && i < n_models; i++)
    dpmd_model_info(dpmd_registry_at(models, i), &info[i], &buf[i]);
  for (size_t f = 0; !t.failed && f < sizeof families / sizeof *families; f++) {
    head(&t, families[f].name, families[f].type ? families[f].type : "gauge",
         families[f].help);
    for (int i = 0; i < n_models; i++) {
      const char *p = (const char *)&info[i];
      if (!*(const protobuf_c_boolean *)(p + families[f].has_off)) continue;
      double v = families[f].is_u64 ? (double)*(const uint64_t *)(p + families[f].val_off)
                                    : *(const double *)(p + families[f].val_off);
      if (isfinite(v))
        put(&t, "%s{model=\"%s\"} %.17g\n", families[f].name, info[i].name,
            v * families[f].scale);
    }
  }
  free(info);
  free(buf);
  if (t.failed) {
    free(t.buf);
    return NULL;
  }
  return t.buf;
}
