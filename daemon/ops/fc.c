/* FC: the fully connected layer Y = X W^T + b (Caffe2 layout), and its
 * gradient. X [N, ...] is read as [N, K] (flattened at axis 1), W is [M, K],
 * b is [M], Y is [N, M]. Every product is one dpm_gemm call on the tensors as
 * they lie: no transposes or copies are materialised, and the forward adds
 * the bias (and a fused Relu) while each tile of Y is in registers. */
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"
#include "ops/gemm.h"

#define FC_INITS "xavier|msra|gaussian|uniform|constant"

/* arg[0] is dim_out; the others are read by the engine's param fills. */
static const dpm_arg_def fc_args[] = {
    {"dim_out", DPM_ARG_INT, NULL, NULL, 1, INT32_MAX},
    {"weight_init", DPM_ARG_STRING, "xavier", FC_INITS, 0, 0},
    {"weight_std", DPM_ARG_FLOAT, "0.01", NULL, 0, 0},
    {"bias_init", DPM_ARG_STRING, "constant", FC_INITS, 0, 0},
    {"bias_value", DPM_ARG_FLOAT, "0", NULL, 0, 0},
    {NULL},
};

static const dpm_param_def fc_params[] = {
    {"_w", DPM_BLOB_PARAM, "xavier", "weight_init", 0.01, "weight_std"},
    {"_b", DPM_BLOB_PARAM, "constant", "bias_init", 0, "bias_value"},
    {NULL},
};

/* X must be f32 with 2 to 4 dimensions. */
static dpm_status check_x(const dpm_shape *x, dpm_err *err) {
  if (dpm_expect_dtype(x, DPM_F32, "input", err)) return err->code;
  return dpm_expect_ndim(x, 2, DPM_MAX_DIMS, "input", err);
}

static dpm_status fc_param_shapes(const dpm_node *n, const dpm_shape *data_in,
                                  dpm_shape *param, dpm_err *err) {
  if (check_x(&data_in[0], err)) return err->code;
  int64_t m = n->arg[0].i, k = dpm_shape_span(&data_in[0], 1, data_in[0].ndim);
  param[0] = dpm_shape_make(DPM_F32, 2, (int64_t[]){m, k});
  param[1] = dpm_shape_make(DPM_F32, 1, &m);
  return DPM_OK;
}

/* Y's shape from X's and W's; W must be what fc_param_shapes gives for X. */
static dpm_status infer_y(const dpm_node *n, const dpm_shape *x, const dpm_shape *w,
                          dpm_shape *y, dpm_err *err) {
  dpm_shape want[2];
  char a[64], b[64], c[64];
  if (fc_param_shapes(n, x, want, err)) return err->code;
  if (!dpm_shape_equal(w, &want[0]))
    return dpm_errf(err, DPM_SHAPE, "weight is %s, expected %s for input %s",
                    dpm_shape_str(w, a, sizeof a), dpm_shape_str(&want[0], b, sizeof b),
                    dpm_shape_str(x, c, sizeof c));
  *y = dpm_shape_make(DPM_F32, 2, (int64_t[]){x->d[0], w->d[0]});
  return DPM_OK;
}

/* FC(X, W, b) -> Y. */
static dpm_status fc_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                           dpm_err *err) {
  char a[64];
  if (infer_y(n, &in[0], &in[1], &out[0], err)) return err->code;
  if (in[2].dtype != DPM_F32 || in[2].ndim != 1 || in[2].d[0] != in[1].d[0])
    return dpm_errf(err, DPM_SHAPE, "bias is %s, expected f32[%lld]",
                    dpm_shape_str(&in[2], a, sizeof a), (long long)in[1].d[0]);
  return DPM_OK;
}

static void fc_run(const dpm_op *op) {
  const dpm_tensor *x = op->in[0], *w = op->in[1];
  int n = (int)x->shape.d[0], m = (int)w->shape.d[0], k = (int)w->shape.d[1];
  dpm_gemm_nt(&(dpm_gemm_nt_args){.n = n, .m = m, .k = k, .x = dpm_f32(x), .ldx = k,
                                  .w = dpm_f32(w), .ldw = k, .b = dpm_f32(op->in[2]),
                                  .relu = !!(op->node->fuse & DPM_FUSE_RELU),
                                  .y = dpm_f32(op->out[0]), .ldy = m});
}

/* FCGradient(X, W, dY) -> dW, db, dX; each output may be absent (NULL). */
static dpm_status fc_grad_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  dpm_shape y;
  char a[64], b[64];
  if (infer_y(n, &in[0], &in[1], &y, err)) return err->code;
  if (!dpm_shape_equal(&in[2], &y))
    return dpm_errf(err, DPM_SHAPE, "output gradient is %s, expected %s",
                    dpm_shape_str(&in[2], a, sizeof a), dpm_shape_str(&y, b, sizeof b));
  out[0] = in[1];
  out[1] = dpm_shape_make(DPM_F32, 1, in[1].d);
  out[2] = in[0];
  return DPM_OK;
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
 * dpm_gemm_outer): each part's rows of dW and db. Both dpm_gemm_outer's
 * tiles and sgemm sum the inner dimension of each output element in the
 * same order whatever rows are asked for, so the parts give run's result
 * bit for bit (tests/unit/share_test.c); run stays one product, which is
 * 2-3% faster for the MLP than 11 calls. */
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
  fc_grad_units(op, 0, m);
  if (op->out[2]) /* dX [N, K] = dY W */
    dpm_gemm_outer(n, k, m, dpm_f32(op->in[2]), m, 1, dpm_f32(w), k, 0,
                   dpm_f32(op->out[2]), k);
}

static dpm_status fc_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->in[0], g->fwd->in[1], g->gout[0]};
  const char *out[] = {g->gin[1], g->gin[2], g->gin[0]};
  return dpm_grad_emit(g, DPM_OP_FC_GRADIENT, 3, in, 3, out, err);
}

const dpm_op_def DPM_OP_DEF(FC) = {
    .id = DPM_OP_FC,
    .name = "FC",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = fc_args,
    .params = fc_params,
    .param_shapes = fc_param_shapes,
    .infer = fc_infer,
    .grad = fc_grad,
    .run = fc_run,
    .fusable = DPM_FUSE_RELU,
};
const dpm_op_def DPM_OP_DEF(FC_GRADIENT) = {
    .id = DPM_OP_FC_GRADIENT,
    .name = "FCGradient",
    .min_in = 3,
    .max_in = 3,
    .min_out = 3,
    .max_out = 3,
    .args = fc_args,
    .infer = fc_grad_infer,
    .run = fc_grad_run,
    .parts = fc_grad_parts,
    .run_part = fc_grad_part,
    .flags = DPM_OP_HIDDEN,
};
