/* The CPU kernels of Conv and ConvGradient (ops/conv.c: 2-D convolution of
 * NCHW float32 with square kernels).
 *
 * Both lower one image at a time into a matrix L and run matrix products
 * (backend/cpu/gemm.h; "sgemms" below) on it.
 * When C*k is large, L is lowered along x only (MEC, Cho & Brand 2017): row
 * (c, kx) holds the input rows of channel c shifted by kx, every kernel row
 * ky reads a [C*k, Ho*Wo] window L_ky of it, and the convolution is k sgemms
 *   Y[n] += W_ky * L_ky,   dW_ky += dY[n] * L_ky^T,   dL_ky += W_ky^T * dY[n]
 * with W_ky [M, C*k] the weights of kernel row ky. Against im2col, L is k
 * times smaller and the scatter back to dX does k times fewer adds. When C*k
 * is small (a first layer on grey images), sgemms with so short an inner
 * dimension are slow, so all kernel rows are folded into L: plain im2col,
 * one sgemm per image.
 *
 * L ends with a row of ones and W_0 with a column holding the bias (zeros
 * with no_bias), so the bias is added by the first sgemm, and its gradient
 * comes out of the first dW sgemm as one more output.
 *
 * With many filters (M >= TRANSPOSED_MIN_FILTERS) the forward and the
 * weight gradient run transposed, so that the filters lie along the
 * products' columns, which the AVX-512 tiles of backend/cpu/gemm.h fill whole:
 *   Y[n]^T += L_ky^T * W_ky^T,   dW_ky^T += L_ky * dY[n]^T
 * at the cost of transposing one image's output (or output gradient).
 *
 * At stride 1 with a "same" output width (Wo == W), the rows of L that one
 * (channel, kernel row, kx) gives are, end to end, the input plane shifted
 * by a constant, so lower and unlower move them as one run with a few
 * zeroed columns rather than row by row.
 *
 * Fused with a following in-place Relu (DPM_FUSE_RELU), Conv applies it to
 * each image's output right after that image's sgemms, while it is in cache.
 *
 * With groups, each group is such a convolution of its own channels, run
 * one after the other over the same scratch (sized for one group). */
#include <stdint.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp_run.h"
#include "engine/lowp.h"
#include "ops/conv.h"

/* Scratch: L with its row of ones, the weight blocks W_t [M, R+1] (or, in
 * the transposed forms, W_t^T [R+1, M]), the transposed gradient blocks
 * [R+1, M] (gradient only), and one image's output or output gradient
 * transposed [Ho*Wo, M] (transposed forms only); each part 64-byte
 * aligned. */
static int64_t align16(int64_t floats) { return (floats + 15) & ~(int64_t)15; }
static int64_t l_floats(const conv_geom *g) { return align16((g->r + 1) * g->ll); }
static int64_t w_floats(const conv_geom *g) { return align16(g->nt * g->m * (g->r + 1)); }
static int64_t t_floats(const conv_geom *g) {
  return g->tr ? align16(g->m * g->ho * g->wo) : 0;
}

static size_t conv_scratch(const dpm_node *nd, const dpm_shape *in) {
  conv_geom g = conv_geom_of(nd, &in[0]);
  return (size_t)(l_floats(&g) + w_floats(&g) + t_floats(&g)) * sizeof(float);
}
static size_t conv_grad_scratch(const dpm_node *nd, const dpm_shape *in) {
  conv_geom g = conv_geom_of(nd, &in[0]);
  return (size_t)(l_floats(&g) + 2 * w_floats(&g) + t_floats(&g)) * sizeof(float);
}

/* wb[t][m][(c*kg + a)*k + kx] = w[m][c][t*kg + a][kx]: block t (row stride
 * R+1) multiplies window t of L. Column R is left to the caller. */
static void w_to_blocks(const conv_geom *g, const float *w, float *wb) {
  const int64_t kk = g->kg * g->k, ld = g->r + 1;
  for (int64_t t = 0; t < g->nt; t++)
    for (int64_t m = 0; m < g->m; m++)
      for (int64_t c = 0; c < g->c; c++)
        memcpy(wb + (t * g->m + m) * ld + c * kk,
               w + ((m * g->c + c) * g->k + t * g->kg) * g->k, kk * sizeof *w);
}

