/* One op case on one device (oprun.h). */
#include "tests/opcases/oprun.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autodiff.h"
#include "engine/rng.h"

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "oprun: out of memory\n");
    exit(2);
  }
  return p;
}

void oprun_fini(oprun *h) {
  dpm_exec_fini(&h->fx);
  dpm_exec_fini(&h->gx);
  dpm_ws_fini(&h->ws);
  dpm_ctx_fini(&h->ctx);
  dpm_shapes_fini(&h->shapes);
  dpm_net_fini(&h->net);
  dpm_net_fini(&h->grad);
  for (int k = 0; k < OPCASE_MAX_IN; k++) free(h->host[k]);
  for (int k = 0; k < DPM_OP_MAX_IO; k++) free(h->r[k]);
  memset(h, 0, sizeof *h);
}

dpm_status oprun_setup(oprun *h, const opcase *c, dpm_dev *dev, dpm_err *err) {
  memset(h, 0, sizeof *h);
  h->ws.dev = dev;
  h->ctx.dev = dev;
  h->ctx.math = DPM_MATH_DIRECT; /* TF32 off; convolutions as direct sums */
  const dpm_op_def *def = dpm_op_find(c->op);
  if (!def) return dpm_errf(err, DPM_NOT_FOUND, "unknown op '%s'", c->op);
  if (c->n_in > OPCASE_MAX_IN || c->n_out > DPM_OP_MAX_IO)
    return dpm_errf(err, DPM_INVALID, "op %s: too many inputs or outputs", c->op);
  const char *in[DPM_OP_MAX_IO], *out[DPM_OP_MAX_IO];
  int n_out = c->n_out;
  for (int k = 0; k < c->n_in; k++)
    snprintf(h->in_name[k], sizeof h->in_name[k], "in%d", k), in[k] = h->in_name[k];
  for (int k = 0; k < c->n_out; k++) {
    if (k < 4 && c->alias[k] > 0)
      snprintf(h->out_name[k], sizeof h->out_name[k], "in%d", c->alias[k] - 1);
    else
      snprintf(h->out_name[k], sizeof h->out_name[k], "out%d", k);
    out[k] = h->out_name[k];
  }
  for (int a = 0; def->aux && def->aux[a] && n_out < DPM_OP_MAX_IO; a++, n_out++) {
    snprintf(h->out_name[n_out], sizeof h->out_name[n_out], "out0%s", def->aux[a]);
    out[n_out] = h->out_name[n_out];
  }
  if (!(h->node = dpm_net_add(&h->net, def, c->n_in, in, n_out, out, err)))
    return err->code;
  h->node->is_test = c->is_test;
  h->node->fuse = c->fuse;
  if (dpm_node_set_args(h->node, c->args, err) || dpm_node_check_required(h->node, err))
    return err->code;
  for (int k = 0; k < c->n_in; k++)
    if (dpm_shapes_set(&h->shapes, in[k], &c->in[k].shape, DPM_BLOB_DATA))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
  if (dpm_net_infer(&h->net, &h->shapes, -1, "test", err) ||
      dpm_exec_bind(&h->fx, &h->net, &h->shapes, &h->ws, &h->ctx, err))
    return err->code;
  for (int k = 0; k < c->n_in; k++) {
    h->host[k] = xmalloc(dpm_shape_bytes(&c->in[k].shape));
    opcase_input(c, k, h->host[k]);
  }
  return DPM_OK;
}

void oprun_forward(oprun *h, const opcase *c) {
  for (int k = 0; k < c->n_in; k++)
    dpm_tensor_write(h->fx.ops[0].in[k], h->host[k], dpm_shape_bytes(&c->in[k].shape));
  dpm_rng_seed(h->ctx.rng, c->seed + 7);
  dpm_exec_run(&h->fx);
}

void *oprun_read(const dpm_tensor *t) {
  size_t b = dpm_shape_bytes(&t->shape);
  void *p = xmalloc(b);
  dpm_tensor_read(t, p, b);
  return p;
}

dpm_status oprun_backward(oprun *h, const opcase *c, dpm_err *err) {
  const dpm_op_def *def = h->node->def;
  /* a fused forward (Relu applied by the kernel) has no gradient of its own:
   * the engine fuses after autodiff */
  h->has_grad = def->grad && !(def->flags & DPM_OP_NO_GRAD) && !c->fuse;
  if (!h->has_grad) return DPM_OK;
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed + 99);
  for (int k = 0; k < c->n_out; k++) {
    const dpm_tensor *y = h->fx.ops[0].out[k];
    if (y->shape.dtype != DPM_F32) continue;
    snprintf(h->gout_name[k], sizeof h->gout_name[k], "out%d_grad", k);
    h->gout[k] = h->gout_name[k];
    if (dpm_shapes_set(&h->shapes, h->gout[k], &y->shape, DPM_BLOB_GRAD))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    int64_t n = dpm_tensor_numel(y);
    h->r[k] = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h->r[k][i] = (float)(2 * dpm_rng_uniform(rng) - 1);
  }
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k].shape.dtype == DPM_F32 && !c->in[k].no_grad) {
      snprintf(h->gin_name[k], sizeof h->gin_name[k], "in%d_grad", k);
      h->gin[k] = h->gin_name[k];
    }
  if (dpm_autodiff_node(h->node, h->gout, h->gin, &h->grad, err) ||
      dpm_net_infer(&h->grad, &h->shapes, DPM_BLOB_GRAD, "test", err))
    return err->code;
  for (int i = 0; i < h->grad.n; i++)
    h->grad.nodes[i].fuse |= c->gfuse & h->grad.nodes[i].def->fusable;
  if (dpm_exec_bind(&h->gx, &h->grad, &h->shapes, &h->ws, &h->ctx, err)) return err->code;
  for (int k = 0; k < c->n_out; k++)
    if (h->gout[k]) {
      dpm_blob *b = dpm_ws_find(&h->ws, h->gout[k]);
      dpm_tensor_write(&b->t, h->r[k], dpm_shape_bytes(&b->t.shape));
    }
  dpm_exec_run(&h->gx);
  return DPM_OK;
}

