/* The op cases (cases.h): the table every op harness runs, and the
 * inputs' values. */
#include "tests/opcases/cases.h"

#include <math.h>

#include "engine/rng.h"

/* Shapes and inputs, as constant initializers. IN(shape): random f32;
 * INV(shape, kind): other values; NOGRAD(shape, kind): no gradient checked;
 * LABELS(n, classes); I64(value). */
#define F32S(n, ...)                                                                     \
  {                                                                                      \
    .dtype = DPM_F32, .ndim = (n), .d = { __VA_ARGS__ }                                  \
  }
#define VEC(a) F32S(1, a)
#define MAT(a, b) F32S(2, a, b)
#define T3(a, b, c) F32S(3, a, b, c)
#define T4(a, b, c, d) F32S(4, a, b, c, d)
#define SCALAR                                                                           \
  { .dtype = DPM_F32, .ndim = 0 }
#define IN(s)                                                                            \
  { .shape = s }
#define INV(s, v)                                                                        \
  { .shape = s, .vals = (v) }
#define NOGRAD(s, v)                                                                     \
  { .shape = s, .vals = (v), .no_grad = 1 }
#define LABELS(n, classes)                                                               \
  {                                                                                      \
    .shape = {.dtype = DPM_I32, .ndim = 1, .d = {n}}, .vals = OPCASE_LABEL,              \
    .arg = (classes), .no_grad = 1                                                       \
  }
#define I64(v)                                                                           \
  { .shape = {.dtype = DPM_I64, .ndim = 0}, .vals = OPCASE_VALUE, .arg = (v) }
/* CASE(label, op, args, n_in, n_out, .in = {inputs}, rare fields...) */
#define CASE(label_, op_, args_, n_in_, n_out_, ...)                                     \
  {                                                                                      \
    .name = label_, .op = op_, .args = args_, .n_in = n_in_, .n_out = n_out_,            \
    __VA_ARGS__                                                                          \
  }
/* An op whose outputs are copies, sums or averages of its inputs, or
 * products with LINEAR's step: the central difference is exact up to float
 * rounding in Y, on any device, so the check is as tight as the CPU's
 * hand-written ones. */
#define EXACT_FD .fd_tol = 1e-3, .fd_elems = 200
/* Linear in each single input element (FC, Conv): the large step. */
#define LINEAR .fd_eps = OPCASE_LINEAR_EPS
#define AWAY OPCASE_AWAY
#define SPACED OPCASE_SPACED
#define POS OPCASE_POS

/* One entry per case: row label, op, arguments, inputs, outputs, and the
 * rare fields by name. Every op of the op table has a case here, or a
 * check of its own in the device harness (opcase_own_check). */
