/* A served model: its thread, its job queue, training in chunks, and the
 * jobs that run between steps (the command table, commands.c, names them). */
#include "server/models/model.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/escape.h"
#include "common/spec.h"
#include "common/validate.h"
#include "engine/dtype_wire.h"
#include "engine/workspace.h"
#include "server/commands.h" /* DPMD_MAX_ITERS */
#include "server/devices.h"
#include "server/fleet/fleet.h"
#include "server/log.h"
#include "server/models/store.h"
#include "server/paths.h"
#include "train/trainer.h"

typedef enum { JOB_REQUEST, JOB_DELETE, JOB_SHUTDOWN } job_kind;

/* Why a fleet job's coordinator stops the job's run (dpm_trainer_stop's
 * reason, as every other shard receives it in band). */
enum { STOP_PAUSE = 1, STOP_END = 2 }; /* pause; delete or shutdown */
static const char *const stop_names[] = {"", "paused", "ended"};

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
  /* owned; immutable once the thread runs, except that an elastic resume
   * (model thread) replaces it with the job's new shards: the old one
   * stays in retired_specs until the model is freed */
  Dpm__ModelSpec *_Atomic spec;
  Dpm__ModelSpec **retired_specs;
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
  dpm_trainer *t; /* set and cleared under mu (interrupt reads it) */
  /* phases (ModelInfo.phases): submit -> built, and the first step; the
     trainer's copied in when they change */
  double admit_ms, save_ms, train_wait_ms;
  double trainer_ms[DPM_TRAINER_PHASES];
  int has_phases, has_first;
  /* model thread only */
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

static const char *const state_names[DPMD_STATE_COUNT] = {"building", "ready", "training",
                                                          "paused", "failed"};
const char *dpmd_state_name(dpmd_state s) { return state_names[s]; }
const char *dpmd_model_name(const dpmd_model *m) { return m->spec->name; }
const Dpm__ModelSpec *dpmd_model_spec(const dpmd_model *m) { return m->spec; }
const dpmd_fleet_link *dpmd_model_fleet(const dpmd_model *m) { return m->fleet; }

dpmd_state dpmd_model_state(dpmd_model *m) {
  pthread_mutex_lock(&m->mu);
  dpmd_state s = m->state;
  pthread_mutex_unlock(&m->mu);
  return s;
}

int dpmd_model_ending(const dpmd_model *m) { return m->ending; }

/* ---- snapshots and events ----------------------------------------------- */

void dpmd_model_info(dpmd_model *m, Dpm__ModelInfo *info, dpmd_info_buf *buf) {
  dpm__model_info__init(info);
  info->name = m->spec->name;
  info->n_devices = m->spec->parallel ? m->spec->parallel->n_devices : 0;
  info->devices = m->spec->parallel ? m->spec->parallel->devices : NULL;
  if (m->fleet) {
    info->has_shard_id = info->has_num_shards = 1;
    info->shard_id = (uint32_t)dpmd_fleet_shard_id(m->fleet);
    info->num_shards = (uint32_t)dpmd_fleet_num_shards(m->fleet);
    info->coordinator = (char *)dpmd_fleet_coordinator(m->fleet);
  }
  pthread_mutex_lock(&m->mu);
  info->state = (char *)state_names[m->state];
  info->has_iter = info->has_target_iter = 1;
  info->iter = m->iter;
  info->target_iter = m->target > m->iter ? m->target : m->iter;
  if (m->has_last) {
    info->has_loss = info->has_accuracy = info->has_lr = info->has_step_ms = 1;
    info->loss = m->last.loss;
    info->accuracy = m->last.accuracy;
    info->lr = m->last.lr;
    info->step_ms = m->last.step_ms;
    info->has_images_per_s = 1;
    info->images_per_s = m->images_per_s;
  }
  if (m->error[0]) info->error = strcpy(buf->error, m->error);
  if (m->ckpt[0]) {
    info->checkpoint = strcpy(buf->checkpoint, m->ckpt);
    info->has_checkpoint_iter = 1;
    info->checkpoint_iter = m->ckpt_iter;
  }
  if (m->ckpt_error[0]) info->checkpoint_error = strcpy(buf->ckpt_error, m->ckpt_error);
  info->has_tensor_bytes = m->tensor_bytes > 0;
  info->tensor_bytes = m->tensor_bytes;
  info->has_memory_bytes = m->memory_bytes > 0;
  info->memory_bytes = m->memory_bytes;
  info->n_phases = 0;
  info->phases = buf->phase_ptr;
  if (m->has_phases) { /* in order: submit to built, then the first step's */
    static const struct {
      int trainer; /* index into trainer_ms, or -1: the model's own */
      const char *name;
      size_t off;
      int first; /* of the first step */
    } order[] = {
        {-1, "admit", offsetof(dpmd_model, admit_ms), 0},
        {DPM_PHASE_VALIDATE, NULL, 0, 0},
        {DPM_PHASE_GRAPH, NULL, 0, 0},
        {DPM_PHASE_DATA, NULL, 0, 0},
        {DPM_PHASE_ALLOC, NULL, 0, 0},
        {DPM_PHASE_INIT, NULL, 0, 0},
        {DPM_PHASE_COMM, NULL, 0, 0},
        {DPM_PHASE_BROADCAST, NULL, 0, 0},
        {-1, "save", offsetof(dpmd_model, save_ms), 0},
        {-1, "train_wait", offsetof(dpmd_model, train_wait_ms), 1},
        {DPM_PHASE_FIRST_BATCH, NULL, 0, 1},
        {DPM_PHASE_FIRST_STEP, NULL, 0, 1},
    };
    _Static_assert(sizeof order / sizeof *order == DPMD_PHASES, "phases");
    for (size_t i = 0; i < DPMD_PHASES; i++) {
      if (order[i].first && !m->has_first) continue;
      Dpm__Phase *p = &buf->phase[info->n_phases];
      dpm__phase__init(p);
      p->name = (char *)(order[i].trainer >= 0 ? dpm_trainer_phase_names[order[i].trainer]
                                               : order[i].name);
      p->ms = order[i].trainer >= 0 ? m->trainer_ms[order[i].trainer]
                                    : *(const double *)((const char *)m + order[i].off);
      buf->phase_ptr[info->n_phases++] = p;
    }
  }
  info->has_tensor_bytes_unshared = m->tensor_bytes_unshared > 0;
  info->tensor_bytes_unshared = m->tensor_bytes_unshared;
  if (m->every_iters || m->every_s) {
    Dpm__CheckpointPolicy *p = &buf->every;
    dpm__checkpoint_policy__init(p);
    p->has_every_iters = m->every_iters > 0;
    p->every_iters = m->every_iters;
    p->has_every_seconds = m->every_s > 0;
    p->every_seconds = m->every_s;
    info->checkpoint_every = p;
  }
  pthread_mutex_unlock(&m->mu);
}

