/* The driver of the two-process benchmarks (bench/gloo.c, bench/gloo_wire.c):
 * parses [--rounds N], makes a scratch folder for their file store, forks
 * process 1 (killed if this one dies), runs process 0 here, waits, removes
 * the folder. run(proc, dir, rounds) is each process's part; it returns
 * nonzero on failure. Exit status: 0 when both parts succeeded, 1 when one
 * failed, 2 on a usage error. */
#ifndef DPM_BENCH_TWO_PROCS_H
#define DPM_BENCH_TWO_PROCS_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int bench_two_procs(const char *name, int argc, char **argv, int rounds,
                                  int (*run)(int proc, const char *dir, int rounds)) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
      rounds = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  char dir[] = "/tmp/dpm-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "%s bench: mkdtemp: %s\n", name, strerror(errno));
    return 1;
  }
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "%s bench: fork: %s\n", name, strerror(errno));
    return 1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    _exit(run(1, dir, rounds));
  }
  int rc = run(0, dir, rounds), status = 0;
  waitpid(child, &status, 0);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "%s bench: could not remove %s\n", name, dir);
  return rc || !WIFEXITED(status) || WEXITSTATUS(status);
}

#endif