/* The same blocks transposed, wt[t][(c*kg + a)*k + kx][m]; row R of block 0
 * is the bias (zeros without one). */
static void w_to_blocks_t(const conv_geom *g, const float *w, const float *b, float *wt) {
  const int64_t kk = g->kg * g->k, ld = g->r + 1;
  for (int64_t t = 0; t < g->nt; t++)
    for (int64_t m = 0; m < g->m; m++)
      for (int64_t c = 0; c < g->c; c++) {
        const float *src = w + ((m * g->c + c) * g->k + t * g->kg) * g->k;
        float *dst = wt + (t * ld + c * kk) * g->m + m;
        for (int64_t j = 0; j < kk; j++) dst[j * g->m] = src[j];
      }
  if (b)
    memcpy(wt + g->r * g->m, b, g->m * sizeof *b);
  else
    memset(wt + g->r * g->m, 0, g->m * sizeof *wt);
}

/* NAME(src, rows, cols, dst): dst[j][i] = src[i][j] for an [rows, cols]
 * src of T, in 16x16 blocks (f32, and bf16 as uint16_t). */
#define DEFINE_TRANSPOSE(NAME, T)                                                        \
  static void NAME(const T *restrict src, int64_t rows, int64_t cols, T *restrict dst) { \
    for (int64_t i0 = 0; i0 < rows; i0 += 16)                                            \
      for (int64_t j0 = 0; j0 < cols; j0 += 16)                                          \
        for (int64_t i = i0; i < i0 + 16 && i < rows; i++)                               \
          for (int64_t j = j0; j < j0 + 16 && j < cols; j++)                             \
            dst[j * rows + i] = src[i * cols + j];                                       \
  }
DEFINE_TRANSPOSE(transpose, float)
DEFINE_TRANSPOSE(transpose_u16, uint16_t)

/* dW from its blocks transposed: w[m][c][t*kg + a][kx] =
 * wt[t][(c*kg + a)*k + kx][m], block t having R+1 rows of M. */
static void blocks_t_to_w(const conv_geom *g, const float *wt, float *w) {
  const int64_t kk = g->kg * g->k;
  for (int64_t t = 0; t < g->nt; t++)
    for (int64_t c = 0; c < g->c; c++)
      for (int64_t j = 0; j < kk; j++) {
        const float *row = wt + (t * (g->r + 1) + c * kk + j) * g->m;
        float *dst = w + (c * g->k + t * g->kg) * g->k + j;
        for (int64_t m = 0; m < g->m; m++) dst[m * g->c * g->k * g->k] = row[m];
      }
}

/* Offset in a row of L of window t (kernel rows t*kg...): stride phase
 * t*kg % s, starting at lowered row t*kg / s. */
static int64_t window(const conv_geom *g, int64_t t) {
  int64_t ky = t * g->kg;
  return ((ky % g->s) * g->j + ky / g->s) * g->wo;
}

/* Output columns [*lo, *hi) whose input column ox*s + kx - p lies in [0, w). */
static void col_range(const conv_geom *g, int64_t kx, int64_t *lo, int64_t *hi) {
  int64_t a = g->p - kx, b = g->w + g->p - kx;
  *lo = a > 0 ? (a + g->s - 1) / g->s : 0;
  *hi = b > 0 ? (b + g->s - 1) / g->s : 0;
  if (*hi > g->wo) *hi = g->wo;
  if (*lo > *hi) *lo = *hi;
}

/* One row of L: l[ox] = src[(ox - lo) * s] for ox in [lo, hi), else 0. */
static void gather_row(float *restrict l, const float *restrict src, int64_t lo,
                       int64_t hi, int64_t wo, int64_t s) {
  for (int64_t ox = 0; ox < lo; ox++) l[ox] = 0.f;
  if (s == 1)
    memcpy(l + lo, src, (hi - lo) * sizeof *l);
  else
    for (int64_t ox = lo; ox < hi; ox++) l[ox] = src[(ox - lo) * s];
  for (int64_t ox = hi; ox < wo; ox++) l[ox] = 0.f;
}

