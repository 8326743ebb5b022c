/* Trainer fixtures shared by the data-parallel tests: small specs on
 * synthetic 28x28 data, trainers on CPU replicas, steps. Each helper prints
 * what went wrong ("    create: ...") and returns NULL or 0, so a test can
 * chain them in one CHECK. */
#ifndef DPM_TEST_TRAINER_FIXTURE_H
#define DPM_TEST_TRAINER_FIXTURE_H

#include "train/trainer.h"

/* Forward ops for tf_spec: the MLP of the examples, and the Fashion-MNIST
 * CNN's structure with fewer channels (cheap under the sanitizers). */
#define MLP_FORWARD                                                                      \
  "  - {op: FC, in: [data], out: fc1, dim_out: 256}\n"                                   \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: FC, in: [fc1], out: fc2, dim_out: 128}\n"                                    \
  "  - {op: Relu, in: [fc2], out: fc2}\n"                                                \
  "  - {op: FC, in: [fc2], out: pred, dim_out: 10}\n"

#define CNN_FORWARD                                                                      \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}\n"              \
  "  - {op: Relu, in: [conv1], out: conv1}\n"                                            \
  "  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}\n"                   \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 5, pad: 2}\n"            \
  "  - {op: Relu, in: [conv2], out: conv2}\n"                                            \
  "  - {op: MaxPool, in: [conv2], out: pool2, kernel: 2, stride: 2}\n"                   \
  "  - {op: FC, in: [pool2], out: fc3, dim_out: 64}\n"                                   \
  "  - {op: Relu, in: [fc3], out: fc3}\n"                                                \
  "  - {op: FC, in: [fc3], out: pred, dim_out: 10}\n"

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
/* body() with tf_trainer's replicas on fenced devices, then cpu again. */
void tf_on_fenced(void (*body)(void));
/* A malloc'd path NAME in a directory made once per process under /tmp
 * (left for the system to clean); NULL when it cannot be made. */
char *tf_temp_path(const char *name);
/* Runs n steps; 1 when all n ran. */
int tf_steps(dpm_trainer *t, int n);

#endif
