/* Op families: one file each under daemon/ops/, each exporting a
 * NULL-terminated list of its op defs (gathered by registry.c). */
#ifndef DPM_OPS_FAMILIES_H
#define DPM_OPS_FAMILIES_H

#include "engine/op.h"

extern const dpm_op_def
    *const dpm_ops_elementwise[]; /* Relu Sigmoid Tanh Add Sum Scale Copy StopGradient */
extern const dpm_op_def *const dpm_ops_shape[];   /* Flatten Reshape Concat */
extern const dpm_op_def *const dpm_ops_fc[];      /* FC */
extern const dpm_op_def *const dpm_ops_conv[];    /* Conv */
extern const dpm_op_def *const dpm_ops_pool[];    /* MaxPool AveragePool */
extern const dpm_op_def *const dpm_ops_norm[];    /* SpatialBN */
extern const dpm_op_def *const dpm_ops_dropout[]; /* Dropout */
extern const dpm_op_def *const dpm_ops_loss[];    /* Softmax SoftmaxWithLoss Accuracy */
extern const dpm_op_def
    *const dpm_ops_fill[]; /* ConstantFill XavierFill MSRAFill GaussianFill UniformFill */
extern const dpm_op_def
    *const dpm_ops_optim[]; /* SGD MomentumSGD Adam LearningRate Iter */
extern const dpm_op_def *const dpm_ops_collective[]; /* Allreduce(Start|Wait) Broadcast */

#endif
