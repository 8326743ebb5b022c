/* What the trainer's files share: the trainer's and its replicas' state,
 * and what train/trainer.c lends the files above it. The calls run one
 * way: trainer.c (lock-step jobs on the replicas' workers, training,
 * evaluation, accessors, destroy) calls neither of the others; state.c
 * (sync, checkpoints and loads) builds on trainer.c's jobs; setup.c
 * (create) on both (dpm_trainer_sync, the first broadcast). Not an
 * interface: only daemon/train/ includes it. Threads and ownership as
 * train/trainer.h says; a replica's fields are its crew worker's during a
 * run. */
#ifndef DPM_TRAIN_INTERNAL_H
#define DPM_TRAIN_INTERNAL_H

#include <stdatomic.h>
#include <time.h>

#include "common/err.h"
#include "engine/exec.h"
#include "io/reader.h"
#include "parallel/bmuf.h"
#include "parallel/crew.h"
#include "parallel/memshare.h"
#include "parallel/share.h"
#include "train/graph.h"
#include "train/trainer.h"

typedef enum { JOB_STEP, JOB_SYNC, JOB_META, JOB_GO, JOB_BMUF } job_kind;

/* What a JOB_META run broadcasts from the job's rank 0 (shard 0's master)
 * to every replica of every shard: at create, what the shards must agree
 * on (the AGREE_ words); at load, shard 0's verdict on the checkpoint (the
 * LOAD_ words and msg). Host memory, one copy per replica. */
typedef struct meta {
  uint64_t word[8];
  char msg[sizeof((dpm_err *)0)->msg]; /* load: shard 0's error message */
} meta;
enum { AGREE_MODEL, AGREE_PLAN, AGREE_DEVICES, AGREE_SHARDS, AGREE_EXAMPLES };
enum {
  LOAD_STATUS,
  LOAD_ITER,
  LOAD_EPOCH,
  LOAD_INDEX,
  LOAD_NOTHING,
  LOAD_SCALER /* .. +2: the loss scaler (state.c: LOSS_SCALER) */
};
/* What a JOB_GO run sums over the job's replicas before each grant of
 * steps of a job of several shards (doubles: every value is an integer
 * below 2^53, exact): rank 0's decision (0: step; else stop, with the
 * reason rank 0's driver gave to dpm_trainer_stop), its iteration, which
 * every shard must share, and how many steps the grant holds (every other
 * replica adds 0 to these), and the replicas whose shard asks the job to
 * yield (dpm_trainer_yield). 32 bytes per grant. */
enum { GO_STOP, GO_ITER, GO_STEPS, GO_YIELD, GO_WORDS };
typedef struct replica {
  int rank;
  dpm_dev *dev; /* its device (backend/device.h) */
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec step;
  dpm_exec refresh;     /* the working copies' Casts (model.refresh): copies_stale */
  dpm_step_graph graph; /* the step as a CUDA graph, where it can be one */
  dpm_dptr arena;       /* the gradients, back to back in plan order, on dev */
  size_t arena_bytes;
  dpm_dptr shared; /* memory sharing's arena (parallel/memshare.h), on dev; null: none */
  size_t shared_got;
  dpm_blob *data, *label, *lr, *accuracy, **losses;
  /* This replica's rows as floats: gathered at the step's start from the
   * examples at `rows`, in place into the data blob's memory when the device
   * is host memory, else into this host staging and copied to the device;
   * the labels likewise (a view of the batch's, or copied from `labels`). */
  float *input;
  const uint8_t *const *rows;
  const int32_t *labels;
  /* On a device (not host memory): the next step's rows and labels, which
   * this step uploads once its own work is queued, so that their gather
   * and copy overlap the step on the device (NULL: none); and whether this
   * step's were uploaded so by the last one. */
  const uint8_t *const *ahead_rows;
  const int32_t *ahead_labels;
  int preloaded;
  meta meta;           /* JOB_META: the job's rank 0's, once the run is over */
  float flag;          /* JOB_META with agreement: replicas that disagree, summed */
  double go[GO_WORDS]; /* JOB_GO: the job's decision, once the run is over */
  float *bmuf_host;    /* parallel.mode bmuf: host copies for the block update */
  dpm_status status;   /* of the last job */
  dpm_err err;
  /* The gathered step (train/update.c): the plan's gradients (the
   * workspace's tensors) and their sizes, a host copy of them all (stage),
   * the sum of an update's earlier micro-batches' gradients
   * (update.accumulate_steps > 1; else NULL), and the last update's
   * outcome: the gradients' global L2 norm (unscaled, before clipping) and
   * whether any was not finite (the update skipped). */
  dpm_tensor **grad;
  size_t *grad_n;
  float *stage, *acc;
  double norm;
  int nonfinite;
} replica;

