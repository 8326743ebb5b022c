/* The GPU checks of tests/gpu/run.sh, one program: every case of the op
 * table (tests/opcases/cases.c) on cuda:0 against its CPU kernel,
 * finite-difference gradients on the GPU, fills, Dropout, both examples
 * trained to the CPU accuracy goals, 20 steps on cuda:0 against cpu:0,
 * deterministic runs, a warm second model, and with more than one GPU the
 * 1/2/4/8-device equivalence of the CPU suite.
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
 *                        [--examples DIR] [--kind cpu|fenced]
 *
 * --probe prints the verdict and runs no check: exit 0 with a GPU, 1 when
 * the plugin failed, 3 no GPU, 4 no plugin (with $DPM_CUDA_LIB naming the
 * plugin, 3 says it loaded on a host without a GPU). --quick leaves out the
 * two examples' full trainings, --examples-only runs only those;
 * --examples DIR reads fmnist_mlp.yaml and fmnist_cnn.yaml (and so their
 * data) from DIR, not examples/. --kind cpu runs every check with cpu:N in
 * place of cuda:N (the op checks on cpu:1 against the host's kernels), and
 * --kind fenced with fenced:N (a test build: build/asan-bin/gpu_test): the
 * checks' own test, on any host.
 *
 * Ops run as one-node nets (tests/opcases/oprun.h: inputs, outputs and
 * gradients bound in a workspace on the device, as the engine binds them),
 * from the same host inputs on both devices, every device tensor crossing
 * through the backend's copies. Comparisons are max |gpu - cpu| / max |cpu|
 * over a tensor, with TF32 off (dpm_ctx.math DPM_MATH_DIRECT).
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
#include "engine/lowp.h"
#include "tests/opcases/oprun.h"
#include "train/trainer.h"

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

/* ---- the op table on the device --------------------------------------------- */

/* Compares the device's result with the CPU's: shapes equal, floats (or,
 * with f64, the f32 blobs' bytes as doubles) within OPCASE_OP_TOL relative,
 * integers exactly. Returns the worst relative difference (INFINITY on a
 * mismatch of shape or integers). */
static double compare(const oprun_result *gpu, const oprun_result *cpu, int f64) {
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
    if (d > OPCASE_OP_TOL) note("%s differs: %.3g relative", cpu->what[i], d);
    int64_t at = 0, off = cpu->shape[i].dtype == DPM_F32 && !f64
                              ? elems_off(gpu->data[i], cpu->data[i],
                                          dpm_shape_numel(&cpu->shape[i]), &at)
                              : 0;
    if (off) {
      note("%s: %lld element(s) outside %g * max + %g * |cpu|, e.g. [%lld]: %.9g, cpu "
           "%.9g",
           cpu->what[i], (long long)off, ELEM_ATOL, ELEM_RTOL, (long long)at,
           ((const float *)gpu->data[i])[at], ((const float *)cpu->data[i])[at]);
      d = INFINITY;
    }
    worst = fmax(worst, d);
  }
  return worst;
}

/* Every case of the op table (tests/opcases/cases.c) on the device against
 * the CPU's kernels, and its gradient by finite differences on the device;
 * then whether every op of the op table was compared (or has a check of
 * its own below). */
