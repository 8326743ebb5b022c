/* The engine's kernels of the collective ops, through dpm_comm_* on any
 * backend (engine/collective.h). */
#include "engine/collective.h"

#include <stdint.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "comm/comm.h"
#include "common/clock.h"
#include "ops/collective.h"

/* One call of a collective over `bytes` bytes at buf (on ctx->dev). */
typedef dpm_status (*span_fn)(dpm_ctx *ctx, void *buf, size_t bytes);

static size_t padded(const dpm_tensor *t) {
  return (dpm_shape_bytes(&t->shape) + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
}

/* Whether op's blobs lie back to back at aligned offsets, as in the arena;
 * then *span is the bytes from the first's start to the last's end. */
static int contiguous(const dpm_op *op, size_t *span) {
  dpm_dptr first = dpm_tensor_mem(op->in[0]);
  size_t at = 0;
  for (int k = 1; k < op->n_in; k++) {
    at += padded(op->in[k - 1]);
    if (dpm_dptr_raw(dpm_tensor_mem(op->in[k])) != dpm_dptr_raw(dpm_dptr_at(first, at)))
      return 0;
  }
  *span = at + dpm_shape_bytes(&op->in[op->n_in - 1]->shape);
  return 1;
}

/* Calls fn once over all of op's blobs when contiguous, else once per blob;
 * nothing after a failure of the step. */
static void over_blobs(const dpm_op *op, span_fn fn) {
  dpm_ctx *ctx = op->ctx;
  if (ctx->status) return;
  int64_t t0 = dpm_mono_ns();
  size_t span;
  if (contiguous(op, &span)) {
    ctx->status = fn(ctx, dpm_dptr_raw(dpm_tensor_mem(op->in[0])), span);
  } else {
    for (int k = 0; k < op->n_in && !ctx->status; k++)
      ctx->status = fn(ctx, dpm_dptr_raw(dpm_tensor_mem(op->in[k])),
                       dpm_shape_bytes(&op->in[k]->shape));
  }
  ctx->comm_ns += (uint64_t)(dpm_mono_ns() - t0);
}

static dpm_status reduce_now(dpm_ctx *ctx, void *buf, size_t bytes) {
  return dpm_comm_allreduce(ctx->comm, ctx->device, buf, bytes / sizeof(float),
                            &ctx->err);
}
/* Allreduce with dtype f64: the blobs' bytes are doubles. */
static dpm_status reduce_now_f64(dpm_ctx *ctx, void *buf, size_t bytes) {
  return dpm_comm_allreduce_f64(ctx->comm, ctx->device, buf, bytes / sizeof(double),
                                &ctx->err);
}
static dpm_status reduce_later(dpm_ctx *ctx, void *buf, size_t bytes) {
  dpm_status s = dpm_comm_allreduce_start(ctx->comm, ctx->device, buf,
                                          bytes / sizeof(float), &ctx->err);
  ctx->started += !s;
  return s;
}
static dpm_status wait_one(dpm_ctx *ctx, void *buf, size_t bytes) {
  (void)buf, (void)bytes;
  ctx->started--;
  return dpm_comm_allreduce_wait(ctx->comm, ctx->device, &ctx->err);
}
static dpm_status from_master(dpm_ctx *ctx, void *buf, size_t bytes) {
  return dpm_comm_broadcast(ctx->comm, ctx->device, 0, buf, bytes, &ctx->err);
}

static void allreduce_now(const dpm_op *op) {
  int f64 = op->node->arg[ALLREDUCE_ARG_DTYPE].i == ALLREDUCE_F64;
  over_blobs(op, f64 ? reduce_now_f64 : reduce_now);
}
static void start_now(const dpm_op *op) { over_blobs(op, reduce_later); }
static void wait_now(const dpm_op *op) { over_blobs(op, wait_one); }
static void broadcast_now(const dpm_op *op) { over_blobs(op, from_master); }

/* Each collective's work, by op id. */
static void (*const work[DPM_OP_COUNT])(const dpm_op *op) = {
    [DPM_OP_ALLREDUCE] = allreduce_now,
    [DPM_OP_ALLREDUCE_START] = start_now,
    [DPM_OP_ALLREDUCE_WAIT] = wait_now,
    [DPM_OP_BROADCAST] = broadcast_now,
};

/* The work of op, as host code acting as op's device. */
static void collective_run(const dpm_op *op) {
  void (*fn)(const dpm_op *op) = work[op->node->def->id];
  if (op->ctx->dev)
    dpm_dev_run_host(op->ctx->dev, fn, op);
  else
    fn(op);
}

static const dpm_kernel_def collective = {.run = collective_run};

const dpm_kernel_def *dpm_collective_kernel(dpm_op_id id) {
  return (unsigned)id < DPM_OP_COUNT && work[id] ? &collective : NULL;
}
