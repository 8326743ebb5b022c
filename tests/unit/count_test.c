/* Model counts (engine/count.h): parameters and forward multiply-adds of a
 * small net by hand, and of examples/resnet50_imagenet.yaml against
 * torchvision's resnet50 (25,557,032 parameters) and the multiply-adds of
 * its Convs and FC at 224x224 (4,089,184,256: the "4.1 GFLOPs" of the
 * papers), and of examples/resnet20_fmnist.yaml. The specs are only built
 * (shapes), never run. */
#include "common/spec.h"
#include "engine/count.h"
#include "test.h"

/* Builds the spec at path for images of shape chw. */
static dpm_status build_file(const char *path, const int64_t chw[3], int batch,
                             dpm_model *m, dpm_err *err) {
  Dpm__ModelSpec *spec = NULL;
  dpm_status s = dpm_spec_load(path, &spec, err);
  if (!s) s = dpm_model_build(spec, chw, batch, 1.0f, m, err);
  dpm_spec_free(spec);
  return s;
}

/* Conv 3x3 pad 1 (1 -> 4 channels, no bias) + BN on 1x4x5, FC 80 -> 3. */
TEST(count_small_net_by_hand) {
  const char *yaml =
      "name: c\n"
      "input: {reader: synthetic, batch_size: 3, num_examples: 9, shape: [1, 4, 5],"
      " num_classes: 3}\n"
      "forward:\n"
      "  - {op: Conv, in: [data], out: c1, dim_out: 4, kernel: 3, pad: 1, no_bias: "
      "true}\n"
      "  - {op: SpatialBN, in: [c1], out: bn1}\n"
      "  - {op: FC, in: [bn1], out: pred, dim_out: 3}\n"
      "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
      "losses: [loss]\n";
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_model m;
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "c.yaml", &spec, &err), DPM_OK);
  dpm_status s =
      spec ? dpm_model_build(spec, (const int64_t[]){1, 4, 5}, 3, 1.0f, &m, &err)
           : DPM_SPEC;
  dpm_spec_free(spec);
  CHECK_INT(s, DPM_OK);
  if (s) return;
  dpm_model_count c = dpm_model_count_of(&m);
  /* c1_w 4*1*3*3 = 36, bn1_s + bn1_b 8, pred_w 3*80 = 240, pred_b 3 */
  CHECK_INT(c.params, 36 + 8 + 240 + 3);
  CHECK_INT(c.computed, 8); /* bn1_rm, bn1_riv */
  /* Conv: 4*5 outputs x 4 filters x 9; FC: 3 x 80 */
  CHECK(c.macs == 20 * 4 * 9 + 3 * 80);
  CHECK_INT(c.n_conv, 1);
  CHECK_INT(c.n_fc, 1);
  dpm_model_fini(&m);
}

TEST(count_resnet50_example) {
  dpm_model m;
  dpm_err err = {0};
  dpm_status s = build_file("examples/resnet50_imagenet.yaml",
                            (const int64_t[]){3, 224, 224}, 1, &m, &err);
  if (s) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  CHECK_INT(s, DPM_OK);
  if (s) return;
  dpm_model_count c = dpm_model_count_of(&m);
  printf("    resnet50: %lld parameters, %.0f multiply-adds per image\n",
         (long long)c.params, c.macs);
  CHECK_INT(c.params, 25557032);
  CHECK(c.macs == 4089184256.0);
  CHECK_INT(c.n_conv, 53);
  CHECK_INT(c.n_fc, 1);
  /* no Conv has a bias; the output is 1000 classes after a 1x1 global pool */
  CHECK(dpm_shapes_get(&m.shapes, "conv1_b") == NULL);
  const dpm_blobinfo *pool = dpm_shapes_get(&m.shapes, "pool5");
  CHECK(pool && pool->shape.ndim == 4 && pool->shape.d[1] == 2048 &&
        pool->shape.d[2] == 1 && pool->shape.d[3] == 1);
  CHECK(m.accuracy && !strcmp(m.accuracy, "accuracy"));
  dpm_model_fini(&m);
}

/* The CIFAR-style ResNet-20 on 28x28 Fashion-MNIST: 19 Convs of the paper,
 * 2 projections, 1 FC; 272,186 parameters; from IDX files and from JPEG
 * tar shards (28 x 28 crops) alike. */
static void resnet20(const char *path) {
  dpm_model m;
  dpm_err err = {0};
  dpm_status s = build_file(path, (const int64_t[]){1, 28, 28}, 1, &m, &err);
  if (s) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  CHECK_INT(s, DPM_OK);
  if (s) return;
  dpm_model_count c = dpm_model_count_of(&m);
  CHECK_INT(c.params, 272186);
  CHECK_INT(c.n_conv, 21);
  CHECK_INT(c.n_fc, 1);
  const dpm_blobinfo *pool = dpm_shapes_get(&m.shapes, "pool");
  CHECK(pool && pool->shape.d[1] == 64 && pool->shape.d[2] == 1);
  dpm_model_fini(&m);
}

TEST(count_resnet20_example) { resnet20("examples/resnet20_fmnist.yaml"); }
TEST(count_resnet20_jpeg_example) { resnet20("examples/resnet20_fmnist_jpeg.yaml"); }
