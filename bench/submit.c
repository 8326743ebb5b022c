/* Warm start benchmark: how long from a submit to the end of the model's
 * first training step, measured by a client linked to the client library
 * (no process start in the figure), against a dpmd whose devices are warm.
 *
 * It starts build/dpmd (temporary state dir and endpoint, 2 CPU devices),
 * then, for the cold model and each of the warm ones: submit SPEC on
 * cpu:0,cpu:1 (answered once the model is built), train --iters 1 --wait
 * (answered once the step is done), status (the daemon's phases of that
 * model), delete. The first model reads the data files from disk; the
 * others find them in the data cache. Prints the cold figure and the
 * median, min and max of the warm ones, and each phase the same way.
 *
 *   build/bench/submit [SPEC] [WARM]   (default examples/fmnist_mlp.yaml, 10)
 * Run with OPENBLAS_NUM_THREADS=1 from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "common/spec.h"
#include "dpmd.h"

#define MAX_RUNS 64
#define MAX_PHASES 16

typedef struct run {
  double submit_ms, train_ms;
  int n_phases;
  char names[MAX_PHASES][24];
  double phase_ms[MAX_PHASES];
} run;

/* One model: submit, one step, its phases, delete. */
static void one(dpm_client *c, Dpm__ModelSpec *spec, int i, run *r) {
  char name[32];
  snprintf(name, sizeof name, "warm%d", i);
  char *devices[] = {"cpu:0", "cpu:1"};
  Dpm__SubmitRequest sr = DPM__SUBMIT_REQUEST__INIT;
  sr.spec = spec;
  sr.name = name;
  sr.devices = devices;
  sr.n_devices = 2;
  Dpm__Request submit = DPM__REQUEST__INIT;
  submit.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  submit.submit = &sr;
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = name;
  tr.iters = 1;
  tr.has_wait = tr.wait = 1;
  Dpm__Request train = DPM__REQUEST__INIT;
  train.command_case = DPM__REQUEST__COMMAND_TRAIN;
  train.train = &tr;

  double t0 = bench_now_ms();
  dpm_client_free_response(bench_call(c, &submit));
  double t1 = bench_now_ms();
  dpm_client_free_response(bench_call(c, &train));
  double t2 = bench_now_ms();
  r->submit_ms = t1 - t0;
  r->train_ms = t2 - t1;

  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = name;
  Dpm__Request status = DPM__REQUEST__INIT;
  status.command_case = DPM__REQUEST__COMMAND_STATUS;
  status.status = &nr;
  Dpm__Response *rs = bench_call(c, &status);
  r->n_phases = 0;
  for (size_t k = 0; k < rs->model->n_phases && k < MAX_PHASES; k++, r->n_phases++) {
    snprintf(r->names[k], sizeof r->names[k], "%s", rs->model->phases[k]->name);
    r->phase_ms[k] = rs->model->phases[k]->ms;
  }
  dpm_client_free_response(rs);
  Dpm__Request del = DPM__REQUEST__INIT;
  del.command_case = DPM__REQUEST__COMMAND_DELETE;
  del.delete_ = &nr;
  dpm_client_free_response(bench_call(c, &del));
}

/* "cold   median   min   max" of the warm runs' values v(r). */
static void row(const char *what, const run *runs, int n, double (*v)(const run *, int),
                int k) {
  double w[MAX_RUNS];
  for (int i = 1; i < n; i++) w[i - 1] = v(&runs[i], k);
  double med = bench_median(w, n - 1); /* sorts w */
  printf("  %-22s %9.2f %9.2f %9.2f %9.2f\n", what, v(&runs[0], k), med, w[0], w[n - 2]);
}

static double total(const run *r, int k) { (void)k; return r->submit_ms + r->train_ms; }
static double submit_rt(const run *r, int k) { (void)k; return r->submit_ms; }
static double train_rt(const run *r, int k) { (void)k; return r->train_ms; }
static double phase(const run *r, int k) { return k < r->n_phases ? r->phase_ms[k] : 0; }

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/fmnist_mlp.yaml";
  int warm = argc > 2 ? atoi(argv[2]) : 10;
  if (warm < 1 || warm >= MAX_RUNS) {
    fprintf(stderr, "bench: WARM must be 1..%d\n", MAX_RUNS - 1);
    return 2;
  }
  Dpm__ModelSpec *spec = bench_spec(path);
  bench_dpmd d;
  bench_dpmd_start(&d);
  run runs[MAX_RUNS];
  for (int i = 0; i <= warm; i++) one(d.c, spec, i, &runs[i]);
  int st = bench_dpmd_stop(&d);
  dpm_spec_free(spec);

  printf("submit -> first step done (%s, cpu:0,cpu:1; ms; warm: %d models)\n", path, warm);
  printf("  %-22s %9s %9s %9s %9s\n", "", "cold", "warm med", "warm min", "warm max");
  row("total (client)", runs, warm + 1, total, 0);
  row("  submit round trip", runs, warm + 1, submit_rt, 0);
  row("  train round trip", runs, warm + 1, train_rt, 0);
  printf("phases (dpmd, status --json phases_ms)\n");
  for (int k = 0; k < runs[0].n_phases; k++) row(runs[0].names[k], runs, warm + 1, phase, k);
  printf("dpmd exit status %d\n", st);
  return st != 0;
}