/* dst[i * s] += src[i] for i < n. */
static void scatter_row(float *restrict dst, const float *restrict src, int64_t n,
                        int64_t s) {
  if (s == 1)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
  else
    for (int64_t i = 0; i < n; i++) dst[i * s] += src[i];
}

/* Whole-plane runs (see the top): in the rows of L of one (c, a, kx), rows
 * [*j0, *j1) read input rows, and entry i is plane entry i + *off, which
 * lies in the plane for i in [*i0, *i1). */
static int flat_rows(const conv_geom *g) { return g->s == 1 && g->wo == g->w; }

static void flat_span(const conv_geom *g, int64_t a, int64_t kx, int64_t *j0, int64_t *j1,
                      int64_t *off, int64_t *i0, int64_t *i1) {
  int64_t lo = g->p - a, hi = g->h + g->p - a; /* j with 0 <= j + a - p < h */
  *j0 = lo < 0 ? 0 : lo < g->j ? lo : g->j;
  *j1 = hi < g->j ? hi : g->j;
  if (*j1 < *j0) *j1 = *j0;
  *off = (a - g->p) * g->w + kx - g->p;
  *i0 = *j0 * g->wo > -*off ? *j0 * g->wo : -*off;
  *i1 = *j1 * g->wo < g->h * g->w - *off ? *j1 * g->wo : g->h * g->w - *off;
  if (*i1 < *i0) *i1 = *i0;
}

/* Zeroes columns [0, lo) and [hi, Wo) of rows [j0, j1) of l. */
static void zero_cols(float *l, int64_t j0, int64_t j1, int64_t lo, int64_t hi,
                      int64_t wo) {
  for (int64_t j = j0; j < j1; j++) {
    for (int64_t ox = 0; ox < lo; ox++) l[j * wo + ox] = 0.f;
    for (int64_t ox = hi; ox < wo; ox++) l[j * wo + ox] = 0.f;
  }
}

static void lower_flat(const conv_geom *g, const float *x, float *l) {
  const int64_t wo = g->wo, n = g->j * wo;
  for (int64_t c = 0; c < g->c; c++, x += g->h * g->w)
    for (int64_t a = 0; a < g->kg; a++)
      for (int64_t kx = 0; kx < g->k; kx++, l += n) {
        int64_t lo, hi, j0, j1, off, i0, i1;
        col_range(g, kx, &lo, &hi);
        flat_span(g, a, kx, &j0, &j1, &off, &i0, &i1);
        memset(l, 0, j0 * wo * sizeof *l);
        if (i1 > i0) memcpy(l + i0, x + i0 + off, (i1 - i0) * sizeof *l);
        zero_cols(l, j0, j1, lo, hi, wo);
        memset(l + j1 * wo, 0, (n - j1 * wo) * sizeof *l);
      }
}

/* Columns outside [lo, hi) of dl hold gradients of padding: zeroed, they
 * add nothing to the run's wrapped-around entries. */
static void unlower_flat(const conv_geom *g, float *dl, float *dx) {
  const int64_t wo = g->wo, n = g->j * wo;
  for (int64_t c = 0; c < g->c; c++, dx += g->h * g->w)
    for (int64_t a = 0; a < g->kg; a++)
      for (int64_t kx = 0; kx < g->k; kx++, dl += n) {
        int64_t lo, hi, j0, j1, off, i0, i1;
        col_range(g, kx, &lo, &hi);
        flat_span(g, a, kx, &j0, &j1, &off, &i0, &i1);
        zero_cols(dl, j0, j1, lo, hi, wo);
        if (i1 > i0) {
          float *restrict d = dx + i0 + off;
          const float *restrict s = dl + i0;
          for (int64_t i = 0; i < i1 - i0; i++) d[i] += s[i];
        }
      }
}

/* l[(c*kg + a)*k + kx][(ry*J + j)*Wo + ox] =
 *   x[c][j*s + ry + a - p][ox*s + kx - p], zero where that is padding. */