static void check_ops(dpm_dev *gpu) {
  int n;
  const opcase *cases = opcase_table(&n);
  static int covered[DPM_OP_COUNT];
  int fd_cases = 0, fd_bad = 0;
  double fd_worst = 0; /* of measured / tolerance */
  for (int i = 0; i < n; i++) {
    const opcase *c = &cases[i];
    char name[64];
    snprintf(name, sizeof name, "op %s", c->name);
    oprun_result rc, rg;
    oprun h;
    dpm_err err = {0};
    if (oprun_case(c, NULL, &rc, NULL, &err)) {
      note("on the CPU: %s", err.msg);
      row(name, 0, "the CPU run failed");
      oprun_result_fini(&rc);
      continue;
    }
    if (oprun_case(c, gpu, &rg, &h, &err)) {
      note("on %s:0: %s", kind_name, err.msg);
      row(name, 0, "the GPU run failed");
      oprun_result_fini(&rc);
      oprun_result_fini(&rg);
      continue;
    }
    double d = compare(&rg, &rc, c->f64_out);
    int grads = 0;
    for (int k = 0; k < c->n_in; k++) grads += h.gin[k] != NULL;
    row(name, d <= OPCASE_OP_TOL, "max rel diff %.2g (%d outputs, %d grads)", d, c->n_out,
        grads);
    if (d <= OPCASE_OP_TOL)
      for (int k = 0; k < rg.n_ops; k++) covered[rg.ops[k]] = 1;
    if (opcase_fd_applies(c)) {
      double tol, g = oprun_gradcheck_case(&h, c, &rg, &tol);
      fd_cases++;
      if (!(g / tol <= fd_worst)) fd_worst = g / tol;
      if (!(g <= tol)) {
        fd_bad++;
        note("gradient check of %s: worst %.3g (tol %g)", c->name, g, tol);
      }
    }
    oprun_fini(&h);
    oprun_result_fini(&rc);
    oprun_result_fini(&rg);
  }
  row("finite differences on the device", fd_cases > 0 && fd_bad == 0,
      "%d cases, worst %.2g of its tolerance (tol %g, eps %g unless the case's own)",
      fd_cases, fd_worst, OPCASE_FD_TOL, OPCASE_FD_EPS);
  /* every op of the table: compared above, or in a check of its own */
  int count, missing = 0;
  const dpm_op_def *const *all = dpm_op_all(&count);
  for (int i = 0; i < count; i++)
    if (!covered[all[i]->id] && !opcase_own_check(all[i]->id)) {
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
    opcase c = {.name = fills[i].op,
                .op = fills[i].op,
                .args = fills[i].args,
                .n_out = 1,
                .seed = 1};
    oprun_result rc, rg;
    dpm_err err = {0};
    dpm_status s = oprun_case(&c, NULL, &rc, NULL, &err);
    if (!s)
      s = oprun_case(&c, gpu, &rg, NULL, &err);
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
    oprun_result_fini(&rc);
    oprun_result_fini(&rg);
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
  opcase c = {.name = "Dropout",
              .op = "Dropout",
              .args = "ratio=0.3",
              .n_in = 1,
              .in = {{.shape = {.dtype = DPM_F32, .ndim = 2, .d = {64, 1000}},
                      .vals = OPCASE_POS}},
              .n_out = 1,
              .seed = 5};
  oprun h;
  dpm_err err = {0};
  if (oprun_setup(&h, &c, gpu, &err)) {
    note("%s", err.msg);
    row("Dropout train mode", 0, "setup failed");
    oprun_fini(&h);
    return;
  }
  int64_t n = 64 * 1000, dropped = 0, bad_val = 0, bad_grad = 0;
  oprun_forward(&h, &c);
  float *y = oprun_read(h.fx.ops[0].out[0]);
  const float *x = h.host[0];
  for (int64_t i = 0; i < n; i++) {
    if (y[i] == 0) {
      dropped++;
      continue;
    }
    double want = x[i] / (1 - ratio);
    bad_val += !(fabs(y[i] - want) <= 1e-6 * fabs(want));
  }
  oprun_forward(&h, &c); /* the same seed: the same mask */
  float *y2 = oprun_read(h.fx.ops[0].out[0]);
  int same = !memcmp(y, y2, (size_t)n * sizeof(float));
  c.seed = 6; /* another seed: another mask */
  oprun_forward(&h, &c);
  float *y3 = oprun_read(h.fx.ops[0].out[0]);
  int other = memcmp(y, y3, (size_t)n * sizeof(float)) != 0;
  c.seed = 5;
  oprun_forward(&h, &c);
  if (oprun_backward(&h, &c, &err)) {
    note("gradient: %s", err.msg);
    bad_grad = n;
  } else {
    float *g = oprun_read(&dpm_ws_find(&h.ws, h.gin[0])->t);
    for (int64_t i = 0; i < n; i++) {
      double want = y[i] == 0 ? 0 : h.r[0][i] / (1 - ratio);
      bad_grad += !(fabs(g[i] - want) <= 1e-6 * fmax(fabs(want), 1e-30));
    }
    free(g);
  }
  oprun_fini(&h);
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
  oprun_result rg;
  if (oprun_case(&c, gpu, &rg, &h, &err)) {
    note("%s", err.msg);
    row("Dropout test mode", 0, "run failed");
    oprun_result_fini(&rg);
    return;
  }
  int ident = !memcmp(rg.data[0], h.host[0], (size_t)n * sizeof(float));
  row("Dropout test mode", ident, "output %s the input", ident ? "is" : "is not");
  oprun_fini(&h);
  oprun_result_fini(&rg);
}

/* ---- bf16 (precision.compute: bf16) ------------------------------------------ */

/* One node of op `op` (arguments args, fusion fuse) on dev: inputs of the
 * given shapes (dtypes included) written from in[k], its n_out outputs
 * read back into out[k] (as many bytes as each output's shape has, up to
 * out_bytes[k]). Runs through the engine's bind, as a net would (on cpu,
 * 16-bit ops through the CPU's wrapper; on fenced the same inside the
 * fence; on cuda the bf16 kernels). 1 on success; else a note and 0. */
static int run_node(dpm_dev *dev, const char *op, const char *args, unsigned fuse,
                    int n_in, const dpm_shape *shape, const void *const *in, int n_out,
                    void *const *out, const size_t *out_bytes) {
  dpm_net net = {0};
  dpm_shapes shapes = {0};
  dpm_workspace ws = {.dev = dev};
  dpm_ctx ctx = {.dev = dev, .math = DPM_MATH_DIRECT};
  dpm_exec x = {0};
  dpm_err err = {0};
  static const char *const in_names[] = {"in0", "in1", "in2", "in3"};
  static const char *const out_names[] = {"out0", "out1", "out2", "out3"};
  const dpm_op_def *def = dpm_op_find(op);
  dpm_node *n = def && n_in <= 4 && n_out <= 4
                    ? dpm_net_add(&net, def, n_in, in_names, n_out, out_names, &err)
                    : NULL;
  int ok = n != NULL;
  if (ok) {
    n->fuse = fuse;
    ok = !dpm_node_set_args(n, args, &err) && !dpm_node_check_required(n, &err);
  }
  for (int k = 0; ok && k < n_in; k++)
    ok = !dpm_shapes_set(&shapes, in_names[k], &shape[k], DPM_BLOB_DATA);
  ok = ok && !dpm_net_infer(&net, &shapes, -1, "bf16", &err) &&
       !dpm_exec_bind(&x, &net, &shapes, &ws, &ctx, &err);
  if (ok) {
    for (int k = 0; k < n_in; k++)
      dpm_tensor_write(x.ops[0].in[k], in[k], dpm_shape_bytes(&shape[k]));
    dpm_exec_run(&x);
    for (int k = 0; ok && k < n_out; k++) {
      size_t b = dpm_shape_bytes(&x.ops[0].out[k]->shape);
      if (b > out_bytes[k]) {
        note("%s: output %d has %zu bytes, %zu expected", op, k, b, out_bytes[k]);
        ok = 0;
      } else {
        dpm_tensor_read(x.ops[0].out[k], out[k], b);
      }
    }
    if (dev) dpm_dev_synchronize(dev);
    if (ok && dev && dpm_dev_failure(dev, &err)) ok = 0;
  }
  if (!ok && err.msg[0]) note("%s %s: %s", op, args, err.msg);
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
  dpm_ctx_fini(&ctx);
  dpm_shapes_fini(&shapes);
  dpm_net_fini(&net);
  return ok;
}

/* Uniform values in [-1, 1) from a fixed LCG (the same on every host). */
static void fill_vals(float *v, int64_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = (float)((double)(s >> 8) / (double)(1u << 24) * 2 - 1);
  }
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "gpu_test: out of memory\n");
    exit(2);
  }
  return p;
}

