/* A model served by dpmd: its spec, its trainer (replicas on warm devices)
 * and the thread that drives it.
 *
 * Every model has one thread of its own. It builds the trainer, trains in
 * chunks of progress_every steps, and between steps runs the jobs the loop
 * posts: the commands the table makes jobs (train, pause, resume,
 * checkpoint, load, sync, eval, extract-predictor, get-blob: the dpmd_job_*
 * functions below), and the model's end (delete, shutdown). A checkpoint or
 * get-blob during training therefore sees the state between two steps and
 * never waits for the whole run. Posting a job interrupts the step loop
 * after the step in flight.
 *
 * States: building -> ready <-> training <-> paused; any -> failed when a
 * step fails (NaN loss, I/O error) — the model keeps its trainer, so a load
 * of a checkpoint brings it back to ready. Failure touches no other model.
 * building -> queued -> building when its memory does not fit beside the
 * other models' yet (the submit is answered queued; the model builds by
 * itself when room frees). A training model held back by a higher
 * priority shows as preempted (server/sched.h); with policy spill it
 * checkpoints, frees its trainer and rebuilds from that checkpoint when
 * its turn comes.
 *
 * Threads: dpmd_model_new, _post, _end, _ending and _free run on the loop
 * thread; _info, _reply_info, _state and _name on any; the dpmd_job_*
 * functions on the model's thread only (they are called through _post).
 * The model thread owns the trainer; a lock guards the snapshot (state,
 * counters, last stats, error text) and the job queue. A model knows the
 * daemon (dpmd.h), never the registry or the command table.
 *
 * Files: DIR/spec.pb (the spec as submitted, with name and devices
 * applied), DIR/checkpoints/ckpt-ITER.dpmckpt and, after a shutdown that
 * interrupted a run, DIR/target (store.h): restored, the model is paused
 * at its newest checkpoint and `resume` finishes that run.
 *
 * A job over several daemons (server/fleet/fleet.h): the model is one shard of
 * it and holds the job's link. The coordinator's model forms the job on its
 * thread before it builds its trainer (the submit is answered once the
 * whole job has met at the rendezvous and built, or failed); train, pause,
 * resume, load, sync and delete there act on every shard. Pause, delete
 * and shutdown there stop every shard after the same iteration, agreed in
 * band (train/trainer.h, dpm_trainer_stop): the other shards' models pause
 * there. load and sync are forwarded to the other shards while the
 * coordinator runs its part (the others read no file). A failure of a
 * collective fails the model on every surviving shard, its message naming
 * the shard (process, job rank, endpoint). Only shard 0 checkpoints on its
 * own (periodically, at shutdown).
 *
 * Re-forming: resume at the coordinator of a failed job, of one not
 * formed (restored), or of a paused one that a shard cannot go on with
 * (its daemon restarted: the coordinator first checkpoints where the job
 * stopped), drops the old formation, deletes the job on its other
 * shards, forms it anew (a fresh formation, the same shards), loads the
 * newest checkpoint that shard 0 accepts on every shard, and trains on
 * towards the target. Meanwhile (and after a failed re-forming) the model
 * has no trainer: every other job is refused (DPM_STATE, "resume re-forms
 * it"). The link is replaced; the old one is kept until the model is freed.
 * `resume --shards` (elastic) re-forms over other shards: the model's spec
 * is replaced by a copy with the new shards and, when the global batch is
 * kept, parallel.device_batch (fleet.h, dpmd_fleet_elastic_batch), saved
 * as DIR/spec.pb.
 *
 * Restart: DIR/shard records which shard of a fleet job the model is. A
 * restarted coordinator brings the job back paused at its newest
 * checkpoint's iteration, with no trainer (nothing is loaded on one shard
 * alone); another shard drops its model and files (the coordinator
 * re-forms the job with it).
 *
 * Code: one job per file of daemon/server/models/, called one way
 * (internal.h): the model's state and snapshot (model.c), its checkpoints
 * (checkpoints.h), its part as a fleet job's shard (shard.h), resume and
 * re-forming (reform.c), and its thread, queue, build, training and the
 * other jobs (lifecycle.c). */
#ifndef DPMD_MODEL_H
#define DPMD_MODEL_H

#include "server/dpmd.h"

typedef enum {
  DPMD_BUILDING,
  DPMD_READY,
  DPMD_TRAINING,
  DPMD_PAUSED,
  DPMD_FAILED,
  DPMD_QUEUED, /* waiting for memory to build (server/sched.h) */
  DPMD_STATE_COUNT
} dpmd_state;

const char *dpmd_state_name(dpmd_state s);

typedef struct dpmd_model dpmd_model;