static void publish(dpmd_model *m, Dpm__EventKind kind, const char *msg) {
  Dpm__Event ev = DPM__EVENT__INIT;
  Dpm__ModelInfo info;
  dpmd_info_buf buf;
  dpmd_model_info(m, &info, &buf);
  ev.kind = kind;
  ev.model = &info;
  ev.message = (char *)msg;
  ev.has_time = 1;
  ev.time = dpmd_now();
  dpmd_publish(m->d, m->spec->name, &ev);
}

static void set_state(dpmd_model *m, dpmd_state s) {
  pthread_mutex_lock(&m->mu);
  dpmd_state old = m->state;
  m->state = s;
  pthread_mutex_unlock(&m->mu);
  if (old != s) {
    dpmd_info("model %s: %s", m->spec->name, state_names[s]);
    publish(m, DPM__EVENT_KIND__EVENT_STATE, NULL);
  }
}

void dpmd_model_reply_info(dpmd_model *m, dpmd_reply_to *to) {
  Dpm__Response rs = DPM__RESPONSE__INIT;
  Dpm__ModelInfo info;
  dpmd_info_buf buf;
  dpmd_model_info(m, &info, &buf);
  rs.result_case = DPM__RESPONSE__RESULT_MODEL;
  rs.model = &info;
  dpmd_reply(m->d, to, &rs);
}

static void reply_err(dpmd_model *m, dpmd_reply_to *to, const dpm_err *err) {
  dpmd_reply_error(m->d, to, err->code, "%s: %s", m->spec->name, err->msg);
}

/* Answer every train --wait: with the model (ok) or with err. */
static void release_waiters(dpmd_model *m, const dpm_err *err) {
  for (waiter *w; (w = m->waiters);) {
    m->waiters = w->next;
    if (err)
      reply_err(m, &w->to, err);
    else
      dpmd_model_reply_info(m, &w->to);
    free(w);
  }
}

static void fail(dpmd_model *m, const dpm_err *in) {
  dpm_err named = *in, *err = &named; /* a fleet's processes named as its shards */
  if (m->fleet)
    dpmd_fleet_name_shards(m->spec, dpmd_fleet_shard_id(m->fleet), in->msg, named.msg,
                           sizeof named.msg);
  dpmd_error("model %s failed: %s", m->spec->name, err->msg);
  pthread_mutex_lock(&m->mu);
  dpm_escape(err->msg, m->error, sizeof m->error);
  pthread_mutex_unlock(&m->mu);
  set_state(m, DPMD_FAILED);
  publish(m, DPM__EVENT_KIND__EVENT_ERROR, err->msg);
  release_waiters(m, err);
}

/* ---- building ------------------------------------------------------------ */

static uint64_t trainer_bytes(dpm_trainer *t) {
  uint64_t b = 0;
  for (int r = 0; r < dpm_trainer_devices(t); r++)
    b += dpm_ws_bytes(dpm_trainer_workspace(t, r));
  return b;
}

/* Restore: the newest checkpoint that loads; a torn or corrupt one (a
 * crash while writing) is skipped with a warning. */
static void restore_checkpoint(dpmd_model *m) {
  uint64_t it[64];
  int n = dpmd_store_checkpoints(m->dir, it, 64);
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    dpm_err err = {0};
    if (dpmd_store_checkpoint_path(m->dir, it[i], path, sizeof path)) continue;
    if (dpm_trainer_load(m->t, NULL, path, &err)) {
      dpmd_warn("model %s: skipping checkpoint: %s", m->spec->name, err.msg);
      continue;
    }
    uint64_t target = dpmd_store_take_target(m->dir);
    pthread_mutex_lock(&m->mu);
    m->iter = m->target = m->ckpt_iter = m->saved_iter = dpm_trainer_iter(m->t);
    if (target > m->iter) m->target = target; /* `resume` finishes that run */
    snprintf(m->ckpt, sizeof m->ckpt, "%s", path);
    pthread_mutex_unlock(&m->mu);
    dpmd_info("model %s: restored from %s (iteration %llu of %llu)", m->spec->name, path,
              (unsigned long long)m->iter, (unsigned long long)m->target);
    set_state(m, DPMD_PAUSED);
    return;
  }
  set_state(m, DPMD_READY);
}

/* The model's trainer becomes t (built, formed). */
static void take_trainer(dpmd_model *m, dpm_trainer *t) {
  /* the workspaces own every tensor but memory sharing's arenas; without
     sharing, its blobs would take their own (aligned) bytes instead */
  const dpm_trainer_memory *mem = dpm_trainer_memory_of(t);
  uint64_t bytes = trainer_bytes(t);
  pthread_mutex_lock(&m->mu);
  m->t = t;
  m->tensor_bytes = bytes + mem->shared_arena;
  m->tensor_bytes_unshared = bytes + mem->shared_apart;
  m->memory_bytes = dpm_trainer_memory_of(t)->total;
  memcpy(m->trainer_ms, dpm_trainer_phases(t), sizeof m->trainer_ms);
  pthread_mutex_unlock(&m->mu);
  m->global_batch = dpm_trainer_batch(t) * dpm_trainer_devices(t);
}

/* A restored fleet job's shard. The coordinator (DIR/shard says 0) comes
 * back paused at its newest checkpoint's iteration with no trainer: its
 * job is not formed until `resume` re-forms it (reform, below); another
 * shard drops itself and its files (its coordinator re-forms the job with
 * it when asked). DIR/shard missing (a state dir of an older dpmd): the
 * files stay and the model is not brought back. */
static dpm_status restore_fleet(dpmd_model *m, dpm_err *err) {
  int shard = dpmd_store_load_shard(m->dir);
  if (shard < 0)
    return dpm_errf(err, DPM_UNSUPPORTED,
                    "%s: a fleet job's shard without %s/shard is not brought back; its "
                    "files stay",
                    m->spec->name, m->dir);
  if (shard > 0) {
    dpm_err rerr = {0};
    if (dpmd_store_remove(m->dir, &rerr))
      dpmd_warn("model %s: %s", m->spec->name, rerr.msg);
    return dpm_errf(err, DPM_STATE,
                    "%s: shard %d of a fleet job coordinated by %s is dropped after a "
                    "restart (its files removed): the coordinator re-forms the job",
                    m->spec->name, shard, m->spec->parallel->shards[0]);
  }
  dpmd_fleet_link *l;
  if (dpmd_fleet_coordinate(m->spec, &l, err)) return err->code;
  m->fleet = l;
  uint64_t it[1];
  int n = dpmd_store_checkpoints(m->dir, it, 1);
  uint64_t target = dpmd_store_take_target(m->dir);
  pthread_mutex_lock(&m->mu);
  m->iter = m->ckpt_iter = m->saved_iter = n ? it[0] : 0;
  m->target = target > m->iter ? target : m->iter;
  if (n) dpmd_store_checkpoint_path(m->dir, it[0], m->ckpt, sizeof m->ckpt);
  pthread_mutex_unlock(&m->mu);
  dpmd_info("model %s: a job over %d daemons, back paused at iteration %llu (of %llu); "
            "resume re-forms it",
            m->spec->name, dpmd_fleet_num_shards(l), (unsigned long long)m->iter,
            (unsigned long long)m->target);
  set_state(m, DPMD_PAUSED);
  return DPM_OK;
}

