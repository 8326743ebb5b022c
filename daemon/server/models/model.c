/* A served model's state (server/models/model.h, internal.h): its
 * accessors and snapshot, the events it publishes, its failure, the
 * replies every job uses, taking a built trainer and the images/s window.
 * Calls no other file of daemon/server/models/. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/spec.h"
#include "common/validate.h"
#include "engine/workspace.h"
#include "server/log.h"
#include "server/models/internal.h"
#include "server/paths.h"
#include "server/sched.h"

static const char *const state_names[DPMD_STATE_COUNT] = {
    "building", "ready", "training", "paused", "failed", "queued"};
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

/* ---- snapshots, events and replies --------------------------------------- */

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
  dpmd_sched_view v; /* the scheduler's lock before the model's, never inside it */
  dpmd_sched_view_of(m->sched, &v);
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  Dpm__Schedule *ps = &buf->schedule;
  dpm__schedule__init(ps);
  ps->has_priority = ps->has_weight = ps->has_preempt = 1;
  ps->priority = sc.priority;
  ps->weight = sc.weight;
  ps->preempt =
      sc.spill ? DPM__PREEMPT_POLICY__PREEMPT_SPILL : DPM__PREEMPT_POLICY__PREEMPT_KEEP;
  ps->has_max_memory = sc.max_memory > 0;
  ps->max_memory = sc.max_memory;
  info->schedule = ps;
  info->group = strcpy(buf->group, v.group);
  info->has_share = 1;
  info->share = v.share;
  pthread_mutex_lock(&m->mu);
  info->state = (char *)state_names[m->state];
  if (m->state == DPMD_TRAINING && v.state == DPMD_SCHED_PREEMPTED) {
    info->state = "preempted";
    snprintf(buf->waiting, sizeof buf->waiting, "by %s%s", v.by,
             m->spilled ? ", spilled to its checkpoint" : "");
    info->waiting = buf->waiting;
  } else if (m->state == DPMD_TRAINING && m->yielded) {
    info->state = "preempted";
    info->waiting = "with its job, which yields to a model of higher priority on a shard";
  } else if (v.state == DPMD_SCHED_QUEUED) {
    snprintf(buf->waiting, sizeof buf->waiting, "for memory: it needs %llu bytes",
             (unsigned long long)v.bytes);
    info->waiting = buf->waiting;
    info->has_queue_position = 1;
    info->queue_position = (uint32_t)v.position;
  }
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
    info->has_grad_norm = !isnan(m->last.grad_norm);
    info->grad_norm = m->last.grad_norm;
    double scale;
    if (m->spec->precision && dpm_spec_loss_scale(m->spec->precision->loss_scale,
                                                  &scale) > DPM_LOSS_SCALE_NONE) {
      info->has_loss_scale = info->has_skipped_steps = 1;
      info->loss_scale = m->last.loss_scale;
      info->skipped_steps = m->last.skipped_total;
    }
    info->has_skipped_samples = dpm_reader_kind_is_image(m->spec->input->reader);
    info->skipped_samples = m->last.samples_skipped;
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

