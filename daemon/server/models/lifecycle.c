/* A served model's life (server/models/model.h): its thread, its job
 * queue, building its trainer, training in chunks, the jobs that run
 * between steps (but checkpoint, checkpoints.c, and resume, reform.c),
 * and its end. Builds on every other file of daemon/server/models/. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spec.h"
#include "engine/dtype_wire.h"
#include "server/commands.h" /* DPMD_MAX_ITERS */
#include "server/devices.h"
#include "server/log.h"
#include "server/models/checkpoints.h"
#include "server/models/shard.h"
#include "server/models/store.h"
#include "server/paths.h"
#include "server/sched.h"

/* ---- building and training -------------------------------------------------- */

static dpm_status build(dpmd_model *m, dpm_err *err) {
  const Dpm__ParallelSpec *par = m->spec->parallel; /* submit always sets devices */
  if (!par || !par->n_devices)
    return dpm_errf(err, DPM_SPEC, "%s: the spec names no devices", m->spec->name);
  /* .devices 0: the replicas are on the spec's devices, as named (kind and
   * index: fenced:0, cpu:1) */
  dpm_trainer_options opt = model_trainer_options(m);
  if (dpmd_fleet_shards(m->spec) && m->restore) return model_restore_fleet(m, err);
  double start = dpm_mono_ns() / 1e6;
  dpmd_fleet_link *l = m->fleet;
  int coordinator = l && dpmd_fleet_shard_id(l) == 0;
  dpm_status s = DPM_OK;
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  if (coordinator) s = dpmd_fleet_form(m->d, l, m->spec, sc.priority, sc.weight, err);
  if (!s && l) s = dpmd_fleet_options(m->d, l, m->spec, &opt, err);
  size_t n;
  const dpm_device *devs = dpm_checked_spec_devices(m->checked, &n);
  if (!s) s = dpmd_devices_crew(m->d->devices, devs, n, &opt.crew, err);
  dpm_trainer *t = NULL;
  m->queued = 0;
  if (!s) s = dpm_trainer_create_checked(m->checked, &opt, &t, err);
  if (s && !m->queued) dpmd_sched_release_memory(m->sched);
  if (s && coordinator) dpmd_fleet_abort(m->d, l, m->spec); /* formed or not */
  if (s && l && !coordinator) dpmd_fleet_report(m->d, l, m->spec, err);
  if (s && !(m->queued && !m->restore)) return s;
  double saving = dpm_mono_ns() / 1e6;
  if (!m->restore &&
      (dpmd_store_save_spec(m->dir, m->spec, err) ||
       dpmd_store_save_schedule(m->dir, &sc, 0, err) ||
       (l && dpmd_store_save_shard(m->dir, dpmd_fleet_shard_id(l), err)))) {
    dpm_trainer_destroy(t);
    if (t) dpmd_sched_release_memory(m->sched);
    if (coordinator) dpmd_fleet_abort(m->d, l, m->spec);
    return err->code;
  }
  if (s) return s; /* queued: its files are saved, so a restart keeps it */
  model_take_trainer(m, t);
  pthread_mutex_lock(&m->mu);
  m->admit_ms = m->submit_to.arrived > 0 ? start - m->submit_to.arrived : 0;
  m->save_ms = dpm_mono_ns() / 1e6 - saving;
  m->has_phases = 1;
  pthread_mutex_unlock(&m->mu);
  if (!m->restore) {
    model_set_state(m, m->target > m->iter ? DPMD_TRAINING : DPMD_READY);
    return DPM_OK;
  }
  model_restore_checkpoint(m);
  int spilled = 0; /* spilled when dpmd stopped: its run goes on */
  if (!dpmd_store_load_schedule(m->dir, &sc, &spilled) && spilled &&
      m->state == DPMD_PAUSED && m->target > m->iter) {
    dpmd_info("model %s: was spilled by a preemption: it trains on", m->spec->name);
    dpm_err serr = {0};
    if (dpmd_store_save_schedule(m->dir, &sc, 0, &serr))
      dpmd_warn("model %s: %s", m->spec->name, serr.msg);
    model_set_state(m, DPMD_TRAINING);
  }
  return DPM_OK;
}

/* ---- turns: training under the scheduler ------------------------------------ */

static void train_chunk(dpmd_model *m);

