/* The collective ops of a step (ops/collective.c: Allreduce, AllreduceStart,
 * AllreduceWait, Broadcast; DPM_COLLECTIVE_OP_MAP in ops/list.h), run by the
 * engine through the replicas' communicator (comm/comm.h) on every backend:
 * no backend has a kernel for them. The executor binds them here
 * (engine/exec.c), so a new backend or communicator needs nothing of its
 * own to run them.
 *
 * Each runs its collective over its blobs, in place, as rank ctx->device
 * of ctx->comm: blobs laid out back to back at DPM_ALIGN-rounded offsets
 * (the plan's gradient arena) in one call, others one call each (so a start
 * and its wait make the same number of calls). Buffers are the tensors'
 * memory on ctx->dev, as dpm_dptr (backend/dptr.h), handed to the
 * communicator, which takes any buffer its backend's devices address; the
 * bytes are each tensor's shape's (dpm_shape_bytes). Allreduce with dtype
 * f64 sums the bytes as doubles (dpm_comm_allreduce_f64).
 *
 * The work runs as host code acting as the device (dpm_dev_run_host,
 * backend/device.h): in the device's order, recorded with the rest of a
 * step captured as a graph where the device records host work (fenced),
 * and queued on the device's stream by a stream-ordered communicator
 * (nccl). A context without a device (host code) runs it at once.
 *
 * Errors: a failure (disagreeing ranks, timeout, broken group) is recorded
 * in ctx->status and ctx->err for the runner, and later collectives of the
 * step are skipped while ctx->status is set. ctx->started counts the
 * allreduces started and not yet waited for; ctx->comm_ns accumulates the
 * host time spent in these ops. Threads: the device's worker, as every
 * kernel; the defs are static and immutable. */
#ifndef DPM_ENGINE_COLLECTIVE_H
#define DPM_ENGINE_COLLECTIVE_H

#include "engine/op.h"

struct dpm_kernel_def;

/* The engine's kernel of collective op `id` (< DPM_OP_COUNT), static; NULL
 * for every other op (those are the backends'). */
const struct dpm_kernel_def *dpm_collective_kernel(dpm_op_id id);

#endif