/* What every trainer of the model is built with (the crew and a fleet's
 * part are added by the caller). */
static dpm_trainer_options trainer_options(const dpmd_model *m) {
  return (dpm_trainer_options){.net_type = -1,
                               .max_bytes = m->d->cfg->max_model_bytes,
                               .max_bytes_name = "max_model_bytes",
                               .fs = dpmd_paths_data(m->d->paths),
                               .data_cache = m->d->data};
}

static dpm_status build(dpmd_model *m, dpm_err *err) {
  const Dpm__ParallelSpec *par = m->spec->parallel; /* submit always sets devices */
  if (!par || !par->n_devices)
    return dpm_errf(err, DPM_SPEC, "%s: the spec names no devices", m->spec->name);
  /* .devices 0: the replicas are on the spec's devices, as named (kind and
   * index: fenced:0, cpu:1) */
  dpm_trainer_options opt = trainer_options(m);
  if (dpmd_fleet_shards(m->spec) && m->restore) return restore_fleet(m, err);
  double start = dpm_mono_ns() / 1e6;
  dpmd_fleet_link *l = m->fleet;
  int coordinator = l && dpmd_fleet_shard_id(l) == 0;
  dpm_status s = DPM_OK;
  if (coordinator) s = dpmd_fleet_form(m->d, l, m->spec, err);
  if (!s && l) s = dpmd_fleet_options(m->d, l, m->spec, &opt, err);
  if (!s)
    s = dpmd_devices_crew(m->d->devices, par->devices, par->n_devices, &opt.crew, err);
  dpm_trainer *t = NULL;
  if (!s) s = dpm_trainer_create(m->spec, &opt, &t, err);
  if (s && coordinator) dpmd_fleet_abort(m->d, l, m->spec); /* formed or not */
  if (s && l && !coordinator) dpmd_fleet_report(m->d, l, m->spec, err);
  if (s) return s;
  double saving = dpm_mono_ns() / 1e6;
  if (!m->restore &&
      (dpmd_store_save_spec(m->dir, m->spec, err) ||
       (l && dpmd_store_save_shard(m->dir, dpmd_fleet_shard_id(l), err)))) {
    dpm_trainer_destroy(t);
    if (coordinator) dpmd_fleet_abort(m->d, l, m->spec);
    return err->code;
  }
  take_trainer(m, t);
  pthread_mutex_lock(&m->mu);
  m->admit_ms = m->submit_to.arrived > 0 ? start - m->submit_to.arrived : 0;
  m->save_ms = dpm_mono_ns() / 1e6 - saving;
  m->has_phases = 1;
  pthread_mutex_unlock(&m->mu);
  if (m->restore)
    restore_checkpoint(m);
  else
    set_state(m, DPMD_READY);
  return DPM_OK;
}

/* ---- training ------------------------------------------------------------ */

/* A run (re)starts: the images/s window starts over. */
static void rate_restart(dpmd_model *m) { m->rate_n = 0; }

/* Images per second over the last RATE_WINDOW_S seconds or more of
 * wall-clock time (jobs between steps, other models on the same devices, a
 * loaded host: all of it counts, as a user watching the run sees it).
 * Samples are kept at most every RATE_WINDOW_S / (RATE_SAMPLES / 2) s. */
static double rate_update(dpmd_model *m, double now, uint64_t iter) {
  int last = (m->rate_n - 1) % RATE_SAMPLES;
  if (m->rate_n == 0 || now - m->rate_t[last] >= 2 * RATE_WINDOW_S / RATE_SAMPLES) {
    m->rate_t[m->rate_n % RATE_SAMPLES] = now;
    m->rate_iter[m->rate_n % RATE_SAMPLES] = iter;
    m->rate_n++;
  }
  int o = m->rate_n > RATE_SAMPLES ? m->rate_n - RATE_SAMPLES : 0;
  while (o < m->rate_n - 1 && now - m->rate_t[(o + 1) % RATE_SAMPLES] >= RATE_WINDOW_S)
    o++;
  double dt = now - m->rate_t[o % RATE_SAMPLES];
  uint64_t di = iter - m->rate_iter[o % RATE_SAMPLES];
  return dt > 0 && di ? (double)di * m->global_batch / dt : 0;
}

static dpm_status checkpoint_default(dpmd_model *m, char *path, size_t n, dpm_err *err);

/* Steps until the next periodic checkpoint by iterations (or a huge number). */
static uint64_t steps_to_checkpoint(const dpmd_model *m) {
  if (!m->every_iters) return UINT64_MAX;
  return m->every_iters - m->iter % m->every_iters;
}

/* The longest wait between two tries of a failing periodic checkpoint. */
#define CKPT_BACKOFF_MAX_S 300.0

/* A periodic checkpoint when one is due. A failure is logged (rate-limited),
 * shown in status (checkpoint_error) and published; training goes on, and
 * the next try waits 1 s, then twice as long after each failure in a row,
 * up to CKPT_BACKOFF_MAX_S (it is due as soon as that wait is over). */
static void checkpoint_if_due(dpmd_model *m) {
  double now = dpm_mono_s();
  int due =
      (m->every_iters && m->iter % m->every_iters == 0 && m->iter != m->ckpt_iter) ||
      (m->every_s > 0 && m->trained_s >= m->every_s) ||
      (m->ckpt_failures && m->iter != m->ckpt_iter);
  if (!due || now < m->ckpt_retry_s) return;
  char path[PATH_MAX];
  dpm_err err = {0};
  if (!checkpoint_default(m, path, sizeof path, &err)) return;
  double wait = CKPT_BACKOFF_MAX_S;
  if (m->ckpt_failures < 30) wait = (double)(1u << m->ckpt_failures);
  m->ckpt_failures++;
  m->ckpt_retry_s = now + (wait < CKPT_BACKOFF_MAX_S ? wait : CKPT_BACKOFF_MAX_S);
  publish(m, DPM__EVENT_KIND__EVENT_ERROR, m->ckpt_error);
}

static void train_chunk(dpmd_model *m) {
  uint64_t left = m->target - m->iter, next = steps_to_checkpoint(m);
  int every = m->d->cfg->progress_every; /* >= 1 (config.c) */
  if (next < left) left = next;
  int n = left < (uint64_t)every ? (int)left : every;
  dpm_step_stats st;
  dpm_err err = {0};
  double t0 = dpm_mono_s();
  if (m->rate_n == 0) rate_update(m, t0, m->iter);
  dpm_status s = dpm_trainer_step(m->t, n, &st, &err);
  double t1 = dpm_mono_s();
  m->trained_s += t1 - t0;
  pthread_mutex_lock(&m->mu);
  if (!m->has_first && !s && st.steps_done > 0) { /* the first step's phases */
    m->train_wait_ms = m->first_train > 0 ? t0 * 1e3 - m->first_train : 0;
    memcpy(m->trainer_ms, dpm_trainer_phases(m->t), sizeof m->trainer_ms);
    m->has_first = 1;
  }
  m->iter = dpm_trainer_iter(m->t);
  if (st.steps_done > 0) m->unsaved = 1;
  if (!s && st.steps_done > 0) {
    m->last = st;
    m->has_last = 1;
    m->images_per_s = rate_update(m, t1, m->iter);
  }
  pthread_mutex_unlock(&m->mu);
  if (s) {
    fail(m, &err);
    return;
  }
  if (st.stopped) { /* the coordinator stopped the job: this shard stops with it */
    dpmd_info("model %s: the job's coordinator %s it at iteration %llu", m->spec->name,
              st.stopped == STOP_END ? "ended" : "paused", (unsigned long long)m->iter);
    set_state(m, DPMD_PAUSED);
    return;
  }
  if (st.steps_done > 0) publish(m, DPM__EVENT_KIND__EVENT_PROGRESS, NULL);
  checkpoint_if_due(m);
  if (m->iter >= m->target) {
    set_state(m, DPMD_READY);
    publish(m, DPM__EVENT_KIND__EVENT_DONE, NULL);
    release_waiters(m, NULL);
  }
}

