/* The CPU kernels of Dropout and DropoutGradient (ops/dropout.c: inverted
 * dropout, its mask and test mode are described there). The draws come
 * from the device context's stream (op->ctx->rng), one per element in
 * order, so a run is reproducible from the stream's seed. */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "engine/rng.h"
#include "ops/dropout.h"

/* y = x in test mode; an in-place op has nothing to do. */
static void copy(const dpm_tensor *from, dpm_tensor *to) {
  if (to->data != from->data) memcpy(to->data, from->data, dpm_shape_bytes(&from->shape));
}

static void dropout_run(const dpm_op *op) {
  if (op->node->is_test) {
    copy(op->in[0], op->out[0]);
    return;
  }
  const double ratio = op->node->arg[DROPOUT_ARG_RATIO].f;
  const float keep = (float)(1 / (1 - ratio));
  const float *x = dpm_f32(op->in[0]);
  float *y = dpm_f32(op->out[0]), *mask = dpm_f32(op->out[1]);
  uint64_t *rng = op->ctx->rng;
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) mask[i] = dpm_rng_uniform(rng) < ratio ? 0.f : keep;
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

static void dropout_grad_run(const dpm_op *op) {
  if (op->node->is_test) {
    copy(op->in[0], op->out[0]);
    return;
  }
  const float *dy = dpm_f32(op->in[0]), *mask = dpm_f32(op->in[1]);
  float *dx = dpm_f32(op->out[0]);
  int64_t n = dpm_tensor_numel(op->in[0]);
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i];
}

const dpm_kernel_def DPM_CPU_KERNEL(DROPOUT) = {.run = dropout_run};
const dpm_kernel_def DPM_CPU_KERNEL(DROPOUT_GRADIENT) = {.run = dropout_grad_run};
