/* The GPU checks of tests/gpu/run.sh, one program: every op on cuda:0
 * against its CPU kernel, finite-difference gradients on the GPU, fills,
 * Dropout, both examples trained to the CPU accuracy goals, 20 steps on
 * cuda:0 against cpu:0, deterministic runs, a warm second model, and with
 * more than one GPU the 1/2/4/8-device equivalence of the CPU suite.
 *
 * Prints one table row per check, "name | ok/FAIL | figure", with the
 * details of a failure on indented lines before its row; exits 1 when any
 * check failed. The loader's verdict comes first, one line: with a GPU
 * its line; "no GPU: <the driver's reason>" (exit 0, nothing to check);
 * "no plugin: <what was looked for, where>" (exit 0: a build without
 * CUDA); "FAIL: <dlerror or the plugin's init error>" when the probe or
 * plugin is there and does not load (exit 1, always). --expect-gpu makes
 * "no GPU" and "no plugin" exit 1 too.
 *
 *   build/tests/gpu_test [--expect-gpu] [--probe] [--quick | --examples-only]
 *                        [--examples DIR] [--kind cpu]
 *
 * --probe prints the verdict and runs no check: exit 0 with a GPU, 1 when
 * the plugin failed, 3 no GPU, 4 no plugin (with $DPM_CUDA_LIB naming the
 * plugin, 3 says it loaded on a host without a GPU). --quick leaves out the
 * two examples' full trainings, --examples-only runs only those;
 * --examples DIR reads fmnist_mlp.yaml and fmnist_cnn.yaml (and so their
 * data) from DIR, not examples/. --kind cpu runs every check with cpu:N in
 * place of cuda:N (the op checks on cpu:1 against the host's kernels): the
 * checks' own test, on any host.
 *
 * Ops run as one-node nets (inputs, outputs and gradients bound in a
 * workspace on the device, as the engine binds them), from the same host
 * inputs on both devices, every device tensor crossing through the
 * backend's copies. Comparisons are max |gpu - cpu| / max |cpu| over a
 * tensor, with TF32 off (dpm_ctx.math 0).
 *
 * Single-threaded (the trainers run their own workers). Exits 2 on a
 * setup failure outside any check (out of memory). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda_load.h"
#include "backend/device.h"
#include "common/spec.h"
#include "engine/autodiff.h"
#include "engine/exec.h"
#include "engine/rng.h"
#include "engine/workspace.h"
#include "train/trainer.h"

#define OP_TOL 1e-5   /* forward and gradient, gpu against cpu, relative */
#define FD_EPS 1e-2   /* central differences' step */
#define FD_TOL 5e-3   /* |analytic - numeric| / max(|a|, |n|, 1e-2) */
#define FD_ELEMS 48   /* elements checked per input */
#define STEP_TOL 1e-4 /* parameters after 20 steps, gpu against cpu */
/* Each element beside the max-norm: |gpu - cpu| <= ELEM_ATOL * max |cpu| +
 * ELEM_RTOL * |cpu|, so that a wrong small entry is not hidden by a large
 * one. ELEM_ATOL covers the rounding of a sum whose result cancels: about
 * sqrt(K) units of 2^-24 of its terms' size for K terms, at most ~2e-6 of
 * the largest output for the K <= 800 of these cases. */
#define ELEM_ATOL 5e-6
#define ELEM_RTOL 1e-4

/* ---- the table ------------------------------------------------------------ */

static int failed;
/* The devices under test: cuda, or cpu for the checks' own test. */
static dpm_device_kind kind = DPM_DEVICE_CUDA;
static const char *kind_name = "cuda";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One row: name | ok or FAIL | figure. */
static void row(const char *name, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void row(const char *name, int ok, const char *fmt, ...) {
  char fig[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fig, sizeof fig, fmt, ap);
  va_end(ap);
  printf("%-44s | %-4s | %s\n", name, ok ? "ok" : "FAIL", fig);
  fflush(stdout);
  if (!ok) failed++;
}

/* A detail line under the check being run. */
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("    ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "gpu_test: out of memory\n");
    exit(2);
  }
  return p;
}

/* max |a - b| / max |b| over n floats (0 when both are all zero). */
static double rel_diff(const float *a, const float *b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = a[i], y = b[i];
    if (isnan(x) != isnan(y)) return INFINITY;
    if (isnan(x)) continue;
    d = fmax(d, fabs(x - y));
    m = fmax(m, fabs(y));
  }
  return d == 0 ? 0 : d / fmax(m, 1e-30);
}

/* Elements of n floats outside ELEM_ATOL * max |b| + ELEM_RTOL * |b|; the
 * worst one's index in *at. */
static int64_t elems_off(const float *a, const float *b, int64_t n, int64_t *at) {
  double m = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)b[i]));
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), bound = ELEM_ATOL * m + ELEM_RTOL * fabs(b[i]);
    if (!(d <= bound)) { /* NaN too */
      off++;
      if (!(d / bound <= worst)) worst = d / bound, *at = i;
    }
  }
  return off;
}

/* rel_diff of n doubles. */
static double rel_diff_f64(const double *a, const double *b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    if (isnan(a[i])) continue;
    d = fmax(d, fabs(a[i] - b[i]));
    m = fmax(m, fabs(b[i]));
  }
  return d == 0 ? 0 : d / fmax(m, 1e-30);
}

/* ---- one op on one device ------------------------------------------------- */

/* How an input's values are made (host side, the same for both devices). */
enum {
  V_RAND,   /* f32 uniform in [-1, 1) */
  V_AWAY,   /* f32 in +-[0.1, 1.1): no value near a kink at 0 (Relu) */
  V_SPACED, /* f32 distinct, 0.05 apart, shuffled: no ties within 2 eps (MaxPool) */
  V_POS,    /* f32 in [0.5, 1.5) (running variances) */
  V_LABEL,  /* i32 in [0, arg) */
  V_VALUE,  /* i64: arg */
};

typedef struct g_in {
  dpm_shape shape;
  int vals, arg;
  int no_grad; /* no gradient checked for it */
} g_in;

#define G_MAX_IN 8

typedef struct g_case {
  const char *name; /* row label */
  const char *op, *args;
  int n_in;
  g_in in[G_MAX_IN];
  int n_out;      /* spec-visible outputs */
  int is_test;    /* test mode */
  unsigned fuse;  /* DPM_FUSE_* on the forward node */
  unsigned gfuse; /* DPM_FUSE_* on the gradient nodes whose def takes them */
  int alias[4];   /* alias[k] > 0: output k is input alias[k]-1 (in place) */
  int f64_out;    /* the outputs' bytes are doubles (combined BN sums, ops/norm.c) */
  int no_fd;      /* compared with the CPU only: too many outputs for float32 finite
                     differences (their noise in L exceeds FD_TOL) */
  unsigned seed;
} g_case;

static dpm_shape f32s(int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t v[4] = {a, b, c, d};
  return dpm_shape_make(DPM_F32, ndim, v);
}
static dpm_shape i32s(int64_t n) { return dpm_shape_make(DPM_I32, 1, &n); }
static dpm_shape f32_scalar(void) { return dpm_shape_scalar(DPM_F32); }
static dpm_shape i64_scalar(void) { return dpm_shape_scalar(DPM_I64); }

