/* Test runner: runs every registered test (or those whose name contains an
 * argument) and prints "N passed, N failed". A test whose checks recorded
 * tolerances (dpm_test_margin) also gets its largest measured / tolerance
 * and where; the run closes with its three largest. */
#include <cblas.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "test.h"

#define MAX_TESTS 1024
typedef struct {
  const char *name, *file;
  dpm_test_fn fn;
} test_entry;
static test_entry tests[MAX_TESTS];
static int n_tests, failed_now;

/* A tolerance use: measured / tol at file:line, in test `name`. */
typedef struct {
  double used;
  const char *name, *file;
  int line;
} margin;
#define TIGHTEST 3
static margin test_worst, run_worst[TIGHTEST]; /* run_worst: largest first */
static const char *test_now;

void dpm_test_margin(const char *file, int line, double measured, double tol) {
  if (!(tol > 0)) return;
  margin m = {measured / tol, test_now, file, line};
  if (!test_worst.file || !(m.used <= test_worst.used)) test_worst = m; /* NaN: worst */
}

/* Enters the test's worst use into the run's TIGHTEST. */
static void rank_test_worst(void) {
  for (int i = 0; i < TIGHTEST; i++)
    if (!run_worst[i].file || !(test_worst.used <= run_worst[i].used)) {
      memmove(&run_worst[i + 1], &run_worst[i], (TIGHTEST - 1 - i) * sizeof *run_worst);
      run_worst[i] = test_worst;
      return;
    }
}

void dpm_test_register(const char *name, const char *file, dpm_test_fn fn) {
  if (n_tests < MAX_TESTS) tests[n_tests++] = (test_entry){name, file, fn};
}

void dpm_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "    %s:%d: ", file, line);
  vfprintf(stdout, fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  failed_now = 1;
}

int dpm_test_has_failed(void) { return failed_now; }

static int selected(const char *name, int argc, char **argv) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strstr(name, argv[i])) return 1;
  return 0;
}

int main(int argc, char **argv) {
  /* BLAS single-threaded from each device worker, as in dpmd and dpm-train:
   * the environment is read when OpenBLAS loads, before main */
  openblas_set_num_threads(1);
  int passed = 0, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < n_tests; i++) {
    if (!selected(tests[i].name, argc, argv)) continue;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    failed_now = 0;
    test_now = tests[i].name;
    test_worst = (margin){0};
    tests[i].fn();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    char used[300] = "";
    if (test_worst.file) {
      snprintf(used, sizeof used, "; tolerance used %.2g at %s:%d", test_worst.used,
               test_worst.file, test_worst.line);
      rank_test_worst();
    }
    printf("%s %s (%.0f ms%s)\n", failed_now ? "FAIL" : "ok  ", tests[i].name, ms, used);
    failed_now ? failed++ : passed++;
  }
  for (int i = 0; i < TIGHTEST && run_worst[i].file; i++)
    printf("tightest %d: %s used %.2g of its tolerance at %s:%d\n", i + 1,
           run_worst[i].name, run_worst[i].used, run_worst[i].file, run_worst[i].line);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