struct dpm_trainer {
  double phase_ms[DPM_TRAINER_PHASES]; /* dpm_trainer_phases */
  int stepped;                         /* a step has run (first_* are set) */
  dpm_model model;
  dpm_plan plan;
  dpm_memshare memshare; /* parallel.optimize_gradient_memory: which blobs share one
                            arena, where (n 0: none) */
  dpm_trainer_options opt;
  dpm_reader *reader, *eval_reader;
  dpm_crew *crew; /* the replicas' workers: opt.crew or own_crew */
  dpm_crew *own_crew;
  dpm_comm *comm; /* the replicas' group, every shard's (NULL: one replica alone) */
  dpm_comm_config comm_cfg; /* how it was made (its kind: the factory's choice at
                               setup); a broken local one is made anew */
  int n;                    /* replicas (of this shard) */
  int shard,
      shards;      /* this process's shard of the job, and the job's shards (1: alone) */
  dpm_device *dev; /* [n] their devices, parsed once */
  unsigned math;  /* dpm_ctx.math of every replica (parallel.allow_tf32, deterministic) */
  int graphs;     /* parallel.cuda_graphs */
  int pipeline;   /* the replicas' memory is not the host's: a step uploads the next
                     one's input while it runs (dpm_trainer_step) */
  void **streams; /* [n] the replicas' CUDA streams, for a nccl group; else NULL */
  struct dpm_dev **devs; /* [n] the replicas' devices, for a staged group; else NULL */
  /* The replicas' exclusive devices (backend/device.h: dpm_dev_claim_set),
   * claimed while the trainer queues work on them; claimed counts nested
   * claims (trainer_claim). */
  struct dpm_dev **claim_set;
  int claim_n, claimed;
  uint64_t claim_owner; /* this trainer, or its fleet job (one per rendezvous prefix) */
  dpm_share *share;     /* replicas take parts of each other's last backward op */
  replica *r;
  job_kind job;                  /* of the crew run in flight */
  const char *const *sync_names; /* JOB_SYNC: what to broadcast */
  int sync_n;
  meta meta;           /* JOB_META: this shard's own values (rank 0's are broadcast) */
  int agree;           /* JOB_META: also sum the replicas that disagree with rank 0 */
  int go_stop;         /* JOB_GO at shard 0: the decision to broadcast (0: step) */
  int go_steps;        /* ... and the steps it grants */
  int go_yield;        /* JOB_GO: this shard asks the job to yield (read once a run) */
  atomic_int yield;    /* dpm_trainer_yield's ask */
  int granted;         /* steps of the job's current grant this shard has yet to run */
  double last_step_ms; /* the last step's wall time (shard 0 sizes grants by it) */
  atomic_int interrupted;
  uint64_t iter, seed, spec_hash;
  dpm_trainer_memory memory; /* counted at create */
  int eval_batch;
  int has_eval;                    /* the spec has an eval section */
  int eval_kind;                   /* its reader (io/reader.h DPM_READER_*) */
  char *eval_images, *eval_labels; /* idx */
  char **eval_paths;               /* image readers: the shards, or the one path */
  int n_eval_paths;
  dpm_reader_images eval_image; /* image readers: centre crop (paths: eval_paths) */
  int num_classes;
  double scale;
  dpm_bmuf bm; /* parallel.mode bmuf (parallel/bmuf.h) */
  /* update.accumulate_steps, update.clip_grad_norm and precision.loss_scale
   * (train/update.c); gathered: any of them is on, and steps run the plan's
   * ranges (dpm_plan reduce_at ...) with the host's work between them. */
  int gathered;
  int accum;           /* micro-batches per update (1: none) */
  int micro;           /* JOB_STEP: the micro-batch in flight, 0..accum-1 */
  double clip;         /* the norm limit; 0: no clipping */
  int ls_kind;         /* DPM_LOSS_SCALE_* (common/spec.h) */
  double ls_scale;     /* the loss scale now (1: none) */
  uint64_t ls_good;    /* dynamic: clean updates since the scale last changed */
  uint64_t ls_run;     /* skipped updates in a row */
  uint64_t ls_skipped; /* skipped updates, all told (not checkpointed) */
  uint32_t ls_growth_interval, ls_max_skipped;
  float seed_base; /* the loss gradients' seed without the loss scale */
  int seed_op[8];  /* plan.step indices of the loss gradients' seeds */
  int n_seed_ops;
  dpm_ctx eval_ctx; /* the eval net's context on the master: its own scratch, so a
                       step's graph never names a scratch an eval moved */
  /* The masters changed other than by the update (create, a load, a sync, a
   * BMUF block, a caller holding a workspace): the next step first remakes
   * the bf16 working copies that the update otherwise writes
   * (engine/fuse.h: dpm_net_fuse_working_copies). */
  int copies_stale;
};