/* ---- jobs: the commands that run on the model's thread ---------------------- */

static void reply_state(dpmd_model *m, dpmd_reply_to *to, const char *what) {
  dpmd_reply_error(m->d, to, DPM_STATE, "%s: model is %s%s%s", m->spec->name,
                   state_names[m->state], what ? ": " : "", what ? what : "");
}

void dpmd_job_train(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__TrainRequest *r = rq->train;
  if (m->state == DPMD_FAILED) return reply_state(m, to, "load a checkpoint to recover");
  if (m->state == DPMD_TRAINING) return reply_state(m, to, "pause it or wait");
  uint64_t iters = r->iters;
  if (r->has_epochs) { /* the reader's steps per epoch, over every replica and shard */
    int64_t per = m->t ? dpm_trainer_steps_per_epoch(m->t) : 0;
    if (!m->t) return reply_state(m, to, "resume re-forms it first");
    if (per < 1)
      return dpmd_reply_error(m->d, to, DPM_INVALID,
                              "%s: an epoch of its training data is less than one step",
                              m->spec->name);
    if (r->epochs > DPMD_MAX_ITERS / (uint64_t)per)
      return dpmd_reply_error(
          m->d, to, DPM_INVALID, "%s: %llu epochs of %lld steps are more than 2^40 steps",
          m->spec->name, (unsigned long long)r->epochs, (long long)per);
    iters = r->epochs * (uint64_t)per;
  }
  if (r->has_from_iter && r->from_iter != m->iter)
    return dpmd_reply_error(
        m->d, to, DPM_STATE,
        "%s: this shard is at iteration %llu, its coordinator at %llu", m->spec->name,
        (unsigned long long)m->iter, (unsigned long long)r->from_iter);
  if (m->fleet && dpmd_fleet_shard_id(m->fleet) == 0) { /* the whole job trains */
    dpm_err err = {0};
    if (dpmd_fleet_train(m->d, m->fleet, m->spec, iters, m->iter, &err))
      return reply_err(m, to, &err);
  }
  pthread_mutex_lock(&m->mu);
  m->target = m->iter + iters;
  pthread_mutex_unlock(&m->mu);
  if (!m->has_first) m->first_train = to->arrived;
  rate_restart(m);
  set_state(m, DPMD_TRAINING);
  if (!r->wait) return dpmd_model_reply_info(m, to);
  waiter *w = malloc(sizeof *w);
  if (!w) return dpmd_reply_error(m->d, to, DPM_NOMEM, "out of memory");
  w->to = *to;
  w->next = m->waiters;
  m->waiters = w;
}

/* Whether this model coordinates a job of several daemons (shard 0). */
static int coordinates(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) == 0 &&
         dpmd_fleet_num_shards(m->fleet) > 1;
}

/* The coordinator of a training fleet job stops every shard after the
 * iteration it stands at (in band: trainer.h, dpm_trainer_stop). A shard
 * that does not answer within the timeout fails the model, naming it. */
static dpm_status stop_job(dpmd_model *m, int why, dpm_err *err) {
  if (!coordinates(m) || m->state != DPMD_TRAINING || !m->t) return DPM_OK;
  if (dpm_trainer_stop(m->t, why, err)) {
    fail(m, err);
    return err->code;
  }
  dpmd_info("model %s: every shard %s at iteration %llu", m->spec->name, stop_names[why],
            (unsigned long long)m->iter);
  return DPM_OK;
}

void dpmd_job_pause(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  if (m->state != DPMD_TRAINING) return reply_state(m, to, "not training");
  dpm_err err = {0};
  if (stop_job(m, STOP_PAUSE, &err)) return reply_err(m, to, &err);
  set_state(m, DPMD_PAUSED);
  dpmd_model_reply_info(m, to);
}

static dpm_status load_here(dpmd_model *m, const void *path, dpm_err *err);
static dpm_status whole_job(dpmd_model *m, Dpm__Request *fwd,
                            dpm_status (*fn)(dpmd_model *m, const void *arg,
                                             dpm_err *err),
                            const void *arg, dpm_err *err);

/* Loads, on every shard of the (re-formed) job, the newest of the model's
 * checkpoints that shard 0 accepts (the others receive it); one refused
 * (torn, corrupt) is skipped with a warning, as every shard hears shard
 * 0's verdict. None at all: the job starts from its seeded init. */
static dpm_status load_newest(dpmd_model *m, dpm_err *err) {
  uint64_t it[64];
  int n = dpmd_store_checkpoints(m->dir, it, 64);
  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = m->spec->name;
  lr.path = "";
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.command_case = DPM__REQUEST__COMMAND_LOAD;
  fwd.load = &lr;
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    if (dpmd_store_checkpoint_path(m->dir, it[i], path, sizeof path)) continue;
    dpm_status s = whole_job(m, &fwd, load_here, path, err);
    if (!s) {
      pthread_mutex_lock(&m->mu);
      snprintf(m->ckpt, sizeof m->ckpt, "%s", path);
      pthread_mutex_unlock(&m->mu);
      return DPM_OK;
    }
    if (s != DPM_CORRUPT && s != DPM_SPEC && s != DPM_SHAPE) return s;
    dpmd_warn("model %s: skipping checkpoint: %s", m->spec->name, err->msg);
  }
  dpmd_warn("model %s: no checkpoint to re-form from: the job starts at iteration 0",
            m->spec->name);
  return DPM_OK;
}

/* Re-forms a fleet job at its coordinator (failed, or restored without a
 * trainer): the old formation is dropped and the job deleted on its other
 * shards (those gone count as deleted), a new link draws a fresh formation,
 * the job forms and builds as at submit, every shard loads the newest
 * checkpoint (load_newest), and the run goes on towards its target. A
 * failure leaves the model failed (no trainer) with the reason; resume
 * tries again. */
