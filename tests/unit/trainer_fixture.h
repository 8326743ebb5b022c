/* Trainer fixtures shared by the data-parallel tests: small specs on
 * synthetic 28x28 data, trainers on CPU replicas, steps. Each helper prints
 * what went wrong ("    create: ...") and returns NULL or 0, so a test can
 * chain them in one CHECK. */
#ifndef DPM_TEST_TRAINER_FIXTURE_H
#define DPM_TEST_TRAINER_FIXTURE_H

#include "train/trainer.h"

/* A spec: synthetic input (2048 examples, 10 classes, `seed`),
 * `per_device` examples per device, the given forward ops ending in `pred`,
 * SoftmaxWithLoss + Accuracy, momentum SGD at learning rate `lr`,
 * `net_type` and `bucket_bytes`. Free with dpm_spec_free. */
Dpm__ModelSpec *tf_spec(const char *forward, int per_device, int seed, double lr,
                        const char *net_type, int bucket_bytes);
/* The kind of device tf_trainer's replicas run on (default cpu). */
extern dpm_device_kind tf_device_kind;
/* A trainer on `devices` replicas, on a borrowed crew or (NULL) its own. */
dpm_trainer *tf_trainer(const Dpm__ModelSpec *spec, int devices, struct dpm_crew *crew);
/* Runs n steps; 1 when all n ran. */
int tf_steps(dpm_trainer *t, int n);

#endif
