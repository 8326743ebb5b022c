/* Collective ops of a data-parallel step, inserted by parallel/plan.c (never
 * written in a spec): each runs a collective of the replicas' group over
 * its blobs, in place.
 *
 *   Allreduce(g...) -> g...        sum over replicas, synchronous; with
 *                                  dtype f64 (combine_spatial_bn's sums,
 *                                  parallel/sync_bn.h) each blob's bytes are
 *                                  doubles, summed as such
 *                                  (dpm_comm_allreduce_f64): its f32 shape
 *                                  holds twice as many floats as doubles
 *   AllreduceStart(g...) -> g...   start the sum (dpm_comm_allreduce_start)
 *   AllreduceWait(g...) -> g...    complete the oldest started sum
 *   Broadcast(b...) -> b...        copy the master's (rank 0) values
 *
 * Here: arguments, shape inference (reduced blobs are f32, of an even
 * element count with dtype f64; every blob keeps its shape). No backend has
 * a kernel for them: the engine runs them through the communicator on any
 * device (engine/collective.h, which also says how a failure reaches the
 * runner). */
#include "ops/collective.h"

#include "engine/op.h"
#include "ops/families.h"

/* In the order of ALLREDUCE_ARG_* (ops/collective.h). */
static const dpm_arg_def allreduce_args[] = {
    {"dtype", DPM_ARG_STRING, "f32", "f32|f64", 0, 0},
    {NULL},
};

static dpm_status same_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  (void)err;
  for (int k = 0; k < n->n_in; k++) out[k] = in[k];
  return DPM_OK;
}

static dpm_status reduce_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                               dpm_err *err) {
  int f64 = n->def->args && n->arg[ALLREDUCE_ARG_DTYPE].i == ALLREDUCE_F64;
  for (int k = 0; k < n->n_in; k++) {
    if (dpm_expect_dtype(&in[k], DPM_F32, "a reduced blob", err)) return err->code;
    if (f64 && dpm_shape_numel(&in[k]) % 2)
      return dpm_errf(err, DPM_SHAPE,
                      "input %d: a blob reduced as doubles holds an even number of "
                      "floats, got %lld",
                      k, (long long)dpm_shape_numel(&in[k]));
  }
  return same_infer(n, in, out, err);
}

#define COLLECTIVE(ID, op_name, infer_fn, arg_defs)                                      \
  const dpm_op_def DPM_OP_DEF(ID) = {                                                    \
      .id = DPM_OP_##ID,                                                                 \
      .name = op_name,                                                                   \
      .min_in = 1,                                                                       \
      .max_in = DPM_OP_MAX_IO,                                                           \
      .min_out = 1,                                                                      \
      .max_out = DPM_OP_MAX_IO,                                                          \
      .args = arg_defs,                                                                  \
      .infer = infer_fn,                                                                 \
      .flags = DPM_OP_HIDDEN | DPM_OP_INPLACE | DPM_OP_NO_GRAD,                          \
  }
COLLECTIVE(ALLREDUCE, "Allreduce", reduce_infer, allreduce_args);
COLLECTIVE(ALLREDUCE_START, "AllreduceStart", reduce_infer, NULL);
COLLECTIVE(ALLREDUCE_WAIT, "AllreduceWait", reduce_infer, NULL);
COLLECTIVE(BROADCAST, "Broadcast", same_infer, NULL);
