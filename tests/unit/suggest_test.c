/* Errors that say what was meant: the nearest-name helper (common/suggest.h)
 * and where it is used (unknown ops, op arguments, spec keys), device names
 * written as Caffe2's gpu scope, and a predictor directory that holds an
 * ONNX export. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/device.h"
#include "common/spec.h"
#include "common/suggest.h"
#include "common/validate.h"
#include "dpm/predictor.h"
#include "engine/model.h"
#include "test.h"
#include "testfile.h"

static const char *nearest(const char *word, const char *const *names) {
  static dpm_suggest s; /* its best points into names, which outlive it */
  dpm_suggest_init(&s, word);
  for (; *names; names++) dpm_suggest_add(&s, *names);
  return dpm_suggest_best(&s);
}

TEST(suggest_finds_the_nearest_name) {
  static const char *const ops[] = {"Relu", "ReluGradient", "Sigmoid", "FC",
                                    "Conv", "SpatialBN",    "MaxPool", NULL};
  CHECK(!strcmp(nearest("ReLU", ops), "Relu")); /* case only: always */
  CHECK(!strcmp(nearest("relu", ops), "Relu"));
  CHECK(!strcmp(nearest("Sigmod", ops), "Sigmoid")); /* one deletion */
  CHECK(!strcmp(nearest("MaxPoll", ops), "MaxPool"));
  CHECK(!strcmp(nearest("SpaitalBN", ops), "SpatialBN")); /* a swap is one edit */
  CHECK(!strcmp(nearest("fc", ops), "FC"));
  CHECK(nearest("Softmax", ops) == NULL); /* too far from all */
  CHECK(nearest("Relu", ops) == NULL);    /* found: nothing to suggest */
  CHECK(nearest("", ops) == NULL);
  char longw[200];
  memset(longw, 'a', sizeof longw - 1);
  longw[sizeof longw - 1] = 0;
  CHECK(nearest(longw, ops) == NULL);
  dpm_suggest s;
  char buf[80];
  dpm_suggest_init(&s, "Sigmod");
  CHECK(!strcmp(dpm_suggest_phrase(&s, buf, sizeof buf), ""));
  dpm_suggest_add(&s, "Sigmoid");
  CHECK(!strcmp(dpm_suggest_phrase(&s, buf, sizeof buf), "; did you mean 'Sigmoid'?"));
}

#define HEAD                                                                             \
  "name: t\n"                                                                            \
  "input: {reader: synthetic, batch_size: 3, num_examples: 30, shape: [1,4,5],"          \
  " num_classes: 4}\n"
#define TAIL                                                                             \
  "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"                 \
  "losses: [loss]\n"

/* Parses and builds yaml; the status, with the message in err. */
static dpm_status build(const char *yaml, dpm_err *err) {
  static const int64_t chw[3] = {1, 4, 5};
  Dpm__ModelSpec *spec = NULL;
  dpm_model m;
  dpm_status s = dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, err);
  if (!s) s = dpm_model_build(spec, chw, 4, 1.0f, &m, err);
  if (!s) dpm_model_fini(&m);
  dpm_spec_free(spec);
  return s;
}

TEST(suggest_unknown_op_and_argument) {
  dpm_err err = {0};
  CHECK_INT(build(HEAD "forward:\n  - {op: FC, in: [data], out: h, dim_out: 4}\n"
                       "  - {op: ReLU, in: [h], out: h}\n"
                       "  - {op: FC, in: [h], out: pred, dim_out: 4}\n" TAIL,
                  &err),
            DPM_SPEC);
  CHECK_HAS(err.msg, "unknown op 'ReLU'; did you mean 'Relu'?");
  /* hidden ops are never suggested */
  CHECK_INT(
      build(HEAD "forward:\n  - {op: FCGradint, in: [data], out: pred}\n" TAIL, &err),
      DPM_SPEC);
  CHECK_HAS(err.msg, "unknown op 'FCGradint'");
  CHECK(!strstr(err.msg, "did you mean"));
  CHECK_INT(
      build(HEAD "forward:\n  - {op: FC, in: [data], out: pred, dim_ot: 4}\n" TAIL, &err),
      DPM_SPEC);
  CHECK_HAS(err.msg, "unknown argument 'dim_ot' for FC; did you mean 'dim_out'?");
}

TEST(suggest_unknown_spec_key) {
  dpm_err err = {0};
  Dpm__ModelSpec *spec = NULL;
  static const char yaml[] =
      HEAD "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n" TAIL
           "update: {optimizer: adam, beta: 0.9}\n";
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "unknown key 'beta' in update; did you mean 'beta1'?");
  static const char yaml2[] = HEAD
      "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n" TAIL "paralel: {}\n";
  CHECK_INT(dpm_spec_parse(yaml2, strlen(yaml2), "t.yaml", &spec, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "unknown key 'paralel' at top level; did you mean 'parallel'?");
}

TEST(suggest_cuda_for_gpu_devices) {
  CHECK_HAS(dpm_device_hint("gpu:0"), "GPUs are cuda:N");
  CHECK_HAS(dpm_device_hint("GPU:1"), "GPUs are cuda:N");
  CHECK_HAS(dpm_device_hint("gpu_0"), "GPUs are cuda:N");
  CHECK_HAS(dpm_device_hint("CPU:0"), "lower case");
  CHECK_HAS(dpm_device_hint("cpu_0"), "KIND:N");
  CHECK(!strcmp(dpm_device_hint("tpu:0"), ""));
  CHECK(!strcmp(dpm_device_hint(NULL), ""));
  dpm_err err = {0};
  Dpm__ModelSpec *spec = NULL;
  static const char yaml[] =
      HEAD "forward:\n  - {op: FC, in: [data], out: pred, dim_out: 4}\n" TAIL
           "parallel: {devices: [gpu:0]}\n";
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "GPUs are cuda:N");
}

TEST(suggest_onnx_runtime_for_an_onnx_folder) {
  char dir[] = "/tmp/dpm-suggest-XXXXXX", path[64];
  CHECK(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK(test_write_file(path, "\x08\x07", 2) == 0);
  dpm_predictor *p = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_predictor_load(dir, &p, &err);
  unlink(path);
  rmdir(dir);
  CHECK_INT(s, DPM_NOT_FOUND);
  CHECK_HAS(err.msg, "holds an ONNX model (model.onnx), not a dpm predictor");
  CHECK_HAS(err.msg, "use onnxruntime");
}
