/* Inside the CUDA plugin (build/libdpm_cuda.so; plugin.h is its seam with
 * the host): the per-device state every kernel uses, and what the plugin's
 * files share. Host-side C (gcc, -fPIC) unpacks ops and calls cuBLASLt,
 * cuDNN, NCCL and the launchers of the plugin's own kernels (launch.h,
 * nvcc); nothing here touches engine functions, only engine structs and
 * static inline helpers, plus the host table (dpm_cuda_host).
 *
 * Device state (cuda_dev), one per open device, made by the backend's open
 * (plugin.c, from cuda_dev_open and the parts it adds) and owned by the
 * host's device registry until close: the device's compute
 * stream, on which every kernel, copy and collective of the device is
 * queued in order; a copy stream for staging uploads; cuBLAS, cuBLASLt and
 * cuDNN handles bound to the compute stream; a cuBLASLt workspace; the
 * cuDNN algorithm cache (conv.c); pinned host staging. Kept warm for the
 * life of the process: a second model on the device reuses all of it.
 *
 * Threads: a device's state is used by the one worker that runs the
 * device's replica at a time (the engine's rule); the algorithm cache has
 * a lock of its own, since models on one device may bind concurrently.
 *
 * Errors: kernels cannot fail (backend.h); a CUDA error inside one is a
 * sticky error of the device (cuda_check records the first one and its
 * place), reported by the next synchronize or copy through the host's
 * checks, and logged. */
#ifndef DPM_BACKEND_CUDA_CUDA_H
#define DPM_BACKEND_CUDA_CUDA_H

#include <pthread.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/cuda/plugin.h"

/* Bytes of cuBLASLt workspace per device (NVIDIA suggests 32 MiB on Hopper). */
#define CUDA_LT_WORKSPACE ((size_t)32 << 20)
/* Largest cuDNN workspace an algorithm may ask for. */
#define CUDA_CONV_WORKSPACE_LIMIT ((size_t)256 << 20)

typedef struct cuda_algo_cache cuda_algo_cache; /* algo.c */
typedef struct cuda_staging cuda_staging;       /* staging.c */
typedef int (*cuda_watch_fn)(void *arg, int64_t waited_ms);
#define CUDA_MAX_WATCHES 16

typedef struct cuda_dev {
  int index; /* cuda:N */
  cudaStream_t compute, copy;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cudnnHandle_t dnn;
  void *lt_ws; /* CUDA_LT_WORKSPACE bytes on the device */
  cuda_algo_cache *algos;
  cuda_staging *staging; /* pinned host and device blocks for copies (staging.c) */
  struct {
    cuda_watch_fn fn;
    void *arg;
  } watch[CUDA_MAX_WATCHES];
  int n_watch;
  pthread_mutex_t watch_mu;
  int async_alloc; /* raw memory from cudaMallocAsync (else cudaMalloc) */
  pthread_mutex_t err_mu;
  int sticky; /* first failure seen on the device (that library's code), 0: none */
  const char *sticky_at; /* the call that failed */
  int capturing;         /* a graph capture is open on compute */
} cuda_dev;

/* The host's table, set by dpm_cuda_plugin_init (plugin.c). */
extern const dpm_cuda_host *cuda_host;

/* Makes dev the calling thread's current CUDA device (kernels launch on
 * the current device's streams); a no-op when it already is. */
extern __thread int cuda_current; /* the calling thread's, -1: not set yet (cuda.c) */
static inline void cuda_use(const cuda_dev *dev) {
  if (cuda_current != dev->index && cudaSetDevice(dev->index) == cudaSuccess)
    cuda_current = dev->index;
}

/* The device state an op runs on, made current on the calling thread. */
static inline cuda_dev *cuda_dev_of(const dpm_op *op) {
  cuda_dev *dev = (cuda_dev *)cuda_host->dev_state(op->ctx->dev);
  cuda_use(dev);
  return dev;
}

/* Element count of a tensor (dpm_shape_numel without the engine). */
static inline int64_t cuda_numel(const dpm_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->shape.ndim; i++) n *= t->shape.d[i];
  return n;
}

static inline size_t cuda_bytes(const dpm_tensor *t) {
  static const size_t size[] = {
      [DPM_F32] = 4, [DPM_I32] = 4, [DPM_I64] = 8, [DPM_BF16] = 2, [DPM_F16] = 2};
  return (size_t)cuda_numel(t) * size[t->shape.dtype];
}

/* Records the first failure of a CUDA, cuBLAS, cuDNN or NCCL call on dev
 * (ok: that library's success); returns whether the call succeeded. */
