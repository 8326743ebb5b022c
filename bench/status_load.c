/* Status under load: the hardening goal "32 concurrent clients polling
 * `status` for 20 s while two models train: no errors", measured.
 *
 * Starts build/dpmd (temporary state dir, ipc endpoint, --devices 2), waits
 * for it to answer ping, submits examples/fmnist_mlp.yaml as "mlp" and
 * examples/fmnist_cnn.yaml as "cnn", both on cpu:0,cpu:1, and starts both
 * training (without waiting). Once both are training, N client threads, each
 * with its own dpm_client, ask `status` for mlp and cnn alternately, back to
 * back, for S seconds. Every round trip is timed (CLOCK_MONOTONIC); errors
 * are transport failures, refusals (a non-OK status) and answers without the
 * model asked for. Then both models must still be training and have
 * advanced, and dpmd must stop on a shutdown request and exit 0.
 *
 * Prints one line: requests, requests/s, errors, round-trip p50, p90, p99,
 * p99.9 and max in ms, and the steps each model made during the window
 * (training under the load; status moves the iteration on every
 * progress_every steps, 10 by default, so they come in tens, and a window of
 * a few seconds can see none of the CNN's). The first error of each client
 * goes to stderr.
 * Exit status 0 when all is well, 1 otherwise, 2 on bad usage.
 *
 *   build/bench/status_load [--clients N] [--seconds S]    (default 32, 20)
 * Run from the repository root with OPENBLAS_NUM_THREADS=1 (set for dpmd
 * when unset). */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dpm/client.h"
#include "common/spec.h"

extern char **environ;

#define N_MODELS 2
#define CALL_TIMEOUT_MS 10000  /* one status round trip, or submit and train */
#define START_TIMEOUT_MS 30000 /* dpmd answering ping; a model training */
#define STOP_TIMEOUT_MS 120000 /* dpmd exiting after shutdown (checkpoints) */
#define TRAIN_ITERS 100000000u /* far more than any window */

static const char *const spec_paths[N_MODELS] = {"examples/fmnist_mlp.yaml",
                                                 "examples/fmnist_cnn.yaml"};
static const char *const model_names[N_MODELS] = {"mlp", "cnn"};
static char *devices[] = {"cpu:0", "cpu:1"};
static Dpm__Empty empty = DPM__EMPTY__INIT;

/* ---- the load: one thread per client ------------------------------------------- */

/* Where the clients wait until every one is open. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ready, go;
} gate;

typedef struct worker {
  pthread_t thread;
  int index;
  const char *endpoint;
  gate *gate;
  atomic_int *stop;
  double *lat; /* every round trip, ms */
  size_t n, cap;
  long errors;
  char first_error[640];
} worker;

static void worker_error(worker *w, const char *fmt, ...) {
  if (w->errors++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->first_error, sizeof w->first_error, fmt, ap);
    va_end(ap);
  }
}

static int worker_record(worker *w, double ms) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 4096;
    double *grown = realloc(w->lat, cap * sizeof *grown);
    if (!grown) return -1;
    w->lat = grown;
    w->cap = cap;
  }
  w->lat[w->n++] = ms;
  return 0;
}

