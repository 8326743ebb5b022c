/* The CPU kernels of FC and FCGradient (ops/fc.c: Y = X W^T + b, X read as
 * [N, K], W [M, K], b [M], Y [N, M]). Every product is one dpm_gemm call on
 * the tensors as they lie: no transposes or copies are materialised, and the
 * forward adds the bias (and a fused Relu) while each tile of Y is in
 * registers. FCGradient without dX splits into parts (work sharing). */
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"

static void fc_run(const dpm_op *op) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  dpm_gemm_nt(&(dpm_gemm_nt_args){.n = n, .m = m, .k = k, .x = dpm_f32(x), .ldx = k,
                                  .w = dpm_f32(w), .ldw = k, .b = dpm_f32(op->in[2]),
                                  .relu = !!(op->node->fuse & DPM_FUSE_RELU),
                                  .y = dpm_f32(op->out[0]), .ldy = m});
}

/* db[j] = sum over rows of dy[i][j] for j in [lo, hi), row by row (db
 * stays in L1). dy has m columns. */
static void col_sums(const float *restrict dy, int n, int m, int lo, int hi,
                     float *restrict db) {
  memset(db + lo, 0, (size_t)(hi - lo) * sizeof *db);
  for (int i = 0; i < n; i++)
    for (int j = lo; j < hi; j++) db[j] += dy[(size_t)i * m + j];
}

/* Without dX (the first layer: the last op of backward), FCGradient splits
 * into parts of FC_PART_ROWS output units (whole 6-row tiles of
 * dpm_gemm_outer): each part's rows of dW and db. run computes the same
 * parts in turn, so the parts give run's result bit for bit
 * (tests/unit/share_test.c) whatever the product's kernel: an sgemm may
 * sum a row block's inner dimension in another order than the whole
 * product's (OpenBLAS's AVX2 kernels do). */
#define FC_PART_ROWS 24

static int fc_grad_parts(const dpm_op *op) {
  if (!op->out[0] || op->out[2]) return 0;
  return (int)((op->in[1]->shape.d[0] + FC_PART_ROWS - 1) / FC_PART_ROWS);
}

/* dW and db for output units [lo, hi): dW[lo, hi) = dY[:, lo..hi)^T X. */
static void fc_grad_units(const dpm_op *op, int lo, int hi) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  const float *dy = dpm_f32(op->in[2]);
  if (op->out[0])
    dpm_gemm_outer(hi - lo, k, n, dy + lo, 1, m, dpm_f32(x), k, 0,
                   dpm_f32(op->out[0]) + (size_t)lo * k, k);
  if (op->out[1]) col_sums(dy, n, m, lo, hi, dpm_f32(op->out[1]));
}

static void fc_grad_part(const dpm_op *op, int part) {
  int m = (int)op->in[1]->shape.d[0], lo = part * FC_PART_ROWS;
  fc_grad_units(op, lo, lo + FC_PART_ROWS < m ? lo + FC_PART_ROWS : m);
}

static void fc_grad_run(const dpm_op *op) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  int parts = fc_grad_parts(op);
  for (int p = 0; p < parts; p++) fc_grad_part(op, p);
  if (!parts) fc_grad_units(op, 0, m);
  if (op->out[2]) /* dX [N, K] = dY W */
    dpm_gemm_outer(n, k, m, dpm_f32(op->in[2]), m, 1, dpm_f32(w), k, 0,
                   dpm_f32(op->out[2]), k);
}

const dpm_kernel_def DPM_CPU_KERNEL(FC) = {.run = fc_run};
const dpm_kernel_def DPM_CPU_KERNEL(FC_GRADIENT) = {
    .run = fc_grad_run,
    .parts = fc_grad_parts,
    .run_part = fc_grad_part,
};
