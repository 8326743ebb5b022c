/* Backends: where a device's tensors live and how its kernels run.
 *
 * One const table per device kind (common/device.h): cpu, fenced (test
 * builds: the CPU kernels over memory host code cannot touch), cuda (a
 * shared object loaded at start: backend/cuda_load.h). Everything the engine does with a
 * device goes through its table: raw memory (under the caching allocator,
 * backend/pool.h), copies between host and device and within a device, a
 * memset, an ordering handle with synchronise (a CUDA stream; nothing on
 * CPU), and the kernel of each op id (dpm_kernel_def) but the collectives,
 * which the engine runs through the communicator (engine/collective.h).
 * Only backends and kernels touch device bytes; the trainer, readers'
 * staging, checkpoints, get-blob, sync and predictor extraction copy
 * through here (backend/device.h).
 *
 * Ops and kernels: an op's semantics (arity, arguments, shape inference,
 * gradient, the fusions its kernels implement) are its dpm_op_def
 * (engine/op.h, daemon/ops/), the same on every device; its code is the
 * kernel each backend has for its id. The CPU's kernels are in
 * daemon/backend/cpu/, one file per op family as in daemon/ops/; host code
 * that runs ops outside any device (the predictor runtime: a dpm_ctx
 * without a device) runs the cpu backend's.
 *
 * Ownership: tables, kernel defs included, are static and immutable; a
 * backend's per-device state (open/close) belongs to the device registry
 * (backend/device.h).
 * Threads: every function may be called from any thread; calls for one
 * device that must be ordered are ordered by the caller (a device worker),
 * or by the backend's stream. */
#ifndef DPM_BACKEND_H
#define DPM_BACKEND_H

#include <stddef.h>

#include "common/device.h"
#include "engine/op.h"

typedef enum { DPM_COPY_H2D, DPM_COPY_D2H, DPM_COPY_D2D } dpm_copy_kind;

struct dpm_comm;
struct dpm_comm_config;

/* What a backend asked its device libraries for so far (dpm_backend.counts):
 * a warm second model should ask for nothing but its own graphs. */
typedef struct dpm_backend_counts {
  unsigned long comm_inits;     /* groups of its own communicator created (warm ones
                                   taken again: not) */
  unsigned long staging_blocks; /* pinned host and device staging blocks allocated */
  unsigned long graphs;         /* step graphs instantiated */
} dpm_backend_counts;

/* The kernel of one op on one backend. The device an op runs on is
 * op->ctx->dev (NULL: host memory, the cpu backend's kernels). */
typedef struct dpm_kernel_def {
  /* Runs op: its shapes were accepted by its def's infer, its outputs are
   * allocated on its device, and op->ctx->scratch holds at least the
   * scratch bytes below. Never fails (collectives record a failure in
   * op->ctx->status). */
  void (*run)(const dpm_op *op);
  /* Optional split of run, both or neither: parts(op) independent pieces
   * (0: none for this op's shapes and outputs); run_part for every part in
   * [0, parts), in any order and on any threads, does what run does, bit
   * for bit. parts reads shapes and which outputs exist, never tensor
   * bytes. Lets an idle device worker take parts of a peer replica's op
   * (parallel/share.h). */
  int (*parts)(const dpm_op *op);
  void (*run_part)(const dpm_op *op, int part);
  /* Optional with parts: work every part reads (an operand packed into
   * op->ctx->scratch), run once by the op's owner before any part; run
   * does it itself. */
  void (*prepare)(const dpm_op *op);
  /* Scratch bytes run needs for node n at input shapes `in` (shapes its
   * def's infer accepted); NULL: none. Scratch is the kernel's own, so
   * each backend sizes it: dpm_net_scratch (engine/exec.h) asks the
   * backend of the device a net will run on. */
  size_t (*scratch)(const dpm_node *n, const dpm_shape *in);
  /* Optional: runs ops[0..n), consecutive ops of one net that all have
   * this kernel, in one go, as run would one after the other (a fused
   * multi-tensor update: one launch for every parameter). The executor
   * hands every such run of ops to it (engine/exec.c). */
  void (*run_many)(const dpm_op *ops, int n);
  /* The 16-bit types (DPM_LOWP_BIT(DPM_BF16) ...) in which run takes the
   * op's floating tensors as they are, for a model whose precision.compute
   * is one (engine/precision.h). 0: none, and an op of a net bound with a
   * tensor of such a type is refused, naming op, type and device
   * (dpm_exec_bind), but on the cpu backend, which runs every such op
   * through its f32 kernel (backend/cpu/lowp_run.h), and on fenced, whose
   * kernels run the CPU's wrapper with op->inner the CPU's kernel. */
  unsigned lowp;
} dpm_kernel_def;

#define DPM_LOWP_BIT(t) (1u << (unsigned)(t))

