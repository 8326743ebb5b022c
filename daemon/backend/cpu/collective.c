/* The CPU kernels of the collective ops (ops/collective.c): each runs a
 * dpm_comm collective over its blobs, in place, through the device context
 * (ctx->comm, ctx->device). Blobs laid out back to back (the plan's
 * gradient arena) go in one call, others one call each. A failure
 * (timeout, broken group) is recorded in ctx->status (and ctx->err) for the
 * runner, and later collectives of the step are skipped; ctx->started
 * counts the sums started and not yet waited for, and ctx->comm_ns
 * accumulates the time spent in these ops. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "comm/comm.h"
#include "common/clock.h"
#include "ops/collective.h"

static size_t padded(const dpm_tensor *t) {
  return (dpm_shape_bytes(&t->shape) + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
}

/* Whether the blobs lie back to back at aligned offsets, as in the arena. */
static int contiguous(const dpm_op *op) {
  for (int k = 1; k < op->n_in; k++)
    if ((char *)op->in[k]->data != (char *)op->in[k - 1]->data + padded(op->in[k - 1]))
      return 0;
  return 1;
}

/* Calls fn once over all of op's blobs when contiguous, else once per blob
 * (so a start and its wait make the same number of calls). */
typedef dpm_status (*span_fn)(dpm_ctx *ctx, void *buf, size_t bytes);

static void over_blobs(const dpm_op *op, span_fn fn) {
  dpm_ctx *ctx = op->ctx;
  if (ctx->status) return;
  int64_t t0 = dpm_mono_ns();
  if (contiguous(op)) {
    const dpm_tensor *last = op->in[op->n_in - 1];
    char *end = (char *)last->data + dpm_shape_bytes(&last->shape);
    ctx->status = fn(ctx, op->in[0]->data, (size_t)(end - (char *)op->in[0]->data));
  } else {
    for (int k = 0; k < op->n_in && !ctx->status; k++)
      ctx->status = fn(ctx, op->in[k]->data, dpm_shape_bytes(&op->in[k]->shape));
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

static void allreduce_run(const dpm_op *op) {
  int f64 = op->node->arg[ALLREDUCE_ARG_DTYPE].i == ALLREDUCE_F64;
  over_blobs(op, f64 ? reduce_now_f64 : reduce_now);
}
static void start_run(const dpm_op *op) { over_blobs(op, reduce_later); }
static void wait_run(const dpm_op *op) { over_blobs(op, wait_one); }
static void broadcast_run(const dpm_op *op) { over_blobs(op, from_master); }

const dpm_kernel_def DPM_CPU_KERNEL(ALLREDUCE) = {.run = allreduce_run};
const dpm_kernel_def DPM_CPU_KERNEL(ALLREDUCE_START) = {.run = start_run};
const dpm_kernel_def DPM_CPU_KERNEL(ALLREDUCE_WAIT) = {.run = wait_run};
const dpm_kernel_def DPM_CPU_KERNEL(BROADCAST) = {.run = broadcast_run};
