/* What the pooling ops' semantics (ops/pool.c) and their CPU kernels
 * (backend/cpu/pool.c) both read: the positions of their arguments and the
 * geometry of one pooling. Pure: no state. */
#ifndef DPM_OPS_POOL_H
#define DPM_OPS_POOL_H

#include "engine/op.h"

/* By position in the pooling ops' argument table. */
enum { POOL_ARG_KERNEL, POOL_ARG_STRIDE, POOL_ARG_PAD };

/* Sizes of one pooling. */
typedef struct pool_geom {
  int64_t planes, h, w; /* N*C planes of H x W */
  int64_t k, s, p;      /* window side, stride, padding */
  int64_t ho, wo;       /* output plane */
} pool_geom;

/* The geometry of pooling node nd on input X of shape x [N, C, H, W]. */
static inline pool_geom pool_geom_of(const dpm_node *nd, const dpm_shape *x) {
  pool_geom g = {
      .planes = x->d[0] * x->d[1],
      .h = x->d[2],
      .w = x->d[3],
      .k = nd->arg[POOL_ARG_KERNEL].i,
      .s = nd->arg[POOL_ARG_STRIDE].i,
      .p = nd->arg[POOL_ARG_PAD].i,
  };
  g.ho = (g.h + 2 * g.p - g.k) / g.s + 1;
  g.wo = (g.w + 2 * g.p - g.k) / g.s + 1;
  return g;
}

#endif
