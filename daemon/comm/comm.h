/* Collective communication for data parallelism: a group of `size` ranks
 * (one per device replica, possibly on several hosts) that sum gradients,
 * broadcast parameters and meet at barriers.
 *
 * A communicator is a const ops table (dpm_comm_ops) behind an opaque handle,
 * so backends plug in without the callers changing:
 *   local  the ranks are threads of this process (CPU replicas); local.c
 *   gloo   host buffers; the ranks are threads of several processes (hosts),
 *          which meet through Gloo over TCP; gloo.c, on Gloo through
 *          gloo_shim.cc
 *   nccl   GPU buffers, CUDA streams; in the cuda plugin
 *          (daemon/backend/cuda/nccl.c, backend/cuda_load.h)
 *   staged device buffers on host copies: a gloo group run on copies of
 *          each rank's device buffer; staged.c
 *   loop   test builds only: the smallest backend (comm/loop.c)
 * The interface assumes nothing about where buffers live or whether ranks
 * share an address space: a buffer is whatever the backend's devices address
 * (host memory for local and gloo, device memory for nccl), and each rank
 * passes only its own buffer.
 *
 * Call order: every rank of the group calls the same collectives, with the
 * same arguments where the documentation says so, in the same order. A rank
 * that calls a different collective, or the same one with a different
 * count, size or root, gets DPM_INVALID on every rank (never a hang or
 * memory corruption), and the group stays usable.
 *
 * Threads: each rank calls from its own thread (a device worker, or a
 * thread of the rank's: one thread per rank at any moment); a rank's
 * calls are sequential, and a group runs one collective at a time. Calls
 * for different ranks run concurrently by design: that is how a collective
 * meets. A second call for a rank already inside one is refused with
 * DPM_INVALID where the backend can tell (local, gloo and nccl do), and
 * hangs the group until its timeout otherwise. dpm_comm_size and
 * dpm_comm_backend are safe from any thread.
 *
 * Completion: when a call returns DPM_OK its result is ready for the rank's
 * next work on its device: in memory for CPU backends; for stream-ordered
 * backends (nccl), ordered before the work the rank queues next on its
 * stream (the stream is bound when that backend's group is created).
 *
 * Ownership: buffers stay owned by the caller; a backend reads and writes
 * them only during the call (peers may touch a rank's buffer while it is
 * inside the call, never after it returns) and keeps no pointer afterwards.
 * Buffers of different ranks must not overlap.
 *
 * Errors: DPM_INVALID for bad arguments or ranks that disagree (every rank
 * of that collective gets it; buffers are left untouched). DPM_TIMEOUT when
 * ranks did not arrive within the group's timeout: the message names the
 * collective, the ranks that did not arrive and the collective's sequence
 * number in the group, and the group is then broken: every later call on
 * it, by any rank, fails at once with DPM_STATE ("allreduce: communicator
 * broken by an earlier timeout (barrier: timed out after 100 ms; 2 of 3
 * ranks arrived; missing rank(s) 2 (collective 7))"). A broken group cannot
 * be repaired; join the rank threads, destroy it and create a new one. After
 * any failure of an allreduce or broadcast the contents of the buffers are
 * unspecified (DPM_INVALID excepted, see above). A backend across processes
 * also breaks on a lost peer (DPM_IO, naming the peer) and its messages
 * say "broken by an earlier failure". The agreement, the timeout's message
 * and the sticky failure are written once, in the group core
 * (comm/group.h), which every backend uses; tests/unit/comm_contract_test.c
 * holds every backend to this contract. */
#ifndef DPM_COMM_H
#define DPM_COMM_H

#include <stddef.h>

#include "common/device.h"
#include "dpm/status.h"

typedef struct dpm_comm dpm_comm;

/* Most ranks in one group. */
#define DPM_COMM_MAX_RANKS 1024

