/* The data-parallel trainer (Caffe2's data_parallel_model, in process): one
 * replica of a model per device, all fed by one shared reader (each device
 * its slice of the global batch), stepped in lock-step, gradients
 * all-reduced as the step plan says (parallel/plan.h); checkpoints, load +
 * sync (FinalizeAfterCheckpoint), blob sync (AddBlobSync), evaluation and
 * predictor export.
 *
 * Devices are CPU replicas (cpu:0 ... cpu:N-1) in this build. Replica 0 is
 * the master: parameters are initialised there (seeded) and broadcast, and
 * checkpoints, evaluation and predictors read it. Blob names inside a
 * replica are unscoped; the scoped form "cpu_1/fc1_w" addresses replica 1.
 *
 * A job over several processes (hosts): each process runs one trainer, its
 * shard of the job (options.fleet), on as many devices as every other
 * shard. Its replicas are ranks shard*n .. shard*n+n-1 of the job's
 * n*shards, in one gloo group (comm/comm.h) formed at create, after
 * everything of this process is allocated; one replica alone has a group
 * too. The job's rank 0 (shard 0's master) is the job's master: every
 * shard's master runs the seeded init (the same values by construction:
 * fills are seeded by the spec's seed and the blob's name), then rank 0's
 * state is broadcast to every replica of every shard, as by every sync and
 * load. The reader takes the shard's slice of each global batch (io/reader.h),
 * the loss is scaled by 1/(devices x shards), and gradients are summed over
 * every rank, so k shards of n replicas train as one of k*n: the same
 * parameters, bitwise when the sums' order is the same (two ranks, or a
 * backend summing in rank order). Before anything is synced the shards
 * check that they agree (model, devices, shards, data set size, the step's
 * collectives) and all fail with DPM_SPEC when one differs. Calls that run
 * collectives (create, step, sync, sync_blobs, load) are made by every
 * shard together, in the same order; checkpoint, eval, export and the
 * accessors are the process's own (every shard holds the same state; the
 * job's convention is that shard 0 writes files). dpm_trainer_interrupt
 * stops this shard only: whoever drives the job stops every shard after
 * the same step with dpm_trainer_stop, a decision rank 0 gives before
 * every step (else the others' next collective fails after the timeout).
 * A failed collective
 * breaks the job: later calls fail with DPM_STATE, and the job is formed
 * anew (new processes or a new rendezvous prefix) from a checkpoint.
 *
 * Threads: a trainer is driven by one thread (the caller of these
 * functions), which also runs replica 0; replicas 1.. run on the workers of
 * a crew (parallel/crew.h), whose communicator carries the collectives (dag
 * plans start a bucket's sum as soon as its gradients are final; the
 * replicas sum it when they wait for it, so one that finishes backward
 * first sums what its peers have started: comm.h). Replicas that finish
 * backward early take parts of the slower replicas' last backward op
 * (parallel/share.h; when there are no more replicas than CPUs). The crew
 * is either borrowed (options.crew: warm devices shared with other
 * trainers; the trainer starts no worker) or created at create and
 * destroyed at destroy. Each step, each sync and the initial broadcast is
 * one run of the crew, so trainers sharing a crew, driven from their own
 * threads, interleave step by step. The reader has a prefetch thread of its
 * own. dpm_trainer_interrupt may be called from any thread.
 *
 * Errors: create takes a checked spec (common/checked_spec.h: validated
 * once, where it entered the process), validates what the engine owns (op
 * types, arguments, wiring, shapes) and counts every byte it will allocate before
 * allocating any (DPM_SPEC with file:line and op; DPM_DENIED over max_bytes); a missing
 * data or eval file is DPM_IO; step
 * fails with DPM_NUMERIC when the loss is not finite and with a collective's
 * error (DPM_TIMEOUT) if a replica stalls (the crew then renews its broken
 * communicator before its next run); after a failed step the replicas may
 * disagree (load a checkpoint). load refuses a file that does not fit
 * the model, leaving the model exactly as it was (in a job of several
 * shards, every shard; unless the collective that tells them fails). */
#ifndef DPM_TRAINER_H
#define DPM_TRAINER_H