/* `bf16 cast`: Cast on the device against the host's conversion
 * (engine/lowp.h), bitwise: every bf16 pattern widened, and f32 narrowed:
 * every high half with the low halves around the rounding point (ties both
 * ways), and a stride through all 2^32 patterns (NaNs, infinities,
 * subnormals). */
static void check_bf16_cast(dpm_dev *dev) {
  enum { N16 = 65536 };
  static const uint32_t low[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  const int64_t n_low = (int64_t)(sizeof low / sizeof *low), n_round = 65536 * n_low,
                n_stride = 1 << 20;
  const int64_t n = n_round + n_stride;
  uint32_t *f = xcalloc((size_t)n, 4);
  for (int64_t i = 0; i < n_round; i++)
    f[i] = ((uint32_t)(i / n_low) << 16) | low[i % n_low];
  for (int64_t i = 0; i < n_stride; i++) f[n_round + i] = (uint32_t)(i * 4099u + 17u);
  uint16_t *h = xcalloc(N16, 2), *got16 = xcalloc((size_t)n, 2),
           *want16 = xcalloc((size_t)n, 2);
  float *got32 = xcalloc(N16, 4), *want32 = xcalloc(N16, 4);
  for (int i = 0; i < N16; i++) h[i] = (uint16_t)i;
  dpm_shape sn = dpm_shape_make(DPM_F32, 1, (int64_t[]){n}),
            s16 = dpm_shape_make(DPM_BF16, 1, (int64_t[]){N16});
  size_t b16 = (size_t)n * 2, b32 = (size_t)N16 * 4;
  int ok = run_node(dev, "Cast", "from=f32 to=bf16", 0, 1, &sn, (const void *[]){f}, 1,
                    (void *[]){got16}, &b16) &&
           run_node(dev, "Cast", "from=bf16 to=f32", 0, 1, &s16, (const void *[]){h}, 1,
                    (void *[]){got32}, &b32);
  int64_t bad = 0;
  if (ok) {
    dpm_bf16_from_f32(want16, (const float *)f, (size_t)n);
    dpm_f32_from_bf16(want32, h, N16);
    for (int64_t i = 0; i < n; i++)
      if (got16[i] != want16[i] && bad++ < 3)
        note("f32 0x%08x: 0x%04x, host 0x%04x", f[i], got16[i], want16[i]);
    for (int i = 0; i < N16; i++)
      if (memcmp(&got32[i], &want32[i], 4) && bad++ < 3)
        note("bf16 0x%04x widened differs from the host", (unsigned)i);
  }
  row("bf16 cast", ok && bad == 0,
      "%lld f32 -> bf16 and %d bf16 -> f32 patterns, %lld differ from the host",
      (long long)n, N16, (long long)bad);
  free(f), free(h), free(got16), free(want16), free(got32), free(want32);
}

/* The bound of an FC-like output computed in bf16 from inputs rounded
 * once, against f32 on the unrounded inputs (tests/unit/precision_test.c
 * derives it), with bf16's unit roundoff u = 2^-8 (8 significant bits,
 * round to nearest: |d| <= 2^-8; precision_test.c uses 2^-9, half of it,
 * which a single rounding can exceed): e = (2u + u^2 + acc K 2^-24
 * (1 + 2u)) S + u |b|, bound e + u (|y| + e), with S = sum |x w| over the
 * K products. acc: the CPU test's 2 (two f32 sums of K terms, each within
 * K 2^-24 S), here 3, since the tensor cores' f32 accumulation may align
 * by truncation and so be off by up to 2 K 2^-24 S (Fasi, Higham, Mikaitis
 * and Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021); Relu
 * (fused) is 1-Lipschitz and keeps it. Returns |low - ref| / bound. */
static double bf16_ratio(double low, double ref, double s, double b, int64_t k) {
  const double u = 0x1p-8;
  double e = (2 * u + u * u + 3.0 * (double)k * 0x1p-24 * (1 + 2 * u)) * s + u * b;
  double bound = e + u * (fabs(ref) + e);
  return fabs(low - ref) / fmax(bound, 1e-300);
}

typedef struct {
  int64_t n, k, m;
} fc_dims;

/* bf16 copies (rounded once) of n f32 values. */
static uint16_t *to_bf16(const float *v, int64_t n) {
  uint16_t *h = xcalloc((size_t)n, 2);
  dpm_bf16_from_f32(h, v, (size_t)n);
  return h;
}

/* `bf16 fc`: FC in bf16 on the device against the f32 FC on the device
 * (TF32 off) on the unrounded inputs, every element within its bound, at
 * the MLP's first layer (64 x 784 -> 256), its last (64 x 128 -> 10), an
 * odd shape (7 x 33 -> 5: unaligned rows), each also with the Relu fused. */
static void check_bf16_fc(dpm_dev *dev) {
  static const fc_dims dims[] = {{64, 784, 256}, {64, 128, 10}, {7, 33, 5}};
  double worst = 0, max_diff = 0;
  int ok = 1, runs = 0;
  for (size_t c = 0; c < sizeof dims / sizeof *dims && ok; c++)
    for (int relu = 0; relu < 2 && ok; relu++) {
      const int64_t N = dims[c].n, K = dims[c].k, M = dims[c].m;
      float *x = xcalloc((size_t)(N * K), 4), *w = xcalloc((size_t)(M * K), 4),
            *b = xcalloc((size_t)M, 4), *y = xcalloc((size_t)(N * M), 4);
      fill_vals(x, N * K, 1 + (uint32_t)c), fill_vals(w, M * K, 2 + (uint32_t)c);
      fill_vals(b, M, 3 + (uint32_t)c);
      for (int64_t i = 0; i < M * K; i++) w[i] *= 0.1f;
      uint16_t *xl = to_bf16(x, N * K), *wl = to_bf16(w, M * K), *bl = to_bf16(b, M),
               *yl = xcalloc((size_t)(N * M), 2);
      char args[32];
      snprintf(args, sizeof args, "dim_out=%lld", (long long)M);
      dpm_shape sh[3] = {dpm_shape_make(DPM_F32, 2, (int64_t[]){N, K}),
                         dpm_shape_make(DPM_F32, 2, (int64_t[]){M, K}),
                         dpm_shape_make(DPM_F32, 1, (int64_t[]){M})};
      size_t by = (size_t)(N * M) * 4, byl = (size_t)(N * M) * 2;
      unsigned fuse = relu ? DPM_FUSE_RELU : 0;
      ok = run_node(dev, "FC", args, fuse, 3, sh, (const void *[]){x, w, b}, 1,
                    (void *[]){y}, &by);
      for (int k = 0; k < 3; k++) sh[k].dtype = DPM_BF16;
      ok = ok && run_node(dev, "FC", args, fuse, 3, sh, (const void *[]){xl, wl, bl}, 1,
                          (void *[]){yl}, &byl);
      for (int64_t i = 0; ok && i < N; i++)
        for (int64_t j = 0; j < M; j++) {
          double s = 0;
          for (int64_t q = 0; q < K; q++) s += fabs((double)x[i * K + q] * w[j * K + q]);
          double low = dpm_f32_from_bf16_1(yl[i * M + j]), ref = y[i * M + j];
          double r = bf16_ratio(low, ref, s, fabs(b[j]), K);
          if (!(r <= worst)) worst = r; /* NaN too */
          max_diff = fmax(max_diff, fabs(low - ref));
        }
      runs++;
      free(x), free(w), free(b), free(y), free(xl), free(wl), free(bl), free(yl);
    }
  if (ok && worst > 1) note("worst element %.3g of its bound", worst);
  /* max_diff > 0: it did round (not an f32 run in disguise) */
  row("bf16 fc", ok && worst <= 1 && max_diff > 0,
      "%d runs (3 shapes, Relu fused or not), worst %.3g of the derived bound, "
      "max |diff| %.3g",
      runs, worst, max_diff);
}

/* `bf16 fc grad`: FCGradient in bf16 (X, W, dY and the outputs dW, db, dX
 * all bf16, as the precision rewrite types them; then again with dW and db
 * in f32, DPM_FUSE_GRAD_F32, as a bf16 model runs it) against the f32
 * FCGradient on the device on the unrounded inputs: dW's elements over N
 * products, dX's over M, db's over N (one rounded input: the bound holds
 * with room), each within its bound (an f32 dW skips the last rounding:
 * within it too). The f32 run must give some dW that bf16 cannot hold. */
static double grad_value(const void *p, int f32, int64_t i) {
  return f32 ? ((const float *)p)[i] : dpm_f32_from_bf16_1(((const uint16_t *)p)[i]);
}

static void check_bf16_fc_grad(dpm_dev *dev) {
  static const fc_dims dims[] = {{64, 784, 256}, {64, 128, 10}, {7, 33, 5}};
  double worst = 0, max_diff = 0;
  int ok = 1, unrounded = 0;
  for (size_t r = 0; r < 2 * sizeof dims / sizeof *dims && ok; r++) {
    const size_t c = r % (sizeof dims / sizeof *dims);
    const int f32 = r >= sizeof dims / sizeof *dims; /* dW, db in f32 */
    const int64_t N = dims[c].n, K = dims[c].k, M = dims[c].m;
    float *x = xcalloc((size_t)(N * K), 4), *w = xcalloc((size_t)(M * K), 4),
          *dy = xcalloc((size_t)(N * M), 4);
    fill_vals(x, N * K, 11 + (uint32_t)c), fill_vals(w, M * K, 12 + (uint32_t)c);
    fill_vals(dy, N * M, 13 + (uint32_t)c);
    float *dw = xcalloc((size_t)(M * K), 4), *db = xcalloc((size_t)M, 4),
          *dx = xcalloc((size_t)(N * K), 4);
    uint16_t *xl = to_bf16(x, N * K), *wl = to_bf16(w, M * K), *dyl = to_bf16(dy, N * M);
    void *dwl = xcalloc((size_t)(M * K), f32 ? 4 : 2), *dbl = xcalloc((size_t)M, f32 ? 4 : 2);
    uint16_t *dxl = xcalloc((size_t)(N * K), 2);
    dpm_shape sh[3] = {dpm_shape_make(DPM_F32, 2, (int64_t[]){N, K}),
                       dpm_shape_make(DPM_F32, 2, (int64_t[]){M, K}),
                       dpm_shape_make(DPM_F32, 2, (int64_t[]){N, M})};
    size_t b32[3] = {(size_t)(M * K) * 4, (size_t)M * 4, (size_t)(N * K) * 4},
           b16[3] = {(size_t)(M * K) * (f32 ? 4 : 2), (size_t)M * (f32 ? 4 : 2),
                     (size_t)(N * K) * 2};
    char args[32];
    snprintf(args, sizeof args, "dim_out=%lld", (long long)M);
    ok = run_node(dev, "FCGradient", args, 0, 3, sh, (const void *[]){x, w, dy}, 3,
                  (void *[]){dw, db, dx}, b32);
    for (int k = 0; k < 3; k++) sh[k].dtype = DPM_BF16;
    ok = ok && run_node(dev, "FCGradient", args, f32 ? DPM_FUSE_GRAD_F32 : 0, 3, sh,
                        (const void *[]){xl, wl, dyl}, 3, (void *[]){dwl, dbl, dxl}, b16);
    for (int64_t j = 0; ok && j < M; j++) { /* dW [M, K] = dY^T X; db [M] */
      double sb = 0;
      for (int64_t i = 0; i < N; i++) sb += fabs((double)dy[i * M + j]);
      double r = bf16_ratio(grad_value(dbl, f32, j), db[j], sb, 0, N);
      if (!(r <= worst)) worst = r;
      max_diff = fmax(max_diff, fabs(grad_value(dbl, f32, j) - db[j]));
      for (int64_t q = 0; q < K; q++) {
        double s = 0;
        for (int64_t i = 0; i < N; i++) s += fabs((double)dy[i * M + j] * x[i * K + q]);
        double low = grad_value(dwl, f32, j * K + q), ref = dw[j * K + q];
        r = bf16_ratio(low, ref, s, 0, N);
        if (!(r <= worst)) worst = r;
        max_diff = fmax(max_diff, fabs(low - ref));
        unrounded += f32 && dpm_f32_from_bf16_1(dpm_bf16_from_f32_1((float)low)) != low;
      }
    }
    for (int64_t i = 0; ok && i < N; i++) /* dX [N, K] = dY W */
      for (int64_t q = 0; q < K; q++) {
        double s = 0;
        for (int64_t j = 0; j < M; j++) s += fabs((double)dy[i * M + j] * w[j * K + q]);
        double low = dpm_f32_from_bf16_1(dxl[i * K + q]), ref = dx[i * K + q];
        double r = bf16_ratio(low, ref, s, 0, M);
        if (!(r <= worst)) worst = r;
        max_diff = fmax(max_diff, fabs(low - ref));
      }
    free(x), free(w), free(dy), free(dw), free(db), free(dx);
    free(xl), free(wl), free(dyl), free(dwl), free(dbl), free(dxl);
  }
  if (ok && worst > 1) note("worst element %.3g of its bound", worst);
  row("bf16 fc grad", ok && worst <= 1 && max_diff > 0 && unrounded > 0,
      "dW, db, dX at 3 shapes, dW and db in bf16 and in f32, worst %.3g of the derived "
      "bound, max |diff| %.3g, %d f32 dW not in bf16",
      worst, max_diff, unrounded);
}

/* A Conv geometry: N images of C x H x W, M filters of K x K, stride, pad. */
typedef struct {
  int64_t n, c, h, w, m, k, s, p;
} conv_dims;

static int64_t conv_out(int64_t in, const conv_dims *d) { return (in + 2 * d->p - d->k) / d->s + 1; }

/* The sums of |products| of each Conv output (sy, over C K K), each dW
 * (sdw, over N Ho Wo) and each dX (sdx, over the M K K that reach it), by
 * one pass over the whole correlation in double. */
static void conv_abs_sums(const conv_dims *d, const float *x, const float *w,
                          const float *dy, double *sy, double *sdw, double *sdx) {
  const int64_t ho = conv_out(d->h, d), wo = conv_out(d->w, d);
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t m = 0; m < d->m; m++)
      for (int64_t oy = 0; oy < ho; oy++)
        for (int64_t ox = 0; ox < wo; ox++) {
          const int64_t yi = ((n * d->m + m) * ho + oy) * wo + ox;
          for (int64_t c = 0; c < d->c; c++)
            for (int64_t ky = 0; ky < d->k; ky++)
              for (int64_t kx = 0; kx < d->k; kx++) {
                const int64_t iy = oy * d->s - d->p + ky, ix = ox * d->s - d->p + kx;
                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
                const int64_t xi = ((n * d->c + c) * d->h + iy) * d->w + ix,
                              wi = ((m * d->c + c) * d->k + ky) * d->k + kx;
                sy[yi] += fabs((double)x[xi] * w[wi]);
                sdw[wi] += fabs((double)dy[yi] * x[xi]);
                sdx[xi] += fabs((double)dy[yi] * w[wi]);
              }
        }
}

