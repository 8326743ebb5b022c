/* Engine benchmark: one training step of the Fashion-MNIST MLP and CNN on one
 * thread, as achieved GFLOP/s against a 1024^3 single-thread sgemm measured
 * in the same run.
 *
 * The MLP figure is a whole training step (reader hand-off, forward,
 * backward, optimizer); the CNN figure is forward+backward alone.
 *
 * FLOPs are counted from the nets themselves: 2*M*N*K for every matrix
 * product of FC and Conv forward, their weight gradients, and their input
 * gradients where the net computes them (never for the data). Elementwise
 * work, losses and the optimizer are not counted (they are real time that
 * counts against the rate).
 *
 *   build/bench/engine [--rounds N]      (OPENBLAS_NUM_THREADS=1) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "engine/exec.h"
#include "engine/tensor.h"
#include "common/spec.h"
#include "train/trainer.h"

/* One 1024^3 sgemm, in ms. */
static double sgemm_ms(float *a, float *b, float *c) {
  const int n = 1024;
  double t0 = bench_now_ms();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
  return bench_now_ms() - t0;
}

/* Matrix-product FLOPs of one training step of the model's train net
 * (the optimizer adds none). */
static double step_flops(const dpm_model *m) {
  double total = 0;
  for (int i = 0; i < m->train.n; i++) {
    const dpm_node *n = &m->train.nodes[i];
    const char *op = n->def->name;
    int grad = !strcmp(op, "FCGradient") || !strcmp(op, "ConvGradient");
    if (!grad && strcmp(op, "FC") && strcmp(op, "Conv")) continue;
    const dpm_shape *w = &dpm_shapes_get(&m->shapes, n->in[1])->shape;
    const dpm_shape *y = &dpm_shapes_get(&m->shapes, grad ? n->in[2] : n->out[0])->shape;
    double one =
        2.0 * (double)dpm_shape_numel(y) * (double)(dpm_shape_numel(w) / w->d[0]);
    total += grad ? one * (1 + (n->n_out > 2 && n->out[2] != NULL)) : one;
  }
  return total;
}

typedef struct {
  const char *name, *spec;
  int warmup, rounds, steps_per_round;
  int fwd_bwd_only; /* time forward+backward without the optimizer */
} workload;

/* Forward+backward alone: the model's train net (the plan adds the
 * optimizer), run over the trainer's master workspace and its last batch. */
typedef struct {
  dpm_exec x;
  dpm_ctx ctx;
} fwd_bwd;

static dpm_status fwd_bwd_init(fwd_bwd *f, dpm_trainer *t, dpm_err *err) {
  const dpm_model *m = dpm_trainer_model(t);
  return dpm_exec_bind(&f->x, &m->train, &m->shapes, dpm_trainer_workspace(t, 0), &f->ctx,
                       err);
}

static void fwd_bwd_fini(fwd_bwd *f) {
  dpm_exec_fini(&f->x);
  dpm_ctx_fini(&f->ctx);
}

/* Rounds alternate one sgemm and a few training steps, so both rates are
 * measured under the same conditions (this VM's clock and neighbours vary). */
static int run(const workload *w) {
  Dpm__ModelSpec *spec = NULL;
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (dpm_spec_load(w->spec, &spec, &err) || dpm_trainer_create(spec, NULL, &t, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    dpm_spec_free(spec);
    return 1;
  }
  const size_t n = 1024 * 1024;
  float *a = dpm_alloc(n * 4), *b = dpm_alloc(n * 4), *c = dpm_alloc(n * 4);
  for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
  int steps = w->rounds * w->steps_per_round;
  double *ms = malloc((size_t)steps * sizeof *ms),
         *gm = malloc((size_t)w->rounds * sizeof *gm);
  dpm_step_stats st;
  fwd_bwd fb = {0};
  int rc = dpm_trainer_step(t, w->warmup, &st, &err);
  if (!rc && w->fwd_bwd_only) rc = fwd_bwd_init(&fb, t, &err);
  for (int r = 0; r < w->rounds && !rc; r++) {
    gm[r] = sgemm_ms(a, b, c);
    for (int i = 0; i < w->steps_per_round && !rc; i++) {
      double t0 = bench_now_ms();
      if (w->fwd_bwd_only)
        dpm_exec_run(&fb.x);
      else
        rc = dpm_trainer_step(t, 1, &st, &err);
      ms[r * w->steps_per_round + i] = bench_now_ms() - t0;
    }
  }
  fwd_bwd_fini(&fb);
  if (rc) {
    fprintf(stderr, "bench: %s\n", err.msg);
  } else {
    double flops = step_flops(dpm_trainer_model(t)), med = bench_median(ms, steps);
    double gf = flops / (med * 1e6),
           sg = 2.0 * 1024 * 1024 * 1024 / (bench_median(gm, w->rounds) * 1e6);
    printf("%-22s %9.3f ms %8.1f MFLOP %7.1f GFLOP/s | sgemm %6.1f GFLOP/s | %5.1f%% | "
           "%7.0f img/s\n",
           w->name, med, flops / 1e6, gf, sg, 100 * gf / sg,
           dpm_trainer_batch(t) / (med / 1e3));
  }
  dpm_free(a);
  dpm_free(b);
  dpm_free(c);
  free(ms);
  free(gm);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return rc;
}

int main(int argc, char **argv) {
  int rounds = argc > 2 && !strcmp(argv[1], "--rounds") ? atoi(argv[2]) : 0;
  const workload loads[] = {
      {"MLP step, batch 64", "examples/fmnist_mlp.yaml", 50, rounds ? rounds : 40, 25, 0},
      {"CNN fwd+bwd, batch 64", "examples/fmnist_cnn.yaml", 3, rounds ? rounds : 15, 1,
       1},
  };
  printf("one thread; medians; the sgemm (1024^3) alternates with the steps in the same "
         "run\n");
  int rc = 0;
  for (size_t i = 0; i < sizeof loads / sizeof *loads; i++) rc |= run(&loads[i]);
  return rc;
}
