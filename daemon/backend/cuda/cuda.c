/* A cuda device's state (cuda.h), which every file of the plugin uses: its
 * streams and library handles, opened once and kept warm; the failures of
 * a device; the open devices by stream; waits and watches; step graphs.
 * The backend's table, which adds staging, the algorithm cache, the kernels
 * and the nccl communicator, is plugin.c's: this file calls none of them.
 *
 * Waits poll the compute stream and call the device's watches (the NCCL
 * groups' timeouts) between polls.
 *
 * Failures: a failed CUDA, cuBLAS, cuDNN or NCCL call is recorded as the
 * device's first failure (sticky: a faulted CUDA context does not recover
 * in this process), logged once, and reported by cuda_failure, which the
 * trainer calls after each step (backend.h: failure): the model fails
 * naming the call, and the daemon keeps serving its other models. */
#include "backend/cuda/cuda.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const dpm_cuda_host *cuda_host;
__thread int cuda_current = -1;

/* The open devices, for cuda_dev_of_stream (at most one state per index). */
#define MAX_DEVICES 256
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_dev *open_devs[MAX_DEVICES];

static atomic_ulong graphs;

unsigned long cuda_graphs(void) { return atomic_load(&graphs); }

cuda_dev *cuda_dev_of_stream(void *stream) {
  cuda_dev *found = NULL;
  pthread_mutex_lock(&open_mu);
  for (int i = 0; i < MAX_DEVICES && !found; i++)
    if (open_devs[i] && (void *)open_devs[i]->compute == stream) found = open_devs[i];
  pthread_mutex_unlock(&open_mu);
  return found;
}

dpm_status cuda_errf(dpm_err *err, dpm_status code, const char *fmt, ...) {
  if (!err) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  err->code = code;
  return code;
}

/* The device whose compute stream the calling thread is capturing (NULL:
 * none), and the first call that failed during that capture. */
static __thread cuda_dev *capture_dev;
static __thread const char *capture_fail_at;
static __thread int capture_fail_code;

int cuda_check(cuda_dev *dev, int ok, int code, const char *what) {
  if (ok) return 1;
  if (dev == capture_dev) {
    /* Inside a capture (cudaStreamCaptureModeThreadLocal, this thread): a call
     * illegal there, or one that met the capture it invalidated, fails the
     * capture, not the device; capture_end then returns no graph and the
     * step runs eagerly, where a real failure is sticky as below. */
    if (!capture_fail_at) {
      capture_fail_at = what;
      capture_fail_code = code;
    }
    return 0;
  }
  pthread_mutex_lock(&dev->err_mu);
  int first = !dev->sticky;
  if (first) {
    dev->sticky = code ? code : -1;
    dev->sticky_at = what;
  }
  pthread_mutex_unlock(&dev->err_mu);
  if (first)
    fprintf(stderr, "dpm: cuda:%d: %s failed (code %d)\n", dev->index, what, code);
  return 0;
}

/* ---- open and close ------------------------------------------------------- */

void cuda_dev_close(cuda_dev *dev) {
  if (!dev) return;
  pthread_mutex_lock(&open_mu);
  if (dev->index < MAX_DEVICES && open_devs[dev->index] == dev)
    open_devs[dev->index] = NULL;
  pthread_mutex_unlock(&open_mu);
  cuda_use(dev);
  if (dev->compute) cudaStreamSynchronize(dev->compute);
  if (dev->copy) cudaStreamSynchronize(dev->copy);
  if (dev->lt_ws) cudaFree(dev->lt_ws);
  if (dev->dnn) cudnnDestroy(dev->dnn);
  if (dev->lt) cublasLtDestroy(dev->lt);
  if (dev->blas) cublasDestroy(dev->blas);
  if (dev->copy) cudaStreamDestroy(dev->copy);
  if (dev->compute) cudaStreamDestroy(dev->compute);
  pthread_mutex_destroy(&dev->watch_mu);
  pthread_mutex_destroy(&dev->err_mu);
  free(dev);
}