static void gate_pass(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->ready++;
  pthread_cond_broadcast(&g->cv);
  while (!g->go) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void *worker_run(void *arg) {
  worker *w = arg;
  dpm_client *c = NULL;
  dpm_err err = {0};
  if (dpm_client_open(w->endpoint, CALL_TIMEOUT_MS, &c, &err))
    worker_error(w, "open: %s", err.msg);
  gate_pass(w->gate);
  if (!c) return NULL;

  Dpm__NameRequest nr[N_MODELS];
  Dpm__Request rq[N_MODELS];
  for (int m = 0; m < N_MODELS; m++) {
    dpm__name_request__init(&nr[m]);
    nr[m].name = (char *)model_names[m];
    dpm__request__init(&rq[m]);
    rq[m].command_case = DPM__REQUEST__COMMAND_STATUS;
    rq[m].status = &nr[m];
  }
  for (int k = w->index; !atomic_load_explicit(w->stop, memory_order_relaxed); k++) {
    int m = k % N_MODELS;
    Dpm__Response *rs = NULL;
    double t0 = bench_now_ms();
    dpm_status s = dpm_client_call(c, &rq[m], &rs, &err);
    double ms = bench_now_ms() - t0;
    if (s)
      worker_error(w, "status %s: %s: %s", model_names[m], dpm_status_name(s), err.msg);
    else if (rs->status)
      worker_error(w, "status %s: refused: %s: %s", model_names[m],
                   dpm_status_name((dpm_status)rs->status),
                   rs->message ? rs->message : "");
    else if (rs->result_case != DPM__RESPONSE__RESULT_MODEL ||
             strcmp(rs->model->name, model_names[m]) != 0)
      worker_error(w, "status %s: the answer is not that model's", model_names[m]);
    dpm_client_free_response(rs);
    if (worker_record(w, ms)) {
      worker_error(w, "out of memory for %zu latencies", w->n);
      break;
    }
  }
  dpm_client_close(c);
  return NULL;
}

/* ---- the daemon -------------------------------------------------------------- */

typedef struct daemon_proc {
  pid_t pid;
  int exited, status; /* reaped, and its wait status */
} daemon_proc;

/* Reaps the daemon if it has exited (1), else 0. */
static int daemon_gone(daemon_proc *d) {
  if (d->exited) return 1;
  if (waitpid(d->pid, &d->status, WNOHANG) == d->pid) d->exited = 1;
  return d->exited;
}

static int daemon_wait(daemon_proc *d, double timeout_ms) {
  double until = bench_now_ms() + timeout_ms;
  while (!daemon_gone(d)) {
    if (bench_now_ms() > until) return -1;
    usleep(10000);
  }
  return 0;
}

/* On a failure path: SIGTERM, then SIGKILL if it lingers. */
static void daemon_stop(daemon_proc *d) {
  if (d->pid <= 0 || daemon_gone(d)) return;
  kill(d->pid, SIGTERM);
  if (daemon_wait(d, STOP_TIMEOUT_MS) == 0) return;
  kill(d->pid, SIGKILL);
  daemon_wait(d, STOP_TIMEOUT_MS);
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  if (remove(path)) perror(path);
  return 0;
}

/* ---- calls from the main thread -------------------------------------------------- */

/* A call that must succeed: 0 with *out (NULL: freed), else -1 with a message. */
static int call(dpm_client *c, Dpm__Request *rq, const char *what, Dpm__Response **out) {
  Dpm__Response *rs = NULL;
  dpm_err err = {0};
  if (dpm_client_call(c, rq, &rs, &err)) {
    fprintf(stderr, "status_load: %s: %s\n", what, err.msg);
    return -1;
  }
  if (rs->status) {
    fprintf(stderr, "status_load: %s: %s: %s\n", what,
            dpm_status_name((dpm_status)rs->status), rs->message ? rs->message : "");
    dpm_client_free_response(rs);
    return -1;
  }
  if (out)
    *out = rs;
  else
    dpm_client_free_response(rs);
  return 0;
}

/* Polls ping until dpmd answers (a call to an ipc socket not yet bound fails
 * at once). */
static int wait_ready(dpm_client *c, daemon_proc *d) {
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &empty;
  double until = bench_now_ms() + START_TIMEOUT_MS;
  dpm_err err = {0};
  for (;;) {
    Dpm__Response *rs = NULL;
    dpm_status s = dpm_client_call(c, &rq, &rs, &err);
    int ok = !s && !rs->status;
    dpm_client_free_response(rs);
    if (ok) return 0;
    if (daemon_gone(d)) {
      fprintf(stderr, "status_load: build/dpmd exited at start (wait status %d)\n",
              d->status);
      return -1;
    }
    if (bench_now_ms() > until) {
      fprintf(stderr, "status_load: build/dpmd does not answer ping: %s\n",
              s ? err.msg : "refused");
      return -1;
    }
    usleep(20000);
  }
}

/* The model's state (copied into state) and iteration. */
static int model_state(dpm_client *c, int m, char *state, size_t len, uint64_t *iter) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)model_names[m];
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_STATUS;
  rq.status = &nr;
  Dpm__Response *rs;
  if (call(c, &rq, "status", &rs)) return -1;
  int bad = rs->result_case != DPM__RESPONSE__RESULT_MODEL;
  if (bad) {
    fprintf(stderr, "status_load: status %s: no model in the answer\n", model_names[m]);
  } else {
    snprintf(state, len, "%s", rs->model->state);
    *iter = rs->model->iter;
    if (!strcmp(state, "failed"))
      fprintf(stderr, "status_load: model %s failed: %s\n", model_names[m],
              rs->model->error ? rs->model->error : "");
  }
  dpm_client_free_response(rs);
  return bad ? -1 : 0;
}

