/* In-process trainer: a model's replica on one device, fed by the shared
 * reader, stepped in lock-step; evaluation on the spec's eval data.
 *
 * Ownership: the trainer copies what it needs from the spec; the caller may
 * free the spec after create. Threads: a trainer is driven by one thread
 * (its reader runs a prefetch thread of its own). Errors: create validates
 * the whole spec before allocating any tensor (DPM_SPEC with file:line and
 * op), a missing data file is DPM_IO; step fails with DPM_NUMERIC when the
 * loss is not finite. */
#ifndef DPM_TRAINER_H
#define DPM_TRAINER_H

#include <stdint.h>

#include "engine/model.h"

typedef struct dpm_trainer dpm_trainer;

typedef struct dpm_step_stats {
  uint64_t iter;     /* completed steps */
  double loss;       /* of the last step (sum of the losses) */
  double accuracy;   /* of the last step's batch, NaN without an Accuracy op */
  double lr;         /* learning rate used by the last step */
  double step_ms;    /* wall time of the last step */
} dpm_step_stats;

dpm_status dpm_trainer_create(const Dpm__ModelSpec *spec, dpm_trainer **out,
                              dpm_err *err);
/* Run n training steps; *last describes the last one. */
dpm_status dpm_trainer_step(dpm_trainer *t, int n, dpm_step_stats *last, dpm_err *err);
/* Loss and accuracy over the whole eval set, in test mode. DPM_STATE when
 * the spec has no eval section. */
dpm_status dpm_trainer_eval(dpm_trainer *t, double *loss, double *accuracy,
                            dpm_err *err);
/* Steps in one epoch of the training data; examples per step. */
int64_t dpm_trainer_steps_per_epoch(const dpm_trainer *t);
int dpm_trainer_batch(const dpm_trainer *t);
const dpm_model *dpm_trainer_model(const dpm_trainer *t);
/* The workspace of the (master) replica, for tests and benchmarks. */
struct dpm_workspace *dpm_trainer_workspace(dpm_trainer *t);
void dpm_trainer_destroy(dpm_trainer *t);

#endif