/* trainer.c: claims the replicas' exclusive devices for the calls that
 * queue work on them, nested (the outermost claims, its release releases).
 * Driving thread only. */
void trainer_claim(dpm_trainer *t);
void trainer_release(dpm_trainer *t);
/* trainer.c: runs `job` on every replica's worker; the first failure. */
dpm_status trainer_dispatch(dpm_trainer *t, job_kind job, dpm_err *err);
/* trainer.c: the master's `names` copied to every replica (one alone: none). */
dpm_status trainer_broadcast(dpm_trainer *t, const char *const *names, int n,
                             dpm_err *err);
/* trainer.c: "shard 1 of 2: " in front of err's message, in a job of
 * several shards; err's code. */
dpm_status trainer_shard_prefix(const dpm_trainer *t, dpm_err *err);
/* trainer.c: a scalar (loss, accuracy, learning rate) read back from a device. */
double trainer_scalar(const dpm_blob *b);
/* update.c: reads the spec's accumulation, clipping and loss scale into t
 * (before the plan is built: t->gathered shapes it), refusing what cannot
 * run them; DPM_SPEC naming the spec's line. */
dpm_status trainer_update_setup(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err);
/* update.c: once the plan is built, with a loss scale: finds the loss
 * gradients' seeds (at most 8 losses) and sets them to seed_base x the
 * loss scale. */
dpm_status trainer_update_plan(dpm_trainer *t, dpm_err *err);
/* update.c: the seeds set to seed_base x t->ls_scale (after a load). */
void trainer_update_seeds(dpm_trainer *t);
/* update.c: replica r's gradient views and accumulation buffer (once its
 * step is bound); freed by trainer_update_fini. */
dpm_status trainer_update_replica(dpm_trainer *t, replica *r, dpm_err *err);
void trainer_update_fini(replica *r);
/* update.c, on r's worker: one micro-batch of a gathered step; the
 * update's last reduces, unscales, checks, clips and (unless a gradient is
 * not finite with a loss scale on) updates. */
void trainer_gathered_step(dpm_trainer *t, replica *r);
/* update.c, driving thread, after an update's last micro-batch: the loss
 * scale's bookkeeping (backoff, growth, the seeds), and DPM_NUMERIC once
 * max_skipped updates in a row were skipped. */
dpm_status trainer_update_after(dpm_trainer *t, dpm_err *err);

/* trainer.c: the eval reader's config (setup.c checks the eval files
 * with it; the first eval makes the reader). */
dpm_reader_config trainer_eval_config(const dpm_trainer *t);

#endif
