/* Combined SpatialBN statistics: the train net's rewrite (parallel/sync_bn.h). */
#include "parallel/sync_bn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* Appends stats_op(in) -> sums and Allreduce(sums) (dtype f64: the sums
 * are doubles) before the node `of` derives from, infers them, and returns
 * `of`'s copy with sums as its sixth input. */
static dpm_status add_combined(dpm_net *net, dpm_shapes *shapes, const char *source,
                               const dpm_node *of, dpm_op_id stats_op, int n_in,
                               const char *const *in, const char *sums, dpm_err *err) {
  if (dpm_shapes_get(shapes, sums))
    return dpm_errf(err, DPM_SPEC,
                    "%s: combine_spatial_bn: blob '%s' already exists; name the "
                    "SpatialBN output differently",
                    source, sums);
  const char *io[] = {sums};
  dpm_node *n = dpm_net_add(net, dpm_op_get(stats_op), n_in, in, 1, io, err);
  if (!n) return err->code;
  n->index = of->index;
  n->line = of->line;
  memcpy(n->arg, of->arg, sizeof n->arg);
  if (dpm_node_infer(n, shapes, DPM_BLOB_ACT, source, err)) return err->code;
  if (!(n = dpm_net_add(net, dpm_op_get(DPM_OP_ALLREDUCE), 1, io, 1, io, err)) ||
      dpm_node_set_string(n, "dtype", "f64", err))
    return err->code;
  n->index = of->index;
  n->line = of->line;
  if (dpm_node_infer(n, shapes, DPM_BLOB_ACT, source, err)) return err->code;
  if (!(n = dpm_net_add_copy(net, of, err))) return err->code;
  if (n->n_in >= DPM_OP_MAX_IO)
    return dpm_errf(err, DPM_INTERNAL, "%s: combine_spatial_bn: %s has no room for its sums",
                    source, of->def->name);
  if (!(n->in[n->n_in] = strdup(sums))) return dpm_nomem(err);
  n->n_in++;
  return DPM_OK;
}

dpm_status dpm_sync_bn(dpm_model *m, dpm_err *err) {
  dpm_net out = {0};
  int n_forward = 0;
  dpm_status s = DPM_OK;
  char sums[300];
  for (int j = 0; j < m->train.n && !s; j++) {
    const dpm_node *nd = &m->train.nodes[j];
    dpm_op_id id = nd->def->id;
    int before = out.n;
    if (id == DPM_OP_SPATIAL_BN && !nd->is_test && nd->n_in == 5) {
      snprintf(sums, sizeof sums, "%s_sums", nd->out[1]);
      const char *in[] = {nd->in[0], nd->in[3]};
      s = add_combined(&out, &m->shapes, m->source, nd, DPM_OP_SPATIAL_BN_STATS, 2, in,
                       sums, err);
    } else if (id == DPM_OP_SPATIAL_BN_GRADIENT && nd->out[0] && nd->n_in == 5) {
      snprintf(sums, sizeof sums, "%s_gsums", nd->in[2]);
      const char *in[] = {nd->in[0], nd->in[2], nd->in[4]};
      s = add_combined(&out, &m->shapes, m->source, nd, DPM_OP_SPATIAL_BN_GRADIENT_STATS,
                       3, in, sums, err);
    } else if (!dpm_net_add_copy(&out, nd, err)) {
      s = err->code;
    }
    if (j < m->n_forward) n_forward += out.n - before;
  }
  if (s) {
    dpm_net_fini(&out);
    return s;
  }
  dpm_net_fini(&m->train);
  m->train = out;
  m->n_forward = n_forward;
  return DPM_OK;
}