static void lower(const conv_geom *g, const float *x, float *l) {
  const int64_t s = g->s, wo = g->wo;
  if (flat_rows(g)) {
    lower_flat(g, x, l);
    return;
  }
  for (int64_t c = 0; c < g->c; c++)
    for (int64_t a = 0; a < g->kg; a++)
      for (int64_t kx = 0; kx < g->k; kx++) {
        int64_t lo, hi;
        col_range(g, kx, &lo, &hi);
        for (int64_t ry = 0; ry < g->ph; ry++)
          for (int64_t j = 0; j < g->j; j++, l += wo) {
            int64_t iy = j * s + ry + a - g->p;
            if (iy < 0 || iy >= g->h) {
              memset(l, 0, wo * sizeof *l);
              continue;
            }
            gather_row(l, x + (c * g->h + iy) * g->w + lo * s + kx - g->p, lo, hi, wo, s);
          }
      }
}

/* The adjoint of lower: dx (zeroed by the caller) += every entry of dl at
 * the input position it was copied from. May overwrite dl. */
static void unlower(const conv_geom *g, float *dl, float *dx) {
  const int64_t s = g->s, wo = g->wo;
  if (flat_rows(g)) {
    unlower_flat(g, dl, dx);
    return;
  }
  for (int64_t c = 0; c < g->c; c++)
    for (int64_t a = 0; a < g->kg; a++)
      for (int64_t kx = 0; kx < g->k; kx++) {
        int64_t lo, hi;
        col_range(g, kx, &lo, &hi);
        for (int64_t ry = 0; ry < g->ph; ry++)
          for (int64_t j = 0; j < g->j; j++, dl += wo) {
            int64_t iy = j * s + ry + a - g->p;
            if (iy < 0 || iy >= g->h) continue;
            scatter_row(dx + (c * g->h + iy) * g->w + lo * s + kx - g->p, dl + lo,
                        hi - lo, s);
          }
      }
}

/* L's last row: ones, which multiply the bias column of W_0. */
static void set_ones(const conv_geom *g, float *l) {
  for (int64_t i = 0; i < g->ll; i++) l[g->r * g->ll + i] = 1.f;
}

/* y = max(y, 0), as Relu computes it. */
static void relu_inplace(float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.f ? y[i] : 0.f;
}

/* One group's convolution: x, y and the group's own w and b (b NULL: no
 * bias), images at strides of all channels. */
static void conv_group(const dpm_op *op, const conv_geom *gp, const float *x,
                       const float *w, const float *b, float *y) {
  const conv_geom g = *gp;
  float *l = op->ctx->scratch, *wb = l + l_floats(&g), *yt = wb + w_floats(&g);
  const int64_t hw = g.ho * g.wo, ld = g.r + 1;
  const int relu = (op->node->fuse & DPM_FUSE_RELU) != 0;
  if (g.tr) {
    w_to_blocks_t(&g, w, b, wb);
  } else {
    w_to_blocks(&g, w, wb);
    for (int64_t m = 0; m < g.m; m++) wb[m * ld + g.r] = b ? b[m] : 0.f;
  }
  set_ones(&g, l);
  for (int64_t n = 0; n < g.n; n++) {
    float *yn = y + n * g.mt * hw;
    lower(&g, x + n * g.ct * g.h * g.w, l);
    /* Block 0 includes the bias and the ones row; the rest add on. */
    for (int64_t t = 0; t < g.nt; t++) {
      int inner = (int)(t ? g.r : ld);
      if (g.tr) /* Y^T (+)= L_t^T W_t^T */
        dpm_gemm_outer((int)hw, (int)g.m, inner, l + window(&g, t), 1, g.ll,
                       wb + t * ld * g.m, g.m, t > 0, yt, g.m);
      else /* Y (+)= W_t L_t */
        dpm_gemm_outer((int)g.m, (int)hw, inner, wb + t * g.m * ld, ld, 1,
                       l + window(&g, t), g.ll, t > 0, yn, hw);
    }
    if (g.tr) transpose(yt, hw, g.m, yn);
    if (relu) relu_inplace(yn, g.m * hw);
  }
}

