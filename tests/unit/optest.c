/* Op test harness: one op in a one-node net, run forward, and checked
 * against central finite differences through the engine's own autodiff. */
#include "optest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/autodiff.h"
#include "engine/exec.h"
#include "engine/rng.h"
#include "test.h"

typedef struct {
  dpm_net net, grad;
  dpm_shapes shapes;
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec fx, gx;
  dpm_node *node;
} harness;

static void harness_fini(harness *h) {
  dpm_exec_fini(&h->fx);
  dpm_exec_fini(&h->gx);
  dpm_ws_fini(&h->ws);
  dpm_ctx_fini(&h->ctx);
  dpm_shapes_fini(&h->shapes);
  dpm_net_fini(&h->net);
  dpm_net_fini(&h->grad);
}

static void fill_input(const ot_case *c, int k, dpm_tensor *t) {
  const ot_input *in = &c->in[k];
  int64_t n = dpm_tensor_numel(t);
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed * 1000003u + (unsigned)k + 1);
  if (t->shape.dtype == DPM_F32) {
    for (int64_t i = 0; i < n; i++)
      dpm_f32(t)[i] = in->f ? in->f[i] : (float)(2 * dpm_rng_uniform(rng) - 1);
  } else if (t->shape.dtype == DPM_I32) {
    for (int64_t i = 0; i < n; i++) dpm_i32(t)[i] = in->i ? in->i[i] : 0;
  }
}

/* Build, infer, allocate and fill the one-node net. */
static dpm_status setup(harness *h, const ot_case *c, dpm_err *err) {
  const dpm_op_def *def = dpm_op_find(c->op);
  if (!def) return dpm_errf(err, DPM_NOT_FOUND, "unknown op '%s'", c->op);
  char names[2][DPM_OP_MAX_IO][48];
  const char *in[DPM_OP_MAX_IO], *out[DPM_OP_MAX_IO];
  int n_out = c->n_out;
  for (int k = 0; k < c->n_in; k++)
    snprintf(names[0][k], 48, "in%d", k), in[k] = names[0][k];
  for (int k = 0; k < c->n_out; k++)
    snprintf(names[1][k], 48, "out%d", k), out[k] = names[1][k];
  for (int a = 0; def->aux && def->aux[a]; a++, n_out++)
    snprintf(names[1][n_out], 48, "out0%s", def->aux[a]), out[n_out] = names[1][n_out];
  if (!(h->node = dpm_net_add(&h->net, def, c->n_in, in, n_out, out, err)))
    return err->code;
  h->node->is_test = c->is_test;
  h->node->fuse = c->fuse;
  if (dpm_node_set_args(h->node, c->args, err) || dpm_node_check_required(h->node, err))
    return err->code;
  for (int k = 0; k < c->n_in; k++)
    if (dpm_shapes_set(&h->shapes, in[k], &c->in[k].shape, DPM_BLOB_DATA))
      return DPM_NOMEM;
  if (dpm_net_infer(&h->net, &h->shapes, -1, "test", err)) return err->code;
  if (dpm_exec_bind(&h->fx, &h->net, &h->shapes, &h->ws, &h->ctx, err)) return err->code;
  for (int k = 0; k < c->n_in; k++) fill_input(c, k, h->fx.ops[0].in[k]);
  return DPM_OK;
}

static void run_forward(harness *h, const ot_case *c) {
  dpm_rng_seed(h->ctx.rng, c->seed + 7);
  dpm_exec_run(&h->fx);
}

dpm_status ot_forward(const ot_case *c, dpm_tensor *out, dpm_err *err) {
  harness h = {0};
  dpm_status s = setup(&h, c, err);
  if (!s) {
    run_forward(&h, c);
    for (int k = 0; k < c->n_out && !s; k++) {
      const dpm_tensor *y = h.fx.ops[0].out[k];
      memset(&out[k], 0, sizeof out[k]);
      s = dpm_tensor_resize(&out[k], &y->shape);
      if (!s) memcpy(out[k].data, y->data, dpm_shape_bytes(&y->shape));
    }
  }
  harness_fini(&h);
  return s;
}

static void fini_outputs(const ot_case *c, dpm_tensor *out) {
  for (int k = 0; k < c->n_out; k++) dpm_tensor_fini(&out[k]);
}

/* want_status < 0: any failure will do. */
static int rejects(const ot_case *c, int want_status, const char *msg) {
  dpm_tensor y[DPM_OP_MAX_IO];
  dpm_err err = {0};
  dpm_status got = ot_forward(c, y, &err);
  if (got == DPM_OK) {
    fini_outputs(c, y);
    printf("    accepted, expected \"%s\"\n", msg);
    return 0;
  }
  if ((want_status < 0 || got == (dpm_status)want_status) && strstr(err.msg, msg))
    return 1;
  printf("    status %s \"%s\", expected %s%s\"%s\"\n", dpm_status_name(got), err.msg,
         want_status < 0 ? "" : dpm_status_name((dpm_status)want_status),
         want_status < 0 ? "" : " ", msg);
  return 0;
}