static dpm_status reform(dpmd_model *m, Dpm__ModelSpec *elastic, dpm_err *err) {
  dpm_err derr = {0};
  if (dpmd_fleet_delete(m->d, m->fleet, m->spec, &derr))
    dpmd_warn("model %s: re-forming: %s", m->spec->name, derr.msg);
  if (elastic) { /* the job's new shards from now on (saved: a restart keeps them) */
    Dpm__ModelSpec **rs =
        realloc(m->retired_specs, (size_t)(m->n_retired_specs + 1) * sizeof *rs);
    if (!rs) {
      dpm_spec_free(elastic);
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    }
    m->retired_specs = rs;
    if (dpmd_store_save_spec(m->dir, elastic, err)) {
      dpm_spec_free(elastic);
      return err->code;
    }
    m->retired_specs[m->n_retired_specs++] = m->spec;
    m->spec = elastic;
  }
  pthread_mutex_lock(&m->mu);
  dpm_trainer *old = m->t;
  m->t = NULL;
  m->error[0] = 0;
  pthread_mutex_unlock(&m->mu);
  dpm_trainer_destroy(old);
  dpmd_fleet_link *l, **r = realloc(m->retired, (size_t)(m->n_retired + 1) * sizeof *r);
  if (!r) return dpm_errf(err, DPM_NOMEM, "out of memory");
  m->retired = r;
  if (dpmd_fleet_coordinate(m->spec, &l, err)) return err->code;
  m->retired[m->n_retired++] = m->fleet;
  m->fleet = l;
  set_state(m, DPMD_BUILDING);
  const Dpm__ParallelSpec *par = m->spec->parallel;
  dpm_trainer_options opt = trainer_options(m);
  dpm_status s = dpmd_fleet_form(m->d, l, m->spec, err);
  if (!s) s = dpmd_fleet_options(m->d, l, m->spec, &opt, err);
  if (!s)
    s = dpmd_devices_crew(m->d->devices, par->devices, par->n_devices, &opt.crew, err);
  dpm_trainer *t = NULL;
  if (!s) s = dpm_trainer_create(m->spec, &opt, &t, err);
  if (s) {
    dpmd_fleet_abort(m->d, l, m->spec);
    return s;
  }
  take_trainer(m, t);
  if ((s = load_newest(m, err))) return s;
  pthread_mutex_lock(&m->mu);
  m->iter = m->ckpt_iter = m->saved_iter = dpm_trainer_iter(t);
  m->unsaved = 0; /* its own newest checkpoint, or the seeded init */
  if (m->target < m->iter) m->target = m->iter;
  m->has_last = 0;
  m->images_per_s = 0;
  pthread_mutex_unlock(&m->mu);
  dpmd_info("model %s: re-formed as %s at iteration %llu", m->spec->name,
            dpmd_fleet_formation(l), (unsigned long long)m->iter);
  if (m->target > m->iter &&
      (s = dpmd_fleet_train(m->d, l, m->spec, m->target - m->iter, m->iter, err)))
    return s;
  rate_restart(m);
  set_state(m, m->target > m->iter ? DPMD_TRAINING : DPMD_READY);
  return DPM_OK;
}

/* A copy of m's spec over the shards of an elastic resume (r), with the
 * per-device batch that keeps the global batch (or, allowed, the old one:
 * *note says the global batch changed). DPM_INVALID: not this job's
 * coordinator first, a bad or repeated endpoint, a batch that does not
 * divide. */
static dpm_status elastic_spec(dpmd_model *m, const Dpm__ResumeRequest *r,
                               Dpm__ModelSpec **out, char *note, size_t cap,
                               dpm_err *err) {
  const Dpm__ParallelSpec *p = m->spec->parallel;
  if (r->n_shards > DPM_SPEC_MAX_SHARDS)
    return dpm_errf(err, DPM_INVALID, "at most %d shards", DPM_SPEC_MAX_SHARDS);
  for (size_t i = 0; i < r->n_shards; i++) {
    if (!dpm_shard_endpoint_valid(r->shards[i]))
      return dpm_errf(err, DPM_INVALID, "shard %zu is not tcp://HOST:PORT or ipc:///PATH",
                      i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(r->shards[i], r->shards[j]))
        return dpm_errf(err, DPM_INVALID, "shards %zu and %zu are the same daemon", j, i);
  }
  if (strcmp(r->shards[0], p->shards[0]) != 0)
    return dpm_errf(err, DPM_INVALID, "the first shard must be the job's coordinator, %s",
                    p->shards[0]);
  uint32_t batch = p->device_batch ? p->device_batch : m->spec->input->batch_size;
  uint32_t nb;
  int changed;
  if (dpmd_fleet_elastic_batch(batch, (int)p->n_devices, (int)p->n_shards,
                               (int)r->n_shards, r->allow_batch_change, &nb, &changed,
                               err))
    return err->code;
  size_t len = protobuf_c_message_get_packed_size(&m->spec->base);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return dpm_errf(err, DPM_NOMEM, "out of memory");
  protobuf_c_message_pack(&m->spec->base, buf);
  Dpm__ModelSpec *s = dpm__model_spec__unpack(NULL, len, buf);
  free(buf);
  char **sh = s ? calloc(r->n_shards, sizeof *sh) : NULL;
  for (size_t i = 0; sh && i < r->n_shards; i++)
    if (!(sh[i] = strdup(r->shards[i]))) {
      for (size_t j = 0; j < i; j++) free(sh[j]);
      free(sh), sh = NULL;
    }
  if (!sh) {
    dpm_spec_free(s);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  Dpm__ParallelSpec *q = s->parallel;
  for (size_t i = 0; i < q->n_shards; i++) free(q->shards[i]);
  free(q->shards);
  q->shards = sh;
  q->n_shards = r->n_shards;
  q->has_device_batch = nb != s->input->batch_size;
  q->device_batch = q->has_device_batch ? nb : 0;
  note[0] = 0;
  if (changed)
    snprintf(note, cap, "the global batch is now %llu (was %llu): %u per device",
             (unsigned long long)nb * q->n_devices * q->n_shards,
             (unsigned long long)batch * p->n_devices * p->n_shards, nb);
  *out = s;
  return DPM_OK;
}

/* Whether resume re-forms the job: its coordinator, failed or not formed. */
static int needs_reform(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) == 0 &&
         (m->state == DPMD_FAILED || !m->t);
}