#include <stdint.h>

#include "comm/comm.h"
#include "common/device.h"
#include "engine/model.h"
#include "parallel/plan.h"
#include "train/graph.h"

typedef struct dpm_trainer dpm_trainer;
struct dpm_workspace;
struct dpm_crew;
struct dpm_fs;

typedef struct dpm_step_stats {
  uint64_t iter;   /* completed steps */
  int steps_done;  /* steps run by this call (fewer if interrupted) */
  double loss;     /* of the last step: the losses summed, averaged over this
                      shard's replicas (and an update's micro-batches) */
  double accuracy; /* of the last step's global batch (this shard's part of it;
                      an update's micro-batches); NaN without Accuracy */
  double lr;       /* learning rate used by the last step */
  double step_ms;  /* wall time of the last step */
  double comm_ms;  /* of it, the master replica's time in collectives: waiting for
                      peers and summing (the reduction not hidden behind backward) */
  double input_ms; /* of it, the time spent waiting for the batch (the reader's
                      prefetch had none ready) */
  int stopped;     /* a job of several shards: the job's rank 0 stopped it before
                      this shard's next step, with this reason (dpm_trainer_stop);
                      0: not stopped */
  /* With update.accumulate_steps, clip_grad_norm or a loss scale (else NaN,
   * 1, 0, 0): the last update's gradients' global L2 norm (reduced,
   * unscaled, before clipping), the loss scale for the next update, whether
   * the last update was skipped (a gradient not finite under a loss scale)
   * and how many were, all told, by this trainer. */
  double grad_norm;
  double loss_scale;
  int skipped;
  uint64_t skipped_total;
  /* An image reader: bad samples skipped (on_bad_sample: skip) since the
   * reader was made; else 0. */
  uint64_t samples_skipped;
} dpm_step_stats;

struct dpm_trainer_memory;
typedef struct dpm_trainer_options {
  int devices; /* replicas on devices KIND:0..N-1; 0: the spec's parallel.devices */
  dpm_device_kind kind; /* KIND (default cpu; fenced in test builds) */
  int net_type;         /* -1: the spec's; else DPM_NET_SIMPLE or DPM_NET_DAG */
  int comm_timeout_ms;  /* collectives' timeout; 0: 60000 */
  /* Borrowed crew, its size the device count (else DPM_INVALID); it must
   * outlive the trainer. NULL: the trainer creates one of its own. */
  struct dpm_crew *crew;
  /* Refuse (DPM_DENIED), before allocating anything, a model that would
   * take more bytes than this (dpm_trainer_memory: tensors, scratch, input
   * staging, reader, eval); 0: no limit. */
  uint64_t max_bytes;
  const char *max_bytes_name; /* what sets it, for the message ("max_model_bytes") */
  /* Called once the memory is counted and within max_bytes, before anything
   * is allocated (not with plan_only): a status other than DPM_OK, err set,
   * ends the create with it (dpmd's admission, server/sched.h). NULL: none. */
  dpm_status (*admit)(void *arg, const struct dpm_trainer_memory *mem, int devices,
                      dpm_err *err);
  void *admit_arg;
  /* 1: plan only (dpm-train --dump-plan): the model, its step plan and its
   * memory count, with no reader (no data file opened, the readers' bytes
   * not counted), no worker, nothing allocated on a device; such a trainer
   * only answers the accessors (plan, model, memory) and is destroyed. */
  int plan_only;
  /* How data files (input and eval) are opened (common/file.h); NULL: plain. */
  const struct dpm_fs *fs;
  /* Where the readers hold their idx files from (io/datacache.h), shared
   * with whoever else uses it; it must outlive the trainer. NULL: each
   * reader reads its own copy. */
  struct dpm_data_cache *data_cache;
  /* 1: a replica that finishes backward early waits for the others at the
   * reduction instead of taking parts of their last backward op
   * (parallel/share.h); for comparisons. Results are the same either way. */
  int no_share;
  /* This process's part of a job over several processes (hosts): shard
   * shard_id of num_shards, each running the same devices. num_shards 0:
   * no fleet, a job of this process alone; a spec that describes a job over
   * several processes (parallel.shards, parallel.rendezvous, input.num_shards
   * above 1) is then refused (DPM_SPEC: dpmd or dpm-train --shard form such
   * jobs). 1: a fleet of one shard (a job re-formed smaller), alone too,
   * whatever the spec's rendezvous says. Above 1, the replicas reduce
   * locally, then across the shards
   * through the communicator the factory picks (comm/comm.h:
   * dpm_comm_choose: nccl for cuda GPUs, else gloo, on host copies of the
   * buffers of devices whose memory is not the host's) formed at
   * rendezvous (store or kv, and prefix, both required; comm_timeout_ms
   * bounds every wait);
   * the reader takes the shard's slice of each global batch; the spec's
   * input.shard_id/num_shards must be absent (1) or this shard's. The
   * rendezvous strings are read during create only. */
  struct {
    int shard_id, num_shards;
    dpm_comm_rendezvous rendezvous;
  } fleet;
  /* For the checks (gpu_test, unit tests), not specs: a group and the
   * step's collectives even for one replica alone (a group of one), so a
   * one-device trainer runs the multi-device path: NCCL on one GPU, the
   * local group on one cpu or fenced device. Results are those of one
   * replica without it. */
  int force_comm;
  /* Tests of the loss scale (train/update.c): on updates test_inf_first ..
   * test_inf_first + test_inf_count - 1 (1-based; 0: never), replica
   * test_inf_rank's first gradient value becomes +inf before the
   * reduction. */
  uint64_t test_inf_first, test_inf_count;
  int test_inf_rank;
  /* called on the driving thread every progress_every steps (0: never) */
  void (*progress)(void *arg, const dpm_step_stats *st);
  void *progress_arg;
  int progress_every;
} dpm_trainer_options;

