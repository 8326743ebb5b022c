/* Engine benchmark: one training step of the Fashion-MNIST MLP and CNN on one
 * thread, as achieved GFLOP/s against a 1024^3 single-thread sgemm measured
 * in the same run.
 *
 * FLOPs are counted from the nets themselves: 2*M*N*K for every matrix
 * product of FC and Conv forward, their weight gradients, and their input
 * gradients where the net computes them (never for the data). Elementwise
 * work, losses and the optimizer are not counted (they are real time that
 * counts against the rate).
 *
 *   build/bench/engine [--steps N]      (OPENBLAS_NUM_THREADS=1) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tensor.h"
#include "spec/spec.h"
#include "train/trainer.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

static double sgemm_gflops(void) {
  const int n = 1024;
  float *a = dpm_alloc((size_t)n * n * 4), *b = dpm_alloc((size_t)n * n * 4),
        *c = dpm_alloc((size_t)n * n * 4);
  for (int i = 0; i < n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
  double t[7];
  for (int r = 0; r < 7; r++) {
    double t0 = now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    t[r] = now_ms() - t0;
  }
  dpm_free(a);
  dpm_free(b);
  dpm_free(c);
  return 2.0 * n * n * n / (median(t, 7) * 1e6);
}

/* Matrix-product FLOPs of one training step of the model's train net. */
static double step_flops(const dpm_model *m) {
  double total = 0;
  for (int i = 0; i < m->train.n; i++) {
    const dpm_node *n = &m->train.nodes[i];
    const char *op = n->def->name;
    int grad = !strcmp(op, "FCGradient") || !strcmp(op, "ConvGradient");
    if (!grad && strcmp(op, "FC") && strcmp(op, "Conv")) continue;
    const dpm_shape *w = &dpm_shapes_get(&m->shapes, n->in[1])->shape;
    const dpm_shape *y = &dpm_shapes_get(&m->shapes, grad ? n->in[2] : n->out[0])->shape;
    double one = 2.0 * (double)dpm_shape_numel(y) * (double)(dpm_shape_numel(w) / w->d[0]);
    total += grad ? one * (1 + (n->n_out > 2 && n->out[2] != NULL)) : one;
  }
  return total;
}

typedef struct {
  const char *name, *spec;
  int warmup, steps;
} workload;

static int run(const workload *w, double sgemm) {
  Dpm__ModelSpec *spec = NULL;
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (dpm_spec_load(w->spec, &spec, &err) || dpm_trainer_create(spec, &t, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    dpm_spec_free(spec);
    return 1;
  }
  double *ms = malloc((size_t)w->steps * sizeof *ms);
  dpm_step_stats st;
  int rc = dpm_trainer_step(t, w->warmup, &st, &err);
  for (int i = 0; i < w->steps && !rc; i++) {
    rc = dpm_trainer_step(t, 1, &st, &err);
    ms[i] = st.step_ms;
  }
  if (rc) {
    fprintf(stderr, "bench: %s\n", err.msg);
  } else {
    double flops = step_flops(dpm_trainer_model(t)), med = median(ms, w->steps);
    double gf = flops / (med * 1e6);
    printf("%-28s %9.3f ms %8.1f MFLOP %8.1f GFLOP/s %6.1f%% of sgemm  %8.0f img/s\n",
           w->name, med, flops / 1e6, gf, 100 * gf / sgemm,
           dpm_trainer_batch(t) / (med / 1e3));
  }
  free(ms);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return rc;
}

int main(int argc, char **argv) {
  int steps = argc > 2 && !strcmp(argv[1], "--steps") ? atoi(argv[2]) : 0;
  const workload loads[] = {
      {"MLP step, batch 64", "examples/fmnist_mlp.yaml", 50, steps ? steps : 500},
      {"CNN step, batch 64", "examples/fmnist_cnn.yaml", 3, steps ? steps : 15},
  };
  double sgemm = sgemm_gflops();
  printf("%-28s %9s    %8s       %8s\n", "workload (1 thread)", "median", "work", "rate");
  printf("%-28s %12s %14s %8.1f GFLOP/s %6.1f%%\n", "sgemm 1024^3", "", "", sgemm, 100.0);
  int rc = 0;
  for (size_t i = 0; i < sizeof loads / sizeof *loads; i++) rc |= run(&loads[i], sgemm);
  return rc;
}
