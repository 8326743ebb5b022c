/* A served model as one shard of a fleet job (server/fleet/fleet.h): the
 * model holds the job's link; its coordinator (shard 0) stops, forwards to
 * and loads on every shard, the others receive what shard 0 reads. Model
 * thread only (the link's accessors are any thread's). Errors are the
 * dpm_err of the failing part: this shard's, or a named other's. Builds on
 * model.c (internal.h). */
#ifndef DPMD_MODELS_SHARD_H
#define DPMD_MODELS_SHARD_H

#include "server/models/internal.h"

/* Why a fleet job's coordinator stops the job's run (dpm_trainer_stop's
 * reason, as every other shard receives it in band). */
enum { STOP_PAUSE = 1, STOP_END = 2 }; /* pause; delete or shutdown */

/* Whether this model coordinates a job of several daemons (shard 0). */
int model_coordinates(const dpmd_model *m);
/* Shards but 0 of a fleet job receive what shard 0 reads (trainer.h). */
int model_receives(const dpmd_model *m);
/* The coordinator of a training fleet job stops every shard after the
 * iteration it stands at (why: STOP_*); a shard that does not answer
 * fails the model, naming it. DPM_OK elsewhere. */
dpm_status model_stop_job(dpmd_model *m, int why, dpm_err *err);
/* The coordinator of a job that yields to a model of higher priority
 * (lifecycle.c) brings every other shard back to the job's next decision
 * (a train forwarded to each); DPM_OK at once when it does not yield. */
dpm_status model_wake_job(dpmd_model *m, dpm_err *err);
/* Runs fn(arg) on this shard while the coordinator forwards fwd to every
 * other shard; the first failure is the result. Elsewhere fn alone. */
dpm_status model_whole_job(dpmd_model *m, Dpm__Request *fwd,
                           dpm_status (*fn)(dpmd_model *m, const void *arg, dpm_err *err),
                           const void *arg, dpm_err *err);
/* Loads path (the client's files) into the model on the whole job
 * (model_whole_job): shard 0 reads it; the coordinator sends every other
 * shard a load that names no file, and they receive shard 0's state. */
dpm_status model_load_job(dpmd_model *m, const char *path, dpm_err *err);
/* Brings back a restored fleet job's shard (DIR/shard): the coordinator
 * paused with no trainer, another shard dropped with its files. */
dpm_status model_restore_fleet(dpmd_model *m, dpm_err *err);

#endif