/* Sum `count` floats across all ranks, in place in every rank's `buf`
 * (count must be the same on every rank; buf may be NULL only when count
 * is 0). Every rank ends with bitwise identical results. The summation
 * order is fixed, ((b0 + b1) + b2) + ... in rank order, so a result is
 * reproducible from run to run and independent of timing; a backend that
 * cannot keep that order documents the order it keeps at its create
 * function. */
dpm_status dpm_comm_allreduce(dpm_comm *c, int rank, float *buf, size_t count,
                              dpm_err *err);

/* dpm_comm_allreduce over `count` doubles, with the same contract: the same
 * count on every rank, the same fixed summation order (or the backend's
 * documented one, in double), bitwise identical results on every rank, the
 * same errors. Every rank of the collective passes doubles: a rank that
 * calls the float allreduce where its peers call this one is refused like
 * a count that differs (DPM_INVALID on every rank). For small sums that
 * must survive the reduction unrounded (parallel/sync_bn.h: a float sum of
 * the replicas' statistics rounds, and a hi/lo pair of floats does not
 * survive a float sum). Blocking only: there is no started double
 * allreduce. */
dpm_status dpm_comm_allreduce_f64(dpm_comm *c, int rank, double *buf, size_t count,
                                  dpm_err *err);

/* Element types of an allreduce, for backends (dpm_comm_ops.allreduce). */
typedef enum { DPM_COMM_F32, DPM_COMM_F64, DPM_COMM_DTYPE_COUNT } dpm_comm_dtype;

/* Bytes of one element of t. */
static inline size_t dpm_comm_dtype_size(dpm_comm_dtype t) {
  return t == DPM_COMM_F64 ? sizeof(double) : sizeof(float);
}
/* "float", "double": for messages. */
static inline const char *dpm_comm_dtype_name(dpm_comm_dtype t) {
  return t == DPM_COMM_F64 ? "double" : "float";
}

/* Started allreduces, for reductions that overlap computation (dag plans):
 * dpm_comm_allreduce_start begins the sum of `count` floats at buf, with
 * dpm_comm_allreduce's arguments and result, and returns at once;
 * dpm_comm_allreduce_wait completes this rank's oldest started allreduce
 * not yet waited for and returns its status. Every rank starts the same
 * allreduces in the same order; between start and wait the caller leaves
 * buf alone (peers may be reading and writing it). A rank may have at most
 * DPM_COMM_MAX_STARTED started and not waited for (more: DPM_INVALID from
 * start); wait with none: DPM_INVALID. Where the work happens is the
 * backend's: local sums in the waits (see dpm_comm_local_create), gloo on
 * its own thread (dpm_comm_gloo_create), nccl on a stream. Errors as for
 * allreduce, reported by the wait (a start fails only on a broken group,
 * too many started, or a timeout waiting for a peer to wait for a job
 * started DPM_COMM_MAX_STARTED earlier). Blocking collectives may be called in
 * between; they do not complete started ones. */
#define DPM_COMM_MAX_STARTED 64
dpm_status dpm_comm_allreduce_start(dpm_comm *c, int rank, float *buf, size_t count,
                                    dpm_err *err);
dpm_status dpm_comm_allreduce_wait(dpm_comm *c, int rank, dpm_err *err);

/* Copy `bytes` bytes from rank `root`'s buf into every other rank's buf
 * (bytes and root the same on every rank; buf may be NULL only when bytes
 * is 0). The root's buffer is only read. */
dpm_status dpm_comm_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                              dpm_err *err);

/* Return once every rank has called it (DPM_TIMEOUT as above otherwise). */
dpm_status dpm_comm_barrier(dpm_comm *c, int rank, dpm_err *err);

/* Number of ranks in the group. */
int dpm_comm_size(const dpm_comm *c);
/* Whether a failure broke the group (see Errors above): then destroy it
 * and create a new one once every rank has left it. Safe from any thread;
 * 0 for NULL. */