int ot_rejects(const ot_case *c, const char *msg) { return rejects(c, -1, msg); }

int ot_rejects_status(const ot_case *c, dpm_status s, const char *msg) {
  return rejects(c, (int)s, msg);
}

int ot_forward_is(const ot_case *c, dpm_shape shape, const float *want, double tol) {
  dpm_tensor y[DPM_OP_MAX_IO];
  dpm_err err = {0};
  if (ot_forward(c, y, &err)) {
    printf("    forward failed: %s\n", err.msg);
    return 0;
  }
  int ok = dpm_shape_equal(&y[0].shape, &shape);
  if (!ok) {
    char a[64], b[64];
    printf("    output %s, expected %s\n", dpm_shape_str(&y[0].shape, a, sizeof a),
           dpm_shape_str(&shape, b, sizeof b));
  } else {
    int64_t n = dpm_shape_numel(&shape);
    for (int64_t i = 0; i < n; i++) {
      dpm_test_margin(__FILE__, __LINE__, fabs((double)dpm_f32(&y[0])[i] - want[i]), tol);
      if (!(fabs((double)dpm_f32(&y[0])[i] - want[i]) <= tol)) {
        if (ok) printf("    %s output differs (tol %g):\n", c->op, tol);
        printf("    y[%lld] = %.9g, want %.9g\n", (long long)i, dpm_f32(&y[0])[i],
               want[i]);
        ok = 0;
      }
    }
  }
  fini_outputs(c, y);
  return ok;
}

dpm_status ot_run_op(const char *name, const char *args, int is_test, int n_in,
                     dpm_tensor **in, int n_out, dpm_tensor **out, dpm_err *err) {
  return ot_run_fused(name, args, is_test, 0, n_in, in, n_out, out, err);
}

dpm_status ot_run_fused(const char *name, const char *args, int is_test, unsigned fuse,
                        int n_in, dpm_tensor **in, int n_out, dpm_tensor **out,
                        dpm_err *err) {
  dpm_node node = {.def = dpm_op_find(name),
                   .index = -1,
                   .n_in = n_in,
                   .n_out = n_out,
                   .is_test = is_test,
                   .fuse = fuse};
  dpm_err local;
  if (!err) err = &local;
  if (!node.def) return dpm_errf(err, DPM_NOT_FOUND, "unknown op '%s'", name);
  if (n_in > DPM_OP_MAX_IO || n_out > DPM_OP_MAX_IO)
    return dpm_errf(err, DPM_INVALID, "op %s: too many inputs or outputs", name);
  dpm_shape is[DPM_OP_MAX_IO], os[DPM_OP_MAX_IO];
  memset(os, 0, sizeof os);
  for (int k = 0; k < n_in; k++) is[k] = in[k]->shape;
  if (dpm_node_set_defaults(&node, err) || dpm_node_set_args(&node, args, err) ||
      dpm_node_check_required(&node, err) || node.def->infer(&node, is, os, err))
    return dpm_err_prefix(err, "op %s: ", name);
  const dpm_kernel_def *k;
  if (dpm_exec_kernel(&dpm_backend_cpu, node.def, "cpu", &k, err)) return err->code;
  dpm_ctx ctx = {0};
  dpm_rng_seed(ctx.rng, 1);
  dpm_op op = {.node = &node, .n_in = n_in, .n_out = n_out, .ctx = &ctx, .kernel = k};
  dpm_status s = k->scratch ? dpm_ctx_reserve(&ctx, k->scratch(&node, is)) : DPM_OK;
  for (int k = 0; k < n_in; k++) op.in[k] = in[k];
  for (int k = 0; k < n_out && !s; k++) {
    op.out[k] = out[k];
    s = dpm_tensor_resize(out[k], &os[k]); /* keeps the data of an in-place one */
  }
  if (s) {
    dpm_ctx_fini(&ctx);
    return dpm_errf(err, s, "op %s: out of memory", name);
  }
  k->run(&op);
  dpm_ctx_fini(&ctx);
  return DPM_OK;
}

dpm_tensor ot_tensor(dpm_shape s, const float *v) {
  dpm_tensor t = {0};
  if (dpm_tensor_resize(&t, &s)) {
    fprintf(stderr, "ot_tensor: out of memory\n");
    abort();
  }
  int64_t n = dpm_shape_numel(&s);
  for (int64_t i = 0; v && i < n; i++) {
    if (s.dtype == DPM_F32) dpm_f32(&t)[i] = v[i];
    if (s.dtype == DPM_I32) dpm_i32(&t)[i] = (int32_t)v[i];
    if (s.dtype == DPM_I64) dpm_i64(&t)[i] = (int64_t)v[i];
  }
  return t;
}

