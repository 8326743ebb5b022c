/* Loss ops: Softmax, SoftmaxWithLoss, Accuracy, and the gradients of the
 * first two.
 *
 * Each op sees its first input as N rows (dimension 0) of D values (every
 * other dimension flattened, Caffe2's axis=1). Labels are int32 [N]. A label
 * outside [0, D) never indexes memory: SoftmaxWithLoss treats it as a class
 * of probability zero, so the row adds the constant -log(1e-20) to the loss
 * (visible, not silent) and, being constant, nothing to the gradient;
 * Accuracy counts the row as wrong. A NaN probability (diverged logits)
 * makes the loss NaN, never the floor, so training stops on it.
 *
 * Here: shape inference and the gradient makers; the kernels are each
 * backend's (CPU: backend/cpu/loss.c). */
#include "engine/op.h"
#include "ops/families.h"

/* ---- shape checks -------------------------------------------------------- */

static dpm_status expect_rows(const dpm_shape *s, const char *what, dpm_err *err) {
  if (dpm_expect_dtype(s, DPM_F32, what, err)) return err->code;
  return dpm_expect_ndim(s, 2, DPM_MAX_DIMS, what, err);
}

static dpm_status expect_label(const dpm_shape *x, const dpm_shape *label, dpm_err *err) {
  if (label->dtype == DPM_I32 && label->ndim == 1 && label->d[0] == x->d[0])
    return DPM_OK;
  char b[64];
  return dpm_errf(err, DPM_SHAPE, "label must be i32[%lld] (one class per row), got %s",
                  (long long)x->d[0], dpm_shape_str(label, b, sizeof b));
}

static dpm_status expect_same(const dpm_shape *s, const dpm_shape *ref, const char *what,
                              dpm_err *err) {
  if (dpm_shape_equal(s, ref)) return DPM_OK;
  char a[64], b[64];
  return dpm_errf(err, DPM_SHAPE, "%s must be %s, got %s", what,
                  dpm_shape_str(ref, a, sizeof a), dpm_shape_str(s, b, sizeof b));
}

static dpm_status expect_scalar(const dpm_shape *s, const char *what, dpm_err *err) {
  if (s->dtype == DPM_F32 && dpm_shape_numel(s) == 1) return DPM_OK;
  char b[64];
  return dpm_errf(err, DPM_SHAPE, "%s must be an f32 scalar, got %s", what,
                  dpm_shape_str(s, b, sizeof b));
}

/* ---- Softmax ------------------------------------------------------------- */

static dpm_status softmax_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                dpm_err *err) {
  (void)n;
  if (expect_rows(&in[0], "input", err)) return err->code;
  out[0] = in[0];
  return DPM_OK;
}

/* SoftmaxGradient(Y, dY) -> dX: reads the output only, so Softmax may run in
 * place. */
static dpm_status softmax_grad_infer(const dpm_node *n, const dpm_shape *in,
                                     dpm_shape *out, dpm_err *err) {
  (void)n;
  if (expect_rows(&in[0], "softmax output", err) ||
      expect_same(&in[1], &in[0], "output gradient", err))
    return err->code;
  out[0] = in[0];
  return DPM_OK;
}

static dpm_status softmax_grad(dpm_grad *g, dpm_err *err) {
  const char *in[] = {g->fwd->out[0], g->gout[0]};
  return dpm_grad_emit(g, DPM_OP_SOFTMAX_GRADIENT, 2, in, 1, &g->gin[0], err);
}

/* ---- SoftmaxWithLoss ----------------------------------------------------- */

/* label_smoothing eps in [0, 1): the target is (1 - eps) onehot + eps / K. */
static const dpm_arg_def swl_args[] = {
    {"label_smoothing", DPM_ARG_FLOAT, "0", NULL, 0, 1},
    {NULL},
};

static dpm_status check_smoothing(const dpm_node *n, dpm_err *err) {
  if (n->arg[0].f < 1) return DPM_OK;
  return dpm_errf(err, DPM_SPEC, "label_smoothing must be below 1, got %g", n->arg[0].f);
}

/* (logits, label) -> (softmax, loss): loss = mean over rows of
 * -log(max(softmax[label], 1e-20)); with label_smoothing eps, of
 * -sum over k of q_k log(max(softmax[k], 1e-20)), q = (1 - eps) onehot +
 * eps / K (a row whose label is out of range keeps the constant term). */