/* bf16_ratio for the bf16 Conv's output, which cuDNN rounds before the
 * bias is added and the sum rounded again (elem.h dpm_bias_act_bf16): the
 * second rounding adds at most u (|pre| + |b| + e) (1 + u) to the bound,
 * pre the f32 output before Relu (1-Lipschitz). */
static double conv_bf16_ratio(double low, double ref, double pre, double s, double b,
                              int64_t k) {
  const double u = 0x1p-8;
  double e = (2 * u + u * u + 3.0 * (double)k * 0x1p-24 * (1 + 2 * u)) * s + u * b;
  double bound = e + 2 * u * (1 + u) * (fabs(pre) + b + e);
  return fabs(low - ref) / fmax(bound, 1e-300);
}

/* `bf16 conv` and `bf16 conv grad`: Conv (bias, Relu fused or not) and
 * ConvGradient (dW, db, dX) in bf16 on the device against the f32 ops on
 * the device on the unrounded inputs, every element within its bound: the
 * CNN's two convolutions (at 4 images) and an odd one (stride 2, padding
 * 1, 3 x 7 x 9 images). */
static void check_bf16_conv(dpm_dev *dev) {
  static const conv_dims dims[] = {
      {4, 1, 28, 28, 8, 5, 1, 2}, {4, 8, 14, 14, 16, 5, 1, 2}, {3, 3, 7, 9, 5, 3, 2, 1}};
  double worst[2] = {0, 0}, diff[2] = {0, 0};
  int ok = 1, runs = 0;
  for (size_t c = 0; c < sizeof dims / sizeof *dims && ok; c++) {
    const conv_dims *d = &dims[c];
    const int64_t ho = conv_out(d->h, d), wo = conv_out(d->w, d);
    const int64_t nx = d->n * d->c * d->h * d->w, nw = d->m * d->c * d->k * d->k,
                  ny = d->n * d->m * ho * wo;
    float *x = xcalloc((size_t)nx, 4), *w = xcalloc((size_t)nw, 4), *b = xcalloc((size_t)d->m, 4),
          *dy = xcalloc((size_t)ny, 4), *y = xcalloc((size_t)ny, 4),
          *dw = xcalloc((size_t)nw, 4), *db = xcalloc((size_t)d->m, 4),
          *dx = xcalloc((size_t)nx, 4);
    fill_vals(x, nx, 21 + (uint32_t)c), fill_vals(w, nw, 22 + (uint32_t)c);
    fill_vals(b, d->m, 23 + (uint32_t)c), fill_vals(dy, ny, 24 + (uint32_t)c);
    for (int64_t i = 0; i < nw; i++) w[i] *= 0.2f;
    uint16_t *xl = to_bf16(x, nx), *wl = to_bf16(w, nw), *bl = to_bf16(b, d->m),
             *dyl = to_bf16(dy, ny), *yl = xcalloc((size_t)ny, 2), *dwl = xcalloc((size_t)nw, 2),
             *dbl = xcalloc((size_t)d->m, 2), *dxl = xcalloc((size_t)nx, 2);
    double *sy = xcalloc((size_t)ny, 8), *sdw = xcalloc((size_t)nw, 8),
           *sdx = xcalloc((size_t)nx, 8);
    conv_abs_sums(d, x, w, dy, sy, sdw, sdx);
    char args[96];
    snprintf(args, sizeof args, "dim_out=%lld kernel=%lld stride=%lld pad=%lld",
             (long long)d->m, (long long)d->k, (long long)d->s, (long long)d->p);
    dpm_shape sh[3] = {dpm_shape_make(DPM_F32, 4, (int64_t[]){d->n, d->c, d->h, d->w}),
                       dpm_shape_make(DPM_F32, 4, (int64_t[]){d->m, d->c, d->k, d->k}),
                       dpm_shape_make(DPM_F32, 1, (int64_t[]){d->m})};
    size_t by = (size_t)ny * 4, byl = (size_t)ny * 2;
    ok = run_node(dev, "Conv", args, 0, 3, sh, (const void *[]){x, w, b}, 1, (void *[]){y},
                  &by);
    for (int relu = 0; relu < 2 && ok; relu++, runs++) {
      for (int k = 0; k < 3; k++) sh[k].dtype = DPM_BF16;
      ok = run_node(dev, "Conv", args, relu ? DPM_FUSE_RELU : 0, 3, sh,
                    (const void *[]){xl, wl, bl}, 1, (void *[]){yl}, &byl);
      for (int64_t i = 0; ok && i < ny; i++) {
        const int64_t m = i / (ho * wo) % d->m;
        double low = dpm_f32_from_bf16_1(yl[i]), ref = relu ? fmax(y[i], 0) : y[i];
        double r = conv_bf16_ratio(low, ref, y[i], sy[i], fabs(b[m]), d->c * d->k * d->k);
        if (!(r <= worst[0])) worst[0] = r;
        diff[0] = fmax(diff[0], fabs(low - ref));
      }
      for (int k = 0; k < 3; k++) sh[k].dtype = DPM_F32;
    }
    /* ConvGradient(X, W, dY) -> dW, db, dX */
    dpm_shape gs[3] = {sh[0], sh[1],
                       dpm_shape_make(DPM_F32, 4, (int64_t[]){d->n, d->m, ho, wo})};
    size_t g32[3] = {(size_t)nw * 4, (size_t)d->m * 4, (size_t)nx * 4},
           g16[3] = {(size_t)nw * 2, (size_t)d->m * 2, (size_t)nx * 2};
    ok = ok && run_node(dev, "ConvGradient", args, 0, 3, gs, (const void *[]){x, w, dy}, 3,
                        (void *[]){dw, db, dx}, g32);
    for (int k = 0; k < 3; k++) gs[k].dtype = DPM_BF16;
    ok = ok && run_node(dev, "ConvGradient", args, 0, 3, gs, (const void *[]){xl, wl, dyl},
                        3, (void *[]){dwl, dbl, dxl}, g16);
    const int64_t per_w = d->n * ho * wo, per_x = d->m * d->k * d->k;
    for (int64_t i = 0; ok && i < nw; i++) {
      double low = dpm_f32_from_bf16_1(dwl[i]);
      double r = bf16_ratio(low, dw[i], sdw[i], 0, per_w);
      if (!(r <= worst[1])) worst[1] = r;
      diff[1] = fmax(diff[1], fabs(low - dw[i]));
    }
    for (int64_t m = 0; ok && m < d->m; m++) {
      double s = 0;
      for (int64_t n = 0; n < d->n; n++)
        for (int64_t j = 0; j < ho * wo; j++) s += fabs((double)dy[(n * d->m + m) * ho * wo + j]);
      double low = dpm_f32_from_bf16_1(dbl[m]), r = bf16_ratio(low, db[m], s, 0, per_w);
      if (!(r <= worst[1])) worst[1] = r;
      diff[1] = fmax(diff[1], fabs(low - db[m]));
    }
    for (int64_t i = 0; ok && i < nx; i++) {
      double low = dpm_f32_from_bf16_1(dxl[i]), r = bf16_ratio(low, dx[i], sdx[i], 0, per_x);
      if (!(r <= worst[1])) worst[1] = r;
      diff[1] = fmax(diff[1], fabs(low - dx[i]));
    }
    free(x), free(w), free(b), free(dy), free(y), free(dw), free(db), free(dx);
    free(xl), free(wl), free(bl), free(dyl), free(yl), free(dwl), free(dbl), free(dxl);
    free(sy), free(sdw), free(sdx);
  }
  if (ok && (worst[0] > 1 || worst[1] > 1))
    note("worst element %.3g (conv), %.3g (grad) of its bound", worst[0], worst[1]);
  row("bf16 conv", ok && worst[0] <= 1 && diff[0] > 0,
      "%d runs (3 geometries, Relu fused or not), worst %.3g of the derived bound, max "
      "|diff| %.3g",
      runs, worst[0], diff[0]);
  row("bf16 conv grad", ok && worst[1] <= 1 && diff[1] > 0,
      "dW, db, dX at 3 geometries, worst %.3g of the derived bound, max |diff| %.3g",
      worst[1], diff[1]);
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
 * more keys of `parallel` ("deterministic: true, "), or ""; tail: more
 * top-level keys ("precision: {compute: bf16}\n"), or "". */
static Dpm__ModelSpec *synthetic_spec_tail(const char *forward, int per_device,
                                           const char *net_type, const char *extra,
                                           const char *tail) {
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
           "parallel: {%snet_type: %s, bucket_bytes: 65536}\n%s",
           per_device, forward, extra, net_type, tail);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err))
    note("spec: %s", err.msg);
  return spec;
}

