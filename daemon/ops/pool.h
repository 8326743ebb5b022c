/* What the pooling ops' semantics (ops/pool.c) and their CPU kernels
 * (backend/cpu/pool.c) both read: the positions of their arguments and the
 * geometry of one pooling. Pure: no state. */
#ifndef DPM_OPS_POOL_H
#define DPM_OPS_POOL_H

#include "engine/op.h"

/* By position in the pooling ops' argument tables; global_pooling is in
 * AveragePool's (and its gradient's) only. */
enum { POOL_ARG_KERNEL, POOL_ARG_STRIDE, POOL_ARG_PAD, POOL_ARG_GLOBAL };

/* Sizes of one pooling. */
typedef struct pool_geom {
  int64_t planes, h, w; /* N*C planes of H x W */
  int64_t k, s, p;      /* window side, stride, padding */
  int64_t ho, wo;       /* output plane */
  int global;           /* 1: one window, the whole plane (AveragePool) */
} pool_geom;

/* Whether pooling node nd pools whole planes (global_pooling: true). */
static inline int pool_is_global(const dpm_node *nd) {
  return nd->def->args[POOL_ARG_GLOBAL].name && nd->arg[POOL_ARG_GLOBAL].i;
}

/* The geometry of pooling node nd on input X of shape x [N, C, H, W]. */
static inline pool_geom pool_geom_of(const dpm_node *nd, const dpm_shape *x) {
  pool_geom g = {
      .planes = x->d[0] * x->d[1],
      .h = x->d[2],
      .w = x->d[3],
      .k = nd->arg[POOL_ARG_KERNEL].i,
      .s = nd->arg[POOL_ARG_STRIDE].i,
      .p = nd->arg[POOL_ARG_PAD].i,
      .global = pool_is_global(nd),
  };
  if (g.global) { /* one window of side max(H, W) at the origin: the whole plane */
    g.k = g.h > g.w ? g.h : g.w;
    g.s = 1;
    g.p = 0;
  }
  if (g.k < 1) g.k = 1; /* kernel not given (refused by inference) */
  g.ho = g.global ? 1 : (g.h + 2 * g.p - g.k) / g.s + 1;
  g.wo = g.global ? 1 : (g.w + 2 * g.p - g.k) / g.s + 1;
  return g;
}

#endif
