/* Loading the CUDA plugin (cuda_load.h). */
#include "backend/cuda_load.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"

#define PLUGIN "libdpm_cuda.so"
#define PROBE "libdpm_cuda_probe.so"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int loaded;                    /* dpm_cuda_load ran */
static const dpm_cuda_plugin *plugin; /* NULL: none */
static dpm_cuda_state state = DPM_CUDA_NO_PLUGIN;
static int devices;
static char result[720];
static char refusal[720]; /* no GPU or a failed plugin: absent_backend's reason */

/* cuda devices without a plugin: refused with the loader's reason. */
static int absent_probe(dpm_err *err) {
  dpm_errf(err, DPM_UNSUPPORTED, "%s", refusal);
  return 0;
}

static const dpm_kernel_def *absent_kernel(dpm_op_id id) {
  (void)id;
  return NULL;
}

/* Never opened (it has no device): probe and kernel only, for the engine's
 * questions before a device opens (scratch sizes, plans). */
static const dpm_backend absent_backend = {
    .name = "cuda",
    .kind = DPM_DEVICE_CUDA,
    .probe = absent_probe,
    .kernel = absent_kernel,
};

static const dpm_cuda_host host = {
    .abi = DPM_CUDA_ABI,
    .cpu = &dpm_backend_cpu,
    .dev_state = dpm_dev_state,
};

/* The loader's verdict: state st, the log line "cuda: <text>" and, for no
 * GPU or a failed plugin, the refusal of cuda:N. */
static void verdict(dpm_cuda_state st, const char *fmt, ...) {
  char text[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  state = st;
  switch (st) {
  case DPM_CUDA_NO_PLUGIN:
    snprintf(result, sizeof result, "cuda: no plugin (%.600s)", text);
    break;
  case DPM_CUDA_PLUGIN_FAILED:
    snprintf(result, sizeof result, "cuda: plugin failed (%.600s)", text);
    snprintf(refusal, sizeof refusal, "the CUDA plugin failed to load: %.600s", text);
    break;
  case DPM_CUDA_NO_GPU:
    snprintf(result, sizeof result, "cuda: %.600s", text);
    snprintf(refusal, sizeof refusal, "%.600s", text);
    break;
  case DPM_CUDA_READY:
    snprintf(result, sizeof result, "cuda: %.600s", text);
    break;
  }
}

/* dir/name into path; 0 when it does not fit. */
static int join(char *path, size_t n, const char *dir, const char *name) {
  return snprintf(path, n, "%s%s%s", dir, *dir ? "/" : "", name) < (int)n;
}

/* Loads and initialises the plugin at path (which exists); 0 with the
 * reason in why (n bytes) when it does not load or initialise. */
static int try_load(const char *path, char *why, size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, n, "cannot load %.200s: %.300s", path, dlerror());
    return 0;
  }
  dpm_cuda_plugin_init_fn init = (dpm_cuda_plugin_init_fn)dlsym(h, DPM_CUDA_PLUGIN_INIT);
  dpm_err err = {0};
  const dpm_cuda_plugin *p = init ? init(&host, &err) : NULL;
  if (!p || p->abi != DPM_CUDA_ABI) {
    snprintf(why, n, "%.200s: %.300s", path, init ? err.msg : "not a dpm cuda plugin");
    dlclose(h);
    return 0;
  }
  plugin = p; /* kept loaded for the life of the process */
  return 1;
}

/* The probe at path (which exists): the devices it finds (0, the reason in
 * why), or -1 when it does not load (the reason in why). Kept loaded once
 * it ran: it initialised cudart. */
static int probe(const char *path, char *why, size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  dpm_cuda_probe_fn fn = h ? (dpm_cuda_probe_fn)dlsym(h, DPM_CUDA_PROBE) : NULL;
  if (!fn) {
    snprintf(why, n, "cannot load %.200s: %.300s", path,
             h ? "not a dpm cuda probe" : dlerror());
    if (h) dlclose(h);
    return -1;
  }
  return fn(why, n);
}