static Dpm__ModelSpec *synthetic_spec(const char *forward, int per_device,
                                      const char *net_type, const char *extra) {
  return synthetic_spec_tail(forward, per_device, net_type, extra, "");
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
                          double goal, int bf16) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  double t0 = now_s(), acc = 0, best = 0, loss = 0;
  if (dpm_spec_load(path, &spec, &err)) {
    note("%s: %s", path, err.msg);
    row(label, 0, "spec not loaded");
    return;
  }
  if (bf16) { /* precision: {compute: bf16} */
    if (!spec->precision) {
      Dpm__PrecisionSpec *p = malloc(sizeof *p);
      if (!p) {
        fprintf(stderr, "gpu_test: out of memory\n");
        exit(2);
      }
      dpm__precision_spec__init(p);
      spec->precision = p;
    }
    spec->precision->has_compute = 1;
    spec->precision->compute = DPM__COMPUTE_TYPE__COMPUTE_BF16;
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
  row(label,
      init_same && rel <= STEP_TOL && graphs &&
          (!force_comm || strcmp(group, kind == DPM_DEVICE_CUDA ? "nccl" : "local") == 0),
      "init %s; after 20 steps max rel diff %.2g (tol %g); %s; group %s",
      init_same ? "bitwise equal" : "DIFFERS", rel, STEP_TOL, fig, group);
  dpm_trainer_destroy(c);
  dpm_trainer_destroy(g);
  dpm_spec_free(spec);
}