static opcase cases[] = {
    // clang-format off
  CASE("Relu", "Relu", NULL, 1, 1, .in = {INV(MAT(4, 37), AWAY)}),
  CASE("Sigmoid", "Sigmoid", NULL, 1, 1, .in = {IN(MAT(4, 37))}),
  CASE("Tanh", "Tanh", NULL, 1, 1, .in = {IN(MAT(4, 37))}),
  CASE("Add", "Add", NULL, 2, 1, .in = {IN(T3(3, 5, 7)), IN(T3(3, 5, 7))}),
  CASE("Sum", "Sum", NULL, 3, 1, .in = {IN(MAT(2, 33)), IN(MAT(2, 33)), IN(MAT(2, 33))}),
  CASE("Scale", "Scale", "scale=-0.75", 1, 1, .in = {IN(MAT(5, 9))}),
  CASE("Copy", "Copy", NULL, 1, 1, .in = {IN(MAT(5, 9))}),
  CASE("StopGradient", "StopGradient", NULL, 1, 1, .in = {IN(MAT(5, 9))}),
  CASE("Flatten", "Flatten", NULL, 1, 1, .in = {IN(T4(2, 3, 1, 5))}, EXACT_FD),
  CASE("Reshape", "Reshape", "shape=-1,5", 1, 1, .in = {IN(T3(3, 5, 2))}),
  CASE("Concat axis 1", "Concat", NULL, 3, 1, .in = {IN(T4(2, 3, 2, 3)), IN(T4(2, 1, 2, 3)), IN(T4(2, 5, 2, 3))}, EXACT_FD),
  CASE("Concat axis 3", "Concat", "axis=3", 2, 1, .in = {IN(T4(3, 1, 2, 1)), IN(T4(3, 1, 2, 4))}),
  CASE("FC", "FC", "dim_out=17", 3, 1, .in = {IN(MAT(9, 13)), IN(MAT(17, 13)), IN(VEC(17))}, EXACT_FD, LINEAR),
  CASE("FC 4-D input", "FC", "dim_out=33", 3, 1, .in = {IN(T4(3, 2, 3, 1)), IN(MAT(33, 6)), IN(VEC(33))}, EXACT_FD, LINEAR),
  CASE("FC fused Relu", "FC", "dim_out=12", 3, 1, .in = {IN(MAT(7, 20)), IN(MAT(12, 20)), IN(VEC(12))}, .fuse = DPM_FUSE_RELU),
  /* db's channel sums in 3 parts of 64 rows (cuda_chan_parts) */
  CASE("FC batch 200", "FC", "dim_out=17", 3, 1, .in = {IN(MAT(200, 13)), IN(MAT(17, 13)), IN(VEC(17))}, EXACT_FD, LINEAR),
  CASE("FC without input grad", "FC", "dim_out=9", 3, 1, .in = {NOGRAD(MAT(6, 11), 0), IN(MAT(9, 11)), IN(VEC(9))}, EXACT_FD, LINEAR),
  CASE("Conv 3x3 pad 1", "Conv", "dim_out=4 kernel=3 pad=1", 3, 1, .in = {IN(T4(2, 3, 7, 5)), IN(T4(4, 3, 3, 3)), IN(VEC(4))}, EXACT_FD, LINEAR),
  CASE("Conv 3x3 stride 2", "Conv", "dim_out=5 kernel=3 pad=1 stride=2", 3, 1, .in = {IN(T4(2, 3, 9, 8)), IN(T4(5, 3, 3, 3)), IN(VEC(5))}, EXACT_FD, LINEAR),
  CASE("Conv 5x5 fused Relu", "Conv", "dim_out=6 kernel=5 pad=2", 3, 1, .in = {IN(T4(2, 2, 8, 8)), IN(T4(6, 2, 5, 5)), IN(VEC(6))}, .fuse = DPM_FUSE_RELU),
  CASE("Conv first layer", "Conv", "dim_out=8 kernel=5 pad=2", 3, 1, .in = {NOGRAD(T4(3, 1, 12, 12), 0), IN(T4(8, 1, 5, 5)), IN(VEC(8))}, EXACT_FD, LINEAR),
  CASE("Conv group 2", "Conv", "dim_out=6 kernel=3 pad=1 group=2", 3, 1, .in = {IN(T4(2, 4, 7, 5)), IN(T4(6, 2, 3, 3)), IN(VEC(6))}, EXACT_FD, LINEAR),
  CASE("Conv no bias", "Conv", "dim_out=5 kernel=3 pad=1 stride=2 no_bias=true", 2, 1, .in = {IN(T4(2, 3, 9, 8)), IN(T4(5, 3, 3, 3))}, EXACT_FD, LINEAR),
  CASE("MaxPool 2x2", "MaxPool", "kernel=2 stride=2", 1, 1, .in = {INV(T4(2, 3, 5, 7), SPACED)}, EXACT_FD),
  CASE("MaxPool 3x3 pad 1", "MaxPool", "kernel=3 stride=2 pad=1", 1, 1, .in = {INV(T4(1, 2, 6, 5), SPACED)}, EXACT_FD),
  CASE("MaxPool 3x3 overlapping", "MaxPool", "kernel=3", 1, 1, .in = {INV(T4(2, 1, 4, 5), SPACED)}, EXACT_FD),
  CASE("MaxPool 2x2 stride 3 (gaps)", "MaxPool", "kernel=2 stride=3", 1, 1, .in = {INV(T4(1, 1, 7, 8), SPACED)}, EXACT_FD),
  /* the fused ReluGradient: dX masked where the pool's input is not > 0 */
  CASE("MaxPool grad fused Relu", "MaxPool", "kernel=2 stride=2", 1, 1, .in = {INV(T4(2, 3, 6, 6), SPACED)}, .gfuse = DPM_FUSE_RELU_GRAD),
  CASE("AveragePool 2x2", "AveragePool", "kernel=2 stride=2", 1, 1, .in = {IN(T4(2, 3, 5, 7))}, EXACT_FD),
  CASE("AveragePool 3x3 pad 1", "AveragePool", "kernel=3 stride=2 pad=1", 1, 1, .in = {IN(T4(1, 2, 6, 5))}, EXACT_FD),
  CASE("AveragePool global", "AveragePool", "global_pooling=true", 1, 1, .in = {IN(T4(2, 3, 7, 5))}, EXACT_FD),
  CASE("SpatialBN train", "SpatialBN", NULL, 5, 1, .in = {IN(T4(2, 4, 1, 7)), IN(VEC(4)), IN(VEC(4)), NOGRAD(VEC(4), 0), NOGRAD(VEC(4), POS)}),
  /* each channel's sums in 3 parts of 4096 (cuda_bn_parts) */
  CASE("SpatialBN train, 3 parts", "SpatialBN", NULL, 5, 1, .in = {IN(T4(6, 2, 48, 48)), IN(VEC(2)), IN(VEC(2)), NOGRAD(VEC(2), 0), NOGRAD(VEC(2), POS)}, .no_fd = 1),
  CASE("SpatialBN test", "SpatialBN", NULL, 5, 1, .in = {IN(T4(2, 3, 2, 3)), IN(VEC(3)), IN(VEC(3)), NOGRAD(VEC(3), 0), NOGRAD(VEC(3), POS)}, .is_test = 1),
  CASE("SpatialBN train [N,C]", "SpatialBN", NULL, 5, 1, .in = {IN(MAT(16, 3)), IN(VEC(3)), IN(VEC(3)), NOGRAD(VEC(3), 0), NOGRAD(VEC(3), POS)}),
  /* combine_spatial_bn's per-channel sums (parallel/sync_bn.c) */
  CASE("SpatialBNStats", "SpatialBNStats", NULL, 2, 1, .in = {IN(T4(2, 4, 1, 7)), NOGRAD(VEC(4), 0)}, .f64_out = 1),
  CASE("SpatialBNGradientStats", "SpatialBNGradientStats", NULL, 3, 1, .in = {IN(T4(2, 3, 2, 3)), NOGRAD(VEC(3), 0), IN(T4(2, 3, 2, 3))}, .f64_out = 1),
  CASE("Softmax", "Softmax", NULL, 1, 1, .in = {IN(MAT(6, 10))}),
  CASE("Softmax 4-D", "Softmax", NULL, 1, 1, .in = {IN(T4(2, 3, 2, 2))}),
  CASE("SoftmaxWithLoss", "SoftmaxWithLoss", NULL, 2, 2, .in = {IN(MAT(8, 10)), LABELS(8, 10)}),
  CASE("SoftmaxWithLoss smoothed", "SoftmaxWithLoss", "label_smoothing=0.1", 2, 2, .in = {IN(MAT(8, 10)), LABELS(8, 10)}),
  CASE("Accuracy", "Accuracy", NULL, 2, 1, .in = {IN(MAT(50, 4)), LABELS(50, 4)}),
  CASE("Accuracy top 3", "Accuracy", "top_k=3", 2, 1, .in = {IN(MAT(50, 7)), LABELS(50, 7)}),
  /* updates run in place, as the engine binds them */
  CASE("SGD", "SGD", "weight_decay=0.01", 3, 1, .in = {IN(MAT(7, 9)), IN(MAT(7, 9)), INV(SCALAR, POS)}, .alias = {1}),
  CASE("MomentumSGD", "MomentumSGD", "momentum=0.9 weight_decay=0.001", 4, 2, .in = {IN(VEC(301)), IN(VEC(301)), IN(VEC(301)), INV(SCALAR, POS)}, .alias = {1, 3}),
  CASE("MomentumSGD nesterov", "MomentumSGD", "nesterov=true", 4, 2, .in = {IN(VEC(301)), IN(VEC(301)), IN(VEC(301)), INV(SCALAR, POS)}, .alias = {1, 3}),
  CASE("Adam", "Adam", "weight_decay=0.01", 6, 3, .in = {IN(MAT(5, 41)), IN(MAT(5, 41)), IN(MAT(5, 41)), INV(MAT(5, 41), POS), INV(SCALAR, POS), I64(3)}, .alias = {1, 3, 4}),
  CASE("LearningRate step", "LearningRate", "base_lr=0.1 policy=step stepsize=100 gamma=0.9 warmup_iters=50", 1, 1, .in = {I64(1234)}),
  CASE("LearningRate in warm-up", "LearningRate", "base_lr=0.1 policy=step stepsize=100 gamma=0.9 warmup_iters=50", 1, 1, .in = {I64(17)}),
  CASE("Iter", "Iter", NULL, 1, 1, .in = {I64(41)}, .alias = {1}),
    // clang-format on
};