void oprun_result_fini(oprun_result *r) {
  for (int i = 0; i < r->n; i++) free(r->data[i]);
  r->n = 0;
}

static void keep(oprun_result *r, const char *what, const dpm_tensor *t) {
  snprintf(r->what[r->n], sizeof r->what[r->n], "%s", what);
  r->shape[r->n] = t->shape;
  r->data[r->n++] = oprun_read(t);
}

dpm_status oprun_case(const opcase *c, dpm_dev *dev, oprun_result *r, oprun *keep_h,
                      dpm_err *err) {
  oprun local, *h = keep_h ? keep_h : &local;
  memset(r, 0, sizeof *r);
  dpm_status s = oprun_setup(h, c, dev, err);
  if (!s) {
    oprun_forward(h, c);
    for (int k = 0; k < c->n_out; k++) {
      char w[32];
      snprintf(w, sizeof w, "output %d", k);
      keep(r, w, h->fx.ops[0].out[k]);
    }
    if (h->node->def->flags & DPM_OP_UPDATES_COMPUTED) /* running statistics */
      for (int k = 0; k < c->n_in; k++) {
        char w[32];
        snprintf(w, sizeof w, "input %d after", k);
        keep(r, w, h->fx.ops[0].in[k]);
      }
    r->ops[r->n_ops++] = h->node->def->id;
    s = oprun_backward(h, c, err);
  }
  if (!s && h->has_grad) {
    for (int i = 0; i < h->grad.n && r->n_ops < 2 * DPM_OP_COUNT; i++)
      r->ops[r->n_ops++] = h->grad.nodes[i].def->id;
    for (int k = 0; k < c->n_in; k++) {
      if (!h->gin[k]) continue;
      dpm_blob *b = dpm_ws_find(&h->ws, h->gin[k]);
      if (!b) {
        s = dpm_errf(err, DPM_INTERNAL, "no gradient written for input %d", k);
        break;
      }
      char w[32];
      snprintf(w, sizeof w, "grad of input %d", k);
      keep(r, w, &b->t);
    }
  }
  if (dev) dpm_dev_synchronize(dev);
  if (!s && dev) s = dpm_dev_failure(dev, err); /* a CUDA error inside a kernel */
  if (!keep_h || s) oprun_fini(h);
  return s;
}

/* L = sum_k R_k . Y_k over the float outputs, in double, after a forward. */
static double weighted_loss(oprun *h, const opcase *c) {
  double L = 0;
  for (int k = 0; k < c->n_out; k++) {
    if (!h->r[k]) continue;
    const dpm_tensor *y = h->fx.ops[0].out[k];
    float *v = oprun_read(y);
    int64_t n = dpm_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) L += (double)h->r[k][i] * v[i];
    free(v);
  }
  return L;
}

double oprun_gradcheck(oprun *h, const opcase *c, const oprun_result *r, double eps,
                       int max_elems, double tol) {
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed + 1234);
  double worst = 0;
  int g = r->n; /* the gradients are r's last entries, in input order */
  for (int k = 0; k < c->n_in; k++) g -= h->gin[k] != NULL;
  for (int k = 0; k < c->n_in; k++) {
    if (!h->gin[k]) continue;
    const float *ana = r->data[g++];
    float *x = h->host[k];
    int64_t n = dpm_shape_numel(&c->in[k].shape);
    int checks = n <= max_elems ? (int)n : max_elems;
    for (int m = 0; m < checks; m++) {
      int64_t i = n <= max_elems ? m : (int64_t)dpm_rng_below(rng, (uint64_t)n);
      float keep_x = x[i];
      x[i] = keep_x + (float)eps;
      oprun_forward(h, c);
      double lp = weighted_loss(h, c);
      x[i] = keep_x - (float)eps;
      oprun_forward(h, c);
      double lm = weighted_loss(h, c);
      x[i] = keep_x;
      double num = (lp - lm) / (2 * eps), a = ana[i];
      double rel = fabs(num - a) / fmax(fmax(fabs(num), fabs(a)), 1e-2);
      if (!(rel <= tol) && !(rel <= worst))
        printf("    %s input %d element %lld: analytic %.6g numeric %.6g\n",
               c->name ? c->name : c->op, k, (long long)i, a, num);
      if (!(rel <= worst)) worst = rel; /* NaN too */
    }
  }
  return worst;
}

double oprun_gradcheck_case(oprun *h, const opcase *c, const oprun_result *r,
                            double *tol) {
  *tol = c->fd_tol > 0 ? c->fd_tol : OPCASE_FD_TOL;
  return oprun_gradcheck(h, c, r, c->fd_eps > 0 ? c->fd_eps : OPCASE_FD_EPS,
                         c->fd_elems > 0 ? c->fd_elems : OPCASE_FD_ELEMS, *tol);
}
