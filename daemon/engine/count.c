/* Parameters and forward multiply-adds of a model (engine/count.h). */
#include "engine/count.h"

/* Multiply-adds of Conv or FC node n at the model's batch: every output
 * element takes one row of its weight W [M, ...]: numel(Y) x numel(W) / M
 * (Conv: C/group x k x k; FC: K). 0 when a shape is missing. */
static double node_macs(const dpm_model *m, const dpm_node *n) {
  const dpm_blobinfo *y = dpm_shapes_get(&m->shapes, n->out[0]);
  const dpm_blobinfo *w = n->n_in > 1 ? dpm_shapes_get(&m->shapes, n->in[1]) : NULL;
  if (!y || !w || w->shape.ndim < 1 || w->shape.d[0] < 1) return 0;
  return (double)dpm_shape_numel(&y->shape) * (double)dpm_shape_numel(&w->shape) /
         (double)w->shape.d[0];
}

dpm_model_count dpm_model_count_of(const dpm_model *m) {
  dpm_model_count c = {0};
  for (int i = 0; i < m->shapes.n; i++) {
    const dpm_blobinfo *b = &m->shapes.v[i];
    if (b->kind == DPM_BLOB_PARAM) c.params += dpm_shape_numel(&b->shape);
    if (b->kind == DPM_BLOB_COMPUTED) c.computed += dpm_shape_numel(&b->shape);
  }
  double macs = 0;
  for (int i = 0; i < m->n_forward; i++) {
    const dpm_node *n = &m->train.nodes[i];
    if (n->def->id == DPM_OP_CONV) {
      macs += node_macs(m, n);
      c.n_conv++;
    } else if (n->def->id == DPM_OP_FC) {
      macs += node_macs(m, n);
      c.n_fc++;
    }
  }
  c.macs = m->batch > 0 ? macs / m->batch : 0;
  return c;
}
