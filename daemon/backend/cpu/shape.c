/* The CPU kernels of the shape ops (ops/shape.c): Flatten, Reshape and
 * their gradients copy the bytes under the output's shape; Concat and
 * ConcatGradient copy rows between the joined tensor and its parts. */
#include <string.h>

#include "backend/cpu/kernels.h"

/* Y = X's bytes under the output's shape (forward), or dY's bytes under X's
 * shape (gradient). */
static void copy_run(const dpm_op *op) {
  memcpy(op->out[0]->data, op->in[0]->data, dpm_shape_bytes(&op->out[0]->shape));
}

/* ---- Concat ---------------------------------------------------------------- */

/* Copies `rows` rows of each part between the joined tensor and the parts;
 * a part's row is its span from `axis` on. to_parts: split instead of join,
 * skipping absent (NULL) parts. */
static void concat_copy(float *joined, float *const *part, const int64_t *len, int n_part,
                        int64_t rows, int to_parts) {
  for (int64_t r = 0; r < rows; r++) {
    for (int k = 0; k < n_part; k++) {
      if (part[k]) {
        float *p = part[k] + r * len[k];
        if (to_parts)
          memcpy(p, joined, (size_t)len[k] * sizeof *p);
        else
          memcpy(joined, p, (size_t)len[k] * sizeof *p);
      }
      joined += len[k];
    }
  }
}

static void concat_run(const dpm_op *op) {
  int axis = (int)op->node->arg[0].i;
  float *part[DPM_OP_MAX_IO];
  int64_t len[DPM_OP_MAX_IO];
  for (int k = 0; k < op->n_in; k++) {
    part[k] = dpm_f32(op->in[k]);
    len[k] = dpm_shape_span(&op->in[k]->shape, axis, op->in[k]->shape.ndim);
  }
  concat_copy(dpm_f32(op->out[0]), part, len, op->n_in,
              dpm_shape_span(&op->out[0]->shape, 0, axis), 0);
}

static void concat_grad_run(const dpm_op *op) {
  int axis = (int)op->node->arg[0].i;
  const dpm_shape *dy = &op->in[0]->shape;
  float *part[DPM_OP_MAX_IO];
  int64_t len[DPM_OP_MAX_IO], inner = dpm_shape_span(dy, axis + 1, dy->ndim),
                              last = dy->d[axis];
  for (int k = 0; k < op->n_out; k++) {
    part[k] = op->out[k] ? dpm_f32(op->out[k]) : NULL;
    if (k + 1 < op->n_out) {
      len[k] = op->in[k + 1]->shape.d[axis] * inner;
      last -= op->in[k + 1]->shape.d[axis];
    }
  }
  len[op->n_out - 1] = last * inner;
  concat_copy(dpm_f32(op->in[0]), part, len, op->n_out, dpm_shape_span(dy, 0, axis), 1);
}

/* ---- table ----------------------------------------------------------------- */

const dpm_kernel_def DPM_CPU_KERNEL(FLATTEN) = {.run = copy_run};
const dpm_kernel_def DPM_CPU_KERNEL(FLATTEN_GRADIENT) = {.run = copy_run};
const dpm_kernel_def DPM_CPU_KERNEL(RESHAPE) = {.run = copy_run};
const dpm_kernel_def DPM_CPU_KERNEL(RESHAPE_GRADIENT) = {.run = copy_run};
const dpm_kernel_def DPM_CPU_KERNEL(CONCAT) = {.run = concat_run};
const dpm_kernel_def DPM_CPU_KERNEL(CONCAT_GRADIENT) = {.run = concat_grad_run};