/* Input k's host values into buf (dpm_shape_bytes of its shape). */
static void gen_input(const g_case *c, int k, void *buf) {
  const g_in *in = &c->in[k];
  int64_t n = dpm_shape_numel(&in->shape);
  uint64_t rng[2];
  dpm_rng_seed(rng, c->seed * 1000003u + (unsigned)k + 1);
  if (in->shape.dtype == DPM_I32) {
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)buf)[i] =
          in->arg > 0 ? (int32_t)dpm_rng_below(rng, (uint64_t)in->arg) : 0;
    return;
  }
  if (in->shape.dtype == DPM_I64) {
    for (int64_t i = 0; i < n; i++) ((int64_t *)buf)[i] = in->arg;
    return;
  }
  float *f = buf;
  for (int64_t i = 0; i < n; i++) {
    double u = dpm_rng_uniform(rng);
    switch (in->vals) {
    case V_AWAY:
      f[i] = (float)((u < 0.5 ? -1 : 1) * (0.1 + 2 * fabs(u - 0.5)));
      break;
    case V_POS:
      f[i] = (float)(0.5 + u);
      break;
    case V_SPACED:
      f[i] = (float)(0.05 * (double)i - 0.025 * (double)n);
      break;
    default:
      f[i] = (float)(2 * u - 1);
    }
  }
  if (in->vals == V_SPACED) /* Fisher-Yates: distinct values in random places */
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)dpm_rng_below(rng, (uint64_t)i + 1);
      float t = f[i];
      f[i] = f[j], f[j] = t;
    }
}

typedef struct harness {
  dpm_net net, grad;
  dpm_shapes shapes;
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec fx, gx;
  dpm_node *node;
  char in_name[G_MAX_IN][16], out_name[DPM_OP_MAX_IO][48];
  char gout_name[DPM_OP_MAX_IO][32], gin_name[G_MAX_IN][32];
  const char *gout[DPM_OP_MAX_IO], *gin[DPM_OP_MAX_IO];
  void *host[G_MAX_IN];    /* the inputs' values */
  float *r[DPM_OP_MAX_IO]; /* the fixed output weights R of L = sum R.Y */
  int has_grad;
} harness;

static void harness_fini(harness *h) {
  dpm_exec_fini(&h->fx);
  dpm_exec_fini(&h->gx);
  dpm_ws_fini(&h->ws);
  dpm_ctx_fini(&h->ctx);
  dpm_shapes_fini(&h->shapes);
  dpm_net_fini(&h->net);
  dpm_net_fini(&h->grad);
  for (int k = 0; k < G_MAX_IN; k++) free(h->host[k]);
  for (int k = 0; k < DPM_OP_MAX_IO; k++) free(h->r[k]);
  memset(h, 0, sizeof *h);
}

/* The one-node net of c on dev (NULL: host, the CPU's kernels), bound,
 * inputs made. */
static dpm_status setup(harness *h, const g_case *c, dpm_dev *dev, dpm_err *err) {
  memset(h, 0, sizeof *h);
  h->ws.dev = dev;
  h->ctx.dev = dev;
  h->ctx.math = DPM_MATH_DIRECT; /* TF32 off; convolutions as direct sums */
  const dpm_op_def *def = dpm_op_find(c->op);
  if (!def) return dpm_errf(err, DPM_NOT_FOUND, "unknown op '%s'", c->op);
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
  for (int a = 0; def->aux && def->aux[a]; a++, n_out++) {
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
  if (dpm_net_infer(&h->net, &h->shapes, -1, "gpu_test", err) ||
      dpm_exec_bind(&h->fx, &h->net, &h->shapes, &h->ws, &h->ctx, err))
    return err->code;
  for (int k = 0; k < c->n_in; k++) {
    h->host[k] = xmalloc(dpm_shape_bytes(&c->in[k].shape));
    gen_input(c, k, h->host[k]);
  }
  return DPM_OK;
}

/* Writes every input from its host values (an in-place op changed them),
 * then runs the forward net with the case's rng seed. */
static void forward(harness *h, const g_case *c) {
  for (int k = 0; k < c->n_in; k++)
    dpm_tensor_write(h->fx.ops[0].in[k], h->host[k], dpm_shape_bytes(&c->in[k].shape));
  dpm_rng_seed(h->ctx.rng, c->seed + 7);
  dpm_exec_run(&h->fx);
}

/* A host copy of a bound tensor. */
static void *read_back(const dpm_tensor *t) {
  size_t b = dpm_shape_bytes(&t->shape);
  void *p = xmalloc(b);
  dpm_tensor_read(t, p, b);
  return p;
}

/* After a forward: the gradient net of the node (if the op has one) with
 * the float outputs' gradients set to R, run. */
static dpm_status backward(harness *h, const g_case *c, dpm_err *err) {
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
      dpm_net_infer(&h->grad, &h->shapes, DPM_BLOB_GRAD, "gpu_test", err))
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

/* What one device computed for a case: the visible outputs, then the
 * wanted inputs' gradients. */
typedef struct result {
  int n;
  char what[2 * DPM_OP_MAX_IO][32];
  dpm_shape shape[2 * DPM_OP_MAX_IO];
  void *data[2 * DPM_OP_MAX_IO];
  int ops[2 * DPM_OP_COUNT]; /* op ids run (forward node, gradient nodes) */
  int n_ops;
} result;

static void result_fini(result *r) {
  for (int i = 0; i < r->n; i++) free(r->data[i]);
  r->n = 0;
}

static void keep(result *r, const char *what, const dpm_tensor *t) {
  snprintf(r->what[r->n], sizeof r->what[r->n], "%s", what);
  r->shape[r->n] = t->shape;
  r->data[r->n++] = read_back(t);
}

/* Runs c forward and backward on dev into *r (and leaves the harness for a
 * gradient check when keep_h is given). */
static dpm_status run_case(const g_case *c, dpm_dev *dev, result *r, harness *keep_h,
                           dpm_err *err) {
  harness local, *h = keep_h ? keep_h : &local;
  memset(r, 0, sizeof *r);
  dpm_status s = setup(h, c, dev, err);
  if (!s) {
    forward(h, c);
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
    s = backward(h, c, err);
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
  if (!keep_h || s) harness_fini(h);
  return s;
}

/* Compares the device's result with the CPU's: shapes equal, floats (or,
 * with f64, the f32 blobs' bytes as doubles) within OP_TOL relative,
 * integers exactly. Returns the worst relative difference (INFINITY on a
 * mismatch of shape or integers). */
static double compare(const result *gpu, const result *cpu, int f64) {
  if (gpu->n != cpu->n) {
    note("%d results on the GPU, %d on the CPU", gpu->n, cpu->n);
    return INFINITY;
  }
  double worst = 0;
  for (int i = 0; i < cpu->n; i++) {
    if (!dpm_shape_equal(&gpu->shape[i], &cpu->shape[i])) {
      char a[64], b[64];
      note("%s: %s on the GPU, %s on the CPU", cpu->what[i],
           dpm_shape_str(&gpu->shape[i], a, sizeof a),
           dpm_shape_str(&cpu->shape[i], b, sizeof b));
      return INFINITY;
    }
    double d;
    if (cpu->shape[i].dtype == DPM_F32 && f64)
      d = rel_diff_f64(gpu->data[i], cpu->data[i], dpm_shape_numel(&cpu->shape[i]) / 2);
    else if (cpu->shape[i].dtype == DPM_F32)
      d = rel_diff(gpu->data[i], cpu->data[i], dpm_shape_numel(&cpu->shape[i]));
    else
      d = memcmp(gpu->data[i], cpu->data[i], dpm_shape_bytes(&cpu->shape[i])) ? INFINITY
                                                                              : 0;
    if (d > OP_TOL) note("%s differs: %.3g relative", cpu->what[i], d);
    int64_t at = 0, off = cpu->shape[i].dtype == DPM_F32 && !f64
                              ? elems_off(gpu->data[i], cpu->data[i],
                                          dpm_shape_numel(&cpu->shape[i]), &at)
                              : 0;
    if (off) {
      note("%s: %lld element(s) outside %g * max + %g * |cpu|, e.g. [%lld]: %.9g, cpu %.9g",
           cpu->what[i], (long long)off, ELEM_ATOL, ELEM_RTOL, (long long)at,
           ((const float *)gpu->data[i])[at], ((const float *)cpu->data[i])[at]);
      d = INFINITY;
    }
    worst = fmax(worst, d);
  }
  return worst;
}

/* L = sum_k R_k . Y_k over the float outputs, in double, after a forward. */
static double weighted_loss(harness *h, const g_case *c) {
  double L = 0;
  for (int k = 0; k < c->n_out; k++) {
    if (!h->r[k]) continue;
    const dpm_tensor *y = h->fx.ops[0].out[k];
    float *v = read_back(y);
    int64_t n = dpm_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) L += (double)h->r[k][i] * v[i];
    free(v);
  }
  return L;
}

/* Central differences on the device against the gradients it computed
 * (r: run_case's result on that harness). Returns the worst relative
 * error over up to FD_ELEMS elements of each checked input. */
static double gradcheck(harness *h, const g_case *c, const result *r) {
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
    int checks = n <= FD_ELEMS ? (int)n : FD_ELEMS;
    for (int m = 0; m < checks; m++) {
      int64_t i = n <= FD_ELEMS ? m : (int64_t)dpm_rng_below(rng, (uint64_t)n);
      float keep_x = x[i];
      x[i] = keep_x + (float)FD_EPS;
      forward(h, c);
      double lp = weighted_loss(h, c);
      x[i] = keep_x - (float)FD_EPS;
      forward(h, c);
      double lm = weighted_loss(h, c);
      x[i] = keep_x;
      double num = (lp - lm) / (2 * FD_EPS), a = ana[i];
      double rel = fabs(num - a) / fmax(fmax(fabs(num), fabs(a)), 1e-2);
      if (rel > FD_TOL && rel > worst)
        note("input %d element %lld: analytic %.6g numeric %.6g", k, (long long)i, a,
             num);
      worst = fmax(worst, rel);
    }
  }
  return worst;
}