/* `bf16 train step` and `bf16 cnn step`: the MLP and the CNN in bf16
 * (precision.compute: bf16) from the
 * same initial parameters and batches on device 0 and on cpu:0, 3 steps
 * (the first eager, the next captured and replayed where the device has
 * graphs): each step's loss within 1e-2 relative, and the f32 masters
 * after within 1e-2 relative of the largest. Why these: the two run the
 * same casts bit for bit, but each FC's f32 sums add in other orders, so
 * a bf16 output whose sum lies near a rounding point rounds the other way
 * there: 1 bf16 ulp (2^-8 relative) on such elements, and otherwise the
 * f32 orders' few 2^-24. Through three layers and the loss (whose gradient
 * in the logits, p - onehot, has l1 norm at most 2) that moves the loss by
 * a small multiple of 2^-8 relative at worst, well inside 1e-2, and the
 * masters by lr (0.01) times gradients that agree as closely: far less
 * than 1e-2 of the largest parameter. The CNN's convolutions round twice on
 * cuda (cuDNN's output, then the bias added: conv.c), one more ulp on some
 * elements, and its SpatialBN normalises in f32 between casts: the same
 * argument holds. The same check on the CPU's kinds (--kind cpu, fenced)
 * must be exact. */
static void check_bf16_step(const char *label, const char *forward) {
  Dpm__ModelSpec *spec =
      synthetic_spec_tail(forward, 32, "dag", "", "precision: {compute: bf16}\n");
  dpm_trainer *c = trainer(spec, DPM_DEVICE_CPU, 1), *g = trainer(spec, kind, 1);
  int init_same = 0, ok = c && g;
  double worst = INFINITY, rel = INFINITY;
  if (ok) {
    param_diff(c, g, &init_same);
    worst = 0;
    for (int i = 0; i < 3 && ok; i++) {
      dpm_step_stats a, b;
      dpm_err err = {0};
      ok = !dpm_trainer_step(c, 1, &a, &err) && !dpm_trainer_step(g, 1, &b, &err);
      if (!ok) {
        note("step: %s", err.msg);
        break;
      }
      double r = fabs(b.loss - a.loss) / fmax(fabs(a.loss), 1e-30);
      if (!(r <= worst)) worst = r;
      note("step %d: loss %.7g on %s:0, %.7g on cpu:0", i + 1, b.loss, kind_name, a.loss);
    }
    int bitwise;
    if (ok) rel = param_diff(c, g, &bitwise);
  }
  row(label, ok && init_same && worst <= 1e-2 && rel <= 1e-2,
      "init %s; 3 steps, loss max rel diff %.2g (tol 1e-2); masters max rel diff %.2g "
      "(tol 1e-2)",
      init_same ? "bitwise equal" : "DIFFERS", worst, rel);
  dpm_trainer_destroy(c);
  dpm_trainer_destroy(g);
  dpm_spec_free(spec);
}