int dpm_comm_broken(dpm_comm *c);
/* The failure that broke the group, with its own code (DPM_TIMEOUT,
 * DPM_IO) and message (DPM_OK when it is not broken): for callers that learn of a failure
 * between calls (a stream-ordered group broken while its work ran). */
dpm_status dpm_comm_failure(dpm_comm *c, dpm_err *err);
/* Backend name: "local", "gloo", "nccl", "staged", "loop". */
const char *dpm_comm_backend(const dpm_comm *c);

/* Free the group. No rank may be inside a call, nor call again: join the
 * rank threads first (also after a timeout, when a late rank may still be
 * on its way in). NULL is ignored. */
void dpm_comm_destroy(dpm_comm *c);

/* ---- The factory ---------------------------------------------------------
 *
 * Every communicator comes from dpm_comm_create: the caller says which
 * backend (dpm_comm_choose picks it from the replicas' devices and the
 * job's processes), how many ranks it runs here and where they sit in the
 * job's whole group; the factory opens the rendezvous store a group across
 * processes meets through (comm/store.h) and the backend does the rest (a
 * local group, Gloo across processes and hosts, NCCL across GPUs, or Gloo
 * on host copies of device buffers). */
typedef enum {
  DPM_COMM_LOCAL,  /* the ranks are threads of this process, host buffers */
  DPM_COMM_GLOO,   /* host buffers; this process's ranks reduce locally, then Gloo
                      across the job's processes (hosts) over TCP */
  DPM_COMM_NCCL,   /* device buffers and streams: the cuda plugin's (cuda/nccl.c) */
  DPM_COMM_STAGED, /* device buffers host code cannot touch: a gloo group on host
                      copies (dpm_comm_staged_create), on cfg->devs */
  DPM_COMM_LOOP,   /* test builds only: the smallest backend, threads of this
                      process on host buffers (comm/loop.c); never chosen */
  DPM_COMM_KIND_COUNT
} dpm_comm_kind;

/* The backend for replicas on devices of one kind in a job of `shards`
 * processes (1: this one alone): nccl for cuda GPUs (NCCL meets across
 * processes through any rendezvous store: comm/store.h), else local within
 * one process, gloo across processes where host code can touch the
 * devices' memory, staged where it cannot (the test build's fenced:N).
 * Known from the kind alone, before any device opens. Stateless. */
dpm_comm_kind dpm_comm_choose(dpm_device_kind device, int shards);
/* "local", "gloo", "nccl", "staged", "loop". */
const char *dpm_comm_kind_name(dpm_comm_kind kind);

/* A key-value store served by the caller, for a rendezvous whose store is
 * "daemon" (the coordinating dpmd's): set stores a value under a key once;
 * get returns a malloc'd copy of a key's value, waiting up to timeout_ms for
 * it to be set (DPM_TIMEOUT after that). Called from the thread that creates
 * the communicator. */
typedef struct dpm_comm_store {
  void *ctx;
  dpm_status (*set)(void *ctx, const char *key, const void *value, size_t len,
                    dpm_err *err);
  dpm_status (*get)(void *ctx, const char *key, int timeout_ms, void **value, size_t *len,
                    dpm_err *err);
} dpm_comm_store;

/* How the processes of a job find each other (gloo, nccl). Every process
 * of one formation of the job passes the same store and prefix; a new
 * formation (after a failure, or with other processes) needs a new prefix,
 * since a store's keys cannot be set twice (a used prefix fails with
 * DPM_EXISTS). The store is opened by dpm_comm_create (comm/store.h: the
 * URL is parsed there and nowhere else) for the create of a group across
 * processes, and closed after it. A file store's directory is created if
 * missing; it and the store's files are reached through fs (common/file.h):
 * dpmd passes its confined client paths (server/paths.h), so a store lies
 * where a client's files may. */
