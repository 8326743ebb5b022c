/* A served model's checkpoints (checkpoints.h). */
#include "server/models/checkpoints.h"

#include <stdio.h>

#include "common/clock.h"
#include "common/escape.h"
#include "server/log.h"
#include "server/models/store.h"
#include "server/paths.h"

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
dpm_status model_checkpoint_default(dpmd_model *m, char *path, size_t n, dpm_err *err) {
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
    return model_reply_state(m, to, "its parameters may not be finite");
  char path[PATH_MAX];
  dpm_err err = {0};
  const char *out = rq->checkpoint->out;
  dpm_status s;
  if (out && *out) {
    snprintf(path, sizeof path, "%s", out);
    s = checkpoint_to(m, dpmd_paths_files(m->d->paths), path, &err);
  } else {
    s = model_checkpoint_default(m, path, sizeof path, &err);
  }
  if (s) return model_reply_err(m, to, &err);
  model_reply_path(m, to, path, m->iter);
}

/* Steps until the next periodic checkpoint by iterations (or a huge number). */
uint64_t model_steps_to_checkpoint(const dpmd_model *m) {
  if (!m->every_iters) return UINT64_MAX;
  return m->every_iters - m->iter % m->every_iters;
}

/* The longest wait between two tries of a failing periodic checkpoint. */
#define CKPT_BACKOFF_MAX_S 300.0

/* A periodic checkpoint when one is due. A failure is logged (rate-limited),
 * shown in status (checkpoint_error) and published; training goes on, and
 * the next try waits 1 s, then twice as long after each failure in a row,
 * up to CKPT_BACKOFF_MAX_S (it is due as soon as that wait is over). */
void model_checkpoint_if_due(dpmd_model *m) {
  double now = dpm_mono_s();
  int due =
      (m->every_iters && m->iter % m->every_iters == 0 && m->iter != m->ckpt_iter) ||
      (m->every_s > 0 && m->trained_s >= m->every_s) ||
      (m->ckpt_failures && m->iter != m->ckpt_iter);
  if (!due || now < m->ckpt_retry_s) return;
  char path[PATH_MAX];
  dpm_err err = {0};
  if (!model_checkpoint_default(m, path, sizeof path, &err)) return;
  double wait = CKPT_BACKOFF_MAX_S;
  if (m->ckpt_failures < 30) wait = (double)(1u << m->ckpt_failures);
  m->ckpt_failures++;
  m->ckpt_retry_s = now + (wait < CKPT_BACKOFF_MAX_S ? wait : CKPT_BACKOFF_MAX_S);
  model_publish(m, DPM__EVENT_KIND__EVENT_ERROR, m->ckpt_error);
}

/* Restore: the newest checkpoint that loads; a torn or corrupt one (a
 * crash while writing) is skipped with a warning. */
void model_restore_checkpoint(dpmd_model *m) {
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
    model_set_state(m, DPMD_PAUSED);
    return;
  }
  model_set_state(m, DPMD_READY);
}

/* At shutdown (when the config says so), a model whose parameters changed
 * since it last wrote a checkpoint into its own directory is checkpointed,
 * whatever its state (training, ready after a run, paused), and where an
 * unfinished run was headed is saved, so `resume` after the restart
 * finishes it. A failed model is not (its parameters may not be finite):
 * that is logged. If the checkpoint fails, the previous one stays and the
 * target is saved anyway; dpmd exits non-zero naming the model
 * (dpmd_shutdown_failed). */
void model_checkpoint_at_shutdown(dpmd_model *m) {
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
  if (m->unsaved && (s = model_checkpoint_default(m, path, sizeof path, &err)))
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