/* `bf16 refused`: a net whose Sigmoid runs in bf16 (the policy passes its
 * input's type), which has no bf16 kernel on cuda, is refused when its
 * trainer is made, naming the op and the device ("op Sigmoid has no bf16
 * kernel on device cuda:0"); on the CPU's kinds (--kind cpu, fenced) it
 * trains a step. */
static void check_bf16_refused(void) {
  Dpm__ModelSpec *spec = synthetic_spec_tail(
      "  - {op: FC, in: [data], out: h, dim_out: 16}\n"
      "  - {op: Sigmoid, in: [h], out: h}\n"
      "  - {op: FC, in: [h], out: pred, dim_out: 10}\n",
      32, "dag", "", "precision: {compute: bf16}\n");
  dpm_trainer_options opt = {.devices = 1, .kind = kind, .net_type = -1};
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  dpm_status st = spec ? dpm_trainer_create(spec, &opt, &t, &err) : DPM_SPEC;
  int ok;
  if (kind == DPM_DEVICE_CUDA) {
    ok = st == DPM_UNSUPPORTED &&
         strstr(err.msg, "op Sigmoid has no bf16 kernel on device cuda:0");
    row("bf16 refused", ok, "%s", st ? err.msg : "created: not refused");
  } else {
    ok = !st && steps(t, 1);
    if (st) note("create: %s", err.msg);
    row("bf16 refused", ok, "on %s: created and stepped (the CPU's bf16 path)", kind_name);
  }
  dpm_trainer_destroy(t);
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
      kind == DPM_DEVICE_CUDA && dpm_backend_of(kind)->capture_begin
          ? (unsigned long)devices
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
               (!strcmp(argv[i + 1], "cpu") || !strcmp(argv[i + 1], "fenced"))) {
      kind_name = argv[++i];
      kind = !strcmp(kind_name, "cpu") ? DPM_DEVICE_CPU : DPM_DEVICE_FENCED;
    } else {
      fprintf(stderr,
              "usage: gpu_test [--expect-gpu] [--probe] [--quick | --examples-only] "
              "[--examples DIR] [--kind cpu|fenced]\n");
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
  int gpus = 2; /* --kind cpu or fenced: two devices */
  if (kind == DPM_DEVICE_CUDA) {
    gpus = dpm_cuda_load(line, sizeof line);
    int rc = loader_verdict(line, expect_gpu, probe_only);
    if (rc || gpus <= 0 || probe_only) return rc;
  }
  printf("%-44s | %-4s | %s\n", "check", "", "figure");
  dpm_dev *gpu;
  dpm_err err = {0};
  /* the op checks' device: cuda:0, fenced:0, or cpu:1 (not the host's
     kernels' NULL) */
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
    check_bf16_cast(gpu);
    check_bf16_fc(gpu);
    check_bf16_fc_grad(gpu);
    check_bf16_conv(gpu);
    check_bf16_step("bf16 train step", MLP_FORWARD);
    check_bf16_step("bf16 cnn step", CNN_FORWARD);
    check_bf16_refused();
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
    check_example("examples/fmnist_mlp.yaml, 10 epochs", mlp, 10, 0, 0.88, 0);
    check_example("examples/fmnist_cnn.yaml, 5 epochs", cnn, 5, 1, 0.91, 0);
    check_example("bf16 mlp example", mlp, 10, 0, 0.88, 1);
  }
  printf("%d %s device(s); %s; %.1f s\n", gpus, kind_name,
         failed ? "FAILED" : "all passed", now_s() - t0);
  dpm_dev_shutdown();
  return failed ? 1 : 0;
}