static void conv_run(const dpm_op *op) {
  conv_geom g = conv_geom_of(op->node, &op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *w = dpm_f32(op->in[1]);
  const float *b = conv_has_bias(op->node) ? dpm_f32(op->in[2]) : NULL;
  float *y = dpm_f32(op->out[0]);
  const int64_t chw = g.c * g.h * g.w, mhw = g.m * g.ho * g.wo,
                wn = g.m * g.c * g.k * g.k;
  for (int64_t i = 0; i < g.grp; i++)
    conv_group(op, &g, x + i * chw, w + i * wn, b ? b + i * g.m : NULL, y + i * mhw);
}

/* One group's gradients: x, dy, dx at strides of all channels, the
 * group's own w, dw and db (each output NULL: not wanted). */
static void conv_grad_group(const dpm_op *op, const conv_geom *gp, const float *x,
                            const float *w, const float *dy, float *dw, float *db,
                            float *dx) {
  const conv_geom g = *gp;
  float *l = op->ctx->scratch, *wb = l + l_floats(&g), *dwt = wb + w_floats(&g),
        *dyt = dwt + w_floats(&g);
  const int64_t hw = g.ho * g.wo, chw = g.c * g.h * g.w, ld = g.r + 1;
  const int64_t xstride = g.ct * g.h * g.w;
  if (dx) w_to_blocks(&g, w, wb);
  set_ones(&g, l);
  for (int64_t n = 0; n < g.n; n++) {
    const float *dyn = dy + n * g.mt * hw;
    if (dw || db) {
      /* dW_t^T += L_t dY^T; block 0 gets db as its last row, from L's row
       * of ones. */
      lower(&g, x + n * xstride, l);
      if (g.tr) transpose(dyn, g.m, hw, dyt);
      for (int64_t t = 0; t < g.nt; t++) {
        int rows = (int)(t ? g.r : ld);
        if (g.tr)
          dpm_gemm_outer(rows, (int)g.m, (int)hw, l + window(&g, t), g.ll, 1, dyt, g.m,
                         n > 0, dwt + t * ld * g.m, g.m);
        else
          dpm_gemm_nt(&(dpm_gemm_nt_args){.n = rows,
                                          .m = (int)g.m,
                                          .k = (int)hw,
                                          .x = l + window(&g, t),
                                          .ldx = g.ll,
                                          .w = dyn,
                                          .ldw = hw,
                                          .acc = n > 0,
                                          .y = dwt + t * ld * g.m,
                                          .ldy = g.m});
      }
    }
    if (dx) {
      /* dL overwrites L but its row of ones. */
      float *dxn = dx + n * xstride;
      memset(l, 0, g.r * g.ll * sizeof *l);
      for (int64_t t = 0; t < g.nt; t++) /* dL_t += W_t^T dY */
        dpm_gemm_outer((int)g.r, (int)hw, (int)g.m, wb + t * g.m * ld, 1, ld, dyn, hw, 1,
                       l + window(&g, t), g.ll);
      memset(dxn, 0, chw * sizeof *dxn);
      unlower(&g, l, dxn);
    }
  }
  if (dw) blocks_t_to_w(&g, dwt, dw);
  if (db) memcpy(db, dwt + g.r * g.m, g.m * sizeof *db);
}

static void conv_grad_run(const dpm_op *op) {
  conv_geom g = conv_geom_of(op->node, &op->in[0]->shape);
  const float *x = dpm_f32(op->in[0]), *w = dpm_f32(op->in[1]), *dy = dpm_f32(op->in[2]);
  float *dw = op->out[0] ? dpm_f32(op->out[0]) : NULL;
  float *db = op->out[1] ? dpm_f32(op->out[1]) : NULL;
  float *dx = op->out[2] ? dpm_f32(op->out[2]) : NULL;
  const int64_t chw = g.c * g.h * g.w, mhw = g.m * g.ho * g.wo,
                wn = g.m * g.c * g.k * g.k;
  for (int64_t i = 0; i < g.grp; i++)
    conv_grad_group(op, &g, x + i * chw, w + i * wn, dy + i * mhw,
                    dw ? dw + i * wn : NULL, db ? db + i * g.m : NULL,
                    dx ? dx + i * chw : NULL);
}

const dpm_kernel_def DPM_CPU_KERNEL(CONV) = {.run = conv_run, .scratch = conv_scratch};
const dpm_kernel_def DPM_CPU_KERNEL(CONV_GRADIENT) = {
    .run = conv_grad_run,
    .scratch = conv_grad_scratch,
};

/* ---- bf16, natively (lowp_run.h) -------------------------------------------
 * Where every tensor of the op is bf16 and the native kernels are on
 * (backend/cpu/gemm_bf16.h), the same lowering and products in bf16 with
 * f32 sums: each image is widened (exactly) and lowered in f32 as above,
 * L and the weight blocks narrowed back to bf16 (exactly: they hold bf16
 * values and ones), the products run natively into f32 sums (accumulated
 * over kernel rows, and over images for dW), and each output is rounded
 * to bf16 once. The bf16 tiles take any layout, so the forward runs in
 * the plain form whatever the filters (no transpose), and dL reads the
 * weight blocks transposed once per op (no packing per product). */

/* The scratch of one group, in bytes from the start: L, the W blocks and
 * the dW blocks in f32, W and b widened, one image widened, L and the W
 * blocks in bf16, one image's Y (or dX) in f32, dY^T in bf16, and the
 * products' packing. */
typedef struct {
  size_t l, wb, dwt, wf, bf, xf, lh, wbh, yf, dyth, pack, total;
} conv_bf16_layout;

/* at += bytes rounded up to 64, recording the start in *off; 0 on
 * overflow. */
static int take(size_t *at, size_t *off, int64_t count, size_t size) {
  size_t b;
  if (count < 0 || __builtin_mul_overflow((size_t)count, size, &b) ||
      b > SIZE_MAX - 128 || *at > SIZE_MAX - b - 64)
    return 0;
  *off = *at;
  *at += (b + 63) / 64 * 64;
  return 1;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The products' packing scratch: the largest of the forms below. */
static size_t conv_bf16_pack(const conv_geom *g) {
  const int64_t hw = g->ho * g->wo, ld = g->r + 1;
  if (hw > INT32_MAX || ld > INT32_MAX || g->m > INT32_MAX) return SIZE_MAX;
  int ihw = (int)hw, ild = (int)ld, im = (int)g->m, ir = (int)g->r;
  size_t s = dpm_bf16_gemm_scratch(im, ihw, ild, 1);       /* Y */
  s = max_sz(s, dpm_bf16_gemm_scratch(ild, im, ihw, 1));   /* dW */
  return max_sz(s, dpm_bf16_gemm_scratch(ir, ihw, im, 1)); /* dL */
}

static int conv_bf16_layout_of(const conv_geom *g, conv_bf16_layout *o) {
  const int64_t hw = g->ho * g->wo, chw = g->c * g->h * g->w,
                wn = g->m * g->c * g->k * g->k;
  size_t at = 0, pack = conv_bf16_pack(g);
  int ok = pack != SIZE_MAX && take(&at, &o->l, l_floats(g), 4) &&
           take(&at, &o->wb, w_floats(g), 4) && take(&at, &o->dwt, w_floats(g), 4) &&
           take(&at, &o->wf, wn, 4) && take(&at, &o->bf, g->m, 4) &&
           take(&at, &o->xf, chw, 4) && take(&at, &o->lh, (g->r + 1) * g->ll, 2) &&
           take(&at, &o->wbh, g->nt * g->m * (g->r + 1), 2) &&
           take(&at, &o->yf, g->m * hw > chw ? g->m * hw : chw, 4) &&
           take(&at, &o->dyth, hw * g->m, 2) && take(&at, &o->pack, (int64_t)pack, 1);
  o->total = at;
  return ok;
}

static int conv_bf16_node(const dpm_node *n, const dpm_shape *in, const dpm_shape *out) {
  if (n->def->id != DPM_OP_CONV && n->def->id != DPM_OP_CONV_GRADIENT) return 0;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] && in[k].dtype != DPM_BF16) return 0;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] && out[k].dtype != DPM_BF16) return 0;
  return 1;
}