/* The plugin named by $DPM_CUDA_LIB: loaded whatever a probe would say. */
static void load_named(const char *path) {
  char why[560] = "";
  if (access(path, F_OK))
    verdict(DPM_CUDA_NO_PLUGIN, "DPM_CUDA_LIB=%.500s: no such file", path);
  else if (!try_load(path, why, sizeof why))
    verdict(DPM_CUDA_PLUGIN_FAILED, "%s", why);
}

/* The first of the program's folder, the one above it and ../lib/dpm that
 * holds the probe: the probe says whether there is a GPU, and only then is
 * the plugin beside it loaded (its cuBLASLt alone keeps ~150 MB resident). */
static void load_beside(const char *exe_dir) {
  const char *const rel[] = {"", "/..", "/../lib/dpm"};
  char looked[480] = "", why[560] = "";
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    char dir[PATH_MAX], shown[PATH_MAX], path[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s%s", exe_dir, rel[i]) >= (int)sizeof dir) continue;
    size_t used = strlen(looked);
    snprintf(looked + used, sizeof looked - used, "%s%.200s", used ? ", " : "",
             realpath(dir, shown) ? shown : dir);
    if (!join(path, sizeof path, dir, PROBE) || access(path, F_OK)) continue;
    int found = probe(path, why, sizeof why);
    if (found < 0) {
      verdict(DPM_CUDA_PLUGIN_FAILED, "%s", why);
    } else if (found == 0) { /* no GPU here: the plugin's libraries stay unmapped */
      verdict(DPM_CUDA_NO_GPU, "%s", why);
    } else if (!join(path, sizeof path, dir, PLUGIN) || access(path, F_OK)) {
      verdict(DPM_CUDA_PLUGIN_FAILED, "the probe found %d GPU%s but %.300s is missing",
              found, found > 1 ? "s" : "", path);
    } else if (!try_load(path, why, sizeof why)) {
      verdict(DPM_CUDA_PLUGIN_FAILED, "%s", why);
    }
    return;
  }
  verdict(DPM_CUDA_NO_PLUGIN, "no " PROBE " in %s", looked);
}

static void load(void) {
  const char *env = getenv("DPM_CUDA_LIB");
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (env && *env) {
    load_named(env);
  } else if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    load_beside(exe);
  } else {
    verdict(DPM_CUDA_NO_PLUGIN, "the program's folder is unknown (/proc/self/exe)");
  }
  if (!plugin) return;
  dpm_err err = {0};
  devices = plugin->backend->probe(&err);
  if (devices)
    verdict(DPM_CUDA_READY, "%d device%s (%s)", devices, devices > 1 ? "s" : "",
            plugin->describe());
  else
    verdict(DPM_CUDA_NO_GPU, "%s", err.msg);
}

int dpm_cuda_load(char *line, size_t n) {
  pthread_mutex_lock(&mu);
  if (!loaded) load();
  loaded = 1;
  pthread_mutex_unlock(&mu);
  if (line && n) snprintf(line, n, "%s", result);
  return devices;
}

dpm_cuda_state dpm_cuda_load_state(void) {
  dpm_cuda_load(NULL, 0);
  pthread_mutex_lock(&mu);
  dpm_cuda_state st = state;
  pthread_mutex_unlock(&mu);
  return st;
}

const dpm_backend *dpm_cuda_backend(void) {
  pthread_mutex_lock(&mu);
  const dpm_backend *be = plugin ? plugin->backend : *refusal ? &absent_backend : NULL;
  pthread_mutex_unlock(&mu);
  return be;
}

const dpm_cuda_plugin *dpm_cuda_plugin_get(void) {
  pthread_mutex_lock(&mu);
  const dpm_cuda_plugin *p = plugin;
  pthread_mutex_unlock(&mu);
  return p;
}
