/* What Conv's semantics (ops/conv.c) and its CPU kernels (backend/cpu/conv.c)
 * both read: the positions of its arguments and the geometry of one
 * convolution. The geometry includes the CPU kernels' lowering (see
 * backend/cpu/conv.c), because shape inference refuses the convolutions
 * whose lowered image is too large for BLAS's int sizes. Pure: no state. */
#ifndef DPM_OPS_CONV_H
#define DPM_OPS_CONV_H

#include "engine/op.h"

/* By position in Conv's argument table; the init arguments after these are
 * read by the engine. */
enum { CONV_ARG_DIM_OUT, CONV_ARG_KERNEL, CONV_ARG_STRIDE, CONV_ARG_PAD };
/* Positions of no_bias and group, the table's last two (ops/conv.c). */
#define CONV_ARG_NO_BIAS 8
#define CONV_ARG_GROUP 9

/* Whether node nd (Conv or ConvGradient) has a bias: Conv's input b,
 * ConvGradient's output db. */
static inline int conv_has_bias(const dpm_node *nd) {
  return !nd->arg[CONV_ARG_NO_BIAS].i;
}

/* Sizes of one convolution and of its lowering. With groups, c and m are
 * one group's: group i convolves input channels [i c, (i+1) c) with
 * filters [i m, (i+1) m), and the lowering is one group's. */
typedef struct conv_geom {
  int64_t n, c, h, w; /* input: batch, channels (of a group), height, width */
  int64_t m, k, s, p; /* filters (of a group), kernel side, stride, padding */
  int64_t grp;        /* groups */
  int64_t ct, mt;     /* all channels and all filters: grp c, grp m */
  int64_t ho, wo;     /* output height and width */
  int64_t kg, nt;     /* kernel rows folded into L (1 or k); sgemms: k / kg */
  int64_t ph, j;      /* stride phases in L (s or 1), lowered rows per phase */
  int64_t r, ll;      /* rows of L before the ones (C*kg*k), their length */
  int64_t tr;         /* products in the transposed forms (see the kernels) */
} conv_geom;

/* Below this sgemm inner dimension C*k, fold all kernel rows into L. */
#define MEC_MIN_ROWS 64
/* From this many filters on, the forward and the weight gradient run in
 * the transposed forms (filters along the product's columns). */
#define TRANSPOSED_MIN_FILTERS 48

/* The geometry of node nd (Conv or ConvGradient) on input X of shape x.
 * Plain static, not inline: gcc weighs inlining it as for any file-local
 * function (the kernels call it out of line); every includer calls it. */
static conv_geom conv_geom_of(const dpm_node *nd, const dpm_shape *x) {
  conv_geom g = {
      .n = x->d[0],
      .h = x->d[2],
      .w = x->d[3],
      .k = nd->arg[CONV_ARG_KERNEL].i,
      .s = nd->arg[CONV_ARG_STRIDE].i,
      .p = nd->arg[CONV_ARG_PAD].i,
      .grp = nd->arg[CONV_ARG_GROUP].i,
      .ct = x->d[1],
      .mt = nd->arg[CONV_ARG_DIM_OUT].i,
  };
  if (g.grp < 1) g.grp = 1;
  g.c = g.ct / g.grp; /* exact: shape inference refuses the rest */
  g.m = g.mt / g.grp;
  g.ho = (g.h + 2 * g.p - g.k) / g.s + 1;
  g.wo = (g.w + 2 * g.p - g.k) / g.s + 1;
  g.kg = g.c * g.k >= MEC_MIN_ROWS ? 1 : g.k;
  g.nt = g.k / g.kg;
  g.ph = g.kg == g.k ? 1 : g.s;
  g.j = g.ho + (g.k - g.kg) / g.s;
  g.r = g.c * g.kg * g.k;
  g.ll = g.ph * g.j * g.wo;
  g.tr = g.m >= TRANSPOSED_MIN_FILTERS;
  return g;
}

#endif