/* The CPU core for each of n replicas: device cpu:K (devs[r]; devs NULL: K
 * = r) runs on the (K mod count)-th CPU this process may use. For
 * dpm_crew_create_pinned (parallel/crew.h). */
void dpm_device_cores(const dpm_device *devs, int n, int *cores);

/* What a trainer allocates, counted at create before anything is. */
typedef struct dpm_trainer_memory {
  uint64_t tensors; /* every blob of every replica, dag's gradient arena, input staging;
                       with parallel.optimize_gradient_memory, shared blobs as their
                       arena (parallel/memshare.h) */
  uint64_t tensors_unshared; /* the same without memory sharing (= tensors when off) */
  uint64_t shared_apart;     /* every replica's shared blobs, as they would take apart */
  uint64_t shared_arena;     /* ... and as their arenas take (both 0 when off) */
  uint64_t scratch;          /* kernels' scratch, every replica */
  uint64_t reader;           /* training data, shuffle order, batch ring */
  uint64_t eval;             /* eval data, its ring and test-mode activations */
  uint64_t total;
} dpm_trainer_memory;

/* A trainer for a checked spec (common/checked_spec.h): its devices are
 * the check's, its hash (checkpoints, the shards' agreement) the check's;
 * nothing of it is validated, hashed or parsed again. cs need not outlive
 * the trainer. opt may be NULL (defaults). */
struct dpm_checked_spec;
dpm_status dpm_trainer_create_checked(const struct dpm_checked_spec *cs,
                                      const dpm_trainer_options *opt, dpm_trainer **out,
                                      dpm_err *err);
/* The same for a protobuf spec the caller holds (tests, benchmarks): it is
 * checked first (dpm_spec_check_borrowed), the check's time counted as the
 * validate phase. */
dpm_status dpm_trainer_create(const Dpm__ModelSpec *spec, const dpm_trainer_options *opt,
                              dpm_trainer **out, dpm_err *err);
/* Run up to n steps (fewer if interrupted); *last describes the last one.
 * A step is one update: with update.accumulate_steps K, K micro-batches,
 * and an interrupt takes effect between updates, never inside one. */
