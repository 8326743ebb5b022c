/* A served model as one shard of a fleet job (shard.h). */
#include "server/models/shard.h"

#include "server/log.h"
#include "server/models/store.h"
#include "server/paths.h"

static const char *const stop_names[] = {"", "paused", "ended"};

/* Whether this model coordinates a job of several daemons (shard 0). */
int model_coordinates(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) == 0 &&
         dpmd_fleet_num_shards(m->fleet) > 1;
}

/* Shards but 0 of a fleet job receive what shard 0 reads (trainer.h). */
int model_receives(const dpmd_model *m) {
  return m->fleet && dpmd_fleet_shard_id(m->fleet) != 0;
}

/* The coordinator of a training fleet job stops every shard after the
 * iteration it stands at (in band: trainer.h, dpm_trainer_stop). A shard
 * that does not answer within the timeout fails the model, naming it. */
dpm_status model_stop_job(dpmd_model *m, int why, dpm_err *err) {
  if (!model_coordinates(m) || m->state != DPMD_TRAINING || !m->t) return DPM_OK;
  if (model_wake_job(m, err) || dpm_trainer_stop(m->t, why, err)) {
    model_fail(m, err);
    return err->code;
  }
  dpmd_info("model %s: every shard %s at iteration %llu", m->spec->name, stop_names[why],
            (unsigned long long)m->iter);
  return DPM_OK;
}

/* A job that yields (lifecycle.c, run_gang) waits outside its
 * collectives: the coordinator forwards the train again (towards the same
 * target, from the job's iteration), so that every shard comes to the
 * job's next decision. DPM_OK when the job does not yield. */
dpm_status model_wake_job(dpmd_model *m, dpm_err *err) {
  if (!model_coordinates(m) || !m->yielded) return DPM_OK;
  return dpmd_fleet_train(m->d, m->fleet, m->spec, m->target - m->iter, m->iter, err);
}

/* Runs a collective on the whole fleet job at its coordinator: fwd is sent
 * to every other shard while this shard's part (fn) runs; the first
 * failure, this shard's or a named other's, is the result. Elsewhere (and
 * for a job of one daemon) fn alone. */
dpm_status model_whole_job(dpmd_model *m, Dpm__Request *fwd,
                           dpm_status (*fn)(dpmd_model *m, const void *arg, dpm_err *err),
                           const void *arg, dpm_err *err) {
  dpmd_fleet_calls *fc = NULL;
  if (model_coordinates(m) &&
      dpmd_fleet_forward_begin(m->d, m->fleet, m->spec, fwd, &fc, err))
    return err->code;
  dpm_status s = fn(m, arg, err);
  dpm_err ferr = {0};
  if (fc && dpmd_fleet_forward_end(fc, &ferr) && !s) {
    *err = ferr;
    s = dpm_err_prefix(err, "done here, not on every shard: ");
  }
  return s;
}

/* This shard's part of a load: path at shard 0, shard 0's state elsewhere. */
static dpm_status load_here(dpmd_model *m, const void *path, dpm_err *err) {
  return dpm_trainer_load(m->t, dpmd_paths_files(m->d->paths),
                          model_receives(m) ? NULL : path, err);
}

dpm_status model_load_job(dpmd_model *m, const char *path, dpm_err *err) {
  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = m->spec->name;
  lr.path = ""; /* the other shards read nothing */
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.command_case = DPM__REQUEST__COMMAND_LOAD;
  fwd.load = &lr;
  return model_whole_job(m, &fwd, load_here, path, err);
}

/* A restored fleet job's shard. The coordinator (DIR/shard says 0) comes
 * back paused at its newest checkpoint's iteration with no trainer: its
 * job is not formed until `resume` re-forms it (reform.c); another
 * shard drops itself and its files (its coordinator re-forms the job with
 * it when asked). DIR/shard missing (a state dir of an older dpmd): the
 * files stay and the model is not brought back. */
dpm_status model_restore_fleet(dpmd_model *m, dpm_err *err) {
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
  /* its spec.pb was saved with the rendezvous explicit (commands.c made it
   * so before the submit's check): coordinating changes nothing in it */
  if (dpmd_fleet_coordinate((Dpm__ModelSpec *)m->spec, &l, err)) return err->code;
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
  model_set_state(m, DPMD_PAUSED);
  return DPM_OK;
}