/* L = sum over visible float outputs of R . Y, in double. */
static double weighted_loss(harness *h, const ot_case *c, float *const *r) {
  double L = 0;
  for (int k = 0; k < c->n_out; k++) {
    const dpm_tensor *y = h->fx.ops[0].out[k];
    if (y->shape.dtype != DPM_F32) continue;
    int64_t n = dpm_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) L += (double)r[k][i] * dpm_f32(y)[i];
  }
  return L;
}

static double fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("    gradcheck: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  return -1;
}

double ot_gradcheck(const ot_case *c, double eps, int max_elems) {
  harness h = {0};
  dpm_err err = {0};
  double worst = 0;
  float *r[DPM_OP_MAX_IO] = {0};
  char gnames[2][DPM_OP_MAX_IO][48];
  const char *gout[DPM_OP_MAX_IO] = {0}, *gin[DPM_OP_MAX_IO] = {0};
  if (setup(&h, c, &err)) {
    worst = fail("%s", err.msg);
    goto done;
  }
  run_forward(&h, c);
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed + 99);
  for (int k = 0; k < c->n_out; k++) {
    dpm_tensor *y = h.fx.ops[0].out[k];
    if (y->shape.dtype != DPM_F32) continue;
    snprintf(gnames[0][k], 48, "out%d_grad", k);
    gout[k] = gnames[0][k];
    dpm_shapes_set(&h.shapes, gout[k], &y->shape, DPM_BLOB_GRAD);
    int64_t n = dpm_tensor_numel(y);
    r[k] = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) r[k][i] = (float)(2 * dpm_rng_uniform(rng) - 1);
  }
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k].shape.dtype == DPM_F32 && !c->in[k].no_grad)
      snprintf(gnames[1][k], 48, "in%d_grad", k), gin[k] = gnames[1][k];
  if (dpm_autodiff_node(h.node, gout, gin, &h.grad, &err) ||
      dpm_net_infer(&h.grad, &h.shapes, DPM_BLOB_GRAD, "test", &err) ||
      dpm_exec_bind(&h.gx, &h.grad, &h.shapes, &h.ws, &h.ctx, &err)) {
    worst = fail("%s", err.msg);
    goto done;
  }
  for (int k = 0; k < c->n_out; k++)
    if (gout[k]) {
      dpm_blob *b = dpm_ws_find(&h.ws, gout[k]);
      memcpy(b->t.data, r[k], dpm_shape_bytes(&b->t.shape));
    }
  dpm_exec_run(&h.gx);
  for (int k = 0; k < c->n_in; k++) {
    if (!gin[k]) continue;
    dpm_blob *gb = dpm_ws_find(&h.ws, gin[k]);
    if (!gb) {
      worst = fail("no gradient written for input %d", k);
      goto done;
    }
    float *x = dpm_f32(h.fx.ops[0].in[k]);
    int64_t n = dpm_tensor_numel(h.fx.ops[0].in[k]);
    int checks = n <= max_elems ? (int)n : max_elems;
    for (int m = 0; m < checks; m++) {
      int64_t i = n <= max_elems ? m : (int64_t)dpm_rng_below(rng, (uint64_t)n);
      float keep = x[i];
      x[i] = keep + (float)eps;
      run_forward(&h, c);
      double lp = weighted_loss(&h, c, r);
      x[i] = keep - (float)eps;
      run_forward(&h, c);
      double lm = weighted_loss(&h, c, r);
      x[i] = keep;
      double num = (lp - lm) / (2 * eps), ana = dpm_f32(&gb->t)[i];
      double den = fmax(fmax(fabs(num), fabs(ana)), 1e-2);
      double rel = fabs(num - ana) / den;
      if (rel > 1e-3 && rel > worst)
        printf("    %s input %d element %lld: analytic %.6g numeric %.6g\n", c->op, k,
               (long long)i, ana, num);
      if (rel > worst) worst = rel;
    }
  }
done:
  for (int k = 0; k < DPM_OP_MAX_IO; k++) free(r[k]);
  harness_fini(&h);
  return worst;
}

static dpm_shape vshape(dpm_dtype t, int ndim, va_list ap) {
  int64_t d[DPM_MAX_DIMS];
  for (int i = 0; i < ndim; i++) d[i] = va_arg(ap, int);
  return dpm_shape_make(t, ndim, d);
}

dpm_shape ot_f32(int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  dpm_shape s = vshape(DPM_F32, ndim, ap);
  va_end(ap);
  return s;
}

dpm_shape ot_i32(int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  dpm_shape s = vshape(DPM_I32, ndim, ap);
  va_end(ap);
  return s;
}

double ot_maxdiff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}