typedef struct dpm_comm_rendezvous {
  const char *store;        /* "file:///DIR", "redis://HOST:PORT", or NULL ("",
                               "daemon"): kv */
  const dpm_comm_store *kv; /* the caller's store, when store is NULL */
  const struct dpm_fs *fs;  /* file store: how DIR and its files are opened;
                               NULL: plain paths (dpm_fs_plain) */
  const char *prefix;       /* the formation's keys: "JOB/FORMATION", unique */
  const char *iface;        /* network interface to bind; NULL: the host name's address */
} dpm_comm_rendezvous;

/* How a float allreduce's data crosses processes (precision.allreduce of
 * the spec). F32: as it is. BF16 (gloo and staged groups): each process's
 * sum of its local ranks is rounded to bf16 (to nearest even) for the
 * transfer, and the processes' bf16 values are summed in fp32, in process
 * order, so every rank of the job ends with the same bits:
 *   result[i] = ((bf16(s0[i]) + bf16(s1[i])) + bf16(s2[i])) + ...
 * where s_p is process p's local sum (fp32, local rank order). Gloo's own
 * ring cannot do this (it sums in the type it sends), so the transfer is
 * dpm_gloo_allreduce_bf16's (comm/gloo_shim.h): up to 3 processes an
 * allgather of the bf16 vectors, each process summing them all (2 bytes
 * per element sent at 2 processes where the ring sends 4); beyond, an
 * alltoallv of bf16 segments to their owners and an allgatherv of the fp32
 * sums. Within one process nothing crosses: local and loop groups, and a
 * gloo group of one process, sum in fp32 whatever the wire; doubles
 * (dpm_comm_allreduce_f64) always cross as they are. Processes whose wires
 * differ are refused before data moves (DPM_INVALID on every rank). nccl
 * groups refuse BF16 (DPM_UNSUPPORTED). */
typedef enum { DPM_COMM_WIRE_F32, DPM_COMM_WIRE_BF16, DPM_COMM_WIRE_COUNT } dpm_comm_wire;

typedef struct dpm_comm_config {
  dpm_comm_kind kind;
  int size;       /* ranks this process runs (its replicas), 1..DPM_COMM_MAX_RANKS */
  int rank_base;  /* the job-wide rank of this process's rank 0: a multiple of
                     size (every process runs as many ranks) */
  int world;      /* ranks in the whole job (all processes); 0: size */
  int timeout_ms; /* how long a rank waits for its peers, > 0; also every wait
                     of the rendezvous */
  dpm_comm_rendezvous rendezvous; /* gloo, nccl: how the processes meet */
  /* The store opened from rendezvous by dpm_comm_create for the backend's
   * create (NULL within one process); backends use it, never rendezvous's
   * store, kv and fs. The caller leaves it NULL. */
  struct dpm_store *store;
  void *const *streams;        /* nccl: one per local rank */
  struct dpm_dev *const *devs; /* staged: each local rank's open device */
  int deterministic;           /* nccl: only reductions that repeat bitwise for the same
                                  topology (no in-switch NVLS or CollNet reduction) */
  dpm_comm_wire wire;          /* gloo, staged: how float sums cross processes */
} dpm_comm_config;

/* A new communicator for cfg. DPM_UNSUPPORTED for a backend this build
 * lacks (nccl) and for a local group that is not the whole job (world >
 * size: several hosts need a backend that crosses them, and reducing on one
 * host alone would be a wrong result, not an error); DPM_INVALID for bad
 * numbers; DPM_NOMEM; the store's (comm/store.h: a bad URL is
 * DPM_INVALID) and a gloo group's rendezvous errors (see
 * dpm_comm_gloo_create). *out is NULL on failure. */
dpm_status dpm_comm_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err);
/* Replaces *c with a new group made from cfg when a timeout broke it (no
 * rank may be inside it). On failure *c stays, broken (its calls fail with
 * DPM_STATE), and the error is returned. */
dpm_status dpm_comm_renew(dpm_comm **c, const dpm_comm_config *cfg, dpm_err *err);