int cuda_check(cuda_dev *dev, int ok, int code, const char *what);
/* The call is evaluated once (a launch or an allocation must not repeat). */
static inline int cuda_check_code(cuda_dev *dev, int code, int ok, const char *what) {
  return cuda_check(dev, code == ok, code, what);
}
#define CUDA_OK(dev, call) cuda_check_code((dev), (int)(call), (int)cudaSuccess, #call)
#define CUBLAS_OK(dev, call)                                                             \
  cuda_check_code((dev), (int)(call), (int)CUBLAS_STATUS_SUCCESS, #call)
#define CUDNN_OK(dev, call)                                                              \
  cuda_check_code((dev), (int)(call), (int)CUDNN_STATUS_SUCCESS, #call)

/* err := code and a formatted message (dpm_errf without the engine). */
dpm_status cuda_errf(dpm_err *err, dpm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Waiting for the compute stream (cuda.c): polls it until its work is
 * done, calling each watch between polls with the milliseconds waited so
 * far; a watch that gives up on what it watches (a NCCL group past its
 * timeout: it aborts the group, which lets the stream drain) returns
 * nonzero and the wait goes on until the stream is idle. Watches are added
 * by the nccl communicator for each of its ranks' devices (nccl.c) and
 * removed before it is freed; at most CUDA_MAX_WATCHES per device. */
void cuda_watch_add(cuda_dev *dev, cuda_watch_fn fn, void *arg);
void cuda_watch_remove(cuda_dev *dev, cuda_watch_fn fn, void *arg);
/* Waits for everything queued on dev's compute stream (as above); returns
 * whether the device is free of failures (cuda_check). */
int cuda_wait(cuda_dev *dev);
/* The open device whose compute stream is `stream` (a cudaStream_t from
 * backend.h: stream), NULL if none: how the nccl communicator finds the devices
 * of its ranks' streams to watch them (cuda.c). */
cuda_dev *cuda_dev_of_stream(void *stream);

/* A device's life (cuda.c). cuda_dev_open makes cuda:index's streams,
 * library handles and cuBLASLt workspace, current on the calling thread;
 * DPM_UNSUPPORTED naming the call that failed (nothing is left open), or
 * DPM_NOMEM. The backend's open (plugin.c) then adds the algorithm cache
 * and staging, and cuda_dev_ready refuses the device if a call on it
 * failed meanwhile (DPM_UNSUPPORTED, naming it; the caller closes it), or
 * makes it one of the open devices (cuda_dev_of_stream). cuda_dev_close
 * takes it off that list, waits for both streams and frees what
 * cuda_dev_open made and dev itself, once the parts the plugin added are
 * freed; NULL: nothing. */
dpm_status cuda_dev_open(int index, cuda_dev **out, dpm_err *err);
dpm_status cuda_dev_ready(cuda_dev *dev, dpm_err *err);
void cuda_dev_close(cuda_dev *dev);

/* The device's first failure (cuda_check) as err: DPM_IO naming the call,
 * or DPM_OK (backend.h: failure; state is a cuda_dev). Any thread. */
dpm_status cuda_failure(void *state, dpm_err *err);

/* Step graphs on the compute stream (cuda.c; backend.h: capture_begin,
 * capture_end, replay, graph_free; state is a cuda_dev): a call that fails
 * while the calling thread captures fails the capture, not the device. */
dpm_status cuda_capture_begin(void *state, dpm_err *err);
void *cuda_capture_end(void *state, dpm_err *err);
dpm_status cuda_replay(void *state, void *graph, dpm_err *err);
void cuda_graph_free(void *state, void *graph);
/* Graphs instantiated so far, by every device (backend.h: counts). Any
 * thread. */
unsigned long cuda_graphs(void);

/* Staging (staging.c): host <-> device copies through pinned host memory.
 * cuda_upload copies src into a pinned block at once (src is free again
 * when it returns), sends it to a device block on the copy stream (which
 * overlaps what the compute stream is doing) and queues the copy of that
 * block into dst on the compute stream after it: ordered with every kernel
 * before and after it, without a host wait. cuda_download waits for the
 * compute stream and copies dst out. Blocks are reused once the events
 * that fence them completed (backend/pool.h). */
void cuda_upload(cuda_dev *dev, void *dst, const void *src, size_t bytes);
void cuda_download(cuda_dev *dev, void *dst, const void *src, size_t bytes);
cuda_staging *cuda_staging_new(cuda_dev *dev);
void cuda_staging_free(cuda_staging *s);
/* Pinned and device staging blocks allocated so far, by every device
 * (backend.h: counts). Any thread. */
unsigned long cuda_staging_blocks(void);

/* The kernel of op ID on cuda, defined in one family file (elementwise.c,
 * fc.c, conv.c, ...) as `const dpm_kernel_def DPM_CUDA_KERNEL(ID)`; the
 * table (kernels.c) refers to them weakly, so an op whose family file
 * lacks it has none (refused at bind, naming op and device) and the test
 * that every op of DPM_KERNEL_OP_MAP has a cuda kernel fails (the
 * collectives are the engine's: engine/collective.h). */
#define DPM_CUDA_KERNEL(ID) dpm_cuda_kernel_##ID
#define XX(id, name) extern const dpm_kernel_def DPM_CUDA_KERNEL(id);
DPM_KERNEL_OP_MAP(XX)
#undef XX

const dpm_kernel_def *cuda_kernel(dpm_op_id id);

/* The algorithm cache's life (algo.c). */
cuda_algo_cache *cuda_algo_cache_new(void);
void cuda_algo_cache_free(cuda_algo_cache *c);

#endif
