/* Data-parallel benchmark, CPU replicas on this machine's cores:
 *   - MLP images/s with 1 and with 2 replicas (per-device batch 64), the
 *     trainers alternating rounds in the same run; the ratio is the
 *     scaling (issue goal: >= 1.8 on 2 cores), as the ratio of the medians
 *     and as the per-round ratios' median and quartiles; also with replicas that
 *     never take parts of each other's last backward op (no_share), and,
 *     as the ceiling the two cores give, two independent one-replica
 *     trainers (no reduction, no lock-step) pinned to cores 0 and 1,
 *     stepping at the same time; and 2 replicas in parallel.mode bmuf
 *     (Caffe2's Parallelize_BMUF: one all-reduce of the params every 10
 *     steps instead of the gradients' every step);
 *   - CNN step time with 2 replicas, net_type simple vs dag, alternating,
 *     at the spec's 64 images per device (the reduction is a few percent of
 *     the step) and at 8 (the same 13 MB of gradients against an eighth of
 *     the arithmetic: the reduction is a visible share), with the time the
 *     master replica spends in collectives (waiting and summing; what dag
 *     does not hide behind backward).
 * Medians over rounds of the mean step wall time (reader hand-off, forward,
 * backward, reduction, update); collective time: median of the rounds' last
 * steps. BLAS runs one thread per device worker, as in dpmd and dpm-train.
 *
 *   build/bench/parallel [--rounds N] */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "parallel/crew.h"
#include "common/spec.h"
#include "train/trainer.h"

typedef struct {
  const char *label;
  int devices, net_type, no_share;
  int independent;       /* devices one-replica trainers, one per core, unsynchronised */
  int bmuf;              /* parallel.mode bmuf (BMUF's defaults) */
  dpm_trainer *t, *peer; /* independent: the second trainer */
  dpm_crew *crews[2];    /* independent: each trainer's, pinned */
  double *ms, *comm_ms;  /* per round: mean step; the last step's collectives */
  int n;
} config;

static int setup(config *c, Dpm__ModelSpec *spec, int steps) {
  dpm_trainer_options opt = {
      .devices = c->devices, .net_type = c->net_type, .no_share = c->no_share};
  dpm_err err = {0};
  int rc = 0;
  if (c->independent) {
    opt.devices = 1;
    for (int k = 0; k < 2 && !rc; k++) {
      rc = dpm_crew_create_pinned(1, &k, &c->crews[k], &err) != DPM_OK;
      opt.crew = c->crews[k];
      if (!rc) rc = dpm_trainer_create(spec, &opt, k ? &c->peer : &c->t, &err) != DPM_OK;
    }
  } else {
    spec->parallel->mode =
        c->bmuf ? DPM__PARALLEL_MODE__PARALLEL_BMUF : DPM__PARALLEL_MODE__PARALLEL_SYNC;
    rc = dpm_trainer_create(spec, &opt, &c->t, &err) != DPM_OK;
    spec->parallel->mode = DPM__PARALLEL_MODE__PARALLEL_SYNC;
  }
  if (rc) fprintf(stderr, "bench: %s\n", err.msg);
  c->ms = malloc((size_t)steps * sizeof *c->ms);
  c->comm_ms = malloc((size_t)steps * sizeof *c->comm_ms);
  return rc || !c->ms || !c->comm_ms;
}

typedef struct {
  dpm_trainer *t;
  int steps;
  dpm_status s;
} stepper;

static void *step_peer(void *arg) {
  stepper *p = arg;
  dpm_step_stats st;
  dpm_err err;
  p->s = dpm_trainer_step(p->t, p->steps, &st, &err);
  return NULL;
}

/* `steps` steps of c: with an independent peer, both at once. */
static dpm_status step_config(config *c, int steps, dpm_step_stats *st, dpm_err *err) {
  stepper peer = {.t = c->peer, .steps = steps};
  pthread_t th;
  if (c->peer && pthread_create(&th, NULL, step_peer, &peer))
    return dpm_errf(err, DPM_NOMEM, "cannot start a thread");
  dpm_status s = dpm_trainer_step(c->t, steps, st, err);
  if (c->peer) pthread_join(th, NULL);
  return s ? s : peer.s ? dpm_errf(err, peer.s, "the independent peer failed") : DPM_OK;
}

/* Rounds alternate between the configurations; each runs `per` steps in one
 * dpm_trainer_step call (as dpm-train and dpmd do), timed as a whole. The
 * order rotates from round to round: a 2-replica configuration that follows
 * the 1-replica one (core 1 idle for tens of milliseconds) starts slower,
 * by up to 0.15x in the scaling, so no configuration may always be second. */
static int run(config *cs, int n_cfg, int rounds, int per, int warmup) {
  dpm_err err = {0};
  dpm_step_stats st;
  for (int c = 0; c < n_cfg; c++)
    if (step_config(&cs[c], warmup, &st, &err)) goto fail;
  for (int r = 0; r < rounds; r++)
    for (int k = 0, c = r % n_cfg; k < n_cfg; k++, c = (c + 1) % n_cfg) {
      double t0 = bench_now_ms();
      if (step_config(&cs[c], per, &st, &err)) goto fail;
      cs[c].comm_ms[cs[c].n] = st.comm_ms;
      cs[c].ms[cs[c].n++] = (bench_now_ms() - t0) / per;
    }
  return 0;
fail:
  fprintf(stderr, "bench: %s\n", err.msg);
  return 1;
}

