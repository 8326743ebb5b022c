/* Loading the CUDA plugin (cuda_load.h). */
#include "backend/cuda_load.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"

#define PLUGIN "libdpm_cuda.so"
#define PROBE "libdpm_cuda_probe.so"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int loaded;                     /* dpm_cuda_load ran */
static const dpm_cuda_plugin *plugin;  /* NULL: none */
static int devices;
static char result[600];
static char no_device[512]; /* the probe found none: why (absent_backend's reason) */

/* cuda devices where the probe found none: refused with the probe's reason. */
static int absent_probe(dpm_err *err) {
  dpm_errf(err, DPM_UNSUPPORTED, "%s", no_device);
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

/* Tries dir/rel; 1 when the plugin is loaded and initialised. Any other
 * failure than a missing file is the line's reason. */
static int try_load(const char *dir, const char *rel, char *why, size_t n) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s%s%s", dir, *dir ? "/" : "", rel) >= (int)sizeof path)
    return 0;
  if (access(path, F_OK)) return 0;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, n, "cannot load %.200s: %.200s", path, dlerror());
    return 0;
  }
  dpm_cuda_plugin_init_fn init = (dpm_cuda_plugin_init_fn)dlsym(h, DPM_CUDA_PLUGIN_INIT);
  dpm_err err = {0};
  const dpm_cuda_plugin *p = init ? init(&host, &err) : NULL;
  if (!p || p->abi != DPM_CUDA_ABI) {
    snprintf(why, n, "%.200s: %.200s", path, init ? err.msg : "not a dpm cuda plugin");
    dlclose(h);
    return 0;
  }
  plugin = p; /* kept loaded for the life of the process */
  return 1;
}

/* The probe beside the plugin in dir, if there is one: the devices it
 * finds (0, the reason in no_device), or -1 when there is no probe. */
static int probe(const char *dir) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/" PROBE, dir) >= (int)sizeof path || access(path, F_OK))
    return -1;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  dpm_cuda_probe_fn fn = h ? (dpm_cuda_probe_fn)dlsym(h, DPM_CUDA_PROBE) : NULL;
  if (!fn) {
    snprintf(no_device, sizeof no_device, "cannot load %.200s: %.200s", path,
             h ? "not a dpm cuda probe" : dlerror());
    if (h) dlclose(h);
    return 0;
  }
  int n = fn(no_device, sizeof no_device);
  dlclose(h);
  return n;
}

static void load(void) {
  char why[512] = "";
  const char *env = getenv("DPM_CUDA_LIB");
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (env && *env) { /* a plugin named: loaded whatever the probe would say */
    if (!try_load("", env, why, sizeof why) && !*why)
      snprintf(why, sizeof why, "DPM_CUDA_LIB=%.200s: no such file", env);
  } else if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    const char *const rel[] = {"", "/..", "/../lib/dpm"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel && !plugin && !*why; i++) {
      char dir[PATH_MAX];
      if (snprintf(dir, sizeof dir, "%s%s", exe, rel[i]) >= (int)sizeof dir) continue;
      int found = probe(dir);
      if (found == 0) { /* no GPU here: the plugin's libraries stay unmapped */
        snprintf(result, sizeof result, "cuda: %.500s", no_device);
        return;
      }
      if (found > 0) try_load(dir, PLUGIN, why, sizeof why);
    }
  }
  if (!plugin) {
    snprintf(result, sizeof result, "cuda: no plugin (%.500s)",
             *why ? why : "built with CUDA=0, or " PLUGIN " is not next to the program");
    return;
  }
  dpm_err err = {0};
  devices = plugin->backend->probe(&err);
  if (devices)
    snprintf(result, sizeof result, "cuda: %d device%s (%s)", devices, devices > 1 ? "s" : "",
             plugin->describe());
  else
    snprintf(result, sizeof result, "cuda: %.500s", err.msg);
}

int dpm_cuda_load(char *line, size_t n) {
  pthread_mutex_lock(&mu);
  if (!loaded) load();
  loaded = 1;
  pthread_mutex_unlock(&mu);
  if (line && n) snprintf(line, n, "%s", result);
  return devices;
}

const dpm_backend *dpm_cuda_backend(void) {
  pthread_mutex_lock(&mu);
  const dpm_backend *be = plugin ? plugin->backend : *no_device ? &absent_backend : NULL;
  pthread_mutex_unlock(&mu);
  return be;
}

const dpm_cuda_plugin *dpm_cuda_plugin_get(void) {
  pthread_mutex_lock(&mu);
  const dpm_cuda_plugin *p = plugin;
  pthread_mutex_unlock(&mu);
  return p;
}
