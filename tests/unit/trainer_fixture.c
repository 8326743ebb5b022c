/* Trainer fixtures shared by the data-parallel tests (trainer_fixture.h). */
#include "trainer_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"

Dpm__ModelSpec *tf_spec(const char *forward, int per_device, int seed, double lr,
                        const char *net_type, int bucket_bytes) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 2048,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: %d}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, weight_decay: 0.0001,"
           " lr: {base: %g}}\n"
           "parallel: {net_type: %s, bucket_bytes: %d}\n",
           per_device, seed, forward, lr, net_type, bucket_bytes);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    printf("    spec: %s\n", err.msg);
  return spec;
}

dpm_device_kind tf_device_kind = DPM_DEVICE_CPU;

dpm_trainer *tf_trainer(const Dpm__ModelSpec *spec, int devices, struct dpm_crew *crew) {
  dpm_trainer_options opt = {.devices = devices,
                             .kind = tf_device_kind,
                             .net_type = -1,
                             .comm_timeout_ms = 20000,
                             .crew = crew};
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (!spec || dpm_trainer_create(spec, &opt, &t, &err)) printf("    create: %s\n", err.msg);
  return t;
}

void tf_on_fenced(void (*body)(void)) {
  tf_device_kind = DPM_DEVICE_FENCED;
  body();
  tf_device_kind = DPM_DEVICE_CPU;
}

char *tf_temp_path(const char *name) {
  static char dir[64];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/dpm-test-XXXXXX");
    if (!mkdtemp(dir)) return NULL;
  }
  char *p = malloc(128);
  if (p) snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

int tf_steps(dpm_trainer *t, int n) {
  dpm_err err = {0};
  dpm_step_stats st;
  if (dpm_trainer_step(t, n, &st, &err) || st.steps_done != n) {
    printf("    step: %s\n", err.msg);
    return 0;
  }
  return 1;
}
