/* The cuda backend's table and the plugin's entry point (plugin.h). It puts
 * a device together from its parts: the device state (cuda.c), staging
 * (staging.c), the cuDNN algorithm cache (algo.c), the kernels (kernels.c)
 * and the nccl communicator (nccl.c); none of them calls back into it.
 *
 * Memory: raw blocks come from cudaMallocAsync on the compute stream
 * (stream-ordered: a block freed by cudaFreeAsync is reused only after the
 * work queued before the free), or cudaMalloc where the device has no
 * memory pools; the host's caching allocator (backend/pool.h) sits above,
 * so a steady-state step asks for none. The device's memory pool keeps
 * what is freed (release threshold: all), so a second model on the device
 * reuses it without a new cudaMalloc either.
 *
 * Copies: host to device through pinned staging on the copy stream
 * (staging.c), ordered before what the compute stream runs next, without a
 * host wait; device to host waits for the compute stream (cuda_wait);
 * device to device and memset are queued on the compute stream. */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/nccl.h"

static void cuda_counts(dpm_backend_counts *out) {
  *out = (dpm_backend_counts){.comm_inits = cuda_nccl_inits(),
                              .staging_blocks = cuda_staging_blocks(),
                              .graphs = cuda_graphs()};
}

/* ---- probe ---------------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_count;
static char probe_why[256];

int dpm_cuda_probe(char *why, size_t n); /* probe.c */

static void probe_now(void) { probe_count = dpm_cuda_probe(probe_why, sizeof probe_why); }

static int cuda_probe(dpm_err *err) {
  pthread_once(&probe_once, probe_now);
  if (!probe_count) cuda_errf(err, DPM_UNSUPPORTED, "%s", probe_why);
  return probe_count;
}

/* ---- open and close ------------------------------------------------------- */

static void cuda_close(void *state) {
  cuda_dev *dev = state;
  if (!dev) return;
  cuda_staging_free(dev->staging); /* after both streams are idle */
  cuda_algo_cache_free(dev->algos);
  cuda_dev_close(dev);
}

static dpm_status cuda_open(int index, void **state, dpm_err *err) {
  *state = NULL;
  cuda_dev *dev;
  dpm_status s = cuda_dev_open(index, &dev, err);
  if (s) return s;
  if (!(dev->algos = cuda_algo_cache_new()) || !(dev->staging = cuda_staging_new(dev)))
    s = cuda_errf(err, DPM_NOMEM, "out of memory");
  else
    s = cuda_dev_ready(dev, err);
  if (s) {
    cuda_close(dev);
    return s;
  }
  *state = dev;
  return DPM_OK;
}

/* ---- memory and copies ---------------------------------------------------- */

static void *cuda_alloc(void *state, size_t bytes) {
  cuda_dev *dev = state;
  cuda_use(dev);
  void *p = NULL;
  cudaError_t e =
      dev->async_alloc ? cudaMallocAsync(&p, bytes, dev->compute) : cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* out of memory is not sticky: the pool may trim and retry */
    return NULL;
  }
  return p;
}

static void cuda_free(void *state, void *p, size_t bytes) {
  (void)bytes;
  cuda_dev *dev = state;
  cuda_use(dev);
  if (dev->async_alloc)
    CUDA_OK(dev, cudaFreeAsync(p, dev->compute));
  else
    CUDA_OK(dev, cudaFree(p));
}

static void cuda_copy(void *state, void *dst, const void *src, size_t bytes,
                      dpm_copy_kind kind) {
  cuda_dev *dev = state;
  cuda_use(dev);
  switch (kind) {
  case DPM_COPY_H2D:
    cuda_upload(dev, dst, src, bytes);
    break;
  case DPM_COPY_D2H:
    cuda_download(dev, dst, src, bytes);
    break;
  case DPM_COPY_D2D:
    CUDA_OK(dev,
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->compute));
    break;
  }
}

static void cuda_memset(void *state, void *dst, int value, size_t bytes) {
  cuda_dev *dev = state;
  cuda_use(dev);
  CUDA_OK(dev, cudaMemsetAsync(dst, value, bytes, dev->compute));
}

/* ---- the rest of the table ------------------------------------------------ */

static void cuda_synchronize(void *state) { cuda_wait(state); }

/* Host code never acts as a cuda device (its collectives are NCCL's); the
 * calls only make the device current. */
static void cuda_enter(void *state) { cuda_use(state); }
static void cuda_leave(void *state) { (void)state; }

/* Whether p is device memory (cudaMalloc, cudaMallocAsync): a host buffer,
 * pageable or pinned, is not. A pointer the runtime does not know fails
 * the query on older runtimes: its error is cleared (not the device's
 * failure) and the answer is no. */
static int cuda_owns(void *state, const void *p) {
  cuda_use(state);
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice;
}

static void *cuda_stream_of(void *state) { return ((cuda_dev *)state)->compute; }

static const char *cuda_describe(void) {
  static char text[96];
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  snprintf(text, sizeof text, "CUDA runtime %d.%d, driver %s", rt / 1000, rt % 1000 / 10,
           drv ? "" : "none");
  if (drv)
    snprintf(text + strlen(text), sizeof text - strlen(text), "%d.%d", drv / 1000,
             drv % 1000 / 10);
  return text;
}

/* ---- the tables ----------------------------------------------------------- */

static const dpm_backend cuda_backend = {
    .name = "cuda",
    .kind = DPM_DEVICE_CUDA,
    .host_visible = 0,
    .probe = cuda_probe,
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .synchronize = cuda_synchronize,
    .failure = cuda_failure,
    .kernel = cuda_kernel,
    .enter = cuda_enter,
    .leave = cuda_leave,
    .owns = cuda_owns,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .graph_free = cuda_graph_free,
    .exclusive = 1,
    .stream = cuda_stream_of,
    .comm_create = cuda_nccl_create,
    .counts = cuda_counts,
    .release = cuda_nccl_release,
};

static const dpm_cuda_plugin plugin = {
    .abi = DPM_CUDA_ABI,
    .backend = &cuda_backend,
    .describe = cuda_describe,
};

__attribute__((visibility("default"))) const dpm_cuda_plugin *
dpm_cuda_plugin_init(const dpm_cuda_host *host, dpm_err *err) {
  if (!host || host->abi != DPM_CUDA_ABI) {
    cuda_errf(err, DPM_UNSUPPORTED, "the cuda plugin's ABI is %d, the program's %d",
              DPM_CUDA_ABI, host ? host->abi : 0);
    return NULL;
  }
  cuda_host = host;
  cuda_nccl_env();
  return &plugin;
}