dpm_status dpm_trainer_step(dpm_trainer *t, int n, dpm_step_stats *last, dpm_err *err);
/* Ask a running dpm_trainer_step to return after the step in flight. Safe
 * from any thread (and from a signal handler). In a job of several shards
 * this is local: the shard leaves its step loop (shard 0 at the end of the
 * job's current grant of steps, below), and the others wait for it in
 * their next collective until it steps again or the timeout passes; only
 * dpm_trainer_stop ends the job's run. */
void dpm_trainer_interrupt(dpm_trainer *t);
/* While on, this shard asks its job of several shards to yield: at the
 * job's next decision (below) every shard's dpm_trainer_step returns
 * DPM_OK with last->stopped = DPM_STOP_YIELD and last->iter the job's
 * iteration, having taken no batch, as for a stop of rank 0's; calls made
 * while any shard still asks stop the same way at once. Rank 0's own stop
 * comes first when both are asked. Safe from any thread; a job of one
 * process ignores it. */
#define DPM_STOP_YIELD 1000
void dpm_trainer_yield(dpm_trainer *t, int on);
/* Stops (agreed in band) the job of several shards: such a job steps in
 * grants, each begun by the job's decision, summed over every replica of
 * every shard before any batch is read (32 bytes: rank 0's step or stop,
 * its iteration, which each shard checks against its own, DPM_STATE if
 * they differ, and how many steps the grant holds: as many as take about
 * 25 ms at the last step's pace, 1 to 64, never past the end of shard 0's
 * dpm_trainer_step call, so that shard 0 never leaves a call inside a
 * grant, the others running a grant across their calls; and the shards
 * that ask to yield). Called by shard 0's driver between two of its
 * dpm_trainer_step calls, it gives "stop, reason why" (why > 0, chosen by
 * the driver) as the next decision: every other shard's dpm_trainer_step,
 * waiting there, returns DPM_OK with last->stopped = why and last->iter
 * the job's iteration, having taken no batch, so every shard stops after
 * the same iteration and none is left inside a collective. DPM_OK at once
 * for a job of one process; DPM_INVALID on shards but 0 or for why <= 0; a
 * collective's error (the shard that did not answer within the timeout,
 * named) as a step's. */
dpm_status dpm_trainer_stop(dpm_trainer *t, int why, dpm_err *err);
/* Loss and accuracy over the whole eval set, in test mode, on the master.
 * DPM_STATE when the spec has no eval section. */
dpm_status dpm_trainer_eval(dpm_trainer *t, double *loss, double *accuracy, dpm_err *err);

/* Write the master's parameters, computed params, optimizer state and
 * counters, the reader position and the spec hash to path (atomically),
 * resolved through fs (common/file.h; NULL: plain). */
dpm_status dpm_trainer_checkpoint(dpm_trainer *t, const struct dpm_fs *fs,
                                  const char *path, dpm_err *err);
/* Load a checkpoint (path through fs) into the master and sync it to every
 * replica; the reader resumes at the saved position (the global batch's
 * first example: a checkpoint resumes alike with any number of shards and
 * devices whose global batch is the same). Refuses (DPM_CORRUPT, DPM_SPEC:
 * another spec, DPM_SHAPE; DPM_INVALID: no path) without touching the
 * model.
 * In a job of several shards every shard calls it together: shard 0 reads
 * path, the others ignore theirs (NULL is fine: they receive the state) and
 * fail with shard 0's status and message when shard 0 refuses the file;
 * shard 0 with a NULL path loads nothing, and every shard returns DPM_OK
 * with its model unchanged (so only shard 0 need know whether to resume). */
dpm_status dpm_trainer_load(dpm_trainer *t, const struct dpm_fs *fs, const char *path,
                            dpm_err *err);
/* Broadcast the master's params, computed params, optimizer state and
 * counters to every replica (FinalizeAfterCheckpoint). */
dpm_status dpm_trainer_sync(dpm_trainer *t, dpm_err *err);
/* Broadcast the named blobs (stripped names) from the master (AddBlobSync). */
dpm_status dpm_trainer_sync_blobs(dpm_trainer *t, const char *const *names, int n,
                                  dpm_err *err);
/* Write a predictor for inputs -> outputs (ExtractPredictorNet) to dir. */
dpm_status dpm_trainer_export_predictor(dpm_trainer *t, const char *const *inputs,
                                        int n_in, const char *const *outputs, int n_out,
                                        const struct dpm_fs *fs, const char *dir,
                                        dpm_err *err);
