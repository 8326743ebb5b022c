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

#endif
