/* The cuda kernels of the collective ops (ops/collective.c), as the CPU's
 * (backend/cpu/collective.c): each runs a collective of the replicas'
 * group (ctx->comm: the nccl communicator, nccl.c, or a staged one, gloo
 * on host copies, comm/staged.c) over its blobs, in place, as rank
 * ctx->device. Blobs laid out back to back (the plan's gradient arena) go
 * in one call, others one call each. The nccl communicator queues the work
 * on the device's compute stream and returns (comm.h, "Completion"), so
 * these kernels do not wait either (a staged one waits for the stream to
 * copy out: such steps are never captured); ctx->comm_ns accumulates the
 * host time spent in them.
 *
 * The plugin links nothing of the engine, so the communicator's ops table
 * is called directly, after the rank check dpm_comm_* would make. A
 * failure (disagreeing ranks, timeout, broken group) is recorded in
 * ctx->status and ctx->err for the runner, and later collectives of the
 * step are skipped; ctx->started counts the sums started and not yet waited
 * for. Threads: the device's worker. */
#include <stdint.h>
#include <time.h>

#include "backend/cuda/cuda.h"
#include "comm/comm.h"
#include "ops/collective.h"

static size_t padded(const dpm_tensor *t) {
  return (cuda_bytes(t) + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
}

/* Whether the blobs lie back to back at aligned offsets, as in the arena. */
static int contiguous(const dpm_op *op) {
  for (int k = 1; k < op->n_in; k++)
    if ((char *)op->in[k]->data != (char *)op->in[k - 1]->data + padded(op->in[k - 1]))
      return 0;
  return 1;
}

/* The group and the rank of ctx, as dpm_comm_* checks them. */
static dpm_status check_rank(dpm_ctx *ctx, const char *what) {
  if (!ctx->comm) return cuda_errf(&ctx->err, DPM_INVALID, "%s: no communicator", what);
  if (ctx->device < 0 || ctx->device >= ctx->comm->size)
    return cuda_errf(&ctx->err, DPM_INVALID, "%s: rank %d outside the group of %d", what,
                     ctx->device, ctx->comm->size);
  return DPM_OK;
}

/* Calls fn once over all of op's blobs when contiguous, else once per blob
 * (so a start and its wait make the same number of calls). */
typedef dpm_status (*span_fn)(dpm_ctx *ctx, void *buf, size_t bytes);

static void over_blobs(const dpm_op *op, const char *what, span_fn fn) {
  dpm_ctx *ctx = op->ctx;
  if (ctx->status) return;
  cuda_dev_of(op); /* the rank's device current on this thread */
  if ((ctx->status = check_rank(ctx, what))) return;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (contiguous(op)) {
    const dpm_tensor *last = op->in[op->n_in - 1];
    char *end = (char *)last->data + cuda_bytes(last);
    ctx->status = fn(ctx, op->in[0]->data, (size_t)(end - (char *)op->in[0]->data));
  } else {
    for (int k = 0; k < op->n_in && !ctx->status; k++)
      ctx->status = fn(ctx, op->in[k]->data, cuda_bytes(op->in[k]));
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ctx->comm_ns +=
      (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000L + t1.tv_nsec - t0.tv_nsec);
}

static dpm_status reduce_now(dpm_ctx *ctx, void *buf, size_t bytes) {
  return ctx->comm->ops->allreduce(ctx->comm, ctx->device, DPM_COMM_F32, buf,
                                   bytes / sizeof(float), &ctx->err);
}
/* Allreduce with dtype f64: the blobs' bytes are doubles (ncclDouble). */
static dpm_status reduce_now_f64(dpm_ctx *ctx, void *buf, size_t bytes) {
  return ctx->comm->ops->allreduce(ctx->comm, ctx->device, DPM_COMM_F64, buf,
                                   bytes / sizeof(double), &ctx->err);
}
static dpm_status reduce_later(dpm_ctx *ctx, void *buf, size_t bytes) {
  dpm_status s = ctx->comm->ops->allreduce_start(ctx->comm, ctx->device, buf,
                                                 bytes / sizeof(float), &ctx->err);
  ctx->started += !s;
  return s;
}
static dpm_status wait_one(dpm_ctx *ctx, void *buf, size_t bytes) {
  (void)buf, (void)bytes;
  ctx->started--;
  return ctx->comm->ops->allreduce_wait(ctx->comm, ctx->device, &ctx->err);
}
static dpm_status from_master(dpm_ctx *ctx, void *buf, size_t bytes) {
  return ctx->comm->ops->broadcast(ctx->comm, ctx->device, 0, buf, bytes, &ctx->err);
}

static void allreduce_run(const dpm_op *op) {
  int f64 = op->node->arg[ALLREDUCE_ARG_DTYPE].i == ALLREDUCE_F64;
  over_blobs(op, "allreduce", f64 ? reduce_now_f64 : reduce_now);
}
static void start_run(const dpm_op *op) {
  over_blobs(op, "allreduce start", reduce_later);
}
static void wait_run(const dpm_op *op) { over_blobs(op, "allreduce wait", wait_one); }
static void broadcast_run(const dpm_op *op) { over_blobs(op, "broadcast", from_master); }

const dpm_kernel_def DPM_CUDA_KERNEL(ALLREDUCE) = {.run = allreduce_run};
const dpm_kernel_def DPM_CUDA_KERNEL(ALLREDUCE_START) = {.run = start_run};
const dpm_kernel_def DPM_CUDA_KERNEL(ALLREDUCE_WAIT) = {.run = wait_run};
const dpm_kernel_def DPM_CUDA_KERNEL(BROADCAST) = {.run = broadcast_run};