/* *field made absolute against the working directory (dpmd runs elsewhere). */
static int absolute(char **field) {
  if (!*field || !**field || (*field)[0] == '/') return 0;
  char *a = realpath(*field, NULL);
  if (!a) {
    perror(*field);
    return -1;
  }
  free(*field);
  *field = a;
  return 0;
}

/* Submits model m and starts it training. */
static int start_model(dpm_client *c, int m) {
  Dpm__ModelSpec *spec;
  dpm_err err = {0};
  if (dpm_spec_load(spec_paths[m], &spec, &err)) {
    fprintf(stderr, "status_load: %s\n", err.msg);
    return -1;
  }
  int rc = -1;
  if (spec->input && (absolute(&spec->input->images) || absolute(&spec->input->labels)))
    goto out;
  if (spec->eval && (absolute(&spec->eval->images) || absolute(&spec->eval->labels)))
    goto out;
  Dpm__SubmitRequest sr = DPM__SUBMIT_REQUEST__INIT;
  sr.spec = spec;
  sr.name = (char *)model_names[m];
  sr.devices = devices;
  sr.n_devices = 2;
  Dpm__Request submit = DPM__REQUEST__INIT;
  submit.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  submit.submit = &sr;
  if (call(c, &submit, "submit", NULL)) goto out;
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = (char *)model_names[m];
  tr.iters = TRAIN_ITERS;
  Dpm__Request train = DPM__REQUEST__INIT;
  train.command_case = DPM__REQUEST__COMMAND_TRAIN;
  train.train = &tr;
  rc = call(c, &train, "train", NULL);
out:
  dpm_spec_free(spec);
  return rc;
}

/* Waits until every model is training. */
static int wait_training(dpm_client *c) {
  double until = bench_now_ms() + START_TIMEOUT_MS;
  for (int m = 0; m < N_MODELS; m++) {
    char state[32];
    uint64_t iter;
    for (;;) {
      if (model_state(c, m, state, sizeof state, &iter)) return -1;
      if (!strcmp(state, "training")) break;
      if (strcmp(state, "building") && strcmp(state, "ready")) {
        fprintf(stderr, "status_load: model %s is %s, not training\n", model_names[m],
                state);
        return -1;
      }
      if (bench_now_ms() > until) {
        fprintf(stderr, "status_load: model %s still %s after %d ms\n", model_names[m],
                state, START_TIMEOUT_MS);
        return -1;
      }
      usleep(20000);
    }
  }
  return 0;
}

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1e3)};
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* ---- main -------------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: build/bench/status_load [--clients N] [--seconds S]\n");
  return 2;
}