/* Every op the table has, forward and gradient, with shapes each accepts.
 * Fills, Dropout and the collectives have checks of their own below. */
static const g_case *op_cases(int *n) {
  static g_case cases[64];
  int i = 0;
  /* CASE(row, op, args, n_in, n_out, inputs...); then the rare fields on
   * cases[i - 1]. Inputs: IN(shape) random, INV(shape, V_*) other values,
   * NOGRAD(shape, V_*) without a gradient check, LABELS(n, classes), I64(v). */
#define CASE(label, op_, args_, nin, nout, ...)                                          \
  cases[i++] = (g_case) {                                                                \
    .name = label, .op = op_, .args = args_, .n_in = nin, .n_out = nout, .in = {         \
      __VA_ARGS__                                                                        \
    }                                                                                    \
  }
#define IN(s)                                                                            \
  { .shape = (s) }
#define INV(s, v)                                                                        \
  { .shape = (s), .vals = (v) }
#define NOGRAD(s, v)                                                                     \
  { .shape = (s), .vals = (v), .no_grad = 1 }
#define LABELS(n, classes)                                                               \
  { .shape = i32s(n), .vals = V_LABEL, .arg = (classes), .no_grad = 1 }
#define I64(v)                                                                           \
  { .shape = i64_scalar(), .vals = V_VALUE, .arg = (v) }
#define VEC(a) f32s(1, a, 0, 0, 0)
#define MAT(a, b) f32s(2, a, b, 0, 0)
#define T3(a, b, c) f32s(3, a, b, c, 0)
#define T4(a, b, c, d) f32s(4, a, b, c, d)
  CASE("Relu", "Relu", NULL, 1, 1, INV(MAT(4, 37), V_AWAY));
  CASE("Sigmoid", "Sigmoid", NULL, 1, 1, IN(MAT(4, 37)));
  CASE("Tanh", "Tanh", NULL, 1, 1, IN(MAT(4, 37)));
  CASE("Add", "Add", NULL, 2, 1, IN(T3(3, 5, 7)), IN(T3(3, 5, 7)));
  CASE("Sum", "Sum", NULL, 3, 1, IN(MAT(2, 33)), IN(MAT(2, 33)), IN(MAT(2, 33)));
  CASE("Scale", "Scale", "scale=-0.75", 1, 1, IN(MAT(5, 9)));
  CASE("Copy", "Copy", NULL, 1, 1, IN(MAT(5, 9)));
  CASE("StopGradient", "StopGradient", NULL, 1, 1, IN(MAT(5, 9)));
  CASE("Flatten", "Flatten", NULL, 1, 1, IN(T4(2, 3, 1, 5)));
  CASE("Reshape", "Reshape", "shape=-1,5", 1, 1, IN(T3(3, 5, 2)));
  CASE("Concat axis 1", "Concat", NULL, 3, 1, IN(T4(2, 3, 2, 3)), IN(T4(2, 1, 2, 3)),
       IN(T4(2, 5, 2, 3)));
  CASE("Concat axis 3", "Concat", "axis=3", 2, 1, IN(T4(3, 1, 2, 1)), IN(T4(3, 1, 2, 4)));
  CASE("FC", "FC", "dim_out=17", 3, 1, IN(MAT(9, 13)), IN(MAT(17, 13)), IN(VEC(17)));
  CASE("FC 4-D input", "FC", "dim_out=33", 3, 1, IN(T4(3, 2, 3, 1)), IN(MAT(33, 6)),
       IN(VEC(33)));
  CASE("FC fused Relu", "FC", "dim_out=12", 3, 1, IN(MAT(7, 20)), IN(MAT(12, 20)),
       IN(VEC(12)));
  cases[i - 1].fuse = DPM_FUSE_RELU;
  /* db's channel sums in 3 parts of 64 rows (cuda_chan_parts) */
  CASE("FC batch 200", "FC", "dim_out=17", 3, 1, IN(MAT(200, 13)), IN(MAT(17, 13)),
       IN(VEC(17)));
  CASE("FC without input grad", "FC", "dim_out=9", 3, 1, NOGRAD(MAT(6, 11), V_RAND),
       IN(MAT(9, 11)), IN(VEC(9)));
  CASE("Conv 3x3 pad 1", "Conv", "dim_out=4 kernel=3 pad=1", 3, 1, IN(T4(2, 3, 7, 5)),
       IN(T4(4, 3, 3, 3)), IN(VEC(4)));
  CASE("Conv 3x3 stride 2", "Conv", "dim_out=5 kernel=3 pad=1 stride=2", 3, 1,
       IN(T4(2, 3, 9, 8)), IN(T4(5, 3, 3, 3)), IN(VEC(5)));
  CASE("Conv 5x5 fused Relu", "Conv", "dim_out=6 kernel=5 pad=2", 3, 1,
       IN(T4(2, 2, 8, 8)), IN(T4(6, 2, 5, 5)), IN(VEC(6)));
  cases[i - 1].fuse = DPM_FUSE_RELU;
  CASE("Conv first layer", "Conv", "dim_out=8 kernel=5 pad=2", 3, 1,
       NOGRAD(T4(3, 1, 12, 12), V_RAND), IN(T4(8, 1, 5, 5)), IN(VEC(8)));
  CASE("MaxPool 2x2", "MaxPool", "kernel=2 stride=2", 1, 1,
       INV(T4(2, 3, 5, 7), V_SPACED));
  CASE("MaxPool 3x3 pad 1", "MaxPool", "kernel=3 stride=2 pad=1", 1, 1,
       INV(T4(1, 2, 6, 5), V_SPACED));
  /* the fused ReluGradient: dX masked where the pool's input is not > 0 */
  CASE("MaxPool grad fused Relu", "MaxPool", "kernel=2 stride=2", 1, 1,
       INV(T4(2, 3, 6, 6), V_SPACED));
  cases[i - 1].gfuse = DPM_FUSE_RELU_GRAD;
  CASE("AveragePool 2x2", "AveragePool", "kernel=2 stride=2", 1, 1, IN(T4(2, 3, 5, 7)));
  CASE("AveragePool 3x3 pad 1", "AveragePool", "kernel=3 stride=2 pad=1", 1, 1,
       IN(T4(1, 2, 6, 5)));
  CASE("SpatialBN train", "SpatialBN", NULL, 5, 1, IN(T4(2, 4, 1, 7)), IN(VEC(4)),
       IN(VEC(4)), NOGRAD(VEC(4), V_RAND), NOGRAD(VEC(4), V_POS));
  /* each channel's sums in 3 parts of 4096 (cuda_bn_parts) */
  CASE("SpatialBN train, 3 parts", "SpatialBN", NULL, 5, 1, IN(T4(6, 2, 48, 48)),
       IN(VEC(2)), IN(VEC(2)), NOGRAD(VEC(2), V_RAND), NOGRAD(VEC(2), V_POS));
  cases[i - 1].no_fd = 1;
  CASE("SpatialBN test", "SpatialBN", NULL, 5, 1, IN(T4(2, 3, 2, 3)), IN(VEC(3)),
       IN(VEC(3)), NOGRAD(VEC(3), V_RAND), NOGRAD(VEC(3), V_POS));
  cases[i - 1].is_test = 1;
  CASE("SpatialBN train [N,C]", "SpatialBN", NULL, 5, 1, IN(MAT(16, 3)), IN(VEC(3)),
       IN(VEC(3)), NOGRAD(VEC(3), V_RAND), NOGRAD(VEC(3), V_POS));
  /* combine_spatial_bn's per-channel sums (parallel/sync_bn.c) */
  CASE("SpatialBNStats", "SpatialBNStats", NULL, 2, 1, IN(T4(2, 4, 1, 7)),
       NOGRAD(VEC(4), V_RAND));
  cases[i - 1].f64_out = 1;
  CASE("SpatialBNGradientStats", "SpatialBNGradientStats", NULL, 3, 1, IN(T4(2, 3, 2, 3)),
       NOGRAD(VEC(3), V_RAND), IN(T4(2, 3, 2, 3)));
  cases[i - 1].f64_out = 1;
  CASE("Softmax", "Softmax", NULL, 1, 1, IN(MAT(6, 10)));
  CASE("Softmax 4-D", "Softmax", NULL, 1, 1, IN(T4(2, 3, 2, 2)));
  CASE("SoftmaxWithLoss", "SoftmaxWithLoss", NULL, 2, 2, IN(MAT(8, 10)), LABELS(8, 10));
  CASE("Accuracy", "Accuracy", NULL, 2, 1, IN(MAT(50, 4)), LABELS(50, 4));
  /* updates run in place, as the engine binds them */
  CASE("SGD", "SGD", "weight_decay=0.01", 3, 1, IN(MAT(7, 9)), IN(MAT(7, 9)),
       INV(f32_scalar(), V_POS));
  cases[i - 1].alias[0] = 1;
  CASE("MomentumSGD", "MomentumSGD", "momentum=0.9 weight_decay=0.001", 4, 2,
       IN(VEC(301)), IN(VEC(301)), IN(VEC(301)), INV(f32_scalar(), V_POS));
  cases[i - 1].alias[0] = 1, cases[i - 1].alias[1] = 3;
  CASE("MomentumSGD nesterov", "MomentumSGD", "nesterov=true", 4, 2, IN(VEC(301)),
       IN(VEC(301)), IN(VEC(301)), INV(f32_scalar(), V_POS));
  cases[i - 1].alias[0] = 1, cases[i - 1].alias[1] = 3;
  CASE("Adam", "Adam", "weight_decay=0.01", 6, 3, IN(MAT(5, 41)), IN(MAT(5, 41)),
       IN(MAT(5, 41)), INV(MAT(5, 41), V_POS), INV(f32_scalar(), V_POS), I64(3));
  cases[i - 1].alias[0] = 1, cases[i - 1].alias[1] = 3, cases[i - 1].alias[2] = 4;
  CASE("LearningRate step", "LearningRate",
       "base_lr=0.1 policy=step stepsize=100 gamma=0.9 warmup_iters=50", 1, 1, I64(1234));
  CASE("LearningRate in warm-up", "LearningRate",
       "base_lr=0.1 policy=step stepsize=100 gamma=0.9 warmup_iters=50", 1, 1, I64(17));
  CASE("Iter", "Iter", NULL, 1, 1, I64(41));
  cases[i - 1].alias[0] = 1;
#undef CASE
#undef IN
#undef INV
#undef NOGRAD
#undef LABELS
#undef I64
#undef VEC
#undef MAT
#undef T3
#undef T4
  for (int k = 0; k < i; k++) cases[k].seed = 11u + (unsigned)k;
  *n = i;
  return cases;
}