void model_publish(dpmd_model *m, Dpm__EventKind kind, const char *msg) {
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

void model_set_state(dpmd_model *m, dpmd_state s) {
  pthread_mutex_lock(&m->mu);
  dpmd_state old = m->state;
  m->state = s;
  pthread_mutex_unlock(&m->mu);
  dpmd_sched_want(m->sched, s == DPMD_TRAINING);
  if (old != s) {
    dpmd_info("model %s: %s", m->spec->name, state_names[s]);
    model_publish(m, DPM__EVENT_KIND__EVENT_STATE, NULL);
  }
}

void dpmd_model_reply_info(dpmd_model *m, dpmd_reply_to *to, const char *message) {
  Dpm__Response rs = DPM__RESPONSE__INIT;
  Dpm__ModelInfo info;
  dpmd_info_buf buf;
  dpmd_model_info(m, &info, &buf);
  rs.result_case = DPM__RESPONSE__RESULT_MODEL;
  rs.model = &info;
  if (message) rs.message = (char *)message;
  dpmd_reply(m->d, to, &rs);
}

void model_reply_err(dpmd_model *m, dpmd_reply_to *to, const dpm_err *err) {
  dpmd_reply_error(m->d, to, err->code, "%s: %s", m->spec->name, err->msg);
}

void model_reply_state(dpmd_model *m, dpmd_reply_to *to, const char *what) {
  dpmd_reply_error(m->d, to, DPM_STATE, "%s: model is %s%s%s", m->spec->name,
                   state_names[m->state], what ? ": " : "", what ? what : "");
}

void model_reply_path(dpmd_model *m, dpmd_reply_to *to, const char *path, uint64_t iter) {
  Dpm__Response rs = DPM__RESPONSE__INIT;
  Dpm__PathResult pr = DPM__PATH_RESULT__INIT;
  pr.path = (char *)path;
  pr.has_iter = 1;
  pr.iter = iter;
  rs.result_case = DPM__RESPONSE__RESULT_PATH;
  rs.path = &pr;
  dpmd_reply(m->d, to, &rs);
}

/* Answer every train --wait: with the model (ok) or with err. */
void model_release_waiters(dpmd_model *m, const dpm_err *err) {
  for (waiter *w; (w = m->waiters);) {
    m->waiters = w->next;
    if (err)
      model_reply_err(m, &w->to, err);
    else
      dpmd_model_reply_info(m, &w->to, NULL);
    free(w);
  }
}

void model_fail(dpmd_model *m, const dpm_err *in) {
  dpm_err named = *in, *err = &named; /* a fleet's processes named as its shards */
  if (m->fleet)
    dpmd_fleet_name_shards(m->spec, dpmd_fleet_shard_id(m->fleet), in->msg, named.msg,
                           sizeof named.msg);
  dpmd_error("model %s failed: %s", m->spec->name, err->msg);
  pthread_mutex_lock(&m->mu);
  dpm_escape(err->msg, m->error, sizeof m->error);
  pthread_mutex_unlock(&m->mu);
  model_set_state(m, DPMD_FAILED);
  model_publish(m, DPM__EVENT_KIND__EVENT_ERROR, err->msg);
  model_release_waiters(m, err);
}

/* ---- the trainer and the run's rate --------------------------------------- */

static uint64_t trainer_bytes(dpm_trainer *t) {
  uint64_t b = 0;
  for (int r = 0; r < dpm_trainer_devices(t); r++)
    b += dpm_ws_bytes(dpm_trainer_workspace(t, r));
  return b;
}

/* The model's trainer becomes t (built, formed). */
void model_take_trainer(dpmd_model *m, dpm_trainer *t) {
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
  m->global_batch =
      dpm_trainer_batch(t) * dpm_trainer_devices(t) * dpm_trainer_accumulate_steps(t);
}

/* The trainer's admission (dpm_trainer_options.admit): the scheduler
 * holds its bytes, device bytes being its replicas' tensors and scratch
 * over its devices. Queued: m->queued, and DPM_STATE ends the create. A
 * fleet job's shard is refused rather than queued (its shards build
 * together). */
static dpm_status admit(void *arg, const dpm_trainer_memory *mem, int devices,
                        dpm_err *err) {
  dpmd_model *m = arg;
  uint64_t dev =
      (mem->tensors + mem->scratch + (uint64_t)devices - 1) / (uint64_t)devices;
  switch (dpmd_sched_admit(m->sched, mem->total, dev, !m->no_queue && !m->fleet, err)) {
  case DPMD_ADMIT_OK:
    return DPM_OK;
  case DPMD_ADMIT_QUEUED:
    m->queued = 1;
    return dpm_errf(err, DPM_STATE, "%s: queued for memory", m->spec->name);
  default:
    return err->code;
  }
}

/* What every trainer of the model is built with (the crew and a fleet's
 * part are added by the caller). */
dpm_trainer_options model_trainer_options(dpmd_model *m) {
  return (dpm_trainer_options){.net_type = -1,
                               .max_bytes = m->d->cfg->max_model_bytes,
                               .max_bytes_name = "max_model_bytes",
                               .admit = admit,
                               .admit_arg = m,
                               .fs = dpmd_paths_data(m->d->paths),
                               .data_cache = m->d->data};
}

/* A run (re)starts: the images/s window starts over. */
void model_rate_restart(dpmd_model *m) { m->rate_n = 0; }

/* Images per second over the last RATE_WINDOW_S seconds or more of
 * wall-clock time (jobs between steps, other models on the same devices, a
 * loaded host: all of it counts, as a user watching the run sees it).
 * Samples are kept at most every RATE_WINDOW_S / (RATE_SAMPLES / 2) s. */
double model_rate_update(dpmd_model *m, double now, uint64_t iter) {
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