static void report(config *c, int batch) {
  double med = bench_median_of(c->ms, c->n);
  printf("  %-26s %8.3f ms/step %9.0f images/s", c->label, med,
         batch * c->devices / (med / 1e3));
  if (c->devices > 1 && !c->independent) {
    double comm = bench_median_of(c->comm_ms, c->n);
    printf("  collectives %.3f ms (%.1f%%)", comm, 100 * comm / med);
  }
  printf("\n");
}

static void done(config *cs, int n) {
  for (int c = 0; c < n; c++) {
    dpm_trainer_destroy(cs[c].t);
    dpm_trainer_destroy(cs[c].peer);
    for (int k = 0; k < 2; k++) dpm_crew_destroy(cs[c].crews[k]);
    free(cs[c].ms);
    free(cs[c].comm_ms);
  }
}

/* batch: images per device; 0: the spec's. */
static int workload(const char *path, int batch, config *cs, int n_cfg, int rounds,
                    int per, int warmup) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  int rc = dpm_spec_load(path, &spec, &err);
  if (rc) fprintf(stderr, "bench: %s\n", err.msg);
  if (!rc && batch) spec->input->batch_size = (uint32_t)batch;
  for (int c = 0; c < n_cfg && !rc; c++) rc = setup(&cs[c], spec, rounds * per);
  if (!rc) rc = run(cs, n_cfg, rounds, per, warmup);
  if (!rc)
    for (int c = 0; c < n_cfg; c++) report(&cs[c], (int)spec->input->batch_size);
  dpm_spec_free(spec);
  return rc;
}

/* Scaling of each 2-replica configuration over cs[0] (1 replica): the
 * ratio of the median step times, and the median and quartiles of the
 * per-round ratios. A round measures every configuration within a fraction
 * of a second, so its ratio pairs measurements taken close together; the
 * quartiles show how far the ratio moves from round to round. */
static void scaling(const config *cs, int n_cfg) {
  double one = bench_median_of(cs[0].ms, cs[0].n);
  double *r = malloc((size_t)cs[0].n * sizeof *r);
  if (!r) return;
  printf("  scaling over 1 replica          medians  per round: median [quartiles]\n");
  for (int c = 1; c < n_cfg; c++) {
    for (int k = 0; k < cs[c].n; k++) r[k] = cs[c].devices * cs[0].ms[k] / cs[c].ms[k];
    printf("  %-28s %7.2fx  %7.2fx [%.2f-%.2f]\n", cs[c].label + 5,
           cs[c].devices * one / bench_median_of(cs[c].ms, cs[c].n),
           bench_quantile(r, cs[c].n, 0.5), bench_quantile(r, cs[c].n, 0.25),
           bench_quantile(r, cs[c].n, 0.75));
  }
  free(r);
}

int main(int argc, char **argv) {
  int rounds = argc > 2 && !strcmp(argv[1], "--rounds") ? atoi(argv[2]) : 20;
  openblas_set_num_threads(1);
  config mlp[] = {
      {.label = "MLP, 1 replica", .devices = 1, .net_type = DPM_NET_SIMPLE},
      {.label = "MLP, 2 replicas (simple)", .devices = 2, .net_type = DPM_NET_SIMPLE},
      {.label = "MLP, 2 replicas (dag)", .devices = 2, .net_type = DPM_NET_DAG},
      {.label = "MLP, 2 replicas (no share)",
       .devices = 2,
       .net_type = DPM_NET_SIMPLE,
       .no_share = 1},
      {.label = "MLP, 2 independent", .devices = 2, .independent = 1},
      {.label = "MLP, 2 replicas (bmuf)", .devices = 2, .net_type = DPM_NET_SIMPLE, .bmuf = 1}};
  printf("MLP (examples/fmnist_mlp.yaml), batch 64 per device\n");
  int n_mlp = sizeof mlp / sizeof *mlp;
  int rc = workload("examples/fmnist_mlp.yaml", 0, mlp, n_mlp, rounds, 50, 50);
  if (!rc) scaling(mlp, n_mlp);
  done(mlp, n_mlp);
  static const struct {
    int batch, rounds, per;
  } cnn_runs[] = {{64, 2, 2}, {8, 4, 10}}; /* rounds: x rounds/4 + 1 */
  for (int k = 0; k < 2 && !rc; k++) {
    config cnn[] = {
        {.label = "CNN, 2 replicas, simple", .devices = 2, .net_type = DPM_NET_SIMPLE},
        {.label = "CNN, 2 replicas, dag", .devices = 2, .net_type = DPM_NET_DAG}};
    printf("CNN (examples/fmnist_cnn.yaml), batch %d per device\n", cnn_runs[k].batch);
    rc = workload("examples/fmnist_cnn.yaml", cnn_runs[k].batch, cnn, 2,
                  cnn_runs[k].rounds * (rounds / 4 + 1), cnn_runs[k].per, 2);
    done(cnn, 2);
  }
  return rc;
}