/* Ops left to their own checks, and why. */
static const char *own_check(dpm_op_id id) {
  switch (id) {
  case DPM_OP_CONSTANT_FILL:
  case DPM_OP_XAVIER_FILL:
  case DPM_OP_MSRA_FILL:
  case DPM_OP_GAUSSIAN_FILL:
  case DPM_OP_UNIFORM_FILL:
    return "fills: bitwise against the CPU below";
  case DPM_OP_DROPOUT:
  case DPM_OP_DROPOUT_GRADIENT:
    return "Dropout: its own mask generator, checked below";
  case DPM_OP_ALLREDUCE:
  case DPM_OP_ALLREDUCE_START:
  case DPM_OP_ALLREDUCE_WAIT:
  case DPM_OP_BROADCAST:
    return "collectives: the multi-GPU trainer checks";
  default:
    return NULL;
  }
}

static void check_ops(dpm_dev *gpu) {
  int n;
  const g_case *cases = op_cases(&n);
  static int covered[DPM_OP_COUNT];
  int fd_cases = 0, fd_bad = 0;
  double fd_worst = 0;
  for (int i = 0; i < n; i++) {
    const g_case *c = &cases[i];
    char name[64];
    snprintf(name, sizeof name, "op %s", c->name);
    result rc, rg;
    harness h;
    dpm_err err = {0};
    if (run_case(c, NULL, &rc, NULL, &err)) {
      note("on the CPU: %s", err.msg);
      row(name, 0, "the CPU run failed");
      result_fini(&rc);
      continue;
    }
    if (run_case(c, gpu, &rg, &h, &err)) {
      note("on %s:0: %s", kind_name, err.msg);
      row(name, 0, "the GPU run failed");
      result_fini(&rc);
      result_fini(&rg);
      continue;
    }
    double d = compare(&rg, &rc, c->f64_out);
    int grads = 0;
    for (int k = 0; k < c->n_in; k++) grads += h.gin[k] != NULL;
    row(name, d <= OP_TOL, "max rel diff %.2g (%d outputs, %d grads)", d, c->n_out,
        grads);
    if (d <= OP_TOL)
      for (int k = 0; k < rg.n_ops; k++) covered[rg.ops[k]] = 1;
    /* gfuse masks the gradient by a Relu the one-node net does not have */
    if (h.has_grad && grads > 0 && !c->gfuse && !c->no_fd) {
      double g = gradcheck(&h, c, &rg);
      fd_cases++;
      fd_worst = fmax(fd_worst, g);
      if (!(g <= FD_TOL)) {
        fd_bad++;
        note("gradient check of %s: worst %.3g", c->name, g);
      }
    }
    harness_fini(&h);
    result_fini(&rc);
    result_fini(&rg);
  }
  row("finite differences on the device", fd_cases > 0 && fd_bad == 0,
      "%d cases, worst %.2g (tol %g, eps %g)", fd_cases, fd_worst, FD_TOL, FD_EPS);
  /* every op of the table: compared above, or in a check of its own */
  int count, missing = 0;
  const dpm_op_def *const *all = dpm_op_all(&count);
  for (int i = 0; i < count; i++)
    if (!covered[all[i]->id] && !own_check(all[i]->id)) {
      note("op %s was not compared on the device", all[i]->name);
      missing++;
    }
  row("every op of the table covered", missing == 0, "%d ops, %d not compared", count,
      missing);
}