void dpmd_job_resume(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__ResumeRequest *r = rq->resume;
  Dpm__ModelSpec *elastic = NULL;
  char note[160] = "";
  dpm_err err = {0};
  if (r->n_shards) { /* elastic: the coordinator re-forms the job over r's shards */
    if (!m->fleet || dpmd_fleet_shard_id(m->fleet) != 0)
      return dpmd_reply_error(m->d, to, DPM_INVALID,
                              "%s: --shards re-forms a fleet job at its coordinator",
                              m->spec->name);
    if (m->state == DPMD_TRAINING) return reply_state(m, to, "pause it first");
    if (elastic_spec(m, r, &elastic, note, sizeof note, &err))
      return reply_err(m, to, &err);
  }
  if (elastic || needs_reform(m)) {
    if (reform(m, elastic, &err)) {
      fail(m, &err);
      return reply_err(m, to, &err);
    }
    if (!note[0]) return dpmd_model_reply_info(m, to);
    dpmd_info("model %s: %s", m->spec->name, note);
    Dpm__Response rs = DPM__RESPONSE__INIT;
    Dpm__ModelInfo info;
    dpmd_info_buf buf;
    dpmd_model_info(m, &info, &buf);
    rs.result_case = DPM__RESPONSE__RESULT_MODEL;
    rs.model = &info;
    rs.message = note;
    return dpmd_reply(m->d, to, &rs);
  }
  if (m->state != DPMD_PAUSED) return reply_state(m, to, "not paused");
  /* the whole job goes on towards the same target; a shard that cannot
   * (its daemon restarted and dropped it) makes the coordinator checkpoint
   * where the job stopped and re-form it from there */
  if (coordinates(m) && m->target > m->iter &&
      dpmd_fleet_train(m->d, m->fleet, m->spec, m->target - m->iter, m->iter, &err)) {
    dpmd_warn("model %s: %s; re-forming the job", m->spec->name, err.msg);
    char path[PATH_MAX];
    dpm_err cerr = {0};
    if (m->ckpt_iter != m->iter && checkpoint_default(m, path, sizeof path, &cerr))
      dpmd_warn("model %s: re-forming from an older checkpoint", m->spec->name);
    if (reform(m, NULL, &err)) {
      fail(m, &err);
      return reply_err(m, to, &err);
    }
    return dpmd_model_reply_info(m, to);
  }
  rate_restart(m);
  set_state(m, m->target > m->iter ? DPMD_TRAINING : DPMD_READY);
  dpmd_model_reply_info(m, to);
}

static void reply_path(dpmd_model *m, dpmd_reply_to *to, const char *path,
                       uint64_t iter) {
  Dpm__Response rs = DPM__RESPONSE__INIT;
  Dpm__PathResult pr = DPM__PATH_RESULT__INIT;
  pr.path = (char *)path;
  pr.has_iter = 1;
  pr.iter = iter;
  rs.result_case = DPM__RESPONSE__RESULT_PATH;
  rs.path = &pr;
  dpmd_reply(m->d, to, &rs);
}

/* Writes a checkpoint to path through fs (NULL: the model's own directory,
 * where checkpoint_retention applies: the checkpoint must still be there
 * once the older ones are gone). A failure is logged and kept for status
 * until the next success. */
static dpm_status checkpoint_to(dpmd_model *m, const dpm_fs *fs, const char *path,
                                dpm_err *err) {
  uint64_t iter = m->iter;
  dpm_status s = dpm_trainer_checkpoint(m->t, fs, path, err);
  if (!s && !fs) {
    dpmd_store_retain(m->dir, m->d->cfg->checkpoint_retention, iter);
    if (!dpmd_store_has_checkpoint(m->dir, iter))
      s = dpm_errf(err, DPM_IO, "%s: written, but gone right after its write", path);
  }
  pthread_mutex_lock(&m->mu);
  if (s) {
    dpm_escape(err->msg, m->ckpt_error, sizeof m->ckpt_error);
  } else {
    m->ckpt_error[0] = 0;
    snprintf(m->ckpt, sizeof m->ckpt, "%s", path);
    m->ckpt_iter = m->iter;
  }
  pthread_mutex_unlock(&m->mu);
  if (s) {
    dpmd_error_limited(&m->ckpt_log, "model %s: checkpoint failed: %s", m->spec->name,
                       err->msg);
    return s;
  }
  m->trained_s = 0;
  uint64_t held = dpmd_ratelimit_end(&m->ckpt_log);
  if (held)
    dpmd_info("model %s: %llu more failed checkpoint(s) were not logged (rate limit)",
              m->spec->name, (unsigned long long)held);
  dpmd_info("model %s: checkpoint %s (iteration %llu)", m->spec->name, path,
            (unsigned long long)m->iter);
  return DPM_OK;
}

/* Into the model's own directory, keeping checkpoint_retention files. */
static dpm_status checkpoint_default(dpmd_model *m, char *path, size_t n, dpm_err *err) {
  if (dpmd_store_checkpoint_path(m->dir, m->iter, path, n))
    return dpm_errf(err, DPM_INVALID, "state dir path too long");
  dpm_status s = checkpoint_to(m, NULL, path, err);
  if (s) return s;
  m->unsaved = 0;
  m->saved_iter = m->iter;
  m->ckpt_failures = 0;
  m->ckpt_retry_s = 0;
  return DPM_OK;
}

void dpmd_job_checkpoint(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  if (m->state == DPMD_FAILED)
    return reply_state(m, to, "its parameters may not be finite");
  char path[PATH_MAX];
  dpm_err err = {0};
  const char *out = rq->checkpoint->out;
  dpm_status s;
  if (out && *out) {
    snprintf(path, sizeof path, "%s", out);
    s = checkpoint_to(m, dpmd_paths_files(m->d->paths), path, &err);
  } else {
    s = checkpoint_default(m, path, sizeof path, &err);
  }
  if (s) return reply_err(m, to, &err);
  reply_path(m, to, path, m->iter);
}

/* Runs a collective on the whole fleet job at its coordinator: fwd is sent
 * to every other shard while this shard's part (fn) runs; the first
 * failure, this shard's or a named other's, is the result. Elsewhere (and
 * for a job of one daemon) fn alone. */
static dpm_status whole_job(dpmd_model *m, Dpm__Request *fwd,
                            dpm_status (*fn)(dpmd_model *m, const void *arg,
                                             dpm_err *err),
                            const void *arg, dpm_err *err) {
  dpmd_fleet_calls *fc = NULL;
  if (coordinates(m) && dpmd_fleet_forward_begin(m->d, m->fleet, m->spec, fwd, &fc, err))
    return err->code;
  dpm_status s = fn(m, arg, err);
  dpm_err ferr = {0};
  if (fc && dpmd_fleet_forward_end(fc, &ferr) && !s) {
    *err = ferr;
    s = dpm_err_prefix(err, "done here, not on every shard: ");
  }
  return s;
}

/* Shards but 0 of a fleet job receive what shard 0 reads (trainer.h). */
static int receives(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) != 0;
}

static dpm_status load_here(dpmd_model *m, const void *path, dpm_err *err) {
  return dpm_trainer_load(m->t, dpmd_paths_files(m->d->paths), receives(m) ? NULL : path,
                          err);
}

static dpm_status sync_here(dpmd_model *m, const void *arg, dpm_err *err) {
  (void)arg;
  return dpm_trainer_sync(m->t, err);
}

void dpmd_job_load(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  dpm_err err = {0};
  int fd; /* a path the client may not use is refused whatever the state */
  if (!receives(m) &&
      dpm_file_open_read(dpmd_paths_files(m->d->paths), rq->load->path, &fd, &err))
    return reply_err(m, to, &err);
  if (!receives(m)) close(fd);
  if (m->state == DPMD_TRAINING) return reply_state(m, to, "pause it first");
  /* the other shards read nothing: they receive shard 0's state */
  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = m->spec->name;
  lr.path = "";
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.command_case = DPM__REQUEST__COMMAND_LOAD;
  fwd.load = &lr;
  if (whole_job(m, &fwd, load_here, rq->load->path, &err)) return reply_err(m, to, &err);
  pthread_mutex_lock(&m->mu);
  m->iter = m->target = m->ckpt_iter = dpm_trainer_iter(m->t);
  if (!receives(m)) snprintf(m->ckpt, sizeof m->ckpt, "%s", rq->load->path);
  m->error[0] = m->ckpt_error[0] = 0;
  m->has_last = 0; /* the previous run's loss and speed say nothing now */
  m->images_per_s = 0;
  pthread_mutex_unlock(&m->mu);
  m->trained_s = 0;
  m->unsaved = 1; /* its own directory does not hold what was loaded */
  if (m->state == DPMD_FAILED) set_state(m, DPMD_READY);
  dpmd_model_reply_info(m, to);
}