/* Why a job that needs the trainer cannot run now. */
static const char *no_trainer_reason(const dpmd_model *m) {
  if (m->state == DPMD_QUEUED)
    return "it is queued for memory and builds when room frees";
  if (m->spilled) return "it was spilled by a preemption and rebuilds at its next turn";
  if (!m->fleet) return "it could not be built: delete it";
  return "its job is not formed: resume re-forms it";
}

/* A queued model's turn to build (the scheduler admitted it): ready, or
 * training when a train came while it was queued; queued again, or
 * failed (no trainer: delete it). */
static void build_queued(dpmd_model *m) {
  pthread_mutex_lock(&m->mu);
  m->admit_ready = 0;
  pthread_mutex_unlock(&m->mu);
  dpm_err err = {0};
  if (!build(m, &err)) return;
  if (m->queued) return; /* still queued (a bigger count, or overtaken) */
  model_fail(m, &err);
}

/* Preempted with policy spill: the trainer's state goes to a checkpoint in
 * the model's directory (unless the newest there holds it), the run's
 * target and the spill to its files (a restart trains it on), and the
 * trainer and its memory are freed. A checkpoint that fails keeps the
 * model resident (it is preempted as with keep) until its next turn. */
static void spill(dpmd_model *m) {
  char path[PATH_MAX];
  dpm_err err = {0};
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  if ((m->unsaved && model_checkpoint_default(m, path, sizeof path, &err)) ||
      dpmd_store_save_target(m->dir, m->target, &err) ||
      dpmd_store_save_schedule(m->dir, &sc, 1, &err)) {
    dpmd_warn("model %s: cannot spill, it stays resident: %s", m->spec->name, err.msg);
    m->spill_failed = 1;
    return;
  }
  pthread_mutex_lock(&m->mu);
  dpm_trainer *t = m->t;
  m->t = NULL;
  m->spilled = 1;
  pthread_mutex_unlock(&m->mu);
  dpm_trainer_destroy(t);
  dpmd_sched_release_memory(m->sched);
  dpmd_info("model %s: spilled at iteration %llu (preempted)", m->spec->name,
            (unsigned long long)m->iter);
}

/* A spilled model's turn: a trainer again (admitted: it may queue), loaded
 * from the newest checkpoint, where it was spilled. */
static dpm_status unspill(dpmd_model *m, dpm_err *err) {
  dpm_trainer_options opt = model_trainer_options(m);
  size_t n;
  const dpm_device *devs = dpm_checked_spec_devices(m->checked, &n);
  dpm_trainer *t = NULL;
  char path[PATH_MAX];
  m->queued = 0;
  dpm_status s = dpmd_devices_crew(m->d->devices, devs, n, &opt.crew, err);
  if (!s) s = dpm_trainer_create_checked(m->checked, &opt, &t, err);
  if (!s && dpmd_store_checkpoint_path(m->dir, m->saved_iter, path, sizeof path))
    s = dpm_errf(err, DPM_INVALID, "state dir path too long");
  if (!s) s = dpm_trainer_load(t, NULL, path, err);
  if (s) {
    dpm_trainer_destroy(t);
    if (!m->queued) dpmd_sched_release_memory(m->sched);
    return s;
  }
  model_take_trainer(m, t);
  pthread_mutex_lock(&m->mu);
  m->spilled = 0;
  pthread_mutex_unlock(&m->mu);
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  dpm_err ferr = {0};
  dpmd_store_take_target(m->dir);
  if (dpmd_store_save_schedule(m->dir, &sc, 0, &ferr))
    dpmd_warn("model %s: %s", m->spec->name, ferr.msg);
  dpmd_info("model %s: back from %s (iteration %llu)", m->spec->name, path,
            (unsigned long long)m->iter);
  return DPM_OK;
}

/* Says, once per spell, that the model is preempted, and by whom. */
static void announce_preempted(dpmd_model *m) {
  dpmd_sched_view v;
  dpmd_sched_view_of(m->sched, &v);
  if (v.state != DPMD_SCHED_PREEMPTED) return;
  char msg[192];
  snprintf(msg, sizeof msg, "preempted by %s%s", v.by, m->spilled ? " (spilled)" : "");
  dpmd_info("model %s: %s at iteration %llu", m->spec->name, msg,
            (unsigned long long)m->iter);
  m->told_preempted = 1;
  model_publish(m, DPM__EVENT_KIND__EVENT_STATE, msg);
}