size_t dpm_cpu_conv_bf16_scratch(const dpm_node *n, const dpm_shape *in,
                                 const dpm_shape *out) {
  if (!conv_bf16_node(n, in, out)) return 0;
  conv_geom g = conv_geom_of(n, &in[0]);
  conv_bf16_layout o;
  return conv_bf16_layout_of(&g, &o) ? o.total : SIZE_MAX;
}

#define AT(type, base, off) ((type *)((char *)(base) + (off)))


static void conv_group_bf16(const dpm_op *op, const conv_geom *gp, const uint16_t *x,
                            const uint16_t *w, const uint16_t *b, uint16_t *y,
                            const conv_bf16_layout *o) {
  const conv_geom g = *gp;
  void *s = op->ctx->scratch;
  float *l = AT(float, s, o->l), *wb = AT(float, s, o->wb);
  float *wf = AT(float, s, o->wf), *bf = AT(float, s, o->bf), *xf = AT(float, s, o->xf);
  float *yf = AT(float, s, o->yf);
  uint16_t *lh = AT(uint16_t, s, o->lh), *wbh = AT(uint16_t, s, o->wbh);
  void *pack = AT(char, s, o->pack);
  const int64_t hw = g.ho * g.wo, ld = g.r + 1, chw = g.c * g.h * g.w;
  const int relu = (op->node->fuse & DPM_FUSE_RELU) != 0;
  dpm_f32_from_bf16(wf, w, (size_t)(g.m * g.c * g.k * g.k));
  if (b) dpm_f32_from_bf16(bf, b, (size_t)g.m);
  w_to_blocks(&g, wf, wb);
  for (int64_t m = 0; m < g.m; m++) wb[m * ld + g.r] = b ? bf[m] : 0.f;
  dpm_bf16_from_f32(wbh, wb, (size_t)(g.nt * g.m * ld));
  set_ones(&g, l);
  for (int64_t n = 0; n < g.n; n++) {
    dpm_f32_from_bf16(xf, x + n * g.ct * g.h * g.w, (size_t)chw);
    lower(&g, xf, l);
    dpm_bf16_from_f32(lh, l, (size_t)(ld * g.ll));
    for (int64_t t = 0; t < g.nt; t++) /* Y (+)= W_t L_t: W_t read in place */
      dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = (int)g.m,
                                          .cols = (int)hw,
                                          .inner = (int)(t ? g.r : ld),
                                          .a = wbh + t * g.m * ld,
                                          .ars = ld,
                                          .ass = 1,
                                          .b = lh + window(&g, t),
                                          .bss = g.ll,
                                          .bcs = 1,
                                          .o32 = yf,
                                          .ors = hw,
                                          .ocs = 1,
                                          .acc = t > 0},
                    pack);
    if (relu) relu_inplace(yf, g.m * hw);
    dpm_bf16_from_f32(y + n * g.mt * hw, yf, (size_t)(g.m * hw));
  }
}

