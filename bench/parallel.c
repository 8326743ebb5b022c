/* Data-parallel benchmark, CPU replicas on this machine's cores:
 *   - MLP images/s with 1 and with 2 replicas (per-device batch 64), the
 *     trainers alternating rounds in the same run; the ratio is the
 *     scaling (issue goal: >= 1.8 on 2 cores); also with replicas that
 *     never take parts of each other's last backward op (no_share);
 *   - CNN step time with 2 replicas, net_type simple vs dag, alternating.
 * Medians over rounds of the mean step wall time (reader hand-off, forward,
 * backward, reduction, update).
 *
 *   build/bench/parallel [--rounds N]      (OPENBLAS_NUM_THREADS=1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "spec/spec.h"
#include "train/trainer.h"

typedef struct {
  const char *label;
  int devices, net_type, no_share;
  dpm_trainer *t;
  double *ms;
  int n;
} config;

static int setup(config *c, const Dpm__ModelSpec *spec, int steps) {
  dpm_trainer_options opt = {
      .devices = c->devices, .net_type = c->net_type, .no_share = c->no_share};
  dpm_err err = {0};
  if (dpm_trainer_create(spec, &opt, &c->t, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    return 1;
  }
  c->ms = malloc((size_t)steps * sizeof *c->ms);
  return 0;
}

/* Rounds alternate between the configurations; each runs `per` steps in one
 * dpm_trainer_step call (as dpm-train and dpmd do), timed as a whole: the
 * per-call work (a sharded update gathering its optimizer state) is in it. */
static int run(config *cs, int n_cfg, int rounds, int per, int warmup) {
  dpm_err err = {0};
  dpm_step_stats st;
  for (int c = 0; c < n_cfg; c++)
    if (dpm_trainer_step(cs[c].t, warmup, &st, &err)) goto fail;
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < n_cfg; c++) {
      double t0 = bench_now_ms();
      if (dpm_trainer_step(cs[c].t, per, &st, &err)) goto fail;
      cs[c].ms[cs[c].n++] = (bench_now_ms() - t0) / per;
    }
  return 0;
fail:
  fprintf(stderr, "bench: %s\n", err.msg);
  return 1;
}

static void report(config *c, int batch) {
  double med = bench_median(c->ms, c->n);
  printf("  %-26s %8.3f ms/step %9.0f images/s\n", c->label, med,
         batch * c->devices / (med / 1e3));
}

static void done(config *cs, int n) {
  for (int c = 0; c < n; c++) {
    dpm_trainer_destroy(cs[c].t);
    free(cs[c].ms);
  }
}

static int workload(const char *path, config *cs, int n_cfg, int rounds, int per,
                    int warmup) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  int rc = dpm_spec_load(path, &spec, &err);
  if (rc) fprintf(stderr, "bench: %s\n", err.msg);
  for (int c = 0; c < n_cfg && !rc; c++) rc = setup(&cs[c], spec, rounds * per);
  if (!rc) rc = run(cs, n_cfg, rounds, per, warmup);
  if (!rc)
    for (int c = 0; c < n_cfg; c++) report(&cs[c], (int)spec->input->batch_size);
  dpm_spec_free(spec);
  return rc;
}

int main(int argc, char **argv) {
  int rounds = argc > 2 && !strcmp(argv[1], "--rounds") ? atoi(argv[2]) : 20;
  config mlp[] = {
      {.label = "MLP, 1 replica", .devices = 1, .net_type = DPM_NET_SIMPLE},
      {.label = "MLP, 2 replicas (simple)", .devices = 2, .net_type = DPM_NET_SIMPLE},
      {.label = "MLP, 2 replicas (dag)", .devices = 2, .net_type = DPM_NET_DAG},
      {.label = "MLP, 2 replicas (no share)",
       .devices = 2,
       .net_type = DPM_NET_SIMPLE,
       .no_share = 1}};
  config cnn[] = {
      {.label = "CNN, 2 replicas, simple", .devices = 2, .net_type = DPM_NET_SIMPLE},
      {.label = "CNN, 2 replicas, dag", .devices = 2, .net_type = DPM_NET_DAG}};
  printf("MLP (examples/fmnist_mlp.yaml), batch 64 per device\n");
  int n_mlp = sizeof mlp / sizeof *mlp;
  int rc = workload("examples/fmnist_mlp.yaml", mlp, n_mlp, rounds, 50, 50);
  if (!rc) {
    double one = 64 / bench_median(mlp[0].ms, mlp[0].n);
    for (int c = 1; c < n_mlp; c++)
      printf("  scaling %-22s %.2fx\n", mlp[c].label + 5,
             128 / bench_median(mlp[c].ms, mlp[c].n) / one);
  }
  done(mlp, n_mlp);
  printf("CNN (examples/fmnist_cnn.yaml), batch 64 per device\n");
  if (!rc) rc = workload("examples/fmnist_cnn.yaml", cnn, 2, rounds / 2 + 1, 2, 2);
  done(cnn, 2);
  return rc;
}