/* Says that a model told preempted runs again. */
static void announce_runs_again(dpmd_model *m) {
  if (!m->told_preempted) return;
  m->told_preempted = 0;
  dpmd_info("model %s: runs again", m->spec->name);
  model_publish(m, DPM__EVENT_KIND__EVENT_STATE, "runs again");
}

/* How long a fleet job that yields waits between its coordinator's asks
 * (a decision of the whole job each: one small all-reduce). */
#define GANG_RETRY_S 0.25

/* A chunk of a fleet job's shard, which takes no turns (sched.h, gangs):
 * when a model of higher priority wants this shard's devices, the shard
 * asks the job to yield (dpm_trainer_yield), and every shard stops at the
 * job's next decision, at one iteration (train_chunk). The job then waits
 * outside its collectives, holding no crew: the other shards until their
 * coordinator tries again (model_wake_job: a train forwarded to them),
 * the coordinator every GANG_RETRY_S, or sooner for a job posted to it
 * (pause and delete stop the job as ever). A try runs the job's next
 * decision, which steps again once no shard asks. */
static void run_gang(dpmd_model *m) {
  int run = 1;
  if (m->yielded && model_coordinates(m)) {
    if (!m->napped) {
      m->napped = 1;
      return dpmd_sched_nap(m->sched, GANG_RETRY_S); /* then jobs, then here */
    }
    m->napped = 0;
    if (!(run = dpmd_sched_gang_run(m->sched))) { /* this shard yields: no try */
      if (!m->told_preempted) announce_preempted(m);
      return;
    }
    dpm_err err = {0};
    if (model_wake_job(m, &err)) {
      dpmd_sched_done(m->sched, 0);
      return model_fail(m, &err);
    }
  } else {
    run = dpmd_sched_gang_run(m->sched);
  }
  dpm_trainer_yield(m->t, !run);
  if (!run && !m->told_preempted) announce_preempted(m);
  double t0 = dpm_mono_s();
  train_chunk(m);
  if (run) dpmd_sched_done(m->sched, dpm_mono_s() - t0);
}

/* One turn of a training model: wait for it (or for a job, a spill, a
 * preemption to tell), then a chunk of steps. A fleet job's shard takes
 * no turns (run_gang). */
static void run_turn(dpmd_model *m) {
  if (m->fleet && dpmd_fleet_num_shards(m->fleet) > 1) return run_gang(m);
  switch (dpmd_sched_acquire(m->sched, m->t && !m->spill_failed)) {
  case DPMD_TURN_KICKED:
    return;
  case DPMD_TURN_SPILL:
    return spill(m);
  case DPMD_TURN_PREEMPTED:
    return announce_preempted(m);
  case DPMD_TURN_GRANTED:
    break;
  }
  double t0 = dpm_mono_s();
  announce_runs_again(m);
  dpm_err err = {0};
  if (!m->t && unspill(m, &err)) {
    dpmd_sched_done(m->sched, dpm_mono_s() - t0);
    if (!m->queued) model_fail(m, &err); /* queued: it waits for memory */
    return;
  }
  m->spill_failed = 0;
  train_chunk(m);
  dpmd_sched_done(m->sched, dpm_mono_s() - t0);
}

