/* Op test harness (optest.h): the one-node nets of tests/opcases/oprun.c on
 * the host, and ops run outside any net. */
#include "optest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/lowp_run.h"
#include "engine/exec.h"
#include "engine/lowp.h"
#include "engine/rng.h"
#include "test.h"
#include "tests/opcases/oprun.h"

dpm_status ot_forward(const ot_case *c, dpm_tensor *out, dpm_err *err) {
  oprun h;
  dpm_status s = oprun_setup(&h, c, NULL, err);
  if (!s) {
    oprun_forward(&h, c);
    for (int k = 0; k < c->n_out && !s; k++) {
      const dpm_tensor *y = h.fx.ops[0].out[k];
      memset(&out[k], 0, sizeof out[k]);
      s = dpm_tensor_resize(&out[k], &y->shape);
      if (!s)
        dpm_tensor_read(y, out[k].data, dpm_shape_bytes(&y->shape));
      else /* out of memory: none is left to the caller */
        for (int j = 0; j <= k; j++) dpm_tensor_fini(&out[j]);
    }
  }
  oprun_fini(&h);
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
  /* names by tensor ("b0", "b1", ...: one tensor, one name), so that the
     low-precision wrapper sees which blobs an in-place op shares */
  char names[2 * DPM_OP_MAX_IO][8];
  const dpm_tensor *named[2 * DPM_OP_MAX_IO];
  int n_named = 0;
  for (int k = 0; k < n_in + n_out; k++) {
    const dpm_tensor *t = k < n_in ? in[k] : out[k - n_in];
    int j = 0;
    while (j < n_named && named[j] != t) j++;
    if (j == n_named) {
      named[n_named] = t;
      snprintf(names[n_named++], sizeof names[0], "b%d", j);
    }
    if (k < n_in)
      node.in[k] = names[j];
    else
      node.out[k - n_in] = names[j];
  }
  if (dpm_node_set_defaults(&node, err) || dpm_node_set_args(&node, args, err) ||
      dpm_node_check_required(&node, err) || node.def->infer(&node, is, os, err))
    return dpm_err_prefix(err, "op %s: ", name);
  const dpm_kernel_def *k;
  if (dpm_exec_kernel(&dpm_backend_cpu, node.def, "cpu", &k, err)) return err->code;
  dpm_ctx ctx = {0};
  dpm_rng_seed(ctx.rng, 1);
  dpm_op op = {.node = &node, .n_in = n_in, .n_out = n_out, .ctx = &ctx, .kernel = k};
  dpm_status s = k->scratch ? dpm_ctx_reserve(&ctx, k->scratch(&node, is)) : DPM_OK;
  if (dpm_cpu_lowp_wanted(&node, is, os)) { /* as dpm_exec_bind binds it */
    op.inner = k;
    op.kernel = &dpm_cpu_lowp_kernel;
    s = dpm_ctx_reserve(&ctx, dpm_cpu_lowp_scratch(k, &node, is, os));
  }
  for (int k = 0; k < n_in; k++) op.in[k] = in[k];
  for (int k = 0; k < n_out && !s; k++) {
    op.out[k] = out[k];
    s = dpm_tensor_resize(out[k], &os[k]); /* keeps the data of an in-place one */
  }
  if (s) {
    dpm_ctx_fini(&ctx);
    return dpm_errf(err, s, "op %s: out of memory", name);
  }
  op.kernel->run(&op);
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
    if (s.dtype == DPM_BF16) dpm_u16(&t)[i] = dpm_bf16_from_f32_1(v[i]);
    if (s.dtype == DPM_F16) dpm_u16(&t)[i] = dpm_f16_from_f32_1(v[i]);
  }
  return t;
}

double ot_gradcheck(const ot_case *c, double eps, int max_elems) {
  oprun h;
  oprun_result r;
  dpm_err err = {0};
  if (oprun_case(c, NULL, &r, &h, &err)) {
    printf("    gradcheck: %s\n", err.msg);
    oprun_result_fini(&r);
    return -1;
  }
  double worst = -1;
  if (!h.has_grad)
    printf("    gradcheck: op %s has no gradient to check\n", c->op);
  else
    worst = oprun_gradcheck(&h, c, &r, eps, max_elems, 1e-3);
  oprun_fini(&h);
  oprun_result_fini(&r);
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
