/* Binding nets to tensors and kernels, and running them. */
#include "engine/exec.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/lowp_run.h"
#include "backend/device.h"
#include "common/err.h"
#include "engine/collective.h"

/* The backend whose kernels run on ctx: its device's, or the CPU's for
 * host code (no device). */
static const dpm_backend *ctx_backend(const dpm_ctx *ctx) {
  return ctx->dev ? dpm_dev_backend(ctx->dev) : &dpm_backend_cpu;
}

/* Scratch lives on the context's device, like the tensors. */
static void scratch_free(dpm_ctx *ctx) {
  if (ctx->dev)
    dpm_dev_free(ctx->dev, dpm_dptr_wrap(ctx->scratch), ctx->scratch_bytes);
  else
    dpm_free(ctx->scratch);
}

dpm_status dpm_ctx_reserve(dpm_ctx *ctx, size_t bytes) {
  if (bytes <= ctx->scratch_bytes) return DPM_OK;
  size_t got = bytes;
  void *p =
      ctx->dev ? dpm_dptr_raw(dpm_dev_alloc(ctx->dev, bytes, &got)) : dpm_alloc(bytes);
  if (!p) return DPM_NOMEM;
  scratch_free(ctx);
  ctx->scratch = p;
  ctx->scratch_bytes = got;
  return DPM_OK;
}

void dpm_ctx_fini(dpm_ctx *ctx) {
  scratch_free(ctx);
  ctx->scratch = NULL;
  ctx->scratch_bytes = 0;
}

static dpm_status bind_blob(dpm_workspace *ws, const dpm_shapes *t, const char *name,
                            dpm_tensor **out, dpm_err *err) {
  const dpm_blobinfo *info = dpm_shapes_get(t, name);
  if (!info) return dpm_errf(err, DPM_INTERNAL, "blob '%s' has no shape", name);
  dpm_blob *b;
  if (dpm_ws_ensure(ws, name, info->kind, &info->shape, &b))
    return dpm_errf(err, DPM_NOMEM, "out of memory for blob '%s'", name);
  *out = &b->t;
  return DPM_OK;
}

/* Shapes of node n's outputs from t (NULL name or unknown: zero shape). */
static void output_shapes(const dpm_node *n, const dpm_shapes *t, dpm_shape *out) {
  for (int k = 0; k < n->n_out; k++) {
    const dpm_blobinfo *b = n->out[k] ? dpm_shapes_get(t, n->out[k]) : NULL;
    if (b)
      out[k] = b->shape;
    else
      memset(&out[k], 0, sizeof out[k]);
  }
}

int dpm_node_low(const dpm_node *n, const dpm_shapes *t) {
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  dpm_node_input_shapes(n, t, in);
  output_shapes(n, t, out);
  return dpm_cpu_lowp_wanted(n, in, out);
}

/* The first 16-bit type among node n's tensors (dpm_node_low: one is). */
static dpm_dtype node_low_type(const dpm_node *n, const dpm_shapes *t) {
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
  dpm_node_input_shapes(n, t, in);
  output_shapes(n, t, out);
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] && dpm_dtype_is_low(in[k].dtype)) return in[k].dtype;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] && dpm_dtype_is_low(out[k].dtype)) return out[k].dtype;
  return DPM_BF16;
}

size_t dpm_net_scratch(const dpm_net *net, const dpm_shapes *t, const dpm_backend *be) {
  size_t scratch = 0;
  for (int i = 0; i < net->n; i++) {
    const dpm_node *n = &net->nodes[i];
    const dpm_kernel_def *k = be->kernel(n->def->id);
    if (!k) continue;
    dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO];
    dpm_node_input_shapes(n, t, in);
    output_shapes(n, t, out);
    if ((be == &dpm_backend_cpu || be->kind == DPM_DEVICE_FENCED) &&
        dpm_cpu_lowp_wanted(n, in, out)) {
      size_t s = dpm_cpu_lowp_scratch(k, n, in, out);
      if (s > scratch) scratch = s;
      continue;
    }
    if (!k->scratch) continue;
    size_t s = k->scratch(n, in);
    if (s > scratch) scratch = s;
  }
  return scratch;
}

dpm_status dpm_exec_kernel(const dpm_backend *be, const dpm_op_def *def,
                           const char *device, const dpm_kernel_def **out, dpm_err *err) {
  if ((*out = dpm_collective_kernel(def->id)) || (*out = be->kernel(def->id)))
    return DPM_OK;
  return dpm_errf(err, DPM_UNSUPPORTED, "op %s is not supported on device %s", def->name,
                  device);
}

dpm_status dpm_exec_bind(dpm_exec *x, const dpm_net *net, const dpm_shapes *t,
                         dpm_workspace *ws, dpm_ctx *ctx, dpm_err *err) {
  if (x->n != net->n) {
    free(x->ops);
    x->n = 0;
    if (!(x->ops = calloc((size_t)net->n + 1, sizeof *x->ops))) return dpm_nomem(err);
    x->n = net->n;
  }
  const dpm_backend *be = ctx_backend(ctx);
  char dev[32] = "host";
  if (ctx->dev) dpm_device_format(dpm_dev_id(ctx->dev), dev, sizeof dev);
  for (int i = 0; i < net->n; i++) {
    const dpm_node *n = &net->nodes[i];
    dpm_op *op = &x->ops[i];
    memset(op, 0, sizeof *op);
    *op = (dpm_op){.node = n, .n_in = n->n_in, .n_out = n->n_out, .ctx = ctx};
    if (dpm_exec_kernel(be, n->def, dev, &op->kernel, err)) return err->code;
    if (n->def->id != DPM_OP_CAST && dpm_node_low(n, t)) {
      if (be == &dpm_backend_cpu) {
        op->inner = op->kernel;
        op->kernel = &dpm_cpu_lowp_kernel;
      } else {
        dpm_dtype low = node_low_type(n, t);
        if (!(op->kernel->lowp & DPM_LOWP_BIT(low)))
          return dpm_errf(err, DPM_UNSUPPORTED,
                          "op %s has no %s kernel on device %s (precision.compute)",
                          n->def->name, dpm_dtype_name(low), dev);
        op->inner = dpm_backend_cpu.kernel(n->def->id); /* fenced runs the CPU's
                                                           wrapper around it */
      }
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] && bind_blob(ws, t, n->in[k], &op->in[k], err)) return err->code;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] && bind_blob(ws, t, n->out[k], &op->out[k], err)) return err->code;
  }
  if (dpm_ctx_reserve(ctx, dpm_net_scratch(net, t, be))) return dpm_nomem(err);
  return DPM_OK;
}

/* A kernel with run_many (a fused multi-tensor update) gets the whole run
 * of consecutive ops that share it, within [from, to), in one call. */
void dpm_exec_run_range(const dpm_exec *x, int from, int to) {
  for (int i = from; i < to;) {
    const dpm_kernel_def *k = x->ops[i].kernel;
    if (!k->run_many) {
      k->run(&x->ops[i++]);
      continue;
    }
    int j = i + 1;
    while (j < to && x->ops[j].kernel == k) j++;
    k->run_many(&x->ops[i], j - i);
    i = j;
  }
}

void dpm_exec_fini(dpm_exec *x) {
  free(x->ops);
  x->ops = NULL;
  x->n = 0;
}
