/* The CPU kernels of the loss ops (ops/loss.c): Softmax, SoftmaxWithLoss,
 * Accuracy and the gradients of the first two. Rows are dimension 0 of the
 * first input, every other dimension flattened; a softmax subtracts its
 * row's maximum before expf, and the loss sums in double. */
#include <math.h>

#include "backend/cpu/kernels.h"

#define PROB_FLOOR 1e-20 /* probabilities are clamped here before the log */

static int64_t rows(const dpm_tensor *t) { return t->shape.d[0]; }
static int64_t cols(const dpm_tensor *t) {
  return dpm_shape_span(&t->shape, 1, t->shape.ndim);
}

/* y = softmax of each of the n rows of x (d each); y may be x. */
static void softmax_rows(const float *x, float *y, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; i++, x += d, y += d) {
    float mx = x[0];
    for (int64_t j = 1; j < d; j++) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.f;
    for (int64_t j = 0; j < d; j++) sum += y[j] = expf(x[j] - mx);
    float inv = 1.f / sum;
    for (int64_t j = 0; j < d; j++) y[j] *= inv;
  }
}

/* dx = y * (dy - <y, dy>) row by row; when `add`, added to dx instead. */
static void softmax_grad_rows(const float *y, const float *dy, float *dx, int64_t n,
                              int64_t d, int add) {
  for (int64_t i = 0; i < n; i++, y += d, dy += d, dx += d) {
    float dot = 0.f;
    for (int64_t j = 0; j < d; j++) dot += y[j] * dy[j];
    if (add)
      for (int64_t j = 0; j < d; j++) dx[j] += y[j] * (dy[j] - dot);
    else
      for (int64_t j = 0; j < d; j++) dx[j] = y[j] * (dy[j] - dot);
  }
}

/* ---- Softmax ------------------------------------------------------------- */

static void softmax_run(const dpm_op *op) {
  softmax_rows(dpm_f32(op->in[0]), dpm_f32(op->out[0]), rows(op->in[0]), cols(op->in[0]));
}

static void softmax_grad_run(const dpm_op *op) {
  softmax_grad_rows(dpm_f32(op->in[0]), dpm_f32(op->in[1]), dpm_f32(op->out[0]),
                    rows(op->in[0]), cols(op->in[0]), 0);
}

/* ---- SoftmaxWithLoss ----------------------------------------------------- */

/* -log(max(p, 1e-20)); NaN stays NaN. */
static double nlog(double p) { return -log(p > PROB_FLOOR || isnan(p) ? p : PROB_FLOOR); }

/* Loss term of a row with label smoothing eps > 0 and its label l in range:
 * (1 - eps) (-log y[l]) + eps / d * sum over j of -log y[j]. */
static double smoothed_loss(const float *y, int32_t l, int64_t d, float eps) {
  double all = 0;
  for (int64_t j = 0; j < d; j++) all += nlog((double)y[j]);
  return (1.0 - (double)eps) * nlog((double)y[l]) + (double)eps / (double)d * all;
}

static void swl_run(const dpm_op *op) {
  const int32_t *label = dpm_i32(op->in[1]);
  float *y = dpm_f32(op->out[0]);
  int64_t n = rows(op->in[0]), d = cols(op->in[0]);
  float eps = (float)op->node->arg[0].f;
  softmax_rows(dpm_f32(op->in[0]), y, n, d);
  double loss = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t l = label[i];
    int in = l >= 0 && l < d;
    double p = in ? y[i * d + l] : 0.0;
    loss += eps != 0.f && in ? smoothed_loss(y + i * d, l, d, eps) : nlog(p);
  }
  dpm_f32(op->out[1])[0] = (float)(loss / (double)n);
}

/* dlogits = (softmax - q) * dloss / N with q = onehot(label), or with
 * label smoothing eps > 0 q = (1 - eps) onehot + eps / D; plus
 * SoftmaxGradient of the fourth input where there is one. */
static void swl_grad_run(const dpm_op *op) {
  const float *y = dpm_f32(op->in[0]);
  const int32_t *label = dpm_i32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = rows(op->in[0]), d = cols(op->in[0]);
  float scale = dpm_f32(op->in[2])[0] / (float)n, eps = (float)op->node->arg[0].f;
  float off = eps / (float)d, on = (1.f - eps) + off;
  for (int64_t i = 0; i < n; i++) {
    const float *yi = y + i * d;
    float *dxi = dx + i * d, s = label[i] >= 0 && label[i] < d ? scale : 0.f;
    if (eps == 0.f) {
      for (int64_t j = 0; j < d; j++) dxi[j] = yi[j] * s;
      if (s != 0.f) dxi[label[i]] -= s;
    } else {
      for (int64_t j = 0; j < d; j++) dxi[j] = (yi[j] - (j == label[i] ? on : off)) * s;
    }
  }
  if (op->n_in > 3) softmax_grad_rows(y, dpm_f32(op->in[3]), dx, n, d, 1);
}

/* ---- Accuracy ------------------------------------------------------------ */

/* top_k 1: the row's first maximum is at the label. top_k k > 1 (Caffe2's
 * accuracy_op.cc): fewer than k classes j rank above the label, x[j] >
 * x[label] or equal with j < label, as a stable sort by score would place
 * them; a label out of range is wrong. */
static int top_k_row(const float *x, int32_t label, int64_t d, int64_t k) {
  if (k == 1) {
    int64_t best = 0;
    for (int64_t j = 1; j < d; j++) best = x[j] > x[best] ? j : best;
    return best == label;
  }
  if (label < 0 || label >= d) return 0;
  const float xl = x[label];
  int64_t above = 0;
  for (int64_t j = 0; j < d && above < k; j++)
    above += x[j] > xl || (x[j] == xl && j < label);
  return above < k;
}

static void accuracy_run(const dpm_op *op) {
  const float *x = dpm_f32(op->in[0]);
  const int32_t *label = dpm_i32(op->in[1]);
  int64_t n = rows(op->in[0]), d = cols(op->in[0]), k = op->node->arg[0].i, correct = 0;
  for (int64_t i = 0; i < n; i++, x += d) correct += top_k_row(x, label[i], d, k);
  dpm_f32(op->out[0])[0] = (float)((double)correct / (double)n);
}

/* ---- table --------------------------------------------------------------- */

const dpm_kernel_def DPM_CPU_KERNEL(SOFTMAX) = {.run = softmax_run};
const dpm_kernel_def DPM_CPU_KERNEL(SOFTMAX_GRADIENT) = {.run = softmax_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(SOFTMAX_WITH_LOSS) = {.run = swl_run};
const dpm_kernel_def DPM_CPU_KERNEL(SOFTMAX_WITH_LOSS_GRADIENT) = {.run = swl_grad_run};
const dpm_kernel_def DPM_CPU_KERNEL(ACCURACY) = {.run = accuracy_run};