/* ---- fills and Dropout ------------------------------------------------------- */

static void check_fills(dpm_dev *gpu) {
  static const struct {
    const char *op, *args;
  } fills[] = {
      {"ConstantFill", "shape=64,33 value=0.25"},
      {"ConstantFill", "shape=17 dtype=i64 value=9"},
      {"XavierFill", "shape=64,32,3,3 seed=7"},
      {"MSRAFill", "shape=10,300 seed=8"},
      {"GaussianFill", "shape=1000,3 seed=9 mean=0.5 std=0.2"},
      {"UniformFill", "shape=4097 seed=10 min=-3 max=2"},
  };
  int bad = 0, n = (int)(sizeof fills / sizeof *fills);
  int64_t elems = 0;
  for (int i = 0; i < n; i++) {
    g_case c = {.name = fills[i].op,
                .op = fills[i].op,
                .args = fills[i].args,
                .n_out = 1,
                .seed = 1};
    result rc, rg;
    dpm_err err = {0};
    dpm_status s = run_case(&c, NULL, &rc, NULL, &err);
    if (!s)
      s = run_case(&c, gpu, &rg, NULL, &err);
    else
      memset(&rg, 0, sizeof rg);
    if (s) {
      note("%s %s: %s", fills[i].op, fills[i].args, err.msg);
      bad++;
    } else if (!dpm_shape_equal(&rc.shape[0], &rg.shape[0]) ||
               memcmp(rc.data[0], rg.data[0], dpm_shape_bytes(&rc.shape[0]))) {
      note("%s %s: the device differs from the host", fills[i].op, fills[i].args);
      bad++;
    } else {
      elems += dpm_shape_numel(&rc.shape[0]);
    }
    result_fini(&rc);
    result_fini(&rg);
  }
  row("fills bitwise equal to the CPU's", bad == 0, "%d fills, %lld values", n,
      (long long)elems);
}

/* Dropout on cuda:0 draws its mask from a generator of its own, so its
 * values are checked for what they must be: kept values scaled by
 * 1/(1-ratio), the rest zero, about `ratio` of them dropped, the same mask
 * for the same seed and another for another, the gradient masked and
 * scaled alike, and test mode the identity. */
static void check_dropout(dpm_dev *gpu) {
  const double ratio = 0.3;
  g_case c = {.name = "Dropout",
              .op = "Dropout",
              .args = "ratio=0.3",
              .n_in = 1,
              .in = {{.shape = f32s(2, 64, 1000, 0, 0), .vals = V_POS}},
              .n_out = 1,
              .seed = 5};
  harness h;
  dpm_err err = {0};
  if (setup(&h, &c, gpu, &err)) {
    note("%s", err.msg);
    row("Dropout train mode", 0, "setup failed");
    harness_fini(&h);
    return;
  }
  int64_t n = 64 * 1000, dropped = 0, bad_val = 0, bad_grad = 0;
  forward(&h, &c);
  float *y = read_back(h.fx.ops[0].out[0]);
  const float *x = h.host[0];
  for (int64_t i = 0; i < n; i++) {
    if (y[i] == 0) {
      dropped++;
      continue;
    }
    double want = x[i] / (1 - ratio);
    bad_val += !(fabs(y[i] - want) <= 1e-6 * fabs(want));
  }
  forward(&h, &c); /* the same seed: the same mask */
  float *y2 = read_back(h.fx.ops[0].out[0]);
  int same = !memcmp(y, y2, (size_t)n * sizeof(float));
  c.seed = 6; /* another seed: another mask */
  forward(&h, &c);
  float *y3 = read_back(h.fx.ops[0].out[0]);
  int other = memcmp(y, y3, (size_t)n * sizeof(float)) != 0;
  c.seed = 5;
  forward(&h, &c);
  if (backward(&h, &c, &err)) {
    note("gradient: %s", err.msg);
    bad_grad = n;
  } else {
    float *g = read_back(&dpm_ws_find(&h.ws, h.gin[0])->t);
    for (int64_t i = 0; i < n; i++) {
      double want = y[i] == 0 ? 0 : h.r[0][i] / (1 - ratio);
      bad_grad += !(fabs(g[i] - want) <= 1e-6 * fmax(fabs(want), 1e-30));
    }
    free(g);
  }
  harness_fini(&h);
  double frac = (double)dropped / (double)n;
  int ok = bad_val == 0 && bad_grad == 0 && same && other && fabs(frac - ratio) < 0.01;
  if (!ok)
    note(
        "dropped %.4f, %lld wrong kept values, %lld wrong gradients, same seed same mask "
        "%d, other seed other mask %d",
        frac, (long long)bad_val, (long long)bad_grad, same, other);
  row("Dropout train mode", ok, "dropped %.4f of %lld (ratio %.2f)", frac, (long long)n,
      ratio);
  free(y), free(y2), free(y3);

  /* test mode: the identity */
  c.is_test = 1;
  result rg;
  if (run_case(&c, gpu, &rg, NULL, &err)) {
    note("%s", err.msg);
    row("Dropout test mode", 0, "run failed");
    return;
  }
  float *xt = xmalloc((size_t)n * sizeof(float));
  gen_input(&c, 0, xt);
  int ident = !memcmp(rg.data[0], xt, (size_t)n * sizeof(float));
  row("Dropout test mode", ident, "output %s the input", ident ? "is" : "is not");
  free(xt);
  result_fini(&rg);
}