/* Local backend: `size` ranks (1..DPM_COMM_MAX_RANKS), each a thread of this
 * process passing host memory. Ranks wait for each other at most timeout_ms
 * (> 0) milliseconds per collective; once every rank has arrived, the data
 * movement runs to completion. Allreduce slices the vector into `size`
 * slices of whole 64-byte lines (16 floats or 8 doubles): rank r sums
 * slice r of every rank's buffer in rank order and writes the sum into
 * slice r of every rank's buffer, so each rank reads and writes 1/size of
 * the traffic, nothing is allocated per call, and there are no copies
 * besides the result itself. Broadcast: every non-root copies from the root's buffer.
 * Started allreduces are summed in the waits, 32 KiB chunks at a time, by
 * every rank that waits for them, in the same rank order (so the result is
 * the blocking call's): a rank that waits while its peers still compute
 * sums all they have started, and the last to arrive finds its sums done.
 * No thread is started.
 * DPM_INVALID for bad arguments, DPM_NOMEM; *out is NULL on failure. */
dpm_status dpm_comm_local_create(int size, int timeout_ms, dpm_comm **out, dpm_err *err);

/* Gloo backend: the job's `world` ranks run in world/size processes of
 * `size` ranks each (threads, host memory); this process runs job ranks
 * rank_base .. rank_base+size-1, and a call's `rank` is the local one
 * (0..size-1; the group's dpm_comm_size is size). broadcast's root is a
 * job-wide rank. With more than one process the processes meet first at
 * the rendezvous (through cfg->store, which dpm_comm_create opens from
 * cfg->rendezvous, under its prefix: each process publishes its address,
 * waits up to timeout_ms per key for the others', connects to each); one
 * process alone (world == size) needs no rendezvous and moves nothing over
 * the network. Called directly (not through dpm_comm_create), a group
 * across processes needs cfg->store.
 *
 * Summation order: the local ranks' buffers are summed in local rank order
 * (((b0 + b1) + b2) + ...), as the local backend does; then those
 * per-process sums are all-reduced across the processes by Gloo's ring:
 * each segment of the vector is owned by one process o and summed around
 * the ring, s_o + (s_o+1 + (... + s_o-1)) (process indices mod the number
 * of processes), and the finished segment is copied to every process. The
 * order depends only on the topology (processes, ranks per process) and
 * the count, so results are bitwise identical on every rank and
 * reproducible from run to run, but may differ in the last bits from the
 * rank-order sum of one process alone. With cfg->wire BF16 the processes'
 * sums cross as bf16 and are summed in fp32 in process order instead (see
 * dpm_comm_wire).
 *
 * Collectives run in order, one at a time (the cross-process step, with
 * the local sum and copies): a blocking one on the last local rank to
 * arrive when nothing runs before it, else on a thread of the backend's; a
 * started allreduce is handed to that thread once every local rank started
 * it, so it overlaps the ranks' computation, and its wait waits for it.
 * Blocking and started calls count in one sequence per rank: every rank of
 * the job calls them in the same order, interleaved alike. Before any data
 * moves, the processes swap what they called (collective, count or bytes,
 * root), so a disagreement anywhere is DPM_INVALID on every rank of the job
 * and the group stays usable; that swap also is the job-wide barrier.
 *
 * Timeouts: a rank waits timeout_ms for the other local ranks; the thread
 * waits timeout_ms for each other process's part (each of Gloo's waits).
 * DPM_TIMEOUT names the collective and the ranks or processes missing;
 * DPM_IO a lost peer (process, job ranks, address). Either breaks the
 * group for good (DPM_STATE after). Create's errors: DPM_INVALID (numbers,
 * interface, no prefix or store), DPM_EXISTS (a prefix used before),
 * DPM_TIMEOUT (a process did not arrive within timeout_ms), DPM_IO (store
 * or network), DPM_NOMEM. *out is NULL on failure. Threads: as any
 * communicator (see the top of this file); create blocks until every
 * process has arrived. */
dpm_status dpm_comm_gloo_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err);