static void conv_grad_group_bf16(const dpm_op *op, const conv_geom *gp, const uint16_t *x,
                                 const uint16_t *w, const uint16_t *dy, uint16_t *dw,
                                 uint16_t *db, uint16_t *dx, const conv_bf16_layout *o) {
  const conv_geom g = *gp;
  void *s = op->ctx->scratch;
  float *l = AT(float, s, o->l), *wb = AT(float, s, o->wb), *dwt = AT(float, s, o->dwt);
  float *wf = AT(float, s, o->wf), *xf = AT(float, s, o->xf), *dxf = AT(float, s, o->yf);
  uint16_t *lh = AT(uint16_t, s, o->lh), *wbh = AT(uint16_t, s, o->wbh);
  uint16_t *dyth = AT(uint16_t, s, o->dyth);
  void *pack = AT(char, s, o->pack);
  const int64_t hw = g.ho * g.wo, chw = g.c * g.h * g.w, ld = g.r + 1;
  const int64_t xstride = g.ct * g.h * g.w, wn = g.m * g.c * g.k * g.k;
  if (dx) { /* W_t^T [R+1, M], read in place by dL's products */
    dpm_f32_from_bf16(wf, w, (size_t)wn);
    w_to_blocks_t(&g, wf, NULL, wb);
    dpm_bf16_from_f32(wbh, wb, (size_t)(g.nt * g.m * ld));
  }
  set_ones(&g, l);
  for (int64_t n = 0; n < g.n; n++) {
    const uint16_t *dyn = dy + n * g.mt * hw;
    if (dw || db) { /* dW_t^T += L_t dY^T; block 0's last row is db */
      dpm_f32_from_bf16(xf, x + n * xstride, (size_t)chw);
      lower(&g, xf, l);
      dpm_bf16_from_f32(lh, l, (size_t)(ld * g.ll));
      if (g.tr) transpose_u16(dyn, g.m, hw, dyth);
      for (int64_t t = 0; t < g.nt; t++)
        dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = (int)(t ? g.r : ld),
                                            .cols = (int)g.m,
                                            .inner = (int)hw,
                                            .a = lh + window(&g, t),
                                            .ars = g.ll,
                                            .ass = 1,
                                            .b = g.tr ? dyth : dyn,
                                            .bss = g.tr ? g.m : 1,
                                            .bcs = g.tr ? 1 : hw,
                                            .o32 = dwt + t * ld * g.m,
                                            .ors = g.m,
                                            .ocs = 1,
                                            .acc = n > 0},
                      pack);
    }
    if (dx) { /* dL_t += W_t^T dY, into L (f32) but its row of ones */
      memset(l, 0, g.r * g.ll * sizeof *l);
      for (int64_t t = 0; t < g.nt; t++)
        dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = (int)g.r,
                                            .cols = (int)hw,
                                            .inner = (int)g.m,
                                            .a = wbh + t * ld * g.m,
                                            .ars = g.m,
                                            .ass = 1,
                                            .b = dyn,
                                            .bss = hw,
                                            .bcs = 1,
                                            .o32 = l + window(&g, t),
                                            .ors = g.ll,
                                            .ocs = 1,
                                            .acc = 1},
                      pack);
      memset(dxf, 0, chw * sizeof *dxf);
      unlower(&g, l, dxf);
      dpm_bf16_from_f32(dx + n * xstride, dxf, (size_t)chw);
    }
  }
  if (dw) {
    blocks_t_to_w(&g, dwt, wf);
    dpm_bf16_from_f32(dw, wf, (size_t)wn);
  }
  if (db) dpm_bf16_from_f32(db, dwt + g.r * g.m, (size_t)g.m);
}