/* ---- trainers ------------------------------------------------------------------ */

#define MLP_FORWARD                                                                      \
  "  - {op: FC, in: [data], out: fc1, dim_out: 256}\n"                                   \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: FC, in: [fc1], out: fc2, dim_out: 128}\n"                                    \
  "  - {op: Relu, in: [fc2], out: fc2}\n"                                                \
  "  - {op: FC, in: [fc2], out: pred, dim_out: 10}\n"

#define CNN_FORWARD                                                                      \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}\n"              \
  "  - {op: Relu, in: [conv1], out: conv1}\n"                                            \
  "  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}\n"                   \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 5, pad: 2}\n"            \
  "  - {op: SpatialBN, in: [conv2], out: bn2}\n"                                         \
  "  - {op: Relu, in: [bn2], out: bn2}\n"                                                \
  "  - {op: AveragePool, in: [bn2], out: pool2, kernel: 2, stride: 2}\n"                 \
  "  - {op: FC, in: [pool2], out: fc3, dim_out: 64}\n"                                   \
  "  - {op: Relu, in: [fc3], out: fc3}\n"                                                \
  "  - {op: FC, in: [fc3], out: pred, dim_out: 10}\n"

/* The CNN without SpatialBN, whose batch statistics are per replica: n
 * replicas at 64/n train like one at 64 (the CPU suite's CNN). */
#define CNN_EQ_FORWARD                                                                   \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}\n"              \
  "  - {op: Relu, in: [conv1], out: conv1}\n"                                            \
  "  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}\n"                   \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 5, pad: 2}\n"            \
  "  - {op: Relu, in: [conv2], out: conv2}\n"                                            \
  "  - {op: MaxPool, in: [conv2], out: pool2, kernel: 2, stride: 2}\n"                   \
  "  - {op: FC, in: [pool2], out: fc3, dim_out: 64}\n"                                   \
  "  - {op: Relu, in: [fc3], out: fc3}\n"                                                \
  "  - {op: FC, in: [fc3], out: pred, dim_out: 10}\n"

/* 33 FC layers of 16 (66 parameters), for the optimizers' multi-tensor
 * launches in more than one pack; into buf. */
static const char *deep_forward(char *buf, size_t n) {
  size_t at = 0;
  for (int l = 0; l <= 33 && at < n; l++) {
    int k;
    if (l == 0)
      k = snprintf(buf + at, n - at, "  - {op: FC, in: [data], out: h0, dim_out: 16}\n");
    else if (l < 33)
      k = snprintf(buf + at, n - at,
                   "  - {op: Relu, in: [h%d], out: h%d}\n"
                   "  - {op: FC, in: [h%d], out: h%d, dim_out: 16}\n",
                   l - 1, l - 1, l - 1, l);
    else
      k = snprintf(buf + at, n - at,
                   "  - {op: Relu, in: [h32], out: h32}\n"
                   "  - {op: FC, in: [h32], out: pred, dim_out: 10}\n");
    at += k > 0 ? (size_t)k : 0;
  }
  return buf;
}

/* A spec on synthetic 28x28 data, per_device examples per device; extra:
 * more keys of `parallel` ("deterministic: true, "), or "". */
static Dpm__ModelSpec *synthetic_spec(const char *forward, int per_device,
                                      const char *net_type, const char *extra) {
  char yaml[8192];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 4096,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, weight_decay: 0.0001,"
           " lr: {base: 0.01}}\n"
           "parallel: {%snet_type: %s, bucket_bytes: 65536}\n",
           per_device, forward, extra, net_type);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    note("spec: %s", err.msg);
  return spec;
}

/* A trainer on `devices` devices of kind; force_comm: a group even for one
 * (NCCL on one GPU). */
static dpm_trainer *trainer_forced(const Dpm__ModelSpec *spec, dpm_device_kind kind,
                                   int devices, int force_comm) {
  dpm_trainer_options opt = {.devices = devices,
                             .kind = kind,
                             .net_type = -1,
                             .comm_timeout_ms = 60000,
                             .force_comm = force_comm};
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (!spec || dpm_trainer_create(spec, &opt, &t, &err)) {
    if (spec)
      note("create on %d %s device(s): %s", devices, dpm_device_kind_name(kind), err.msg);
    return NULL;
  }
  return t;
}

static dpm_trainer *trainer(const Dpm__ModelSpec *spec, dpm_device_kind kind,
                            int devices) {
  return trainer_forced(spec, kind, devices, 0);
}

static int steps(dpm_trainer *t, int64_t n) {
  dpm_err err = {0};
  dpm_step_stats st;
  if (dpm_trainer_step(t, (int)n, &st, &err) || st.steps_done != n) {
    note("step: %s", err.msg);
    return 0;
  }
  return 1;
}

/* How two trainers' parameters compare: rel = max |a-b| / max |a| over
 * every parameter (INFINITY when one cannot be read); *bitwise whether
 * every byte is the same. */
static double param_diff(dpm_trainer *a, dpm_trainer *b, int *bitwise) {
  const dpm_model *m = dpm_trainer_model(a);
  double diff = 0, mag = 0;
  *bitwise = 1;
  for (int i = 0; i < m->shapes.n; i++) {
    if (m->shapes.v[i].kind != DPM_BLOB_PARAM) continue;
    dpm_tensor x = {0}, y = {0};
    dpm_err err = {0};
    const char *name = m->shapes.v[i].name;
    if (dpm_trainer_read_blob(a, name, &x, &err) ||
        dpm_trainer_read_blob(b, name, &y, &err) ||
        !dpm_shape_equal(&x.shape, &y.shape)) {
      note("%s: %s", name, err.msg[0] ? err.msg : "shapes differ");
      dpm_tensor_fini(&x), dpm_tensor_fini(&y);
      *bitwise = 0;
      return INFINITY;
    }
    int64_t n = dpm_tensor_numel(&x);
    for (int64_t k = 0; k < n; k++) {
      diff = fmax(diff, fabs((double)dpm_f32(&x)[k] - dpm_f32(&y)[k]));
      mag = fmax(mag, fabs((double)dpm_f32(&x)[k]));
    }
    if (memcmp(x.data, y.data, dpm_shape_bytes(&x.shape))) *bitwise = 0;
    dpm_tensor_fini(&x), dpm_tensor_fini(&y);
  }
  return diff == 0 ? 0 : diff / fmax(mag, 1e-30);
}

