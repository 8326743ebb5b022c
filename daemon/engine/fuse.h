/* Kernel fusion over a built net: an in-place Relu folded into the op that
 * produced its input (Conv, FC), and an in-place ReluGradient folded into
 * the gradient op before it (MaxPoolGradient). Each saves a full pass over
 * an activation. Only adjacent pairs are fused, so nothing else can read the
 * intermediate value; results are bitwise those of the unfused net.
 * Runs on a net that autodiff has already validated. */
#ifndef DPM_FUSE_H
#define DPM_FUSE_H

#include "engine/net.h"

/* Fuse in place. Nodes before *n_forward that are removed decrease it. */
void dpm_net_fuse(dpm_net *net, int *n_forward);

/* In a net after autodiff, with its shapes in t: an op that can write its
 * parameters' gradients in f32 (DPM_FUSE_GRAD_F32: FCGradient) and whose
 * every such output is read only by a Cast bf16 -> f32 among the next two
 * nodes writes the Casts' outputs itself, the Casts go, and the bf16
 * blobs leave t. The gradients then skip a rounding to bf16 (more exact
 * than the unfused net, not bitwise it). Only bf16: an fp16 model keeps
 * its fp16 gradients, whose overflow the loss scaler must see. DPM_NOMEM
 * (the net then half rewritten: discard the model). */
dpm_status dpm_net_fuse_grad_casts(dpm_net *net, dpm_shapes *t);

/* bf16 working copies refreshed by the update: for each optimizer op of
 * `update` that can write one (DPM_FUSE_WORKING_COPY) whose param is read
 * in train's forward ops [0, *n_forward) only by a Cast f32 -> bf16, the
 * op writes the Cast's output too, from the updated master, and the Cast
 * moves from train to `refresh` (appended; *n_forward drops by one). The
 * trainer runs refresh only when the masters change other than by the
 * update (initialisation, a load, a sync, a BMUF block): every step then
 * reads what the Cast would have made, bit for bit, without a pass over
 * the masters. DPM_NOMEM (the nets then half rewritten: discard the
 * model). */
dpm_status dpm_net_fuse_working_copies(dpm_net *train, int *n_forward, dpm_net *update,
                                       dpm_net *refresh, dpm_err *err);

#endif
