/* FC and FCGradient over bf16 tensors, native (lowp_run.h, gemm_bf16.h):
 * the products through dpm_bf16_gemm, db as the f32 kernel sums it. */
#include <string.h>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/lowp_run.h"
#include "engine/lowp.h"
#include "engine/op.h"

/* The forward computes Y^T = W X^T (rows W's, packing X) when W has more
 * rows than X, else Y = X W^T (packing W): B, the operand packed, is the
 * smaller. Y is stored as it lies either way. */
static int fc_transposed(int64_t n, int64_t m) { return m > n; }

static int all_bf16(const dpm_shape *s, const char *const *names, int k) {
  for (int j = 0; j < k; j++)
    if (names[j] && s[j].dtype != DPM_BF16) return 0;
  return 1;
}

/* Whether node n (types in[], out[]) has a native kernel: FC or
 * FCGradient with every tensor bf16. */
static int fc_native_node(const dpm_node *n, const dpm_shape *in, const dpm_shape *out) {
  if (n->def->id != DPM_OP_FC && n->def->id != DPM_OP_FC_GRADIENT) return 0;
  return all_bf16(in, (const char *const *)n->in, n->n_in) &&
         all_bf16(out, (const char *const *)n->out, n->n_out);
}

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

size_t dpm_cpu_fc_bf16_scratch(const dpm_node *n, const dpm_shape *in,
                               const dpm_shape *out) {
  if (!fc_native_node(n, in, out)) return 0;
  int64_t rows = in[0].d[0], m = in[1].d[0], k = in[1].d[1];
  if (rows > INT32_MAX || m > INT32_MAX || k > INT32_MAX) return SIZE_MAX;
  int nn = (int)rows, mm = (int)m, kk = (int)k;
  if (n->def->id == DPM_OP_FC)
    return fc_transposed(rows, m) ? dpm_bf16_gemm_scratch(mm, nn, kk, 1)
                                  : dpm_bf16_gemm_scratch(nn, mm, kk, 1);
  size_t dw = n->out[0] ? dpm_bf16_gemm_scratch(mm, kk, nn, m) : 0;
  size_t dx = n->out[2] ? dpm_bf16_gemm_scratch(nn, kk, mm, 1) : 0;
  return max_z(dw, dx);
}

static const uint16_t *bf(const dpm_tensor *t) { return t ? t->data : NULL; }
static uint16_t *bfw(const dpm_tensor *t) { return t->data; }

static void fc_forward(const dpm_op *op, void *scratch) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  int relu = !!(op->node->fuse & DPM_FUSE_RELU);
  dpm_bf16_gemm_args a;
  if (fc_transposed(n, m)) /* Y^T[j][i] = sum_k W[j][k] X[i][k] */
    a = (dpm_bf16_gemm_args){.rows = m,
                             .cols = n,
                             .inner = k,
                             .a = bf(w),
                             .ars = k,
                             .ass = 1,
                             .b = bf(x),
                             .bss = 1,
                             .bcs = k,
                             .bias = bf(op->in[2]),
                             .bias_by_row = 1,
                             .relu = relu,
                             .o = bfw(op->out[0]),
                             .ors = 1,
                             .ocs = m};
  else /* Y[i][j] = sum_k X[i][k] W[j][k] */
    a = (dpm_bf16_gemm_args){.rows = n,
                             .cols = m,
                             .inner = k,
                             .a = bf(x),
                             .ars = k,
                             .ass = 1,
                             .b = bf(w),
                             .bss = 1,
                             .bcs = k,
                             .bias = bf(op->in[2]),
                             .relu = relu,
                             .o = bfw(op->out[0]),
                             .ors = m,
                             .ocs = 1};
  dpm_bf16_gemm(&a, scratch);
}

/* db[j] = bf16(sum over rows i of dy[i][j]), summed in f32 row after row
 * from 0, as the f32 kernel's col_sums does (the same bits). */
static void col_sums_bf16(const uint16_t *dy, int n, int m, uint16_t *db) {
  float acc[256];
  for (int j0 = 0; j0 < m; j0 += 256) {
    int w = m - j0 < 256 ? m - j0 : 256;
    memset(acc, 0, sizeof acc);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < w; j++)
        acc[j] += dpm_f32_from_bf16_1(dy[(size_t)i * m + j0 + j]);
    dpm_bf16_from_f32(db + j0, acc, (size_t)w);
  }
}

static void fc_backward(const dpm_op *op, void *scratch) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  const uint16_t *dy = bf(op->in[2]);
  if (op->out[0]) /* dW[j][kk] = sum_i dY[i][j] X[i][kk] */
    dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = m,
                                        .cols = k,
                                        .inner = n,
                                        .a = dy,
                                        .ars = 1,
                                        .ass = m,
                                        .b = bf(x),
                                        .bss = k,
                                        .bcs = 1,
                                        .o = bfw(op->out[0]),
                                        .ors = k,
                                        .ocs = 1},
                  scratch);
  if (op->out[1]) col_sums_bf16(dy, n, m, bfw(op->out[1]));
  if (op->out[2]) /* dX[i][kk] = sum_j dY[i][j] W[j][kk] */
    dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = n,
                                        .cols = k,
                                        .inner = m,
                                        .a = dy,
                                        .ars = m,
                                        .ass = 1,
                                        .b = bf(w),
                                        .bss = k,
                                        .bcs = 1,
                                        .o = bfw(op->out[2]),
                                        .ors = k,
                                        .ocs = 1},
                  scratch);
}

int dpm_cpu_fc_bf16_run(const dpm_op *op, void *scratch) {
  if (!dpm_bf16_native()) return 0;
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k]) in[k] = op->in[k]->shape;
  for (int k = 0; k < op->n_out; k++)
    if (op->out[k]) out[k] = op->out[k]->shape;
  if (!fc_native_node(op->node, in, out)) return 0;
  (op->node->def->id == DPM_OP_FC ? fc_forward : fc_backward)(op, scratch);
  return 1;
}