static void train_chunk(dpmd_model *m) {
  uint64_t left = m->target - m->iter, next = model_steps_to_checkpoint(m);
  int every = m->d->cfg->progress_every; /* >= 1 (config.c) */
  if (next < left) left = next;
  int n = left < (uint64_t)every ? (int)left : every;
  dpm_step_stats st;
  dpm_err err = {0};
  double t0 = dpm_mono_s();
  if (m->rate_n == 0) model_rate_update(m, t0, m->iter);
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
    m->images_per_s = model_rate_update(m, t1, m->iter);
  }
  pthread_mutex_unlock(&m->mu);
  if (s) {
    model_fail(m, &err);
    return;
  }
  if (st.stopped == DPM_STOP_YIELD) { /* a shard yields: the job waits, training */
    if (!m->yielded)
      dpmd_info(
          "model %s: the job yields at iteration %llu (a shard's devices are wanted "
          "by a model of higher priority)",
          m->spec->name, (unsigned long long)m->iter);
    pthread_mutex_lock(&m->mu);
    m->yielded = 1;
    m->awaiting = !model_coordinates(m); /* until the coordinator tries again */
    pthread_mutex_unlock(&m->mu);
    return;
  }
  if (m->yielded && st.steps_done > 0) {
    pthread_mutex_lock(&m->mu);
    m->yielded = 0;
    pthread_mutex_unlock(&m->mu);
    dpmd_info("model %s: the job steps again at iteration %llu", m->spec->name,
              (unsigned long long)(m->iter - (uint64_t)st.steps_done));
  }
  if (st.steps_done > 0) announce_runs_again(m);
  if (st.stopped) { /* the coordinator stopped the job: this shard stops with it */
    pthread_mutex_lock(&m->mu);
    m->yielded = 0;
    pthread_mutex_unlock(&m->mu);
    dpmd_info("model %s: the job's coordinator %s it at iteration %llu", m->spec->name,
              st.stopped == STOP_END ? "ended" : "paused", (unsigned long long)m->iter);
    model_set_state(m, DPMD_PAUSED);
    return;
  }
  if (st.steps_done > 0) model_publish(m, DPM__EVENT_KIND__EVENT_PROGRESS, NULL);
  model_checkpoint_if_due(m);
  if (m->iter >= m->target) {
    model_set_state(m, DPMD_READY);
    model_publish(m, DPM__EVENT_KIND__EVENT_DONE, NULL);
    model_release_waiters(m, NULL);
  }
}

/* ---- jobs: the commands that run on the model's thread ---------------------- */

void dpmd_job_train(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__TrainRequest *r = rq->train;
  if (m->state == DPMD_FAILED)
    return model_reply_state(m, to, "load a checkpoint to recover");
  if (m->state == DPMD_TRAINING && !m->awaiting)
    return model_reply_state(m, to, "pause it or wait");
  uint64_t iters = r->iters;
  if (r->has_epochs) { /* the reader's steps per epoch, over every replica and shard */
    int64_t per = m->t ? dpm_trainer_steps_per_epoch(m->t) : 0;
    if (!m->t) return model_reply_state(m, to, no_trainer_reason(m));
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
      return model_reply_err(m, to, &err);
  }
  pthread_mutex_lock(&m->mu);
  m->target = m->iter + iters;
  m->awaiting = 0; /* a job that yielded: its coordinator tries again */
  pthread_mutex_unlock(&m->mu);
  if (m->state == DPMD_QUEUED) /* it trains once built */
    return dpmd_model_reply_info(m, to, NULL);
  if (!m->has_first) m->first_train = to->arrived;
  model_rate_restart(m);
  model_set_state(m, DPMD_TRAINING);
  if (!r->wait) return dpmd_model_reply_info(m, to, NULL);
  waiter *w = malloc(sizeof *w);
  if (!w) return dpmd_reply_error(m->d, to, DPM_NOMEM, "out of memory");
  w->to = *to;
  w->next = m->waiters;
  m->waiters = w;
}

void dpmd_job_pause(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  if (m->state != DPMD_TRAINING) return model_reply_state(m, to, "not training");
  dpm_err err = {0};
  if (model_stop_job(m, STOP_PAUSE, &err)) return model_reply_err(m, to, &err);
  pthread_mutex_lock(&m->mu);
  m->yielded = 0; /* a job that yielded is paused with it */
  pthread_mutex_unlock(&m->mu);
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  if (m->spilled &&
      dpmd_store_save_schedule(m->dir, &sc, 0, &err)) /* paused at restart */
    dpmd_warn("model %s: %s", m->spec->name, err.msg);
  model_set_state(m, DPMD_PAUSED);
  dpmd_model_reply_info(m, to, NULL);
}

static dpm_status sync_here(dpmd_model *m, const void *arg, dpm_err *err) {
  (void)arg;
  return dpm_trainer_sync(m->t, err);
}