/* Starts a model: takes ownership of spec (checked: common/checked_spec.h;
 * name and devices already applied; its name is the model's name) and of
 * fleet (its shard of a job over several daemons, server/fleet/fleet.h;
 * NULL for a job of this daemon alone) and begins building it on its
 * thread. restore: bring it back from
 * its directory (last good checkpoint, paused) instead of answering a
 * submit; then `to` is NULL. The model answers `to` (may be NULL: a shard
 * joining a job) once built (or failed: it then exits, dpmd_model_exited).
 * DPM_NOMEM when its thread cannot start (spec and fleet freed, `to` not
 * answered). schedule: its priority, weight and policy (server/sched.h;
 * NULL: restored from its directory, else the defaults); no_queue: refuse
 * it, rather than queue it, when its memory does not fit now (the model
 * then fails to build with the scheduler's message). */
struct dpmd_fleet_link;
struct dpm_checked_spec;
struct dpmd_schedule;
dpm_status dpmd_model_new(dpmd *d, struct dpm_checked_spec *spec, int restore,
                          const struct dpmd_schedule *schedule, int no_queue,
                          struct dpmd_fleet_link *fleet, dpmd_reply_to *to,
                          dpmd_model **out, dpm_err *err);
/* Requests a model holds queued at most; more are refused (DPM_DENIED). */
#define DPMD_MAX_JOBS 64

/* A command's work on the model's thread, between two steps: answers `to`
 * exactly once (at once, or when the work is done: train --wait). rq is
 * the queue's, freed once the job returns. */
typedef void (*dpmd_job_fn)(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);

/* Queues fn(rq) for the model thread; takes rq and answers `to` (with
 * DPM_DENIED, and fn never runs, when DPMD_MAX_JOBS are waiting). `what`
 * names the command in logs (a static string). */
void dpmd_model_post(dpmd_model *m, dpmd_job_fn fn, const char *what, Dpm__Request *rq,
                     dpmd_reply_to *to);
/* Ask the model thread to end: delete (remove its files; answers `to`) or
 * shut down (to may be NULL): when configured (checkpoint_on_shutdown), a
 * model whose parameters changed since the newest checkpoint in its own
 * directory is checkpointed whatever its state (training, ready, paused;
 * not failed), and an unfinished run's target is saved; a failure makes
 * dpmd exit non-zero naming the model. */
void dpmd_model_end(dpmd_model *m, int delete, dpmd_reply_to *to);
/* Phases a model shows (ModelInfo.phases): admit (the submit's arrival to
 * its build's start: decode, checks, thread start), the trainer's of create
 * (train/trainer.h), save (spec.pb written and synced); after the first
 * step, train_wait (that train's arrival to its first step) and the
 * trainer's first_batch and first_step. */
#define DPMD_PHASES 12
/* Copies of a model's mutable strings and phases for a snapshot. */
typedef struct dpmd_info_buf {
  char error[512];
  char checkpoint[4096];
  char ckpt_error[512];
  Dpm__CheckpointPolicy every;
  Dpm__Phase phase[DPMD_PHASES];
  Dpm__Phase *phase_ptr[DPMD_PHASES];
  Dpm__Schedule schedule;
  char waiting[192];
  char group[256];
} dpmd_info_buf;
/* Snapshot of the model into info (strings point into buf or into the
 * model's immutable spec; a fleet job's shard_id, num_shards and
 * coordinator, never its shards: server/fleet/gather.h). Any thread. */
void dpmd_model_info(dpmd_model *m, Dpm__ModelInfo *info, dpmd_info_buf *buf);
/* Answer `to` with the model's snapshot and message (NULL: none). Any
 * thread. */
void dpmd_model_reply_info(dpmd_model *m, dpmd_reply_to *to, const char *message);
const char *dpmd_model_name(const dpmd_model *m);
/* The model's spec (immutable; an elastic resume replaces it with a new
 * one, and the old stays valid until the model is freed) and its link to a
 * fleet job (NULL: none; replaced likewise when the job re-forms; the
 * link's accessors are safe on any thread). Any thread. */
const Dpm__ModelSpec *dpmd_model_spec(const dpmd_model *m);
const struct dpmd_fleet_link *dpmd_model_fleet(const dpmd_model *m);
dpmd_state dpmd_model_state(dpmd_model *m);
int dpmd_model_ending(const dpmd_model *m);
/* Join the model thread and free everything (after dpmd_model_exited). */
void dpmd_model_free(dpmd_model *m);

/* The jobs (dpmd_job_fn), one per command that runs on the model's thread;
 * the command table (commands.c) names them. Each checks the model's state
 * (DPM_STATE "model is training: pause it first" and the like) and answers
 * with the model's snapshot, a path, an eval result or a blob, or with the
 * error (its message prefixed with the model's name). The arguments were
 * checked before posting (the table's checks); paths are opened here,
 * through the daemon's file systems (paths.h). */
void dpmd_job_train(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_pause(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_resume(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_checkpoint(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_load(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_sync(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_eval(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_extract(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_get_blob(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);
void dpmd_job_set(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to);

#endif
