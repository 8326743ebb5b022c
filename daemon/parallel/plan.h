/* The step plan: how one replica runs a training step.
 *
 * From a built model and the device count, the plan orders the forward
 * ops, LearningRate, the gradient ops, the gradient reduction, the
 * optimizer ops and Iter into one net per replica (Caffe2's
 * Parallelize_*):
 *
 *   one device   each optimizer op runs as soon as its gradient is final
 *                and nothing later reads its parameter (gradient in cache);
 *                where the backend fuses updates (dpm_kernel_def.run_many:
 *                one launch for every parameter), all after backward
 *   simple       backward, then Allreduce of the gradient buckets, then
 *                the optimizer ops
 *   dag          AllreduceStart of a bucket as soon as its last gradient is
 *                final, overlapping the rest of backward; AllreduceWait of
 *                every bucket, then the optimizer ops
 *
 * With `gathered` (update.accumulate_steps, clip_grad_norm or a loss
 * scale), every gradient is final before any collective or update: the
 * plan is simple's on any net type (one device: the updates after
 * backward), with nothing shared, and the trainer runs it in the ranges
 * reduce_at, update_at and update_end mark (train/trainer.c).
 *
 * and, with broadcast_computed_params, a Broadcast of the computed
 * parameters (BN running statistics) from the master at the end.
 *
 * With several devices, when the replicas' kernel of the last op of
 * backward can be split into parts (dpm_kernel_def.parts,
 * backend/backend.h), the plan names it (shared_op) and the op where
 * a replica that is done with its own may take parts of its peers' instead
 * of waiting (help_at: the first collective that waits for the peers); see
 * parallel/share.h.
 *
 * Gradients are reduced in the order backward finishes them (last layer
 * first); every replica runs the same plan, so the collectives match. The
 * replica lays its gradient blobs out back to back in `grads` order (the
 * arena), so a bucket is one contiguous reduction. The plan is immutable
 * once built and shared by all replicas. */
#ifndef DPM_PARALLEL_PLAN_H
#define DPM_PARALLEL_PLAN_H

#include "engine/model.h"

struct dpm_backend;

typedef enum { DPM_NET_SIMPLE, DPM_NET_DAG } dpm_net_type;

typedef struct dpm_plan {
  dpm_net step;  /* one training step of one replica */
  int n_forward; /* step.nodes[0, n_forward) are the forward ops */
  char **grads;  /* parameter gradients, in the order backward finishes them */
  int n_grads;
  int *bucket_end; /* bucket b is grads[bucket_end[b-1] (0 for b=0), bucket_end[b]) */
  int n_buckets;
  char **synced; /* what the master broadcasts at init, load and sync:
                    params, computed params, optimizer state, counters */
  int n_synced;
  int shared_op; /* step.nodes index of the op peers may take parts of; -1: none */
  int help_at;   /* step.nodes index before which a replica helps its peers */
  /* step.nodes [0, reduce_at): forward, LearningRate, backward (and, one
   * device without `gathered`, updates as gradients finish); [reduce_at,
   * update_at): the reduction's collectives; [update_at, update_end): the
   * optimizer ops after them (none where they ran earlier); then the
   * computed params' Broadcast and Iter. */
  int reduce_at, update_at, update_end;
} dpm_plan;

/* Build the plan for `devices` replicas whose kernels are backend be's (it
 * decides whether backward's last op splits; NULL: the replicas do not
 * share one backend, and nothing is shared). The step reduces gradients
 * (and broadcasts computed params) when reduce is set; devices > 1 needs
 * it, and one device may have it (a group of one: the checks of a
 * multi-device path on one device). bucket_bytes bounds a dag bucket (a
 * bucket holds at least one gradient and at most DPM_OP_MAX_IO). gathered:
 * see above. */
dpm_status dpm_plan_build(const dpm_model *m, int devices, int reduce, dpm_net_type type,
                          size_t bucket_bytes, int broadcast_computed, int gathered,
                          const struct dpm_backend *be, dpm_plan *p, dpm_err *err);
void dpm_plan_fini(dpm_plan *p);

#endif