/* Why a device could not open: its first failure, naming the call. */
static dpm_status cannot_open(const cuda_dev *dev, dpm_err *err) {
  return cuda_errf(err, DPM_UNSUPPORTED, "cannot open: %s failed (code %d)",
                   dev->sticky_at, dev->sticky);
}

static dpm_status open_failed(cuda_dev *dev, dpm_err *err) {
  dpm_status s = cannot_open(dev, err);
  cuda_dev_close(dev);
  return s;
}

dpm_status cuda_dev_ready(cuda_dev *dev, dpm_err *err) {
  if (dev->sticky) return cannot_open(dev, err);
  pthread_mutex_lock(&open_mu);
  open_devs[dev->index] = dev;
  pthread_mutex_unlock(&open_mu);
  return DPM_OK;
}

dpm_status cuda_dev_open(int index, cuda_dev **out, dpm_err *err) {
  *out = NULL;
  if (index >= MAX_DEVICES)
    return cuda_errf(err, DPM_UNSUPPORTED, "more than %d cuda devices", MAX_DEVICES);
  cuda_dev *dev = calloc(1, sizeof *dev);
  if (!dev) return cuda_errf(err, DPM_NOMEM, "out of memory");
  dev->index = index;
  pthread_mutex_init(&dev->err_mu, NULL);
  pthread_mutex_init(&dev->watch_mu, NULL);
  if (!CUDA_OK(dev, cudaSetDevice(index))) return open_failed(dev, err);
  cuda_current = index;
  int pools = 0;
  cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index);
  dev->async_alloc = pools;
  if (pools) { /* keep freed memory in the pool for the next model */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (CUDA_OK(dev, cudaDeviceGetDefaultMemPool(&pool, index)))
      CUDA_OK(dev, cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  if (!CUDA_OK(dev, cudaStreamCreateWithFlags(&dev->compute, cudaStreamNonBlocking)) ||
      !CUDA_OK(dev, cudaStreamCreateWithFlags(&dev->copy, cudaStreamNonBlocking)) ||
      !CUBLAS_OK(dev, cublasCreate(&dev->blas)) ||
      !CUBLAS_OK(dev, cublasSetStream(dev->blas, dev->compute)) ||
      /* full float32 products unless a kernel asks for TF32 (ctx->math) */
      !CUBLAS_OK(dev, cublasSetMathMode(dev->blas, CUBLAS_PEDANTIC_MATH)) ||
      !CUBLAS_OK(dev, cublasLtCreate(&dev->lt)) ||
      !CUDNN_OK(dev, cudnnCreate(&dev->dnn)) ||
      !CUDNN_OK(dev, cudnnSetStream(dev->dnn, dev->compute)) ||
      !CUDA_OK(dev, cudaMalloc(&dev->lt_ws, CUDA_LT_WORKSPACE)) ||
      /* cuBLAS gets the same workspace (one stream orders their uses), so it
         allocates none of its own while a step is captured as a graph */
      !CUBLAS_OK(dev, cublasSetWorkspace(dev->blas, dev->lt_ws, CUDA_LT_WORKSPACE)))
    return open_failed(dev, err);
  *out = dev;
  return DPM_OK;
}

/* ---- waits and watches ---------------------------------------------------- */

void cuda_watch_add(cuda_dev *dev, cuda_watch_fn fn, void *arg) {
  pthread_mutex_lock(&dev->watch_mu);
  if (dev->n_watch < CUDA_MAX_WATCHES) {
    dev->watch[dev->n_watch].fn = fn;
    dev->watch[dev->n_watch].arg = arg;
    dev->n_watch++;
  }
  pthread_mutex_unlock(&dev->watch_mu);
}

void cuda_watch_remove(cuda_dev *dev, cuda_watch_fn fn, void *arg) {
  pthread_mutex_lock(&dev->watch_mu);
  for (int i = 0; i < dev->n_watch; i++)
    if (dev->watch[i].fn == fn && dev->watch[i].arg == arg) {
      dev->watch[i] = dev->watch[--dev->n_watch];
      break;
    }
  pthread_mutex_unlock(&dev->watch_mu);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Calls every watch of dev, under watch_mu: once cuda_watch_remove
 * returned, the removed watch is not running and will not run again. */
static void run_watches(cuda_dev *dev, int64_t waited) {
  pthread_mutex_lock(&dev->watch_mu);
  for (int i = 0; i < dev->n_watch; i++) dev->watch[i].fn(dev->watch[i].arg, waited);
  pthread_mutex_unlock(&dev->watch_mu);
}

int cuda_wait(cuda_dev *dev) {
  cuda_use(dev);
  int64_t start = now_ms();
  for (unsigned spins = 0;; spins++) {
    cudaError_t e = cudaStreamQuery(dev->compute);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      CUDA_OK(dev, e);
      break;
    }
    run_watches(dev, now_ms() - start);
    if (spins > 64) nanosleep(&(struct timespec){0, 20000}, NULL); /* 20 us */
  }
  return !dev->sticky;
}

dpm_status cuda_failure(void *state, dpm_err *err) {
  cuda_dev *dev = state;
  pthread_mutex_lock(&dev->err_mu);
  int code = dev->sticky;
  const char *at = dev->sticky_at;
  pthread_mutex_unlock(&dev->err_mu);
  if (!code) return DPM_OK;
  return cuda_errf(err, DPM_IO,
                   "cuda:%d: %s failed (code %d); the device is unusable in this "
                   "process until it restarts",
                   dev->index, at, code);
}

/* ---- graphs --------------------------------------------------------------- */

/* A capture that cannot begin is no failure of the device: the step runs
 * eagerly. */
dpm_status cuda_capture_begin(void *state, dpm_err *err) {
  cuda_dev *dev = state;
  cuda_use(dev);
  cudaError_t e = cudaStreamBeginCapture(dev->compute, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_errf(err, DPM_UNSUPPORTED, "cuda:%d: cannot begin a capture: %s",
                     dev->index, cudaGetErrorString(e));
  }
  dev->capturing = 1;
  capture_dev = dev;
  capture_fail_at = NULL;
  return DPM_OK;
}

void *cuda_capture_end(void *state, dpm_err *err) {
  cuda_dev *dev = state;
  cuda_use(dev);
  if (!dev->capturing) {
    cuda_errf(err, DPM_STATE, "cuda:%d: no capture open", dev->index);
    return NULL;
  }
  dev->capturing = 0;
  capture_dev = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  cudaError_t e = cudaStreamEndCapture(dev->compute, &g);
  if (e == cudaSuccess && !capture_fail_at) e = cudaGraphInstantiate(&x, g, 0);
  if (x) atomic_fetch_add(&graphs, 1);
  if (g) cudaGraphDestroy(g);
  if (capture_fail_at) { /* a call failed while capturing: the graph lacks it */
    if (x) cudaGraphExecDestroy(x);
    cudaGetLastError();
    cuda_errf(
        err, DPM_UNSUPPORTED,
        "cuda:%d: step not captured as a graph: %s failed while capturing (code %d)",
        dev->index, capture_fail_at, capture_fail_code);
    capture_fail_at = NULL;
    return NULL;
  }
  if (e != cudaSuccess) {
    cudaGetLastError(); /* a capture that failed leaves the stream usable */
    cuda_errf(err, DPM_UNSUPPORTED, "cuda:%d: step not captured as a graph: %s",
              dev->index, cudaGetErrorString(e));
    return NULL;
  }
  return x;
}

dpm_status cuda_replay(void *state, void *graph, dpm_err *err) {
  cuda_dev *dev = state;
  cuda_use(dev);
  if (!CUDA_OK(dev, cudaGraphLaunch((cudaGraphExec_t)graph, dev->compute)))
    return cuda_failure(dev, err);
  return DPM_OK;
}

void cuda_graph_free(void *state, void *graph) {
  cuda_use(state);
  if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
