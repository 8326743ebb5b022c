/* Collective ops of a data-parallel step, inserted by parallel/plan.c (never
 * written in a spec): each runs a collective of the replicas' group over
 * its blobs, in place.
 *
 *   Allreduce(g...) -> g...        sum over replicas, synchronous
 *   AllreduceStart(g...) -> g...   start the sum (dpm_comm_allreduce_start)
 *   AllreduceWait(g...) -> g...    complete the oldest started sum
 *   Broadcast(b...) -> b...        copy the master's (rank 0) values
 *
 * Here: shape inference (reduced blobs are f32; every blob keeps its
 * shape); the kernels are each backend's (CPU: backend/cpu/collective.c,
 * which also says how a failure reaches the runner). */
#include "engine/op.h"
#include "ops/families.h"

static dpm_status same_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)err;
  for (int k = 0; k < n->n_in; k++) out[k] = in[k];
  return DPM_OK;
}

static dpm_status reduce_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                               dpm_err *err) {
  for (int k = 0; k < n->n_in; k++)
    if (dpm_expect_dtype(&in[k], DPM_F32, "a reduced blob", err)) return err->code;
  return same_infer(n, in, out, err);
}

#define COLLECTIVE(ID, op_name, infer_fn)                                                \
  const dpm_op_def DPM_OP_DEF(ID) = {                                                    \
      .id = DPM_OP_##ID,                                                                 \
      .name = op_name,                                                                   \
      .min_in = 1,                                                                       \
      .max_in = DPM_OP_MAX_IO,                                                           \
      .min_out = 1,                                                                      \
      .max_out = DPM_OP_MAX_IO,                                                          \
      .infer = infer_fn,                                                                 \
      .flags = DPM_OP_HIDDEN | DPM_OP_INPLACE | DPM_OP_NO_GRAD,                          \
  }
COLLECTIVE(ALLREDUCE, "Allreduce", reduce_infer);
COLLECTIVE(ALLREDUCE_START, "AllreduceStart", reduce_infer);
COLLECTIVE(ALLREDUCE_WAIT, "AllreduceWait", reduce_infer);
COLLECTIVE(BROADCAST, "Broadcast", same_infer);
