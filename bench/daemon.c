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
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dpm/client.h"
#include "common/spec.h"
#include "train/trainer.h"

extern char **environ;

static Dpm__Response *call(dpm_client *c, Dpm__Request *rq) {
  Dpm__Response *rs = NULL;
  dpm_err err = {0};
  if (dpm_client_call(c, rq, &rs, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    exit(1);
  }
  if (rs->status) {
    fprintf(stderr, "bench: %s: %s\n", dpm_status_name(dpm_status_from_wire(rs->status)),
            rs->message);
    exit(1);
  }
  return rs;
}

/* n round trips of rq: median and p99 in microseconds. */
static void latency(dpm_client *c, Dpm__Request *rq, int n, double *med, double *p99) {
  double *v = malloc((size_t)n * sizeof *v);
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_ms();
    dpm_client_free_response(call(c, rq));
    v[i] = (bench_now_ms() - t0) * 1e3;
  }
  *med = bench_median(v, n);
  *p99 = v[n * 99 / 100];
  free(v);
}

static uint64_t iter_of(dpm_client *c, Dpm__Request *status) {
  Dpm__Response *rs = call(c, status);
  uint64_t it = rs->model->iter;
  dpm_client_free_response(rs);
  return it;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/fmnist_mlp.yaml";
  char dir[] = "/tmp/dpm-bench.XXXXXX", ep[256], state[256];
  if (!mkdtemp(dir)) return 1;
  snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
  snprintf(state, sizeof state, "%s/state", dir);
  char *args[] = {"build/dpmd", "--listen", ep, "--state-dir", state, "--devices", "2",
                  "--log-level", "warning", NULL};
  pid_t pid;
  if (posix_spawn(&pid, args[0], NULL, NULL, args, environ)) {
    perror("spawn build/dpmd");
    return 1;
  }
  dpm_client *c;
  dpm_err err = {0};
  Dpm__ModelSpec *spec;
  if (dpm_client_open(ep, 20000, &c, &err) || dpm_spec_load(path, &spec, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    return 1;
  }
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request ping = DPM__REQUEST__INIT, status = DPM__REQUEST__INIT;
  ping.command_case = DPM__REQUEST__COMMAND_PING;
  ping.ping = &e;
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = "bench";
  status.command_case = DPM__REQUEST__COMMAND_STATUS;
  status.status = &nr;
  for (int tries = 0;; tries++) { /* its ipc socket appears once it listens */
    Dpm__Response *rs = NULL;
    if (!dpm_client_call(c, &ping, &rs, &err)) {
      dpm_client_free_response(rs);
      break;
    }
    if (tries == 400) {
      fprintf(stderr, "bench: dpmd does not answer: %s\n", err.msg);
      return 1;
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL);
  }

  Dpm__SubmitRequest sr = DPM__SUBMIT_REQUEST__INIT;
  char *devices[] = {"cpu:0", "cpu:1"};
  sr.spec = spec;
  sr.name = "bench";
  sr.devices = devices;
  sr.n_devices = 2;
  Dpm__Request submit = DPM__REQUEST__INIT;
  submit.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  submit.submit = &sr;
  dpm_client_free_response(call(c, &submit));

  double ping_med, ping_p99, idle_med, idle_p99, busy_med, busy_p99;
  latency(c, &ping, 2000, &ping_med, &ping_p99);
  latency(c, &status, 2000, &idle_med, &idle_p99);

  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = "bench";
  tr.iters = 1000000;
  Dpm__Request train = DPM__REQUEST__INIT;
  train.command_case = DPM__REQUEST__COMMAND_TRAIN;
  train.train = &tr;
  dpm_client_free_response(call(c, &train));
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

  Dpm__Request shutdown = DPM__REQUEST__INIT;
  shutdown.command_case = DPM__REQUEST__COMMAND_SHUTDOWN;
  shutdown.shutdown = &e;
  dpm_client_free_response(call(c, &shutdown));
  int st;
  waitpid(pid, &st, 0);
  dpm_client_close(c);

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
  printf("dpmd exit status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) ? 1 : 0;
}
