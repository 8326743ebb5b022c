/* The size and cost of a model: its parameters and the multiply-adds of one
 * example's forward pass.
 *
 * Counted: parameters, the trainable ones (DPM_BLOB_PARAM: weights, biases,
 * SpatialBN's scale and shift, as torchvision's numel() sum counts them) and
 * the computed ones (SpatialBN's running statistics) apart; multiply-adds,
 * those of Conv (per output element, C/group x kernel x kernel) and FC (per
 * output element, its input features) in the train net's forward ops.
 * Not counted as multiply-adds: biases, normalisation, activations,
 * pooling, element-wise ops, the loss. FLOPs are 2 x multiply-adds, the
 * usual convention ("ResNet-50: 4.1 GFLOPs" counts multiply-adds).
 *
 * Pure: reads the model only; any thread. */
#ifndef DPM_ENGINE_COUNT_H
#define DPM_ENGINE_COUNT_H

#include <stdint.h>

#include "engine/model.h"

typedef struct dpm_model_count {
  int64_t params;       /* trainable parameters' elements */
  int64_t computed;     /* computed parameters' elements (running statistics) */
  double macs;          /* Conv and FC multiply-adds of one example's forward */
  int64_t n_conv, n_fc; /* the ops counted */
} dpm_model_count;

/* Counts model m (built at batch m->batch). */
dpm_model_count dpm_model_count_of(const dpm_model *m);

#endif