/* Whether every replica's synced blobs equal the master's, bitwise. */
static int replicas_identical(dpm_trainer *t) {
  const dpm_plan *p = dpm_trainer_plan(t);
  int same = 1;
  for (int d = 1; d < dpm_trainer_devices(t) && same; d++)
    for (int i = 0; i < p->n_synced && same; i++) {
      char scope[32], scoped[300];
      snprintf(scoped, sizeof scoped, "%s/%s",
               dpm_device_scope(*dpm_trainer_device(t, d), scope, sizeof scope),
               p->synced[i]);
      dpm_tensor a = {0}, b = {0};
      dpm_err err = {0};
      same = !dpm_trainer_read_blob(t, p->synced[i], &a, &err) &&
             !dpm_trainer_read_blob(t, scoped, &b, &err) &&
             !memcmp(a.data, b.data, dpm_shape_bytes(&a.shape));
      if (!same) note("%s differs from the master's %s", scoped, err.msg);
      dpm_tensor_fini(&a), dpm_tensor_fini(&b);
    }
  return same;
}

/* An example trained on device 0 for `epochs`, evaluated after each: the
 * last (best_of 0) or best evaluation must reach goal, as on the CPU. */
static void check_example(const char *label, const char *path, int epochs, int best_of,
                          double goal) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  double t0 = now_s(), acc = 0, best = 0, loss = 0;
  if (dpm_spec_load(path, &spec, &err)) {
    note("%s: %s", path, err.msg);
    row(label, 0, "spec not loaded");
    return;
  }
  dpm_trainer *t = trainer(spec, kind, 1);
  int ok = t != NULL, e = 0;
  for (e = 0; ok && e < epochs; e++) {
    ok = steps(t, dpm_trainer_steps_per_epoch(t)) &&
         !dpm_trainer_eval(t, &loss, &acc, &err);
    if (!ok && err.msg[0]) note("eval: %s", err.msg);
    best = fmax(best, acc);
  }
  double got = best_of ? best : acc;
  row(label, ok && got >= goal,
      "%s test accuracy %.4f after %d epochs (goal %.2f), %.1f s",
      best_of ? "best" : "final", got, e, goal, now_s() - t0);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}

/* Whether replica d's `n` steps ran as graphs do on a backend that has
 * them: the first eagerly, the second captured, all but the first
 * replayed, none dropped (and all eagerly where there are none: cpu). */
static int graphs_as_expected(dpm_trainer *t, int d, uint64_t n, char *fig, size_t len) {
  dpm_graph_stats g = dpm_trainer_graph_stats(t, d);
  int has = dpm_backend_of(kind)->capture_begin != NULL;
  snprintf(fig, len, "%llu eager, %llu captured, %llu replayed, %llu dropped",
           (unsigned long long)g.eager, (unsigned long long)g.captures,
           (unsigned long long)g.replays, (unsigned long long)g.dropped);
  return has ? g.eager == 1 && g.captures == 1 && g.replays == n - 1 && !g.dropped
             : g.eager == n && !g.captures;
}

/* 20 steps on device 0 and on cpu:0 from the same init; on device 0 the
 * step was captured once and replayed (force_comm: inside a group of one,
 * NCCL's on a GPU). */
static void check_against_cpu(const char *label, const char *forward, int force_comm) {
  Dpm__ModelSpec *spec = synthetic_spec(forward, 32, "dag", "");
  dpm_trainer *c = trainer(spec, DPM_DEVICE_CPU, 1),
              *g = trainer_forced(spec, kind, 1, force_comm);
  int init_same = 0, graphs = 0;
  double rel = INFINITY;
  char fig[128] = "";
  if (c && g) {
    param_diff(c, g, &init_same);
    if (steps(c, 20) && steps(g, 20)) {
      int bitwise;
      rel = param_diff(c, g, &bitwise);
      graphs = graphs_as_expected(g, 0, 20, fig, sizeof fig);
    }
  }
  const char *group = g ? dpm_trainer_comm_backend(g) : "?";
  row(label, init_same && rel <= STEP_TOL && graphs &&
                 (!force_comm || strcmp(group, kind == DPM_DEVICE_CUDA ? "nccl" : "local") == 0),
      "init %s; after 20 steps max rel diff %.2g (tol %g); %s; group %s",
      init_same ? "bitwise equal" : "DIFFERS", rel, STEP_TOL, fig, group);
  dpm_trainer_destroy(c);
  dpm_trainer_destroy(g);
  dpm_spec_free(spec);
}

/* Two runs with deterministic math (parallel.deterministic: true): bitwise
 * equal parameters after 20 steps, on `devices` GPUs. */
static void check_deterministic(int devices) {
  char label[64];
  snprintf(label, sizeof label, "deterministic CNN, %d device(s), 2 runs", devices);
  Dpm__ModelSpec *spec =
      synthetic_spec(CNN_FORWARD, 32, "dag", "deterministic: true, allow_tf32: false, ");
  dpm_trainer *a = trainer(spec, kind, devices);
  dpm_trainer *b = a ? trainer(spec, kind, devices) : NULL;
  int bitwise = 0;
  double rel = INFINITY;
  if (a && b && steps(a, 20) && steps(b, 20)) rel = param_diff(a, b, &bitwise);
  row(label, bitwise, "%s after 20 steps (max rel diff %.2g)",
      bitwise ? "bitwise equal" : "DIFFER", rel);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(spec);
}

/* The backend's counts (zero on cpu, whose backend has none). */
static dpm_backend_counts backend_counts(void) {
  dpm_backend_counts c = {0};
  const dpm_backend *be = dpm_backend_of(kind);
  if (be && be->counts) be->counts(&c);
  return c;
}

/* A second model on warm GPUs allocates nothing new from the driver and
 * makes no new NCCL group: the device pools' raw allocations after the
 * first model was freed do not grow while the second one is built and
 * steps, nor do the plugin's staging blocks or NCCL inits (on cuda); its
 * own step graphs are instantiated, one per replica. force_comm: a group of
 * one on one device (NCCL's warm groups on one GPU). */
static void check_warm(int devices, int force_comm) {
  char label[64];
  snprintf(label, sizeof label, "warm second model, %d device(s)%s", devices,
           force_comm ? ", forced group" : "");
  Dpm__ModelSpec *spec = synthetic_spec(CNN_FORWARD, 32, "dag", "");
  dpm_trainer *a = trainer_forced(spec, kind, devices, force_comm);
  int ok = a && steps(a, 3);
  double warm_ms = 0, t0;
  dpm_dev *dev[8] = {0};
  dpm_pool_stats before[8], after[8];
  dpm_trainer_destroy(a);
  for (int d = 0; ok && d < devices; d++) {
    dpm_err err = {0};
    ok = !dpm_dev_get((dpm_device){kind, d}, &dev[d], &err);
    if (ok) before[d] = dpm_dev_stats(dev[d]);
  }
  dpm_backend_counts c0 = backend_counts();
  t0 = now_s();
  dpm_trainer *b = ok ? trainer_forced(spec, kind, devices, force_comm) : NULL;
  ok = b && steps(b, 1);
  warm_ms = (now_s() - t0) * 1e3;
  ok = ok && steps(b, 2);
  uint64_t grew = 0;
  for (int d = 0; ok && d < devices; d++) {
    after[d] = dpm_dev_stats(dev[d]);
    grew += after[d].raw_allocs - before[d].raw_allocs;
    if (after[d].raw_allocs != before[d].raw_allocs)
      note("%s:%d: %llu raw allocations for the second model", kind_name, d,
           (unsigned long long)(after[d].raw_allocs - before[d].raw_allocs));
  }
  dpm_backend_counts c1 = backend_counts();
  unsigned long inits = c1.comm_inits - c0.comm_inits,
                staging = c1.staging_blocks - c0.staging_blocks,
                graphs = c1.graphs - c0.graphs;
  unsigned long want_graphs =
      kind == DPM_DEVICE_CUDA && dpm_backend_of(kind)->capture_begin ? (unsigned long)devices
                                                                     : 0;
  dpm_trainer_destroy(b);
  dpm_spec_free(spec);
  row(label, ok && grew == 0 && inits == 0 && staging == 0 && graphs == want_graphs,
      "%llu new raw allocations, %lu NCCL inits, %lu staging blocks, %lu graphs "
      "instantiated (%lu expected); build + first step %.1f ms",
      (unsigned long long)grew, inits, staging, graphs, want_graphs, warm_ms);
}

