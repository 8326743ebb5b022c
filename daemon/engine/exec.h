/* Executor: a net bound to one workspace and device context, run in order.
 *
 * dpm_exec_bind allocates (or resizes) every output blob from an inferred
 * shape table and resolves every input, so running cannot fail. Binding
 * again after a shape change (a partial eval batch) is cheap: tensors keep
 * their capacity. Owned by one device worker. */
#ifndef DPM_EXEC_H
#define DPM_EXEC_H

#include "engine/net.h"
#include "engine/workspace.h"

typedef struct dpm_exec {
  dpm_op *ops;
  int n;
} dpm_exec;

/* Grow ctx's scratch to at least `bytes` (64-byte aligned). */
dpm_status dpm_ctx_reserve(dpm_ctx *ctx, size_t bytes);
void dpm_ctx_fini(dpm_ctx *ctx);

/* The scratch bytes net's kernels need at the shapes in t (the largest). */
size_t dpm_net_scratch(const dpm_net *net, const dpm_shapes *t);
/* Bind net to ws/ctx using shapes from t (which must cover every blob the
 * net touches), each op with its kernel on ctx->dev (the op's def->run when
 * dev is NULL). Errors: DPM_NOMEM; DPM_INTERNAL if t lacks a blob;
 * DPM_UNSUPPORTED naming op and device when the device has no kernel. */
dpm_status dpm_exec_bind(dpm_exec *x, const dpm_net *net, const dpm_shapes *t,
                         dpm_workspace *ws, dpm_ctx *ctx, dpm_err *err);
/* Run ops [from, to) in order. */
void dpm_exec_run_range(const dpm_exec *x, int from, int to);
static inline void dpm_exec_run(const dpm_exec *x) { dpm_exec_run_range(x, 0, x->n); }
void dpm_exec_fini(dpm_exec *x);

#endif