static dpm_status swl_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                            dpm_err *err) {
  if (expect_rows(&in[0], "logits", err) || expect_label(&in[0], &in[1], err) ||
      check_smoothing(n, err))
    return err->code;
  out[0] = in[0];
  out[1] = dpm_shape_scalar(DPM_F32);
  return DPM_OK;
}

/* SoftmaxWithLossGradient(softmax, label, dloss[, dsoftmax]) -> dlogits
 *   = (softmax - q) * dloss / N  [+ SoftmaxGradient(dsoftmax)], q the
 *   (smoothed) onehot(label);
 * rows with an out-of-range label get no loss term.
 * The softmax output is normally consumed by nothing differentiable; when it
 * is, its gradient is passed as the fourth input and added. */
static dpm_status swl_grad_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  if (expect_rows(&in[0], "softmax", err) || expect_label(&in[0], &in[1], err) ||
      check_smoothing(n, err) || expect_scalar(&in[2], "loss gradient", err) ||
      (n->n_in > 3 && expect_same(&in[3], &in[0], "softmax gradient", err)))
    return err->code;
  out[0] = in[0];
  return DPM_OK;
}

static dpm_status swl_grad(dpm_grad *g, dpm_err *err) {
  const char *softmax = g->fwd->out[0], *dsoftmax = g->gout[0], *dloss = g->gout[1];
  if (!dloss) { /* only the softmax output is differentiated */
    const char *in[] = {softmax, dsoftmax};
    return dpm_grad_emit(g, DPM_OP_SOFTMAX_GRADIENT, 2, in, 1, &g->gin[0], err);
  }
  const char *in[] = {softmax, g->fwd->in[1], dloss, dsoftmax};
  return dpm_grad_emit(g, DPM_OP_SOFTMAX_WITH_LOSS_GRADIENT, dsoftmax ? 4 : 3, in, 1,
                       &g->gin[0], err);
}

/* ---- Accuracy ------------------------------------------------------------ */

/* top_k: a row is correct when its label is among its top_k classes. */
static const dpm_arg_def accuracy_args[] = {
    {"top_k", DPM_ARG_INT, "1", NULL, 1, 1 << 20},
    {NULL},
};

/* (pred, label) -> fraction of rows whose label ranks below top_k (Caffe2's
 * ranking: classes ordered by score, ties by index, lowest first; top_k 1:
 * the row's first maximum is at the label). */
static dpm_status accuracy_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                                 dpm_err *err) {
  if (expect_rows(&in[0], "prediction", err) || expect_label(&in[0], &in[1], err))
    return err->code;
  int64_t d = dpm_shape_span(&in[0], 1, in[0].ndim), k = n->arg[0].i;
  if (k > d)
    return dpm_errf(err, DPM_SPEC, "top_k %lld is more than the %lld classes",
                    (long long)k, (long long)d);
  out[0] = dpm_shape_scalar(DPM_F32);
  return DPM_OK;
}

/* ---- table --------------------------------------------------------------- */

const dpm_op_def DPM_OP_DEF(SOFTMAX) = {
    .id = DPM_OP_SOFTMAX,
    .name = "Softmax",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .infer = softmax_infer,
    .grad = softmax_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(SOFTMAX_GRADIENT) = {
    .id = DPM_OP_SOFTMAX_GRADIENT,
    .name = "SoftmaxGradient",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .infer = softmax_grad_infer,
    .flags = DPM_OP_INPLACE | DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(SOFTMAX_WITH_LOSS) = {
    .id = DPM_OP_SOFTMAX_WITH_LOSS,
    .name = "SoftmaxWithLoss",
    .min_in = 2,
    .max_in = 2,
    .min_out = 2,
    .max_out = 2,
    .args = swl_args,
    .infer = swl_infer,
    .grad = swl_grad,
    .flags = DPM_OP_INPLACE,
};
const dpm_op_def DPM_OP_DEF(SOFTMAX_WITH_LOSS_GRADIENT) = {
    .id = DPM_OP_SOFTMAX_WITH_LOSS_GRADIENT,
    .name = "SoftmaxWithLossGradient",
    .min_in = 3,
    .max_in = 4,
    .min_out = 1,
    .max_out = 1,
    .args = swl_args,
    .infer = swl_grad_infer,
    .flags = DPM_OP_HIDDEN,
};
const dpm_op_def DPM_OP_DEF(ACCURACY) = {
    .id = DPM_OP_ACCURACY,
    .name = "Accuracy",
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .args = accuracy_args,
    .infer = accuracy_infer,
    .flags = DPM_OP_NO_GRAD,
};
