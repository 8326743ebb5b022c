/* FC and FCGradient over bf16 tensors, native (lowp_run.h, gemm_bf16.h):
 * the products through dpm_bf16_gemm, db as the f32 kernel sums it. */
#include <string.h>

#include "backend/cpu/fc_bf16.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/lowp_run.h"
#include "engine/lowp.h"
#include "engine/op.h"

/* The forward runs dot tiles (dpm_bf16_gemm_nt: no packing) up to its k;
 * past it, a dpm_bf16_gemm that computes Y^T = W X^T (rows W's, packing X)
 * when W has more rows than X, else Y = X W^T (packing W): B, the operand
 * packed, is the smaller. Y is stored as it lies either way. */
static int fc_dot(int k) { return k <= DPM_BF16_NT_KMAX; }
static int fc_transposed(int n, int m) { return m > n; }

static int all_bf16(const dpm_shape *s, const char *const *names, int k) {
  for (int j = 0; j < k; j++)
    if (names[j] && s[j].dtype != DPM_BF16) return 0;
  return 1;
}

/* Whether node n (types in[], out[]) has a native kernel: FC or
 * FCGradient with every tensor bf16, but FCGradient's dW and db f32 when
 * it writes them so (DPM_FUSE_GRAD_F32). */
static int fc_native_node(const dpm_node *n, const dpm_shape *in, const dpm_shape *out) {
  if (n->def->id != DPM_OP_FC && n->def->id != DPM_OP_FC_GRADIENT) return 0;
  if (!all_bf16(in, (const char *const *)n->in, n->n_in)) return 0;
  if (!(n->fuse & DPM_FUSE_GRAD_F32))
    return all_bf16(out, (const char *const *)n->out, n->n_out);
  for (int k = 0; k < 2; k++)
    if (n->out[k] && out[k].dtype != DPM_F32) return 0;
  return all_bf16(out + 2, (const char *const *)n->out + 2, 1);
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
    if (fc_dot(k)) return 0;
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
  if (fc_dot(k)) {
    dpm_bf16_nt_args d = {.n = n, .m = m, .k = k, .x = x, .ldx = k, .w = w, .ldw = k};
    d.bias = b, d.relu = relu, d.y = y, d.ldy = m;
    dpm_bf16_gemm_nt(&d);
    return;
  }
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

/* dW's product: dW[j][kk] = sum_i dY[i][j] X[i][kk], into dw or dw32. */
static dpm_bf16_gemm_args dw_args(int n, int m, int k, const uint16_t *x,
                                  const uint16_t *dy, uint16_t *dw, float *dw32) {
  return (dpm_bf16_gemm_args){.rows = m,
                              .cols = k,
                              .inner = n,
                              .a = dy,
                              .ars = 1,
                              .ass = m,
                              .b = x,
                              .bss = k,
                              .bcs = 1,
                              .o = dw,
                              .o32 = dw32,
                              .ors = k,
                              .ocs = 1};
}

void dpm_fc_bf16_dw(int n, int m, int k, const uint16_t *x, const uint16_t *dy,
                    uint16_t *dw, float *dw32, void *scratch) {
  dpm_bf16_gemm_args a = dw_args(n, m, k, x, dy, dw, dw32);
  dpm_bf16_gemm(&a, scratch);
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

/* db[j] = sum over rows i of dy[i][j] for j in [lo, hi), summed in f32 row
 * after row from 0, as the f32 kernel's col_sums does (the same bits),
 * into db32, else rounded into db; the widening inline (a shift), so the
 * loop over j vectorises. */
static void col_sums_bf16(const uint16_t *restrict dy, int n, int m, int lo, int hi,
                          uint16_t *restrict db, float *restrict db32) {
  float acc[256];
  for (int j0 = lo; j0 < hi; j0 += 256) {
    int w = hi - j0 < 256 ? hi - j0 : 256;
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
    if (db32)
      memcpy(db32 + j0, acc, (size_t)w * sizeof *acc);
    else
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

/* FCGradient's output k (dW or db) as bf16 or, fused, as f32. */
static uint16_t *grad16(const dpm_op *op, int k) {
  return op->out[k] && !(op->node->fuse & DPM_FUSE_GRAD_F32) ? op->out[k]->data : NULL;
}
static float *grad32(const dpm_op *op, int k) {
  return op->out[k] && (op->node->fuse & DPM_FUSE_GRAD_F32) ? op->out[k]->data : NULL;
}

static void fc_backward(const dpm_op *op, void *scratch) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  const uint16_t *dy = bf(op->in[2]);
  if (op->out[0]) dpm_fc_bf16_dw(n, m, k, bf(x), dy, grad16(op, 0), grad32(op, 0), scratch);
  if (op->out[1]) col_sums_bf16(dy, n, m, 0, m, grad16(op, 1), grad32(op, 1));
  if (op->out[2]) dpm_fc_bf16_dx(n, m, k, bf(w), dy, op->out[2]->data, scratch);
}

int dpm_cpu_fc_bf16_run(const dpm_op *op, const dpm_shape *in, const dpm_shape *out,
                        void *scratch) {
  if (!dpm_bf16_native()) return 0;
  if (!fc_native_node(op->node, in, out)) return 0;
  (op->node->def->id == DPM_OP_FC ? fc_forward : fc_backward)(op, scratch);
  return 1;
}

/* ---- parts (work sharing) ---------------------------------------------- */

/* Output units (rows of dW, entries of db) a part of FCGradient covers:
 * four 6-row tiles. */
#define PART_ROWS 24

/* The op's tensors' shapes, as dpm_cpu_fc_bf16_run takes them. */
static void op_shapes(const dpm_op *op, dpm_shape *in, dpm_shape *out) {
  memset(in, 0, DPM_OP_MAX_IO * sizeof *in);
  memset(out, 0, DPM_OP_MAX_IO * sizeof *out);
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k]) in[k] = op->in[k]->shape;
  for (int k = 0; k < op->n_out; k++)
    if (op->out[k]) out[k] = op->out[k]->shape;
}

int dpm_cpu_fc_bf16_parts(const dpm_op *op) {
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  if (!dpm_bf16_native() || op->node->def->id != DPM_OP_FC_GRADIENT || op->out[2] ||
      !op->out[0])
    return 0;
  op_shapes(op, in, out);
  if (!fc_native_node(op->node, in, out)) return 0;
  return (int)((in[1].d[0] + PART_ROWS - 1) / PART_ROWS);
}

void dpm_cpu_fc_bf16_prepare(const dpm_op *op) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  dpm_bf16_gemm_args a = dw_args(n, m, k, bf(x), bf(op->in[2]), grad16(op, 0), grad32(op, 0));
  dpm_bf16_gemm_pack(&a, op->ctx->scratch);
}

void dpm_cpu_fc_bf16_part(const dpm_op *op, int part) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  int lo = part * PART_ROWS, hi = lo + PART_ROWS < m ? lo + PART_ROWS : m;
  const uint16_t *dy = bf(op->in[2]);
  dpm_bf16_gemm_args a = dw_args(n, m, k, bf(x), dy, grad16(op, 0), grad32(op, 0));
  dpm_bf16_gemm_rows(&a, op->ctx->scratch, lo, hi);
  if (op->out[1]) col_sums_bf16(dy, n, m, lo, hi, grad16(op, 1), grad32(op, 1));
}
