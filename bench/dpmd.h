/* A dpmd of a benchmark's own: build/dpmd on a temporary state dir and ipc
 * endpoint with 2 CPU devices, a client connected to it, and calls that
 * end the benchmark on any failure. Header-only (each benchmark is one
 * program); single-threaded use. Run from the repository root. */
#ifndef DPM_BENCH_DPMD_H
#define DPM_BENCH_DPMD_H

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

#include "common/spec.h"
#include "dpm/client.h"

extern char **environ;

typedef struct bench_dpmd {
  char dir[32];  /* the temporary directory, removed by bench_dpmd_stop */
  char ep[96];   /* its ipc endpoint */
  pid_t pid;
  dpm_client *c; /* connected, the daemon answering */
} bench_dpmd;

/* rq's answer; prints the failure or refusal and exits 1 on either. */
static inline Dpm__Response *bench_call(dpm_client *c, Dpm__Request *rq) {
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

/* The spec at path; prints why and exits 1 when it cannot be loaded. */
static inline Dpm__ModelSpec *bench_spec(const char *path) {
  Dpm__ModelSpec *spec;
  dpm_err err = {0};
  if (dpm_spec_load(path, &spec, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    exit(1);
  }
  return spec;
}

/* Starts the daemon and waits until it answers a ping; exits 1 on failure. */
static inline void bench_dpmd_start(bench_dpmd *d) {
  snprintf(d->dir, sizeof d->dir, "/tmp/dpm-bench.XXXXXX");
  if (!mkdtemp(d->dir)) {
    perror("mkdtemp");
    exit(1);
  }
  char state[64];
  snprintf(d->ep, sizeof d->ep, "ipc://%s/d.sock", d->dir);
  snprintf(state, sizeof state, "%s/state", d->dir);
  char *args[] = {"build/dpmd", "--listen",  d->ep,     "--state-dir", state,
                  "--devices",  "2",         "--log-level", "warning", NULL};
  if (posix_spawn(&d->pid, args[0], NULL, NULL, args, environ)) {
    perror("spawn build/dpmd");
    exit(1);
  }
  dpm_err err = {0};
  if (dpm_client_open(d->ep, 20000, &d->c, &err)) {
    fprintf(stderr, "bench: %s\n", err.msg);
    exit(1);
  }
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request ping = DPM__REQUEST__INIT;
  ping.command_case = DPM__REQUEST__COMMAND_PING;
  ping.ping = &e;
  for (int tries = 0;; tries++) { /* its ipc socket appears once it listens */
    Dpm__Response *rs = NULL;
    if (!dpm_client_call(d->c, &ping, &rs, &err)) {
      dpm_client_free_response(rs);
      return;
    }
    if (tries == 400) {
      fprintf(stderr, "bench: dpmd does not answer: %s\n", err.msg);
      exit(1);
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL);
  }
}

/* Shuts the daemon down, waits for it and removes its directory; its exit
 * status (-1: killed). */
static inline int bench_dpmd_stop(bench_dpmd *d) {
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request shutdown = DPM__REQUEST__INIT;
  shutdown.command_case = DPM__REQUEST__COMMAND_SHUTDOWN;
  shutdown.shutdown = &e;
  dpm_client_free_response(bench_call(d->c, &shutdown));
  int st;
  waitpid(d->pid, &st, 0);
  dpm_client_close(d->c);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
  if (system(cmd)) fprintf(stderr, "bench: cannot remove %s\n", d->dir);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
