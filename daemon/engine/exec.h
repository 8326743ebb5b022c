/* Executor: a net bound to one workspace and device context, run in order.
 *
 * dpm_exec_bind allocates (or resizes) every output blob from an inferred
 * shape table, resolves every input and binds each op to its kernel on the
 * context's device (through the device's backend; the cpu backend's for a
 * context without a device: host code such as the predictor runtime; the
 * engine's own for the collectives, on any device: engine/collective.h), so
 * running cannot fail. Binding again after a shape change (a partial eval
 * batch) is cheap: tensors keep their capacity. Owned by one device worker;
 * dpm_exec_kernel and dpm_net_scratch are pure and safe from any thread. */
#ifndef DPM_EXEC_H
#define DPM_EXEC_H

#include "engine/net.h"
#include "engine/workspace.h"

struct dpm_backend;
struct dpm_kernel_def;

typedef struct dpm_exec {
  dpm_op *ops;
  int n;
} dpm_exec;

/* Grow ctx's scratch to at least `bytes` (64-byte aligned). */
dpm_status dpm_ctx_reserve(dpm_ctx *ctx, size_t bytes);
void dpm_ctx_fini(dpm_ctx *ctx);

/* The scratch bytes net's kernels on backend be need at the shapes in t
 * (the largest of any op; an op be has no kernel for needs none). */
size_t dpm_net_scratch(const dpm_net *net, const dpm_shapes *t,
                       const struct dpm_backend *be);
/* Whether node n reads or writes a bf16/f16 blob (types from t) and is not
 * a Cast or an optimizer writing a working copy (their kernels convert
 * themselves): on the cpu backend it runs through the low-precision wrapper
 * (backend/cpu/lowp_run.h), on fenced through the same wrapper inside the
 * fence; another backend's kernel must take that type (dpm_kernel_def
 * lowp: cuda's FC, FCGradient, Relu, ReluGradient and byte moves take
 * bf16), else bind refuses it, naming op, type and device. */
int dpm_node_low(const dpm_node *n, const dpm_shapes *t);
/* The kernel of op def on backend be, into *out: the engine's for a
 * collective (engine/collective.h), whatever the backend, else be's.
 * `device` names the device for the message: DPM_UNSUPPORTED "op Conv is
 * not supported on device cuda:0" when be has none (*out NULL). */
dpm_status dpm_exec_kernel(const struct dpm_backend *be, const dpm_op_def *def,
                           const char *device, const struct dpm_kernel_def **out,
                           dpm_err *err);
/* Bind net to ws/ctx using shapes from t (which must cover every blob the
 * net touches), each op with its kernel on ctx->dev (the cpu backend's when
 * dev is NULL), and reserve the kernels' scratch on ctx. Errors:
 * DPM_NOMEM; DPM_INTERNAL if t lacks a blob; DPM_UNSUPPORTED naming op and
 * device ("host" without one) when the device has no kernel for an op. */
dpm_status dpm_exec_bind(dpm_exec *x, const dpm_net *net, const dpm_shapes *t,
                         dpm_workspace *ws, dpm_ctx *ctx, dpm_err *err);
/* Run ops [from, to) in order. */
void dpm_exec_run_range(const dpm_exec *x, int from, int to);
static inline void dpm_exec_run(const dpm_exec *x) { dpm_exec_run_range(x, 0, x->n); }
void dpm_exec_fini(dpm_exec *x);

#endif