/* A case's seed from its label (FNV-1a), so that adding a case leaves the
 * others' values as they were. */
static unsigned seed_of(const char *label) {
  uint32_t h = 2166136261u;
  for (const char *p = label; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return h;
}

const opcase *opcase_table(int *n) {
  *n = (int)(sizeof cases / sizeof *cases);
  for (int k = 0; k < *n; k++) cases[k].seed = seed_of(cases[k].name);
  return cases;
}

const char *opcase_own_check(dpm_op_id id) {
  switch (id) {
  case DPM_OP_CONSTANT_FILL:
  case DPM_OP_XAVIER_FILL:
  case DPM_OP_MSRA_FILL:
  case DPM_OP_GAUSSIAN_FILL:
  case DPM_OP_UNIFORM_FILL:
    return "fills: bitwise against the CPU";
  case DPM_OP_DROPOUT:
  case DPM_OP_DROPOUT_GRADIENT:
    return "Dropout: its own mask generator";
  case DPM_OP_ALLREDUCE:
  case DPM_OP_ALLREDUCE_START:
  case DPM_OP_ALLREDUCE_WAIT:
  case DPM_OP_BROADCAST:
    return "collectives: the multi-device trainer checks";
  case DPM_OP_CAST:
    return "Cast: bitwise against engine/lowp.h (unit precision_test); cpu only";
  default:
    return NULL;
  }
}

int opcase_fd_applies(const opcase *c) {
  const dpm_op_def *def = dpm_op_find(c->op);
  if (!def || !def->grad || (def->flags & DPM_OP_NO_GRAD) || c->fuse || c->gfuse ||
      c->no_fd)
    return 0;
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k].shape.dtype == DPM_F32 && !c->in[k].no_grad) return 1;
  return 0;
}

