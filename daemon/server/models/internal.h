/* What the files of a served model share (daemon/server/models/): the
 * model's struct and what model.c, its state, lends the files above it.
 * The calls run one way: model.c (state, snapshots, events, failure and
 * replies) calls none of the others; checkpoints.c (writing and restoring
 * checkpoints) and shard.c (the model as one shard of a fleet job) build on
 * model.c; reform.c (resume, and re-forming a fleet job) on all three;
 * lifecycle.c (the thread, its job queue, building, training, the other
 * jobs) on all four. Not an interface: only daemon/server/models/
 * includes it. Threads and ownership as server/models/model.h says: the
 * model thread owns the trainer; mu guards the snapshot and the queue. */
#ifndef DPMD_MODELS_INTERNAL_H
#define DPMD_MODELS_INTERNAL_H

#include <limits.h>
#include <pthread.h>

#include "common/checked_spec.h"
#include "server/fleet/fleet.h"
#include "server/models/model.h"
#include "server/ratelimit.h"
#include "train/trainer.h"

typedef enum { JOB_REQUEST, JOB_DELETE, JOB_SHUTDOWN } job_kind;

typedef struct job {
  struct job *next;
  job_kind kind;
  dpmd_job_fn fn;   /* JOB_REQUEST: the command's job */
  const char *what; /* ... and the command's name (logs) */
  Dpm__Request *rq; /* JOB_REQUEST: owned */
  dpmd_reply_to to; /* header NULL: nobody to answer */
} job;

typedef struct waiter { /* a train --wait to answer when the run ends */
  struct waiter *next;
  dpmd_reply_to to;
} waiter;

/* Recent (time, iteration) pairs of the run: images/s over wall-clock time. */
#define RATE_SAMPLES 32
#define RATE_WINDOW_S 10.0

struct dpmd_model {
  dpmd *d;
  /* owned: the spec as admitted, checked once (common/checked_spec.h);
   * immutable once the thread runs, except that an elastic resume (model
   * thread) replaces it with the job's new shards: the old one stays in
   * retired_specs until the model is freed */
  dpm_checked_spec *_Atomic checked;
  const Dpm__ModelSpec *_Atomic spec; /* checked's protobuf spec, for reading */
  dpm_checked_spec **retired_specs;
  int n_retired_specs;
  /* owned: its shard of a fleet job, NULL: none. Set by the model thread
   * only (restored, re-formed: a new link), read by any; a replaced link
   * stays in `retired` until the model is freed, so a reader's stays
   * valid. The link's stores are the model thread's */
  dpmd_fleet_link *_Atomic fleet;
  dpmd_fleet_link **retired; /* model thread; freed with the model */
  int n_retired;
  char dir[PATH_MAX];
  int restore;
  dpmd_reply_to submit_to;
  uint64_t every_iters; /* periodic checkpoints (spec, else the config); 0: off */
  double every_s;       /* ... every so many seconds of training; 0: off */
  pthread_t thread;
  int started;
  pthread_mutex_t mu; /* guards what follows, up to `t` */
  pthread_cond_t cv;
  job *jobs, *jobs_tail;
  int n_jobs; /* queued requests (bounded by DPMD_MAX_JOBS) */
  int ending;
  dpmd_state state;
  uint64_t iter, target, ckpt_iter, tensor_bytes, memory_bytes;
  uint64_t tensor_bytes_unshared; /* tensor_bytes without memory sharing */
  dpm_step_stats last;
  int has_last;
  double images_per_s;
  char error[512], ckpt[PATH_MAX], ckpt_error[512];
  dpm_trainer *t;  /* set and cleared under mu (interrupt reads it) */
  int admit_ready; /* the scheduler admitted it from the memory queue: build now */
  int spilled; /* preempted with policy spill: no trainer, its newest checkpoint holds it
                  (written by the model thread under mu) */
  /* phases (ModelInfo.phases): submit -> built, and the first step; the
     trainer's copied in when they change */
  double admit_ms, save_ms, train_wait_ms;
  double trainer_ms[DPM_TRAINER_PHASES];
  int has_phases, has_first;
  /* its entry in the daemon's scheduler (server/sched.h), from new to free */
  struct dpmd_sched_entry *sched;
  int no_queue; /* submit --no-queue: refuse, rather than queue, what does not fit */
  /* model thread only */
  int queued;         /* its last build was queued for memory (the scheduler wakes it) */
  int spill_failed;   /* its last spill could not checkpoint: resident until its turn */
  int told_preempted; /* a "preempted" event went out and no "resumed" yet */
  int yielded;        /* a fleet job's shard: the job yields (under mu) */
  int awaiting; /* ... a shard but 0: until its coordinator tries again (under mu) */
  int napped;   /* ... shard 0: it has waited before trying again */
  waiter *waiters;
  double first_train; /* dpm_mono_ns() / 1e6 when the train that runs the first step
                         arrived; 0: none */
  int global_batch;
  double trained_s; /* training time since the last checkpoint */
  /* the parameters changed (steps, a load) since the newest checkpoint in
     the model's own directory, which holds iteration saved_iter */
  int unsaved;
  uint64_t saved_iter;
  dpmd_ratelimit ckpt_log; /* "checkpoint failed" lines */
  int ckpt_failures;       /* periodic checkpoints failed in a row */
  double ckpt_retry_s;     /* mono_s before which no periodic one is tried */
  double rate_t[RATE_SAMPLES];
  uint64_t rate_iter[RATE_SAMPLES];
  int rate_n; /* samples since the run (re)started */
};

/* ---- model.c: the model's state ------------------------------------------- */

/* Publishes an event of kind about the model (its snapshot; msg may be NULL). */
void model_publish(dpmd_model *m, Dpm__EventKind kind, const char *msg);
/* Sets the state; a change is logged and published. Model thread. */
void model_set_state(dpmd_model *m, dpmd_state s);
/* Answers `to` with err, its message prefixed with the model's name. */
void model_reply_err(dpmd_model *m, dpmd_reply_to *to, const dpm_err *err);
/* Answers `to` with DPM_STATE naming the model's state, and what to do. */
void model_reply_state(dpmd_model *m, dpmd_reply_to *to, const char *what);
/* Answers `to` with a path and the iteration it holds. */
void model_reply_path(dpmd_model *m, dpmd_reply_to *to, const char *path, uint64_t iter);
/* Answers every train --wait: with the model (err NULL) or with err. */
void model_release_waiters(dpmd_model *m, const dpm_err *err);
/* The model fails with in (a fleet's processes named as its shards):
 * logged, kept for status, published, and every waiter answered. */
void model_fail(dpmd_model *m, const dpm_err *in);
/* The model's trainer becomes t (built, formed). Model thread. */
void model_take_trainer(dpmd_model *m, dpm_trainer *t);
/* What every trainer of the model is built with (the crew and a fleet's
 * part are added by the caller). */
dpm_trainer_options model_trainer_options(dpmd_model *m);
/* A run (re)starts: the images/s window starts over. */
void model_rate_restart(dpmd_model *m);
/* Images per second of the run at time now (dpm_mono_s) and iteration iter. */
double model_rate_update(dpmd_model *m, double now, uint64_t iter);

#endif
