/* A served model's checkpoints (daemon/server/models/): written on
 * command (dpmd_job_checkpoint, model.h), periodically while it trains
 * (its policy: every_iters, every_s), at shutdown, and read back when the
 * model is restored. Checkpoints in the model's own directory keep
 * checkpoint_retention files (store.h). Model thread only. A failed write
 * is logged (rate-limited), kept for status (checkpoint_error) until the
 * next success and returned; nothing here fails the model. Builds on
 * model.c (internal.h). */
#ifndef DPMD_MODELS_CHECKPOINTS_H
#define DPMD_MODELS_CHECKPOINTS_H

#include "server/models/internal.h"

/* Into the model's own directory at its iteration (path: cap n), keeping
 * checkpoint_retention files. */
dpm_status model_checkpoint_default(dpmd_model *m, char *path, size_t n, dpm_err *err);
/* Steps until the next periodic checkpoint by iterations (or UINT64_MAX). */
uint64_t model_steps_to_checkpoint(const dpmd_model *m);
/* A periodic checkpoint when one is due (a failure is retried with backoff). */
void model_checkpoint_if_due(dpmd_model *m);
/* Restore: the newest checkpoint that loads into the model's trainer
 * (paused there), or ready when none does. */
void model_restore_checkpoint(dpmd_model *m);
/* At shutdown, when the config says so (checkpoint_on_shutdown). */
void model_checkpoint_at_shutdown(dpmd_model *m);

#endif