void dpmd_job_sync(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  dpm_err err = {0};
  if (m->state == DPMD_TRAINING && m->fleet) return reply_state(m, to, "pause it first");
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = m->spec->name;
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.command_case = DPM__REQUEST__COMMAND_SYNC;
  fwd.sync = &nr;
  if (whole_job(m, &fwd, sync_here, NULL, &err)) return reply_err(m, to, &err);
  dpmd_model_reply_info(m, to);
}

void dpmd_job_eval(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  dpm_err err = {0};
  Dpm__EvalResult ev = DPM__EVAL_RESULT__INIT;
  if (dpm_trainer_eval(m->t, &ev.loss, &ev.accuracy, &err)) return reply_err(m, to, &err);
  ev.has_iter = 1;
  ev.iter = m->iter;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_EVAL;
  rs.eval = &ev;
  dpmd_reply(m->d, to, &rs);
}

void dpmd_job_extract(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__ExtractRequest *r = rq->extract_predictor;
  dpm_err err = {0};
  if (dpm_trainer_export_format(m->t, r->format, (const char *const *)r->inputs,
                                (int)r->n_inputs, (const char *const *)r->outputs,
                                (int)r->n_outputs, dpmd_paths_files(m->d->paths), r->out,
                                &err))
    return reply_err(m, to, &err);
  reply_path(m, to, r->out, m->iter);
}

void dpmd_job_get_blob(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__GetBlobRequest *r = rq->get_blob;
  char name[512];
  int rank = 0;
  if (r->device && *r->device) {
    const Dpm__ParallelSpec *par = m->spec->parallel;
    rank = -1;
    for (size_t i = 0; par && i < par->n_devices; i++)
      if (strcmp(par->devices[i], r->device) == 0) rank = (int)i;
    if (rank < 0)
      return dpmd_reply_error(m->d, to, DPM_NOT_FOUND, "%s: no device %s in this model",
                              m->spec->name, r->device);
  }
  char scope[32];
  if (strchr(r->blob, '/') || rank == 0)
    snprintf(name, sizeof name, "%s", r->blob);
  else
    snprintf(name, sizeof name, "%s/%s",
             dpm_device_scope(*dpm_trainer_device(m->t, rank), scope, sizeof scope),
             r->blob);
  dpm_tensor host = {0}; /* the bytes cross from the device through the backend */
  dpm_err err = {0};
  if (dpm_trainer_read_blob(m->t, name, &host, &err)) /* "no blob 'x'", or shared */
    return dpmd_reply_error(m->d, to, err.code, "%s: %s", m->spec->name, err.msg);
  Dpm__TensorProto tp = DPM__TENSOR_PROTO__INIT;
  tp.name = name;
  tp.dtype = dpm_dtype_to_wire(host.shape.dtype);
  tp.n_dims = (size_t)host.shape.ndim;
  tp.dims = host.shape.d;
  tp.has_data = 1;
  tp.data.len = dpm_shape_bytes(&host.shape);
  tp.data.data = host.data;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_BLOB;
  rs.blob = &tp;
  dpmd_reply(m->d, to, &rs);
  dpm_tensor_fini(&host);
}

/* ---- the thread ----------------------------------------------------------- */

#ifdef DPM_TEST_HOOKS
/* Tests make races deterministic: while the file named by $DPMD_TEST_GATE
 * exists, a request waits here, on the model thread, before it runs. */
static void test_gate(dpmd_model *m, const job *j) {
  const char *gate = getenv("DPMD_TEST_GATE");
  if (!gate || access(gate, F_OK)) return;
  dpmd_info("model %s: %s waits at the test gate", m->spec->name, j->what);
  while (!access(gate, F_OK)) nanosleep(&(struct timespec){0, 10000000}, NULL);
}
#else
static void test_gate(dpmd_model *m, const job *j) { (void)m, (void)j; }
#endif

static job *next_job(dpmd_model *m) {
  pthread_mutex_lock(&m->mu);
  while (!m->jobs && m->state != DPMD_TRAINING) pthread_cond_wait(&m->cv, &m->mu);
  job *j = m->jobs;
  if (j && !(m->jobs = j->next)) m->jobs_tail = NULL;
  if (j && j->kind == JOB_REQUEST) m->n_jobs--;
  pthread_mutex_unlock(&m->mu);
  return j;
}

/* At shutdown (when the config says so), a model whose parameters changed
 * since it last wrote a checkpoint into its own directory is checkpointed,
 * whatever its state (training, ready after a run, paused), and where an
 * unfinished run was headed is saved, so `resume` after the restart
 * finishes it. A failed model is not (its parameters may not be finite):
 * that is logged. If the checkpoint fails, the previous one stays and the
 * target is saved anyway; dpmd exits non-zero naming the model
 * (dpmd_shutdown_failed). */
static void checkpoint_at_shutdown(dpmd_model *m) {
  if (!m->t || !m->d->cfg->checkpoint_on_shutdown) return;
  if (m->fleet && !dpmd_fleet_checkpoints(m->fleet)) return; /* shard 0's to write */
  if (m->state == DPMD_FAILED) {
    if (m->unsaved)
      dpmd_warn("model %s: failed, not checkpointed at shutdown: it comes back at "
                "iteration %llu",
                m->spec->name, (unsigned long long)m->saved_iter);
    return;
  }
  char path[PATH_MAX];
  dpm_err err = {0}, terr = {0};
  dpm_status s = DPM_OK;
  if (m->unsaved && (s = checkpoint_default(m, path, sizeof path, &err)))
    dpmd_error("model %s: checkpoint at shutdown failed, the last one (iteration %llu) "
               "stays: %s",
               m->spec->name, (unsigned long long)m->saved_iter, err.msg);
  if (m->target > m->iter && dpmd_store_save_target(m->dir, m->target, &terr)) {
    dpmd_error("model %s: cannot save where the run was headed: %s", m->spec->name,
               terr.msg);
    s = terr.code;
  }
  if (s) dpmd_shutdown_failed(m->d, m->spec->name);
}

