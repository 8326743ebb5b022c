/* The positions of SpatialBN's arguments (and SpatialBNGradient's, the
 * same table), which its semantics (ops/norm.c) define and its CPU kernels
 * (backend/cpu/norm.c) read. */
#ifndef DPM_OPS_NORM_H
#define DPM_OPS_NORM_H

enum { BN_ARG_EPSILON, BN_ARG_MOMENTUM };

#endif
