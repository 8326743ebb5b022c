/* Ops over bf16/f16 tensors on the CPU: natively where fc_bf16.c or conv.c can,
 * else through their f32 kernels (lowp_run.h). */
#include "backend/cpu/lowp_run.h"

#include <string.h>

#include "engine/op.h"

static size_t align_up(size_t b) { return (b + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN; }

int dpm_cpu_lowp_wanted(const dpm_node *n, const dpm_shape *in, const dpm_shape *out) {
  if (n->def->id == DPM_OP_CAST || (n->fuse & DPM_FUSE_WORKING_COPY)) return 0;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] && dpm_dtype_is_low(in[k].dtype)) return 1;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] && dpm_dtype_is_low(out[k].dtype)) return 1;
  return 0;
}

/* in[] with every 16-bit type made f32: the shapes the inner kernel sees. */
static void f32_shapes(const dpm_node *n, const dpm_shape *in, dpm_shape *f) {
  for (int k = 0; k < n->n_in; k++) {
    f[k] = in[k];
    if (dpm_dtype_is_low(f[k].dtype)) f[k].dtype = DPM_F32;
  }
}

/* Bytes of an f32 copy of blob k of a node's names (n names, shapes s), or
 * 0 when it is not 16-bit, absent, or named earlier in names[0, k). */
static size_t copy_bytes(char *const *names, const dpm_shape *s, int k) {
  if (!names[k] || !dpm_dtype_is_low(s[k].dtype)) return 0;
  for (int j = 0; j < k; j++)
    if (names[j] && !strcmp(names[j], names[k])) return 0;
  return align_up((size_t)dpm_shape_numel(&s[k]) * sizeof(float));
}

size_t dpm_cpu_lowp_scratch(const dpm_kernel_def *inner, const dpm_node *n,
                            const dpm_shape *in, const dpm_shape *out) {
  dpm_shape f[DPM_OP_MAX_IO];
  f32_shapes(n, in, f);
  size_t b = align_up(inner->scratch ? inner->scratch(n, f) : 0);
  char *names[2 * DPM_OP_MAX_IO];
  dpm_shape s[2 * DPM_OP_MAX_IO];
  int m = 0;
  for (int k = 0; k < n->n_in; k++, m++) names[m] = n->in[k], s[m] = in[k];
  for (int k = 0; k < n->n_out; k++, m++) names[m] = n->out[k], s[m] = out[k];
  for (int k = 0; k < m; k++) b += copy_bytes(names, s, k);
  size_t fc = dpm_cpu_fc_bf16_scratch(n, in, out),
         conv = dpm_cpu_conv_bf16_scratch(n, in, out);
  size_t native = fc > conv ? fc : conv;
  return native > b ? native : b;
}

typedef struct {
  const dpm_tensor *src[2 * DPM_OP_MAX_IO]; /* the op's 16-bit tensors */
  dpm_tensor copy[2 * DPM_OP_MAX_IO];       /* their f32 copies, views of scratch */
  int written[2 * DPM_OP_MAX_IO];           /* an output: rounded back after */
  int n;
  char *free; /* next unused scratch byte */
} copies;

/* The tensor the inner kernel sees for t: t itself unless 16-bit, else its
 * f32 copy (made, widened, on first sight). */
static dpm_tensor *copy_of(copies *c, dpm_tensor *t, int output) {
  if (!t || !dpm_dtype_is_low(t->shape.dtype)) return t;
  int j = 0;
  while (j < c->n && c->src[j] != t) j++;
  if (j == c->n) {
    dpm_shape s = t->shape;
    s.dtype = DPM_F32;
    size_t numel = (size_t)dpm_shape_numel(&s);
    c->src[j] = t;
    c->written[j] = 0;
    memset(&c->copy[j], 0, sizeof c->copy[j]);
    dpm_tensor_view(&c->copy[j], &s, c->free);
    c->copy[j].dev = t->dev;
    c->free += align_up(numel * sizeof(float));
    dpm_cpu_widen(c->copy[j].data, t->data, t->shape.dtype, numel);
    c->n++;
  }
  c->written[j] |= output;
  return &c->copy[j];
}

static void lowp_run(const dpm_op *op) {
  dpm_shape in[DPM_OP_MAX_IO], out[DPM_OP_MAX_IO], f[DPM_OP_MAX_IO];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k]) in[k] = op->in[k]->shape;
  for (int k = 0; k < op->n_out; k++)
    if (op->out[k]) out[k] = op->out[k]->shape;
  if (dpm_cpu_fc_bf16_run(op, in, out, op->ctx->scratch) ||
      dpm_cpu_conv_bf16_run(op, in, out, op->ctx->scratch) || dpm_cpu_relu_grad_bf16_run(op))
    return;
  const dpm_kernel_def *inner = op->inner;
  f32_shapes(op->node, in, f);
  copies c = {.n = 0};
  c.free = (char *)op->ctx->scratch +
           align_up(inner->scratch ? inner->scratch(op->node, f) : 0);
  dpm_op sh = *op;
  sh.kernel = inner;
  sh.inner = NULL;
  for (int k = 0; k < op->n_in; k++) sh.in[k] = copy_of(&c, op->in[k], 0);
  for (int k = 0; k < op->n_out; k++) sh.out[k] = copy_of(&c, op->out[k], 1);
  inner->run(&sh);
  for (int j = 0; j < c.n; j++)
    if (c.written[j])
      dpm_cpu_narrow(c.src[j]->data, c.copy[j].data, c.src[j]->shape.dtype,
                     (size_t)dpm_shape_numel(&c.src[j]->shape));
}

/* Work sharing: FCGradient's native parts (fc_bf16.c); any other op, or
 * with the native kernels off, one part, the whole op. */
static int lowp_parts(const dpm_op *op) {
  int n = dpm_cpu_fc_bf16_parts(op);
  return n ? n : 1;
}

static void lowp_prepare(const dpm_op *op) {
  if (dpm_cpu_fc_bf16_parts(op)) dpm_cpu_fc_bf16_prepare(op);
}

static void lowp_run_part(const dpm_op *op, int part) {
  if (dpm_cpu_fc_bf16_parts(op))
    dpm_cpu_fc_bf16_part(op, part);
  else
    lowp_run(op);
}

const dpm_kernel_def dpm_cpu_lowp_kernel = {
    .run = lowp_run,
    .parts = lowp_parts,
    .run_part = lowp_run_part,
    .prepare = lowp_prepare,
};
