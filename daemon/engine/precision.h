/* The precision rewrite: a model whose precision.compute is bf16 or fp16
 * (docs/SPEC.md "precision") computes its forward ops in the types the
 * policy table gives (ops/precision.h), with Cast ops (ops/cast.c) where
 * types meet. It runs on each forward op as the model builder appends it,
 * before the op's shape inference, and so before autodiff: the gradients
 * follow (a Cast's gradient is the cast back), and the test net, a copy of
 * the forward ops, has the same casts.
 *
 * For the op just appended to the net (its parameters declared, not yet
 * inferred), of class
 *   LOW   each floating input not of the low type is cast to it;
 *   FP32  each 16-bit input is cast to f32;
 *   PASS  nothing when its floating inputs share a type, else each 16-bit
 *         one is cast to f32;
 * the Casts go right before the op, which reads their outputs instead.
 * An op that would change the type of a blob an earlier op wrote (in place
 * on it: SpatialBN x -> x with x bf16) writes a fresh blob of its type
 * instead, and a Cast after it writes the blob back in its type.
 * A cast of a blob is made once and reused while the blob keeps the value
 * it had (a blob written again is cast again, under a new name).
 *
 * Parameters stay f32 (the masters: what the optimizer updates and
 * checkpoints hold); a LOW op reads a working copy, "<param>_bf16", made
 * by a Cast in the forward net, so refreshed every step from the updated
 * master. Their gradients arrive in f32 through the Cast's gradient.
 *
 * Names: the cast of blob x to type t is x_<t> ("fc1_w_bf16", "fc2_f32"),
 * or x_<t>_2, _3 ... when that name is taken.
 *
 * One builder's state; not thread-safe. */
#ifndef DPM_ENGINE_PRECISION_H
#define DPM_ENGINE_PRECISION_H

#include "engine/net.h"

typedef struct dpm_precision_cast dpm_precision_cast;

typedef struct dpm_precision {
  dpm_dtype low;             /* DPM_BF16 or DPM_F16 */
  dpm_precision_cast *casts; /* casts made so far, to reuse */
  int n, cap;
} dpm_precision;

/* Start a rewrite to low type `low` (DPM_BF16 or DPM_F16). */
void dpm_precision_init(dpm_precision *p, dpm_dtype low);
void dpm_precision_fini(dpm_precision *p);

/* Rewrite the last node of net as above, types from t, and infer it and
 * its Casts into t (as dpm_node_infer: kind ACT). The Casts carry the
 * node's spec line (source: the spec file). Errors: DPM_NOMEM, or the
 * node's inference error (dpm_node_infer's). */
dpm_status dpm_precision_node(dpm_precision *p, dpm_net *net, dpm_shapes *t,
                              const char *source, dpm_err *err);

#endif