int dpm_cpu_conv_bf16_run(const dpm_op *op, const dpm_shape *in, const dpm_shape *out,
                          void *scratch) {
  (void)scratch; /* op->ctx->scratch, laid out by conv_bf16_layout_of */
  if (!dpm_bf16_native()) return 0;
  if (!conv_bf16_node(op->node, in, out)) return 0;
  conv_geom g = conv_geom_of(op->node, &op->in[0]->shape);
  conv_bf16_layout o;
  if (!conv_bf16_layout_of(&g, &o)) return 0; /* the scratch could not be sized */
  const int64_t chw = g.c * g.h * g.w, mhw = g.m * g.ho * g.wo,
                wn = g.m * g.c * g.k * g.k;
  const uint16_t *x = op->in[0]->data, *w = op->in[1]->data;
  if (op->node->def->id == DPM_OP_CONV) {
    const uint16_t *b = conv_has_bias(op->node) ? op->in[2]->data : NULL;
    uint16_t *y = op->out[0]->data;
    for (int64_t i = 0; i < g.grp; i++)
      conv_group_bf16(op, &g, x + i * chw, w + i * wn, b ? b + i * g.m : NULL,
                      y + i * mhw, &o);
    return 1;
  }
  const uint16_t *dy = op->in[2]->data;
  uint16_t *dw = op->out[0] ? op->out[0]->data : NULL;
  uint16_t *db = op->out[1] ? op->out[1]->data : NULL;
  uint16_t *dx = op->out[2] ? op->out[2]->data : NULL;
  for (int64_t i = 0; i < g.grp; i++)
    conv_grad_group_bf16(op, &g, x + i * chw, w + i * wn, dy + i * mhw,
                         dw ? dw + i * wn : NULL, db ? db + i * g.m : NULL,
                         dx ? dx + i * chw : NULL, &o);
  return 1;
}
