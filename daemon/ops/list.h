/* The list of every operator: one line each, spec-visible and hidden alike
 * (gradients, optimizer, collectives, fills).
 *
 *   XX(ID, "Name")   ID:   the op's id is DPM_OP_<ID> (engine/op.h) and its
 *                          def the const dpm_op_def DPM_OP_DEF(ID), defined in
 *                          the op's family file (ops/families.h)
 *                    Name: the def's name, as specs and predictor files write it
 *
 * The engine names the ops it emits by id, so a misspelt one fails to
 * compile; specs and predictor files name them by text (dpm_op_find). The
 * order is that of dpm_op_all(); an op is added by one line here, its def in
 * a family file and its CPU kernel, DPM_CPU_KERNEL(ID), in the family's file
 * of daemon/backend/cpu/ (backend/cpu/kernels.h). The list is two: the ops
 * with a kernel per backend (DPM_KERNEL_OP_MAP), then the collectives
 * (DPM_COLLECTIVE_OP_MAP), which the engine runs through the communicator
 * on every backend (engine/collective.h) and which no backend has a kernel
 * for. Pure macros: no includes, nothing to link. */
#ifndef DPM_OPS_LIST_H
#define DPM_OPS_LIST_H

#define DPM_OP_MAP(XX) DPM_KERNEL_OP_MAP(XX) DPM_COLLECTIVE_OP_MAP(XX)

/* Ops that every backend runs as its own kernels. */
#define DPM_KERNEL_OP_MAP(XX)                                                            \
  /* elementwise.c */                                                                    \
  XX(RELU, "Relu")                                                                       \
  XX(RELU_GRADIENT, "ReluGradient")                                                      \
  XX(SIGMOID, "Sigmoid")                                                                 \
  XX(SIGMOID_GRADIENT, "SigmoidGradient")                                                \
  XX(TANH, "Tanh")                                                                       \
  XX(TANH_GRADIENT, "TanhGradient")                                                      \
  XX(ADD, "Add")                                                                         \
  XX(SUM, "Sum")                                                                         \
  XX(SCALE, "Scale")                                                                     \
  XX(COPY, "Copy")                                                                       \
  XX(STOP_GRADIENT, "StopGradient")                                                      \
  /* cast.c */                                                                           \
  XX(CAST, "Cast")                                                                       \
  /* shape.c */                                                                          \
  XX(FLATTEN, "Flatten")                                                                 \
  XX(FLATTEN_GRADIENT, "FlattenGradient")                                                \
  XX(RESHAPE, "Reshape")                                                                 \
  XX(RESHAPE_GRADIENT, "ReshapeGradient")                                                \
  XX(CONCAT, "Concat")                                                                   \
  XX(CONCAT_GRADIENT, "ConcatGradient")                                                  \
  /* fc.c */                                                                             \
  XX(FC, "FC")                                                                           \
  XX(FC_GRADIENT, "FCGradient")                                                          \
  /* conv.c */                                                                           \
  XX(CONV, "Conv")                                                                       \
  XX(CONV_GRADIENT, "ConvGradient")                                                      \
  /* pool.c */                                                                           \
  XX(MAX_POOL, "MaxPool")                                                                \
  XX(MAX_POOL_GRADIENT, "MaxPoolGradient")                                               \
  XX(AVERAGE_POOL, "AveragePool")                                                        \
  XX(AVERAGE_POOL_GRADIENT, "AveragePoolGradient")                                       \
  /* norm.c */                                                                           \
  XX(SPATIAL_BN, "SpatialBN")                                                            \
  XX(SPATIAL_BN_GRADIENT, "SpatialBNGradient")                                           \
  XX(SPATIAL_BN_STATS, "SpatialBNStats")                                                 \
  XX(SPATIAL_BN_GRADIENT_STATS, "SpatialBNGradientStats")                                \
  /* dropout.c */                                                                        \
  XX(DROPOUT, "Dropout")                                                                 \
  XX(DROPOUT_GRADIENT, "DropoutGradient")                                                \
  /* loss.c */                                                                           \
  XX(SOFTMAX, "Softmax")                                                                 \
  XX(SOFTMAX_GRADIENT, "SoftmaxGradient")                                                \
  XX(SOFTMAX_WITH_LOSS, "SoftmaxWithLoss")                                               \
  XX(SOFTMAX_WITH_LOSS_GRADIENT, "SoftmaxWithLossGradient")                              \
  XX(ACCURACY, "Accuracy")                                                               \
  /* fill.c */                                                                           \
  XX(CONSTANT_FILL, "ConstantFill")                                                      \
  XX(XAVIER_FILL, "XavierFill")                                                          \
  XX(MSRA_FILL, "MSRAFill")                                                              \
  XX(GAUSSIAN_FILL, "GaussianFill")                                                      \
  XX(UNIFORM_FILL, "UniformFill")                                                        \
  /* optim.c */                                                                          \
  XX(SGD, "SGD")                                                                         \
  XX(MOMENTUM_SGD, "MomentumSGD")                                                        \
  XX(ADAM, "Adam")                                                                       \
  XX(LEARNING_RATE, "LearningRate")                                                      \
  XX(ITER, "Iter")

/* Ops that the engine runs through the replicas' communicator, on any
 * backend (engine/collective.h): no backend has a kernel for them. */
#define DPM_COLLECTIVE_OP_MAP(XX)                                                        \
  /* collective.c */                                                                     \
  XX(ALLREDUCE, "Allreduce")                                                             \
  XX(ALLREDUCE_START, "AllreduceStart")                                                  \
  XX(ALLREDUCE_WAIT, "AllreduceWait")                                                    \
  XX(BROADCAST, "Broadcast")

/* The def of op ID, as its family file defines it. */
#define DPM_OP_DEF(ID) dpm_op_def_##ID

#endif