/* Staged backend: collectives over device buffers that host code cannot
 * touch (cuda, fenced), run by `inner` (a gloo group over host memory, of
 * any size) on host copies, as Caffe2 ran Gloo for GPUs without GPUDirect.
 * The group has inner's size and ranks; rank r's buffers live on devs[r]
 * (backend/device.h; devs holds inner's size of open devices), and
 * rank_base is inner's (the job-wide rank of local rank 0; broadcast's root
 * is job-wide, as inner's). Each collective copies the rank's device
 * buffer into a host buffer of the rank's own (dpm_dev_to_host: it waits
 * for the work queued on the device), runs inner's collective on that
 * copy, and copies the result back (dpm_dev_to_device: ordered before the
 * device's next work); broadcast copies out on the root only and back on
 * the others. A started allreduce copies out and starts inner's on the
 * copy; its wait completes inner's oldest and copies that one back (a FIFO
 * of up to DPM_COMM_MAX_STARTED per rank, each with its own copy). A buffer
 * that does not point into the rank's device memory (dpm_dev_owns: host
 * memory such as a caller's flags, or NULL) goes to inner as it is. Host
 * copies only grow: after the first step of a model nothing is allocated.
 * Summation order, completion and errors are inner's (with its messages);
 * a rank that cannot allocate its copy passes inner no buffer (every rank
 * then fails alike) and gets DPM_NOMEM naming the collective. Nothing is
 * copied back after a failure. barrier, broken, failure and destroy are
 * inner's. A staged group cannot be captured in a CUDA graph (its copies
 * wait on the host mid-step).
 *
 * Takes ownership of inner, also on failure (then it is destroyed):
 * DPM_INVALID for no inner or a missing device, DPM_NOMEM; *out is NULL on
 * failure. Threads: as any communicator (see the top of this file). */
struct dpm_dev;
dpm_status dpm_comm_staged_create(dpm_comm *inner, struct dpm_dev *const *devs,
                                  int rank_base, dpm_comm **out, dpm_err *err);

/* Loopback backend (comm/loop.c; the factory makes it in test builds
 * only): `size` ranks, threads of this process passing host memory, the
 * whole job (world == size, rank_base 0); one thread moves every rank's
 * data. Contract as above, and DPM_INVALID, DPM_NOMEM from create. */
dpm_status dpm_comm_loop_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err);

/* ---- Backend interface (for the files implementing a backend) ----------
 *
 * A backend defines its own struct with `dpm_comm base` as its first member,
 * fills base.ops with a const table and base.size, and hands out &base. The
 * dispatch functions above check c and rank (0..size-1) before calling the
 * ops; everything else (buffers, counts, agreement of ranks) is the
 * backend's to check, so that every rank of a collective fails alike: with
 * the group core's dpm_group_judge (comm/group.h), as every backend does. */
typedef struct dpm_comm_ops {
  const char *name; /* "local" */
  /* dpm_comm_allreduce (DPM_COMM_F32, buf holds floats) and
   * dpm_comm_allreduce_f64 (DPM_COMM_F64, doubles): count elements of t. */
  dpm_status (*allreduce)(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                          size_t count, dpm_err *err);
  dpm_status (*broadcast)(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                          dpm_err *err);
  dpm_status (*barrier)(dpm_comm *c, int rank, dpm_err *err);
  dpm_status (*allreduce_start)(dpm_comm *c, int rank, float *buf, size_t count,
                                dpm_err *err);
  dpm_status (*allreduce_wait)(dpm_comm *c, int rank, dpm_err *err);
  int (*broken)(dpm_comm *c); /* dpm_comm_broken */
  /* dpm_comm_failure of a broken group; NULL: a generic message. */
  dpm_status (*failure)(dpm_comm *c, dpm_err *err);
  void (*destroy)(dpm_comm *c); /* frees the whole backend struct */
} dpm_comm_ops;

struct dpm_comm {
  const dpm_comm_ops *ops; /* the backend's table; never NULL */
  int size;                /* ranks in the group, >= 1 */
};

#endif
