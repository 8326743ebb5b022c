/* Resume (dpmd_job_resume, server/models/model.h), and re-forming a
 * fleet job at its coordinator: a failed job, one not formed (restored),
 * one a shard cannot go on with, or an elastic resume over other shards.
 * Model thread only. A failure of re-forming fails the model (no trainer)
 * with the reason; resume tries again. Builds on model.c, checkpoints.c
 * and shard.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "common/validate.h"
#include "server/devices.h"
#include "server/log.h"
#include "server/models/checkpoints.h"
#include "server/models/shard.h"
#include "server/models/store.h"
#include "server/sched.h"

/* Loads, on every shard of the (re-formed) job, the newest of the model's
 * checkpoints that shard 0 accepts (the others receive it); one refused
 * (torn, corrupt) is skipped with a warning, as every shard hears shard
 * 0's verdict. None at all: the job starts from its seeded init. */
static dpm_status load_newest(dpmd_model *m, dpm_err *err) {
  uint64_t it[64];
  int n = dpmd_store_checkpoints(m->dir, it, 64);
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    if (dpmd_store_checkpoint_path(m->dir, it[i], path, sizeof path)) continue;
    dpm_status s = model_load_job(m, path, err);
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
static dpm_status reform(dpmd_model *m, dpm_checked_spec *elastic, dpm_err *err) {
  dpm_err derr = {0};
  if (dpmd_fleet_delete(m->d, m->fleet, m->spec, &derr))
    dpmd_warn("model %s: re-forming: %s", m->spec->name, derr.msg);
  if (elastic) { /* the job's new shards from now on (saved: a restart keeps them) */
    dpm_checked_spec **rs =
        realloc(m->retired_specs, (size_t)(m->n_retired_specs + 1) * sizeof *rs);
    if (!rs) {
      dpm_checked_spec_free(elastic);
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    }
    m->retired_specs = rs;
    if (dpmd_store_save_spec(m->dir, dpm_checked_spec_pb(elastic), err)) {
      dpm_checked_spec_free(elastic);
      return err->code;
    }
    m->retired_specs[m->n_retired_specs++] = m->checked;
    m->checked = elastic;
    m->spec = dpm_checked_spec_pb(elastic);
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
  /* the spec's rendezvous is explicit since its submit (commands.c):
   * coordinating changes nothing in the checked spec */
  if (dpmd_fleet_coordinate((Dpm__ModelSpec *)m->spec, &l, err)) return err->code;
  m->retired[m->n_retired++] = m->fleet;
  m->fleet = l;
  model_set_state(m, DPMD_BUILDING);
  size_t n;
  const dpm_device *devs = dpm_checked_spec_devices(m->checked, &n);
  dpm_trainer_options opt = model_trainer_options(m);
  dpmd_schedule sc = dpmd_sched_schedule(m->sched);
  dpm_status s = dpmd_fleet_form(m->d, l, m->spec, sc.priority, sc.weight, err);
  if (!s) s = dpmd_fleet_options(m->d, l, m->spec, &opt, err);
  if (!s) s = dpmd_devices_crew(m->d->devices, devs, n, &opt.crew, err);
  dpm_trainer *t = NULL;
  if (!s) s = dpm_trainer_create_checked(m->checked, &opt, &t, err);
  if (s) {
    dpmd_fleet_abort(m->d, l, m->spec);
    return s;
  }
  model_take_trainer(m, t);
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
  model_rate_restart(m);
  model_set_state(m, m->target > m->iter ? DPMD_TRAINING : DPMD_READY);
  return DPM_OK;
}

/* A copy of m's spec over the shards of an elastic resume (r), with the
 * per-device batch that keeps the global batch (or, allowed, the old one:
 * *note says the global batch changed), checked (its devices as m's were
 * parsed). DPM_INVALID: not this job's coordinator first, a bad or repeated
 * endpoint, a batch that does not divide; DPM_SPEC: the copy's check. */
static dpm_status elastic_spec(dpmd_model *m, const Dpm__ResumeRequest *r,
                               dpm_checked_spec **out, char *note, size_t cap,
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
  size_t n;
  if (dpm_spec_check(s, dpm_checked_spec_devices(m->checked, &n), out, err)) {
    dpm_spec_free(s);
    return err->code;
  }
  return DPM_OK;
}

/* Whether resume re-forms the job: its coordinator, failed or not formed. */
static int needs_reform(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) == 0 &&
         (m->state == DPMD_FAILED || !m->t);
}

void dpmd_job_resume(dpmd_model *m, const Dpm__Request *rq, dpmd_reply_to *to) {
  const Dpm__ResumeRequest *r = rq->resume;
  dpm_checked_spec *elastic = NULL;
  char note[160] = "";
  dpm_err err = {0};
  if (r->n_shards) { /* elastic: the coordinator re-forms the job over r's shards */
    if (!m->fleet || dpmd_fleet_shard_id(m->fleet) != 0)
      return dpmd_reply_error(m->d, to, DPM_INVALID,
                              "%s: --shards re-forms a fleet job at its coordinator",
                              m->spec->name);
    if (m->state == DPMD_TRAINING) return model_reply_state(m, to, "pause it first");
    if (elastic_spec(m, r, &elastic, note, sizeof note, &err))
      return model_reply_err(m, to, &err);
  }
  if (elastic || needs_reform(m)) {
    if (reform(m, elastic, &err)) {
      model_fail(m, &err);
      return model_reply_err(m, to, &err);
    }
    if (note[0]) dpmd_info("model %s: %s", m->spec->name, note);
    return dpmd_model_reply_info(m, to, note[0] ? note : NULL);
  }
  if (m->state != DPMD_PAUSED) return model_reply_state(m, to, "not paused");
  /* the whole job goes on towards the same target; a shard that cannot
   * (its daemon restarted and dropped it) makes the coordinator checkpoint
   * where the job stopped and re-form it from there */
  if (model_coordinates(m) && m->target > m->iter &&
      dpmd_fleet_train(m->d, m->fleet, m->spec, m->target - m->iter, m->iter, &err)) {
    dpmd_warn("model %s: %s; re-forming the job", m->spec->name, err.msg);
    char path[PATH_MAX];
    dpm_err cerr = {0};
    if (m->ckpt_iter != m->iter && model_checkpoint_default(m, path, sizeof path, &cerr))
      dpmd_warn("model %s: re-forming from an older checkpoint", m->spec->name);
    if (reform(m, NULL, &err)) {
      model_fail(m, &err);
      return model_reply_err(m, to, &err);
    }
    return dpmd_model_reply_info(m, to, NULL);
  }
  model_rate_restart(m);
  model_set_state(m, m->target > m->iter ? DPMD_TRAINING : DPMD_READY);
  dpmd_model_reply_info(m, to, NULL);
}
