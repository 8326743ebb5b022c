/* Combined SpatialBN statistics (parallel.combine_spatial_bn; Caffe2's
 * SpatialBN with num_batches, PyTorch's SyncBatchNorm): rewrites a built
 * model's train net so that, in training, every SpatialBN normalizes with
 * the statistics of the job's global batch and its gradient with the global
 * batch's sums.
 *
 * For each train-mode SpatialBN(X, s, b, rm, riv) -> Y, Y_sm, Y_siv the
 * forward gets, right before it,
 *   SpatialBNStats(X, rm) -> Y_sm_sums;  Allreduce(Y_sm_sums)
 * and the SpatialBN takes Y_sm_sums as a sixth input; for each
 * SpatialBNGradient that computes dX, backward gets, right before it,
 *   SpatialBNGradientStats(X, Y_sm, dY) -> Y_sm_gsums;  Allreduce(Y_sm_gsums)
 * and the gradient takes Y_sm_gsums as a sixth input (ops/norm.c gives the
 * semantics). The collectives are blocking Allreduces of 2C+1 doubles
 * (argument dtype f64: dpm_comm_allreduce_f64 over the sums' blob, an
 * f32[2(2C+1)] whose bytes are the doubles), so the replicas' statistics
 * are summed without a float rounding; in net order, so every replica of
 * the job runs them alike (and the plan's digest covers them: their bytes
 * are twice a float sum's); they may run while the dag plan's started
 * gradient buckets are pending (comm/comm.h). The test net is left alone.
 *
 * Call it after dpm_model_build and before dpm_plan_build, only when the
 * job has more than one replica: with one, the model is left as built.
 * Ownership: the model's nets and shapes, as dpm_model. Not thread-safe.
 * Errors: DPM_NOMEM; DPM_SPEC when a generated blob name is taken. */
#ifndef DPM_PARALLEL_SYNC_BN_H
#define DPM_PARALLEL_SYNC_BN_H

#include "engine/model.h"

dpm_status dpm_sync_bn(dpm_model *m, dpm_err *err);

#endif