/* The same in `format`: "dpm" (or NULL) writes dir/predictor.pb as above,
 * "onnx" dir/model.onnx only (predictor/onnx_export.h); any other format is
 * DPM_UNSUPPORTED, naming it. */
dpm_status dpm_trainer_export_format(dpm_trainer *t, const char *format,
                                     const char *const *inputs, int n_in,
                                     const char *const *outputs, int n_out,
                                     const struct dpm_fs *fs, const char *dir,
                                     dpm_err *err);

/* A replica's blob by scoped ("cpu_1/fc1_w": the scope of its device,
 * common/device.h) or stripped (master) name: its shape and device; its
 * bytes are the device's (read them with dpm_trainer_read_blob). */
const dpm_tensor *dpm_trainer_blob(const dpm_trainer *t, const char *name);
/* A copy of that blob's bytes in host memory: out (a host tensor, dev NULL;
 * resized) takes its shape and data. DPM_NOT_FOUND naming it. */
dpm_status dpm_trainer_read_blob(const dpm_trainer *t, const char *name, dpm_tensor *out,
                                 dpm_err *err);
/* Replica d's device. */
const dpm_device *dpm_trainer_device(const dpm_trainer *t, int d);
int dpm_trainer_devices(const dpm_trainer *t);
/* The replicas' group's backend (comm.h: "local", "gloo", "nccl", or
 * "staged": gloo on host copies, for a job of several shards on devices
 * whose memory host code cannot touch); "none" for one replica alone. */
const char *dpm_trainer_comm_backend(const dpm_trainer *t);

/* Where the time from create to the end of the first step went, in ms:
 * create's spec validation (dpm_trainer_create's check; about 0 for a
 * checked spec, whose check ran where it entered the process), the graph (model, plan,
 * memory count), the training set (reader: from the data cache or the file), the
 * replicas' allocation (workspaces, bound steps, crew), the seeded parameter init, the
 * communicator (and a fleet's agreement), the broadcast of the initial parameters; then
 * the first step's wait for its batch and the step. The last two are 0 until the first
 * step ran. Owned by the trainer; read it on the thread that drives it. */
enum {
  DPM_PHASE_VALIDATE,
  DPM_PHASE_GRAPH,
  DPM_PHASE_DATA,
  DPM_PHASE_ALLOC,
  DPM_PHASE_INIT,
  DPM_PHASE_COMM,
  DPM_PHASE_BROADCAST,
  DPM_PHASE_FIRST_BATCH,
  DPM_PHASE_FIRST_STEP,
  DPM_TRAINER_PHASES
};
extern const char *const dpm_trainer_phase_names[DPM_TRAINER_PHASES];
const double *dpm_trainer_phases(const dpm_trainer *t);
const dpm_trainer_memory *dpm_trainer_memory_of(const dpm_trainer *t);
/* Steps (updates) in one epoch of the training data; examples per device
 * per micro-batch; micro-batches per update (update.accumulate_steps). */
int64_t dpm_trainer_steps_per_epoch(const dpm_trainer *t);
/* 1 when the training data comes through an image reader (tar, lmdb, folder). */
int dpm_trainer_image_reader(const dpm_trainer *t);
int dpm_trainer_batch(const dpm_trainer *t);
int dpm_trainer_accumulate_steps(const dpm_trainer *t);
uint64_t dpm_trainer_iter(const dpm_trainer *t);
const dpm_model *dpm_trainer_model(const dpm_trainer *t);
const dpm_plan *dpm_trainer_plan(const dpm_trainer *t);
/* How replica d's steps ran: eagerly, captured, replayed (train/graph.h). */
dpm_graph_stats dpm_trainer_graph_stats(const dpm_trainer *t, int d);
/* Replica d's workspace (0 = master), for tests and benchmarks; the caller
 * may write the masters (the next step remakes the working copies). */
struct dpm_workspace *dpm_trainer_workspace(dpm_trainer *t, int d);
void dpm_trainer_destroy(dpm_trainer *t);

#endif