void dpmd_job_load(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  dpm_err err = {0};
  int fd; /* a path the client may not use is refused whatever the state */
  if (!model_receives(m) &&
      dpm_file_open_read(dpmd_paths_files(m->d->paths), rq->load->path, &fd, &err))
    return model_reply_err(m, to, &err);
  if (!model_receives(m)) close(fd);
  if (m->state == DPMD_TRAINING) return model_reply_state(m, to, "pause it first");
  if (model_load_job(m, rq->load->path, &err)) return model_reply_err(m, to, &err);
  pthread_mutex_lock(&m->mu);
  m->iter = m->target = m->ckpt_iter = dpm_trainer_iter(m->t);
  if (!model_receives(m)) snprintf(m->ckpt, sizeof m->ckpt, "%s", rq->load->path);
  m->error[0] = m->ckpt_error[0] = 0;
  m->has_last = 0; /* the previous run's loss and speed say nothing now */
  m->images_per_s = 0;
  pthread_mutex_unlock(&m->mu);
  m->trained_s = 0;
  m->unsaved = 1; /* its own directory does not hold what was loaded */
  if (m->state == DPMD_FAILED) model_set_state(m, DPMD_READY);
  dpmd_model_reply_info(m, to, NULL);
}

void dpmd_job_sync(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  dpm_err err = {0};
  if (m->state == DPMD_TRAINING && m->fleet)
    return model_reply_state(m, to, "pause it first");
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = m->spec->name;
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.command_case = DPM__REQUEST__COMMAND_SYNC;
  fwd.sync = &nr;
  if (model_whole_job(m, &fwd, sync_here, NULL, &err))
    return model_reply_err(m, to, &err);
  dpmd_model_reply_info(m, to, NULL);
}

void dpmd_job_eval(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  (void)rq;
  dpm_err err = {0};
  Dpm__EvalResult ev = DPM__EVAL_RESULT__INIT;
  if (dpm_trainer_eval(m->t, &ev.loss, &ev.accuracy, &err))
    return model_reply_err(m, to, &err);
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
    return model_reply_err(m, to, &err);
  model_reply_path(m, to, r->out, m->iter);
}

void dpmd_job_set(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__SetRequest *r = rq->set;
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  if (r->has_priority) sc.priority = r->priority;
  if (r->has_weight) sc.weight = r->weight;
  if (r->has_preempt) sc.spill = r->preempt == DPM__PREEMPT_POLICY__PREEMPT_SPILL;
  dpm_err err = {0};
  if (dpmd_store_save_schedule(m->dir, &sc, m->spilled, &err))
    return model_reply_err(m, to, &err);
  dpmd_sched_set(m->sched, &sc);
  dpmd_info("model %s: priority %d, weight %g, preempt %s", m->spec->name, sc.priority,
            sc.weight, sc.spill ? "spill" : "keep");
  dpmd_model_reply_info(m, to, NULL);
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

/* Whether job fn runs on a model without a trainer: resume (a fleet job
 * not formed: restored, failed, re-formed); and, but for a fleet job's
 * model, train, pause and set (queued, spilled: they act on its state). */
static int runs_without_trainer(const dpmd_model *m, dpmd_job_fn fn) {
  if (fn == dpmd_job_resume) return 1;
  return !m->fleet &&
         (fn == dpmd_job_train || fn == dpmd_job_pause || fn == dpmd_job_set);
}

static job *next_job(dpmd_model *m) {
  pthread_mutex_lock(&m->mu);
  while (!m->jobs && (m->state != DPMD_TRAINING || m->awaiting) &&
         !(m->state == DPMD_QUEUED && m->admit_ready))
    pthread_cond_wait(&m->cv, &m->mu);
  job *j = m->jobs;
  if (j && !(m->jobs = j->next)) m->jobs_tail = NULL;
  if (j && j->kind == JOB_REQUEST) m->n_jobs--;
  pthread_mutex_unlock(&m->mu);
  return j;
}

/* The model's last job: delete (files removed) or shut down. */
static void finish(dpmd_model *m, job *j) {
  dpm_err err = {0};
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpm_err serr = {0}; /* a fleet's coordinator: every shard stops at this iteration */
  model_stop_job(m, STOP_END,
                 &serr); /* failed: the model is failed, and not checkpointed */
  if (j->kind == JOB_SHUTDOWN) model_checkpoint_at_shutdown(m);
  err = (dpm_err){.code = DPM_STATE};
  snprintf(err.msg, sizeof err.msg, "%s",
           j->kind == JOB_DELETE ? "model deleted" : "daemon shutting down");
  model_release_waiters(m, &err);
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
 * which inherit it) run TRAIN_NICE below the loop thread's priority (nice
 * values above it, at most 19): it then preempts them on waking, and
 * answers while a model keeps every core busy. Relative, so that a dpmd
 * started under nice keeps its loop on top. Lowering needs no privilege;
 * on failure they stay where they are. */
