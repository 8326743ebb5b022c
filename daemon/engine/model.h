/* Model: a ModelSpec turned into validated, shape-inferred nets.
 *
 *   init   fills every parameter (seeded), optimizer state and counters
 *   train  the forward ops in training mode (the first n_forward nodes),
 *          then the gradient ops; fused (engine/fuse.h)
 *   update LearningRate, one optimizer op per parameter (model order), Iter;
 *          an op's weight_decay is the spec's for a weight (its op's
 *          dpm_param_def.is_weight) and 0 for the other params, unless
 *          update.weight_decay_bias
 *          with precision.compute bf16/fp16, the forward ops carry the
 *          Casts of the precision rewrite (engine/precision.h)
 *   test   the forward ops in test mode (SpatialBN on running statistics,
 *          Dropout off), shaped per eval batch by dpm_model_test_shapes
 *   refresh  with precision.compute bf16: the Casts of the params to their
 *          working copies, which the optimizer ops write at each update
 *          (engine/fuse.h); run after the masters change otherwise
 *
 * Building validates the whole spec (ops, arities, arguments, shapes,
 * losses, update) before any tensor exists; errors name the spec file, line
 * and op. A model is immutable once built and may be shared by the device
 * workers that run replicas of it; parallel/plan.h orders train and update
 * into one step per replica, with the collectives data parallelism needs. */
#ifndef DPM_MODEL_H
#define DPM_MODEL_H

#include "engine/net.h"
#include "proto/dpm.pb-c.h"

typedef struct dpm_model {
  char *source; /* spec file name, for messages */
  char *name;   /* spec name */
  dpm_net init, train, update, test, refresh;
  int n_forward;      /* train.nodes[0, n_forward) are the forward ops */
  dpm_shapes shapes;  /* every blob of init/train/update at the training batch */
  char **param_grad;  /* [n_param_grad], indexed like shapes.v: the gradient
                         blob of a param, or NULL (not a param, or unused) */
  int n_param_grad;   /* blobs declared before autodiff (all params among them) */
  char *data, *label; /* reader output blob names */
  int64_t chw[3];     /* one example's shape */
  int batch;          /* examples per device per step */
  double input_scale; /* the reader's pixel scale (spec input.scale) */
  char **losses;      /* spec losses */
  int n_losses;
  char *accuracy;    /* the first Accuracy output of top_k 1, else the first, or NULL */
  dpm_dtype compute; /* precision.compute: DPM_F32, or DPM_BF16/DPM_F16 with the
                        forward ops rewritten (engine/precision.h) */
} dpm_model;

/* Build from spec for `batch` examples per device, data of shape chw, with
 * the gradient seeded by loss_scale (1 / (devices x shards)). On failure m
 * is left empty (nothing to free) and err names the problem. */
dpm_status dpm_model_build(const Dpm__ModelSpec *spec, const int64_t chw[3], int batch,
                           float loss_scale, dpm_model *m, dpm_err *err);
void dpm_model_fini(dpm_model *m);

/* Set node n's argument a->name from a spec's or predictor file's typed
 * Argument with the typed setter of its kind (engine/op.h): values are taken
 * as they are, doubles exactly. Errors: DPM_SPEC as the setters give them,
 * or "argument 'x' has no value" when a holds none. */
dpm_status dpm_node_set_argument(dpm_node *n, const Dpm__Argument *a, dpm_err *err);

/* Shapes of the test net for `batch` examples, into t (empty on entry; the
 * caller finis it). */
dpm_status dpm_model_test_shapes(const dpm_model *m, int batch, dpm_shapes *t,
                                 dpm_err *err);

#endif