/* The model's last job: delete (files removed) or shut down. */
static void finish(dpmd_model *m, job *j) {
  dpm_err err = {0};
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpm_err serr = {0}; /* a fleet's coordinator: every shard stops at this iteration */
  stop_job(m, STOP_END, &serr); /* failed: the model is failed, and not checkpointed */
  if (j->kind == JOB_SHUTDOWN) checkpoint_at_shutdown(m);
  err = (dpm_err){.code = DPM_STATE};
  snprintf(err.msg, sizeof err.msg, "%s",
           j->kind == JOB_DELETE ? "model deleted" : "daemon shutting down");
  release_waiters(m, &err);
  dpm_err ferr = {0}; /* the coordinator deletes the job on every shard */
  char msg[sizeof err.msg + sizeof ferr.msg + 64];
  if (j->kind == JOB_DELETE && m->fleet && dpmd_fleet_shard_id(m->fleet) == 0 &&
      dpmd_fleet_delete(m->d, m->fleet, m->spec, &ferr)) {
    dpmd_error("model %s: not deleted on every shard: %s", m->spec->name, ferr.msg);
    snprintf(msg, sizeof msg, "%s: deleted here, not on every shard: %s", m->spec->name,
             ferr.msg);
    rs.status = dpm_status_to_wire(ferr.code);
    rs.message = msg;
  }
  if (j->kind == JOB_DELETE && dpmd_store_remove(m->dir, &err)) {
    rs.status = dpm_status_to_wire(err.code);
    rs.message = err.msg;
  }
  pthread_mutex_lock(&m->mu); /* freed here, not on the loop thread */
  dpm_trainer *t = m->t;
  m->t = NULL;
  pthread_mutex_unlock(&m->mu);
  dpm_trainer_destroy(t);
  dpmd_model_exited(m->d, m, j->to.header ? &j->to : NULL, &rs);
}

/* Training threads (this model thread, and the crew workers it creates,
 * which inherit it) run at a lower priority than the loop thread: it then
 * preempts them on waking, and answers while a model keeps every core
 * busy. Lowering needs no privilege; on failure they stay where they are. */
#define TRAIN_NICE 5

static void *model_main(void *arg) {
  dpmd_model *m = arg;
  dpm_err err = {0};
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), TRAIN_NICE);
  if (build(m, &err)) {
    dpmd_error("model %s: %s", m->spec->name, err.msg);
    Dpm__Response rs = DPM__RESPONSE__INIT;
    rs.status = dpm_status_to_wire(err.code);
    rs.message = err.msg;
    dpmd_model_exited(m->d, m, m->submit_to.header ? &m->submit_to : NULL, &rs);
    return NULL;
  }
  if (m->submit_to.header) dpmd_model_reply_info(m, &m->submit_to);
  for (;;) {
    job *j = next_job(m);
    if (!j) {
      train_chunk(m);
      continue;
    }
    if (j->kind != JOB_REQUEST) {
      finish(m, j);
      free(j);
      return NULL;
    }
    test_gate(m, j);
    if (!m->t && j->fn != dpmd_job_resume) /* a fleet job not formed (restored, failed) */
      reply_state(m, &j->to, "its job is not formed: resume re-forms it");
    else
      j->fn(m, j->rq, &j->to);
    dpm__request__free_unpacked(j->rq, NULL);
    free(j);
  }
}

/* Queues j (requests only while fewer than DPMD_MAX_JOBS wait); 0 if full. */
static int push(dpmd_model *m, job *j) {
  pthread_mutex_lock(&m->mu);
  int full = j->kind == JOB_REQUEST && m->n_jobs >= DPMD_MAX_JOBS;
  if (!full) {
    if (m->jobs_tail)
      m->jobs_tail->next = j;
    else
      m->jobs = j;
    m->jobs_tail = j;
    m->n_jobs += j->kind == JOB_REQUEST;
    if (m->t) dpm_trainer_interrupt(m->t);
    pthread_cond_signal(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
  return !full;
}

void dpmd_model_post(dpmd_model *m, dpmd_job_fn fn, const char *what, Dpm__Request *rq,
                     dpmd_reply_to *to) {
  job *j = calloc(1, sizeof *j);
  if (!j) {
    dpm__request__free_unpacked(rq, NULL);
    return dpmd_reply_error(m->d, to, DPM_NOMEM, "out of memory");
  }
  j->kind = JOB_REQUEST;
  j->fn = fn;
  j->what = what;
  j->rq = rq;
  j->to = *to;
  if (push(m, j)) return;
  dpm__request__free_unpacked(rq, NULL);
  free(j);
  dpmd_reply_error(m->d, to, DPM_DENIED,
                   "%s: %d requests are already waiting for this model; try again later",
                   m->spec->name, DPMD_MAX_JOBS);
}

void dpmd_model_end(dpmd_model *m, int delete, dpmd_reply_to *to) {
  job *j = calloc(1, sizeof *j);
  if (!j) { /* cannot queue: answer, and end at shutdown instead */
    if (to) dpmd_reply_error(m->d, to, DPM_NOMEM, "out of memory");
    return;
  }
  m->ending = 1;
  j->kind = delete ? JOB_DELETE : JOB_SHUTDOWN;
  if (to) j->to = *to;
  push(m, j);
}

dpm_status dpmd_model_new(dpmd *d, Dpm__ModelSpec *spec, int restore,
                          dpmd_fleet_link *fleet, dpmd_reply_to *to, dpmd_model **out,
                          dpm_err *err) {
  *out = NULL;
  dpmd_model *m = calloc(1, sizeof *m);
  if (!m) {
    dpm_spec_free(spec);
    dpmd_fleet_link_free(fleet);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  m->d = d;
  m->spec = spec;
  m->fleet = fleet;
  m->restore = restore;
  const Dpm__CheckpointPolicy *cp = spec->checkpoint;
  m->every_iters = cp ? cp->every_iters : d->cfg->checkpoint_every_iters;
  m->every_s = cp ? cp->every_seconds : (double)d->cfg->checkpoint_every_s;
  if (fleet && !dpmd_fleet_checkpoints(fleet)) m->every_iters = 0, m->every_s = 0;
  if (to) m->submit_to = *to;
  m->state = DPMD_BUILDING;
  m->ckpt_log = (dpmd_ratelimit)DPMD_RATELIMIT_INIT;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  if (dpmd_store_model_dir(d->cfg->state_dir, spec->name, m->dir, sizeof m->dir) ||
      !(m->started = !pthread_create(&m->thread, NULL, model_main, m))) {
    m->submit_to.header = NULL;
    dpmd_model_free(m);
    return dpm_errf(err, DPM_NOMEM, "cannot start the model's thread");
  }
  *out = m;
  return DPM_OK;
}

void dpmd_model_free(dpmd_model *m) {
  if (!m) return;
  if (m->started) pthread_join(m->thread, NULL);
  dpm_trainer_destroy(m->t);
  for (job *j; (j = m->jobs);) {
    m->jobs = j->next;
    if (j->rq) dpm__request__free_unpacked(j->rq, NULL);
    if (j->to.header)
      dpmd_reply_error(m->d, &j->to, DPM_STATE, "model %s is gone", m->spec->name);
    free(j);
  }
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  dpmd_fleet_link_free(m->fleet); /* after the trainer, whose communicator used it */
  for (int i = 0; i < m->n_retired; i++) dpmd_fleet_link_free(m->retired[i]);
  free(m->retired);
  for (int i = 0; i < m->n_retired_specs; i++) dpm_spec_free(m->retired_specs[i]);
  free(m->retired_specs);
  dpm_spec_free(m->spec);
  free(m);
}