/* 1 device at 64 per step against n at 64/n: 20 steps, the same
 * parameters (to STEP_TOL: the GPUs' sums run in other orders), every
 * replica bitwise the master. */
static void check_equivalence(const char *what, const char *forward, int max_devices) {
  Dpm__ModelSpec *s1 = synthetic_spec(forward, 64, "dag", "");
  dpm_trainer *one = trainer(s1, kind, 1);
  int ok1 = one && steps(one, 20);
  for (int n = 2; n <= max_devices && n <= 8; n *= 2) {
    char label[64];
    snprintf(label, sizeof label, "%s: 1 device vs %d devices", what, n);
    Dpm__ModelSpec *sn = synthetic_spec(forward, 64 / n, "dag", "");
    dpm_trainer *many = ok1 ? trainer(sn, kind, n) : NULL;
    int ok = many && steps(many, 20), bitwise;
    double rel = ok ? param_diff(one, many, &bitwise) : INFINITY;
    int same = ok && replicas_identical(many);
    row(label, ok && rel <= STEP_TOL && same, "max rel diff %.2g (tol %g), replicas %s",
        rel, STEP_TOL, same ? "bitwise identical" : "DIFFER");
    dpm_trainer_destroy(many);
    dpm_spec_free(sn);
  }
  dpm_trainer_destroy(one);
  dpm_spec_free(s1);
}

/* The loader's verdict (dpm_cuda_load_state), printed: 0 with a GPU, else
 * the exit status: 0 where there is nothing to check (no GPU, or a build
 * without the plugin) unless --expect-gpu, 1 when the plugin is there and
 * fails to load whatever else is asked. --probe answers 3 for no GPU and 4
 * for no plugin, so that a script can tell the four apart. */
static int loader_verdict(const char *line, int expect_gpu, int probe_only) {
  switch (dpm_cuda_load_state()) {
  case DPM_CUDA_READY:
    printf("%s\n", line);
    return 0;
  case DPM_CUDA_NO_GPU:
    printf("no GPU: %s%s\n", line, dpm_cuda_plugin_get() ? " (the plugin loaded)" : "");
    return expect_gpu ? 1 : probe_only ? 3 : 0;
  case DPM_CUDA_NO_PLUGIN:
    printf("no plugin: %s\n", line);
    return expect_gpu ? 1 : probe_only ? 4 : 0;
  case DPM_CUDA_PLUGIN_FAILED:
    printf("FAIL: %s\n", line);
    return 1;
  }
  return 1;
}

int main(int argc, char **argv) {
  int expect_gpu = 0, probe_only = 0, quick = 0, examples_only = 0;
  const char *examples = "examples";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--expect-gpu")) {
      expect_gpu = 1;
    } else if (!strcmp(argv[i], "--probe")) {
      probe_only = 1;
    } else if (!strcmp(argv[i], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[i], "--examples-only")) {
      examples_only = 1;
    } else if (!strcmp(argv[i], "--examples") && i + 1 < argc) {
      examples = argv[++i];
    } else if (!strcmp(argv[i], "--kind") && i + 1 < argc &&
               !strcmp(argv[i + 1], "cpu")) {
      kind = DPM_DEVICE_CPU, kind_name = "cpu";
      i++;
    } else {
      fprintf(stderr,
              "usage: gpu_test [--expect-gpu] [--probe] [--quick | --examples-only] "
              "[--examples DIR] [--kind cpu]\n");
      return 2;
    }
  }
  char mlp[PATH_MAX], cnn[PATH_MAX];
  if (snprintf(mlp, sizeof mlp, "%s/fmnist_mlp.yaml", examples) >= (int)sizeof mlp ||
      snprintf(cnn, sizeof cnn, "%s/fmnist_cnn.yaml", examples) >= (int)sizeof cnn) {
    fprintf(stderr, "gpu_test: --examples: path too long\n");
    return 2;
  }
  char line[768] = "";
  int gpus = 2; /* --kind cpu: two cpu devices */
  if (kind == DPM_DEVICE_CUDA) {
    gpus = dpm_cuda_load(line, sizeof line);
    int rc = loader_verdict(line, expect_gpu, probe_only);
    if (rc || gpus <= 0 || probe_only) return rc;
  }
  printf("%-44s | %-4s | %s\n", "check", "", "figure");
  dpm_dev *gpu;
  dpm_err err = {0};
  /* the op checks' device: cuda:0, or cpu:1 (not the host's kernels' NULL) */
  dpm_device under_test = {kind, kind == DPM_DEVICE_CPU ? 1 : 0};
  if (dpm_dev_get(under_test, &gpu, &err)) {
    row("open the device", 0, "%s", err.msg);
    return 1;
  }
  double t0 = now_s();
  if (!examples_only) {
    check_ops(gpu);
    check_fills(gpu);
    check_dropout(gpu);
    char deep[4096];
    check_against_cpu("MLP: 20 steps on device 0 vs cpu:0", MLP_FORWARD, 0);
    check_against_cpu("CNN: 20 steps on device 0 vs cpu:0", CNN_FORWARD, 0);
    check_against_cpu("33 FC layers: 20 steps vs cpu:0", deep_forward(deep, sizeof deep),
                      0);
    /* a group of one: NCCL's enqueue, completion event, watches and graph
       capture on one GPU */
    check_against_cpu("MLP, group of one: 20 steps vs cpu:0", MLP_FORWARD, 1);
    check_against_cpu("CNN, group of one: 20 steps vs cpu:0", CNN_FORWARD, 1);
    check_deterministic(1);
    if (gpus > 1) check_deterministic(2);
    check_warm(1, 0);
    check_warm(1, 1);
    if (gpus > 1) check_warm(2, 0);
    if (gpus > 1) {
      check_equivalence("MLP", MLP_FORWARD, gpus);
      check_equivalence("CNN", CNN_EQ_FORWARD, gpus);
    }
  }
  if (!quick) {
    check_example("examples/fmnist_mlp.yaml, 10 epochs", mlp, 10, 0, 0.88);
    check_example("examples/fmnist_cnn.yaml, 5 epochs", cnn, 5, 1, 0.91);
  }
  printf("%d %s device(s); %s; %.1f s\n", gpus, kind_name,
         failed ? "FAILED" : "all passed", now_s() - t0);
  dpm_dev_shutdown();
  return failed ? 1 : 0;
}