#define TRAIN_NICE 5

static void lower_priority(void) {
  errno = 0;
  int base = getpriority(PRIO_PROCESS, 0); /* the process's: the loop thread's */
  if (base == -1 && errno) return;
  int nice = base + TRAIN_NICE < 19 ? base + TRAIN_NICE : 19;
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
}

static void *model_main(void *arg) {
  dpmd_model *m = arg;
  dpm_err err = {0};
  lower_priority();
  if (build(m, &err) && !m->queued) {
    dpmd_error("model %s: %s", m->spec->name, err.msg);
    Dpm__Response rs = DPM__RESPONSE__INIT;
    rs.status = dpm_status_to_wire(err.code);
    rs.message = err.msg;
    dpmd_model_exited(m->d, m, m->submit_to.header ? &m->submit_to : NULL, &rs);
    return NULL;
  }
  if (m->queued) {
    dpmd_info("model %s: %s", m->spec->name, err.msg);
    model_set_state(m, DPMD_QUEUED);
  }
  if (m->submit_to.header) dpmd_model_reply_info(m, &m->submit_to, NULL);
  for (;;) {
    job *j = next_job(m);
    if (!j) {
      if (m->state == DPMD_QUEUED)
        build_queued(m);
      else
        run_turn(m);
      continue;
    }
    if (j->kind != JOB_REQUEST) {
      finish(m, j);
      free(j);
      return NULL;
    }
    test_gate(m, j);
    if (!m->t && !runs_without_trainer(m, j->fn))
      model_reply_state(m, &j->to, no_trainer_reason(m));
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
  if (!full) dpmd_sched_kick(m->sched); /* a turn's wait ends for the job */
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

/* The scheduler's callbacks (server/sched.h), under its lock. */
static void sched_interrupt(void *arg) {
  dpmd_model *m = arg;
  pthread_mutex_lock(&m->mu);
  if (m->t) dpm_trainer_interrupt(m->t);
  pthread_mutex_unlock(&m->mu);
}

static void sched_wake(void *arg) {
  dpmd_model *m = arg;
  pthread_mutex_lock(&m->mu);
  m->admit_ready = 1;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

dpm_status dpmd_model_new(dpmd *d, dpm_checked_spec *checked, int restore,
                          const dpmd_schedule *schedule, int no_queue,
                          dpmd_fleet_link *fleet, dpmd_reply_to *to, dpmd_model **out,
                          dpm_err *err) {
  *out = NULL;
  const Dpm__ModelSpec *spec = dpm_checked_spec_pb(checked);
  dpmd_model *m = calloc(1, sizeof *m);
  if (!m) {
    dpm_checked_spec_free(checked);
    dpmd_fleet_link_free(fleet);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  m->d = d;
  m->checked = checked;
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
  m->no_queue = no_queue;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  dpmd_schedule sc = schedule ? *schedule : (dpmd_schedule){.weight = 1};
  int spilled;
  int named = !dpmd_store_model_dir(d->cfg->state_dir, spec->name, m->dir, sizeof m->dir);
  if (named && restore) dpmd_store_load_schedule(m->dir, &sc, &spilled); /* else as is */
  const Dpm__ParallelSpec *par = spec->parallel;
  dpmd_sched_hooks hooks = {.interrupt = sched_interrupt, .wake = sched_wake, .arg = m};
  if (named)
    m->sched = dpmd_sched_join(d->sched, spec->name,
                               (const char *const *)(par ? par->devices : NULL),
                               par ? par->n_devices : 0, &sc, &hooks);
  if (!named || !m->sched ||
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
  dpmd_sched_leave(m->sched); /* its memory freed, the queue moves */
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  dpmd_fleet_link_free(m->fleet); /* after the trainer, whose communicator used it */
  for (int i = 0; i < m->n_retired; i++) dpmd_fleet_link_free(m->retired[i]);
  free(m->retired);
  for (int i = 0; i < m->n_retired_specs; i++) dpm_checked_spec_free(m->retired_specs[i]);
  free(m->retired_specs);
  dpm_checked_spec_free(m->checked);
  free(m);
}