typedef struct dpm_backend {
  const char *name; /* "cpu" */
  dpm_device_kind kind;
  /* Device memory is host memory that host code may read and write in
   * place (cpu): the engine then skips staging copies. */
  int host_visible;
  /* Devices of this kind on this machine (0: none); why in err when none. */
  int (*probe)(dpm_err *err);
  /* Per-device state for device `index` (< probe), into *state. */
  dpm_status (*open)(int index, void **state, dpm_err *err);
  void (*close)(void *state);
  /* Raw memory, DPM_ALIGN aligned; NULL when out of memory. Only the pool
   * calls these. */
  void *(*alloc)(void *state, size_t bytes);
  void (*free)(void *state, void *p, size_t bytes);
  void (*copy)(void *state, void *dst, const void *src, size_t bytes, dpm_copy_kind kind);
  void (*memset)(void *state, void *dst, int value, size_t bytes);
  /* Waits for everything queued on the device's ordering handle. */
  void (*synchronize)(void *state);
  /* The device's first failure since it opened (a fault in a kernel or a
   * library: such failures are sticky), with its reason in err; DPM_OK
   * when none. NULL: the device cannot fail (cpu). */
  dpm_status (*failure)(void *state, dpm_err *err);
  /* The kernel of op `id` (< DPM_OP_COUNT) on this backend, static; NULL:
   * the op is not supported here (a net using it is refused when it is
   * bound, naming op and device: dpm_exec_kernel, engine/exec.h), and for
   * the collectives (DPM_COLLECTIVE_OP_MAP: the engine's). A returned def
   * always has run. */
  const dpm_kernel_def *(*kernel)(dpm_op_id id);
  /* Host code acting as the device (the local communicator's data movement
   * on buffers of this device) runs between enter and leave. */
  void (*enter)(void *state);
  void (*leave)(void *state);
  /* Optional: runs fn(op), host code acting as the device for op (a
   * collective: engine/collective.h), in the device's order as a kernel
   * would run: recorded instead, and run by each replay, while the calling
   * thread captures a step graph. NULL: fn runs at once between enter and
   * leave (a stream-ordered communicator queues its own work, which a
   * capture then takes: cuda). */
  void (*run_host)(void *state, void (*fn)(const dpm_op *op), const dpm_op *op);
  /* Whether p points into this device's memory (a communicator over host
   * copies passes host buffers through as they are: comm/staged.c). NULL:
   * never, for host-visible backends, whose memory is the host's. Any
   * thread; reads no device bytes. */
  int (*owns)(void *state, const void *p);
  /* Optional, all four or none (NULL: every step runs eagerly): step graphs
   * (train/graph.h). capture_begin starts recording, as one replayable
   * graph, the work the calling thread queues on the device; nothing of it
   * runs meanwhile. DPM_OK, or why not in err (then nothing is recording).
   * capture_end ends it: the graph, or NULL with the reason in err when the
   * capture failed (what was queued has not run and never will: the caller
   * runs it again eagerly). replay queues a graph's work as captured, with
   * the buffers it named then; its failure is the device's. graph_free
   * frees a graph no replay is queued for. */
  dpm_status (*capture_begin)(void *state, dpm_err *err);
  void *(*capture_end)(void *state, dpm_err *err);
  dpm_status (*replay)(void *state, void *graph, dpm_err *err);
  void (*graph_free)(void *state, void *graph);
  /* One job at a time: the device orders all its work on one stream (a
   * CUDA compute stream), so the work of two crews must not interleave on
   * it (a capture would swallow the other's kernels). Whoever queues work
   * on such a device holds its claim meanwhile (device.h: dpm_dev_claim). */
  int exclusive;
  /* Optional extras, each NULL where the backend has none (cpu and fenced
   * have none). stream: the device's ordering handle (a CUDA stream), on
   * which the backend's own communicator queues that rank's collectives.
   * comm_create: that communicator (DPM_COMM_NCCL, comm/comm.h) over
   * device buffers, cfg->streams holding stream() of each local rank's
   * device. counts: what the backend asked its libraries for so far.
   * release: gives back the idle warm groups of its communicator, before
   * the devices close (dpm_dev_shutdown). Any thread. */
  void *(*stream)(void *state);
  dpm_status (*comm_create)(const struct dpm_comm_config *cfg, struct dpm_comm **out,
                            dpm_err *err);
  void (*counts)(dpm_backend_counts *out);
  void (*release)(void);
} dpm_backend;

extern const dpm_backend dpm_backend_cpu;
extern const dpm_backend dpm_backend_fenced;

/* The backend of a device kind, or NULL when this build has none. */
const dpm_backend *dpm_backend_of(dpm_device_kind kind);
/* Loads the backend of kind where it is a plugin loaded at run time
 * (backend/cuda_load.h), once per process, and returns how many of its
 * devices this process can use; line (n bytes) gets the loader's one line
 * for the log. A built-in backend: its probe's count, line "". Any thread;
 * no error is fatal (the line says what was found). */
int dpm_backend_load(dpm_device_kind kind, char *line, size_t n);
/* Whether devices of kind reduce through their backend's own communicator
 * (comm_create), known from the kind alone, before anything loads: the
 * comm factory picks DPM_COMM_NCCL for them. */
int dpm_backend_brings_comm(dpm_device_kind kind);

#endif