void opcase_input(const opcase *c, int k, void *buf) {
  const opcase_in *in = &c->in[k];
  int64_t n = dpm_shape_numel(&in->shape);
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed * 1000003u + (unsigned)k + 1);
  if (in->shape.dtype == DPM_I32) {
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)buf)[i] = in->i         ? in->i[i]
                            : in->arg > 0 ? (int32_t)dpm_rng_below(rng, (uint64_t)in->arg)
                                          : 0;
    return;
  }
  if (in->shape.dtype == DPM_I64) {
    for (int64_t i = 0; i < n; i++) ((int64_t *)buf)[i] = in->arg;
    return;
  }
  float *f = buf;
  for (int64_t i = 0; i < n; i++) {
    double u = dpm_rng_uniform(rng);
    if (in->f) {
      f[i] = in->f[i];
      continue;
    }
    switch (in->vals) {
    case OPCASE_AWAY:
      f[i] = (float)((u < 0.5 ? -1 : 1) * (0.1 + 2 * fabs(u - 0.5)));
      break;
    case OPCASE_POS:
      f[i] = (float)(0.5 + u);
      break;
    case OPCASE_SPACED:
      f[i] = (float)(0.05 * (double)i - 0.025 * (double)n);
      break;
    default:
      f[i] = (float)(2 * u - 1);
    }
  }
  if (!in->f &&
      in->vals == OPCASE_SPACED) /* Fisher-Yates: distinct values, random places */
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)dpm_rng_below(rng, (uint64_t)i + 1);
      float t = f[i];
      f[i] = f[j], f[j] = t;
    }
}