int main(int argc, char **argv) {
  long clients = 32;
  double seconds = 20;
  for (int i = 1; i < argc; i++) {
    char *end;
    if (!strcmp(argv[i], "--clients") && i + 1 < argc) {
      clients = strtol(argv[++i], &end, 10);
      if (*end || clients < 1 || clients > 4096) return usage();
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = strtod(argv[++i], &end);
      if (*end || !(seconds > 0 && seconds <= 86400)) return usage();
    } else {
      return usage();
    }
  }
  setenv("OPENBLAS_NUM_THREADS", "1", 0);

  char dir[] = "/tmp/dpm-status-load.XXXXXX", ep[256], state[256];
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
  snprintf(state, sizeof state, "%s/state", dir);
  char *args[] = {"build/dpmd",  "--listen", ep,  "--state-dir", state, "--devices", "2",
                  "--log-level", "warning",  NULL};
  daemon_proc d = {0};
  int rc = 1, spawned = 0;
  dpm_client *c = NULL;
  worker *w = NULL;
  long started = 0;
  atomic_int stop = 0;
  gate g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  double *all = NULL;
  dpm_err err = {0};

  if ((errno = posix_spawn(&d.pid, args[0], NULL, NULL, args, environ))) {
    perror("spawn build/dpmd");
    goto out;
  }
  spawned = 1;
  if (dpm_client_open(ep, CALL_TIMEOUT_MS, &c, &err)) {
    fprintf(stderr, "status_load: %s\n", err.msg);
    goto out;
  }
  if (wait_ready(c, &d)) goto out;
  for (int m = 0; m < N_MODELS; m++)
    if (start_model(c, m)) goto out;
  if (wait_training(c)) goto out;

  /* every client open before the window starts */
  if (!(w = calloc((size_t)clients, sizeof *w))) {
    fprintf(stderr, "status_load: out of memory\n");
    goto out;
  }
  for (; started < clients; started++) {
    w[started] =
        (worker){.index = (int)started, .endpoint = ep, .gate = &g, .stop = &stop};
    if ((errno = pthread_create(&w[started].thread, NULL, worker_run, &w[started]))) {
      perror("pthread_create");
      break;
    }
  }
  if (started < clients) atomic_store(&stop, 1);
  pthread_mutex_lock(&g.mu);
  while (g.ready < started) pthread_cond_wait(&g.cv, &g.mu);
  g.go = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  double t0 = bench_now_ms();

  uint64_t iter0[N_MODELS] = {0}, iter1[N_MODELS] = {0};
  char st[N_MODELS][32];
  int window_ok = started == clients;
  for (int m = 0; window_ok && m < N_MODELS; m++)
    if (model_state(c, m, st[m], sizeof st[m], &iter0[m])) window_ok = 0;
  if (window_ok) sleep_ms(seconds * 1e3 - (bench_now_ms() - t0));
  for (int m = 0; window_ok && m < N_MODELS; m++)
    if (model_state(c, m, st[m], sizeof st[m], &iter1[m])) window_ok = 0;
  atomic_store(&stop, 1);
  for (long i = 0; i < started; i++) pthread_join(w[i].thread, NULL);
  double elapsed_s = (bench_now_ms() - t0) / 1e3;
  size_t total = 0;
  long errors = 0;
  for (long i = 0; i < started; i++) {
    total += w[i].n;
    errors += w[i].errors;
    if (w[i].errors)
      fprintf(stderr, "status_load: client %ld: %ld error(s), first: %s\n", i,
              w[i].errors, w[i].first_error);
  }
  if (!window_ok) goto out;

  int fine = 1;
  for (int m = 0; m < N_MODELS; m++) {
    if (strcmp(st[m], "training")) {
      fprintf(stderr, "status_load: model %s is %s after the window\n", model_names[m],
              st[m]);
      fine = 0;
    } else if (iter1[m] <= iter0[m]) {
      fprintf(stderr, "status_load: model %s made no step during the window\n",
              model_names[m]);
      fine = 0;
    }
  }

  Dpm__Request shutdown = DPM__REQUEST__INIT;
  shutdown.command_case = DPM__REQUEST__COMMAND_SHUTDOWN;
  shutdown.shutdown = &empty;
  if (call(c, &shutdown, "shutdown", NULL)) goto out;
  if (daemon_wait(&d, STOP_TIMEOUT_MS)) {
    fprintf(stderr, "status_load: dpmd still running %d ms after shutdown\n",
            STOP_TIMEOUT_MS);
    goto out;
  }
  int exit_code = WIFEXITED(d.status) ? WEXITSTATUS(d.status) : -1;
  if (exit_code) {
    fprintf(stderr, "status_load: dpmd exit status %d (wait status %d)\n", exit_code,
            d.status);
    fine = 0;
  }

  if (!total || !(all = malloc(total * sizeof *all))) {
    fprintf(stderr, "status_load: %s\n",
            total ? "out of memory" : "no request completed");
    goto out;
  }
  size_t k = 0;
  for (long i = 0; i < clients; i++) {
    memcpy(all + k, w[i].lat, w[i].n * sizeof *all);
    k += w[i].n;
  }
  int n = (int)total;
  double p50 = bench_quantile(all, n, 0.5), p90 = bench_quantile(all, n, 0.9),
         p99 = bench_quantile(all, n, 0.99), p999 = bench_quantile(all, n, 0.999),
         max = all[n - 1];
  printf("status_load: %ld clients, %.1f s: %zu requests, %.0f/s, %ld errors; "
         "latency ms p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.3f; "
         "steps in window %s %llu, %s %llu; dpmd exit %d\n",
         clients, elapsed_s, total, (double)total / elapsed_s, errors, p50, p90, p99,
         p999, max, model_names[0], (unsigned long long)(iter1[0] - iter0[0]),
         model_names[1], (unsigned long long)(iter1[1] - iter0[1]), exit_code);
  rc = fine && errors == 0 ? 0 : 1;

out:
  if (w) {
    for (long i = 0; i < clients; i++) free(w[i].lat);
    free(w);
  }
  free(all);
  dpm_client_close(c);
  if (spawned) daemon_stop(&d);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
