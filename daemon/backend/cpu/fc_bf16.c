/* FC and FCGradient over bf16 tensors, native (lowp_run.h, gemm_bf16.h):
 * the products through dpm_bf16_gemm, db as the f32 kernel sums it. */
#include <string.h>

#include "backend/cpu/fc_bf16.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/lowp_run.h"
#include "engine/lowp.h"
#include "engine/op.h"

/* The forward computes Y^T = W X^T (rows W's, packing X) when W has more
 * rows than X, else Y = X W^T (packing W): B, the operand packed, is the
 * smaller. Y is stored as it lies either way. */
static int fc_transposed(int n, int m) { return m > n; }

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
    return dpm_fc_bf16_scratch(nn, mm, kk, DPM_FC_BF16_FORWARD);
  size_t dw = n->out[0] ? dpm_fc_bf16_scratch(nn, mm, kk, DPM_FC_BF16_DW) : 0;
  size_t dx = n->out[2] ? dpm_fc_bf16_scratch(nn, mm, kk, DPM_FC_BF16_DX) : 0;
  return max_z(dw, dx);
}

size_t dpm_fc_bf16_scratch(int n, int m, int k, dpm_fc_bf16_product p) {
  switch (p) {
  case DPM_FC_BF16_FORWARD:
    return fc_transposed(n, m) ? dpm_bf16_gemm_scratch(m, n, k, 1)
                               : dpm_bf16_gemm_scratch(n, m, k, 1);
  case DPM_FC_BF16_DW:
    return dpm_bf16_gemm_scratch(m, k, n, m);
  default:
    return dpm_bf16_gemm_scratch(n, k, m, 1);
  }
}

void dpm_fc_bf16_forward(int n, int m, int k, const uint16_t *x, const uint16_t *w,
                         const uint16_t *b, int relu, uint16_t *y, void *scratch) {
  dpm_bf16_gemm_args a;
  if (fc_transposed(n, m)) /* Y^T[j][i] = sum_k W[j][k] X[i][k] */
    a = (dpm_bf16_gemm_args){.rows = m,
                             .cols = n,
                             .inner = k,
                             .a = w,
                             .ars = k,
                             .ass = 1,
                             .b = x,
                             .bss = 1,
                             .bcs = k,
                             .bias = b,
                             .bias_by_row = 1,
                             .relu = relu,
                             .o = y,
                             .ors = 1,
                             .ocs = m};
  else /* Y[i][j] = sum_k X[i][k] W[j][k] */
    a = (dpm_bf16_gemm_args){.rows = n,
                             .cols = m,
                             .inner = k,
                             .a = x,
                             .ars = k,
                             .ass = 1,
                             .b = w,
                             .bss = 1,
                             .bcs = k,
                             .bias = b,
                             .relu = relu,
                             .o = y,
                             .ors = m,
                             .ocs = 1};
  dpm_bf16_gemm(&a, scratch);
}

void dpm_fc_bf16_dw(int n, int m, int k, const uint16_t *x, const uint16_t *dy,
                    uint16_t *dw,
                    void *scratch) { /* dW[j][kk] = sum_i dY[i][j] X[i][kk] */
  dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = m,
                                      .cols = k,
                                      .inner = n,
                                      .a = dy,
                                      .ars = 1,
                                      .ass = m,
                                      .b = x,
                                      .bss = k,
                                      .bcs = 1,
                                      .o = dw,
                                      .ors = k,
                                      .ocs = 1},
                scratch);
}

void dpm_fc_bf16_dx(int n, int m, int k, const uint16_t *w, const uint16_t *dy,
                    uint16_t *dx,
                    void *scratch) { /* dX[i][kk] = sum_j dY[i][j] W[j][kk] */
  dpm_bf16_gemm(&(dpm_bf16_gemm_args){.rows = n,
                                      .cols = k,
                                      .inner = m,
                                      .a = dy,
                                      .ars = m,
                                      .ass = 1,
                                      .b = w,
                                      .bss = k,
                                      .bcs = 1,
                                      .o = dx,
                                      .ors = k,
                                      .ocs = 1},
                scratch);
}

/* db[j] = bf16(sum over rows i of dy[i][j]), summed in f32 row after row
 * from 0, as the f32 kernel's col_sums does (the same bits); the widening
 * inline (a shift), so the loop over j vectorises. */
static void col_sums_bf16(const uint16_t *restrict dy, int n, int m,
                          uint16_t *restrict db) {
  float acc[256];
  for (int j0 = 0; j0 < m; j0 += 256) {
    int w = m - j0 < 256 ? m - j0 : 256;
    memset(acc, 0, sizeof acc);
    for (int i = 0; i < n; i++) {
      const uint16_t *row = dy + (size_t)i * m + j0;
      for (int j = 0; j < w; j++) {
        uint32_t u = (uint32_t)row[j] << 16;
        float v;
        memcpy(&v, &u, sizeof v);
        acc[j] += v;
      }
    }
    dpm_bf16_from_f32(db + j0, acc, (size_t)w);
  }
}

static const uint16_t *bf(const dpm_tensor *t) { return t ? t->data : NULL; }

static void fc_forward(const dpm_op *op, void *scratch) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  dpm_fc_bf16_forward(n, m, k, bf(x), bf(w), bf(op->in[2]),
                      !!(op->node->fuse & DPM_FUSE_RELU), op->out[0]->data, scratch);
}

static void fc_backward(const dpm_op *op, void *scratch) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  const uint16_t *dy = bf(op->in[2]);
  if (op->out[0]) dpm_fc_bf16_dw(n, m, k, bf(x), dy, op->out[0]->data, scratch);
  if (op->out[1]) col_sums_bf16(dy, n, m, op->out[1]->data);
  if (op->out[2]) dpm_fc_bf16_dx(n, m, k, bf(w), dy, op->out[2]->data, scratch);
}

int dpm_cpu_fc_bf16_run(const dpm_op *op, const dpm_shape *in, const dpm_shape *out,
                        void *scratch) {
  if (!dpm_bf16_native()) return 0;
  if (!fc_native_node(op->node, in, out)) return 0;
  (op->node->def->id == DPM_OP_FC ? fc_forward : fc_backward)(op, scratch);
  return 1;
}
