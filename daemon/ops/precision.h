/* The precision policy: one row per op of the op list (ops/list.h), saying
 * in which type the op computes when the model's precision.compute is a
 * 16-bit type (bf16 or fp16). The precision rewrite (engine/precision.h)
 * reads it for each forward op of the spec; a gradient op follows its
 * forward op (its row repeats the forward's for the record).
 *
 *   LOW   computes in the 16-bit type: its floating inputs, parameters'
 *         working copies included, are cast to it and its outputs are of
 *         it. FC and Conv: 16-bit products, f32 accumulation
 *         (backend/cpu/lowp_run.h on the CPU).
 *   FP32  computes in f32: 16-bit inputs are cast up. The softmax family,
 *         the loss, Accuracy, SpatialBN (statistics and parameters), the
 *         optimizers, fills and counters (after PyTorch autocast's fp32
 *         list).
 *   PASS  computes in its inputs' type, which its outputs take: element-wise
 *         ops, pooling, Dropout, Concat, Flatten, Reshape. Inputs of
 *         different floating types are all cast to f32 first.
 *   CAST  the conversion itself (ops/cast.c).
 *
 * A new op needs its row here: the table (ops/precision.c) has as many
 * rows as the list has ops, checked at compile time, and the unit test
 * precision_policy_covers_every_op checks that every op has one. Pure
 * macros and one pure function: safe from any thread. */
#ifndef DPM_OPS_PRECISION_H
#define DPM_OPS_PRECISION_H

#include "engine/op.h"

typedef enum {
  DPM_PREC_NONE, /* no row (a bug: every op has one) */
  DPM_PREC_LOW,
  DPM_PREC_FP32,
  DPM_PREC_PASS,
  DPM_PREC_CAST,
} dpm_prec_class;

/* clang-format off */
#define DPM_PRECISION_MAP(XX)                                                            \
  XX(RELU, PASS) XX(RELU_GRADIENT, PASS)                                                 \
  XX(SIGMOID, PASS) XX(SIGMOID_GRADIENT, PASS)                                           \
  XX(TANH, PASS) XX(TANH_GRADIENT, PASS)                                                 \
  XX(ADD, PASS) XX(SUM, PASS) XX(SCALE, PASS) XX(COPY, PASS) XX(STOP_GRADIENT, PASS)      \
  XX(CAST, CAST)                                                                         \
  XX(FLATTEN, PASS) XX(FLATTEN_GRADIENT, PASS)                                           \
  XX(RESHAPE, PASS) XX(RESHAPE_GRADIENT, PASS)                                           \
  XX(CONCAT, PASS) XX(CONCAT_GRADIENT, PASS)                                             \
  XX(FC, LOW) XX(FC_GRADIENT, LOW)                                                       \
  XX(CONV, LOW) XX(CONV_GRADIENT, LOW)                                                   \
  XX(MAX_POOL, PASS) XX(MAX_POOL_GRADIENT, PASS)                                         \
  XX(AVERAGE_POOL, PASS) XX(AVERAGE_POOL_GRADIENT, PASS)                                 \
  XX(SPATIAL_BN, FP32) XX(SPATIAL_BN_GRADIENT, FP32)                                     \
  XX(SPATIAL_BN_STATS, FP32) XX(SPATIAL_BN_GRADIENT_STATS, FP32)                         \
  XX(DROPOUT, PASS) XX(DROPOUT_GRADIENT, PASS)                                           \
  XX(SOFTMAX, FP32) XX(SOFTMAX_GRADIENT, FP32)                                           \
  XX(SOFTMAX_WITH_LOSS, FP32) XX(SOFTMAX_WITH_LOSS_GRADIENT, FP32)                       \
  XX(ACCURACY, FP32)                                                                     \
  XX(CONSTANT_FILL, FP32) XX(XAVIER_FILL, FP32) XX(MSRA_FILL, FP32)                      \
  XX(GAUSSIAN_FILL, FP32) XX(UNIFORM_FILL, FP32)                                         \
  XX(SGD, FP32) XX(MOMENTUM_SGD, FP32) XX(ADAM, FP32)                                    \
  XX(LEARNING_RATE, FP32) XX(ITER, FP32)                                                 \
  XX(ALLREDUCE, FP32) XX(ALLREDUCE_START, FP32) XX(ALLREDUCE_WAIT, FP32)                 \
  XX(BROADCAST, FP32)
/* clang-format on */

/* Op id's row (id < DPM_OP_COUNT). */
dpm_prec_class dpm_op_precision(dpm_op_id id);
/* "low", "fp32", "pass", "cast" ("none" for DPM_PREC_NONE). */
const char *dpm_prec_class_name(dpm_prec_class c);

#endif
