/* Daemon benchmark: starts build/dpmd (temporary state dir and endpoint),
 * then measures, side by side in one run:
 *   - ping and status round trips with the daemon idle (median, p99);
 *   - status round trips while a model trains on two CPU replicas (the
 *     loop thread must answer at once; median, p99);
 *   - training throughput through the daemon (images/s over a timed
 *     window, from the iteration counter) against the in-process trainer
 *     (dpm_trainer_step) on the same spec and devices.
 *
 *   build/bench/daemon [SPEC]     (default examples/fmnist_mlp.yaml)
 * Run with OPENBLAS_NUM_THREADS=1 from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "common/spec.h"
#include "dpmd.h"
#include "train/trainer.h"

/* n round trips of rq: median and p99 in microseconds. */
static void latency(dpm_client *c, Dpm__Request *rq, int n, double *med, double *p99) {
  double *v = malloc((size_t)n * sizeof *v);
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_ms();
    dpm_client_free_response(bench_call(c, rq));
    v[i] = (bench_now_ms() - t0) * 1e3;
  }
  *med = bench_median(v, n);
  *p99 = v[n * 99 / 100];
  free(v);
}

static uint64_t iter_of(dpm_client *c, Dpm__Request *status) {
  Dpm__Response *rs = bench_call(c, status);
  uint64_t it = rs->model->iter;
  dpm_client_free_response(rs);
  return it;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/fmnist_mlp.yaml";
  Dpm__ModelSpec *spec = bench_spec(path);
  dpm_err err = {0};
  bench_dpmd d;
  bench_dpmd_start(&d);
  dpm_client *c = d.c;
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request ping = DPM__REQUEST__INIT, status = DPM__REQUEST__INIT;
  ping.command_case = DPM__REQUEST__COMMAND_PING;
  ping.ping = &e;
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = "bench";
  status.command_case = DPM__REQUEST__COMMAND_STATUS;
  status.status = &nr;

  Dpm__SubmitRequest sr = DPM__SUBMIT_REQUEST__INIT;
  char *devices[] = {"cpu:0", "cpu:1"};
  sr.spec = spec;
  sr.name = "bench";
  sr.devices = devices;
  sr.n_devices = 2;
  Dpm__Request submit = DPM__REQUEST__INIT;
  submit.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  submit.submit = &sr;
  dpm_client_free_response(bench_call(c, &submit));

  double ping_med, ping_p99, idle_med, idle_p99, busy_med, busy_p99;
  latency(c, &ping, 2000, &ping_med, &ping_p99);
  latency(c, &status, 2000, &idle_med, &idle_p99);

  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = "bench";
  tr.iters = 1000000;
  Dpm__Request train = DPM__REQUEST__INIT;
  train.command_case = DPM__REQUEST__COMMAND_TRAIN;
  train.train = &tr;
  dpm_client_free_response(bench_call(c, &train));
  usleep(500000); /* past the first steps */
  latency(c, &status, 2000, &busy_med, &busy_p99);
  /* throughput over a window of its own: the 2000 requests above take CPU
   * from the replicas, as any client would, but are not part of training */
  uint64_t i0 = iter_of(c, &status);
  double t0 = bench_now_ms();
  usleep(3000000);
  uint64_t i1 = iter_of(c, &status);
  int batch = (int)spec->input->batch_size * 2;
  double daemon_ips = (double)(i1 - i0) * batch / ((bench_now_ms() - t0) / 1e3);

  int st = bench_dpmd_stop(&d);

  /* the same model in process, for comparison */
  dpm_trainer *t;
  dpm_trainer_options opt = {.devices = 2, .net_type = -1};
  dpm_step_stats last;
  if (dpm_trainer_create(spec, &opt, &t, &err) || dpm_trainer_step(t, 100, &last, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    return 1;
  }
  double t1 = bench_now_ms();
  dpm_trainer_step(t, (int)(i1 - i0), &last, &err);
  double inproc_ips = (double)(i1 - i0) * batch / ((bench_now_ms() - t1) / 1e3);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);

  printf("daemon RPC (ipc, %s)\n", path);
  printf("  ping, idle            median %7.1f us   p99 %7.1f us\n", ping_med, ping_p99);
  printf("  status, idle          median %7.1f us   p99 %7.1f us\n", idle_med, idle_p99);
  printf("  status, training      median %7.1f us   p99 %7.1f us\n", busy_med, busy_p99);
  printf("training, 2 cpu replicas, global batch %d\n", batch);
  printf("  through dpmd          %8.0f images/s\n", daemon_ips);
  printf("  in process            %8.0f images/s   (daemon/in-process %.2f)\n", inproc_ips,
         daemon_ips / inproc_ips);
  printf("dpmd exit status %d\n", st);
  return st != 0;
}
