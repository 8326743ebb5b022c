/* Test runner: runs every registered test (or those whose name contains an
 * argument) and prints "N passed, N failed". */
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
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  int passed = 0, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < n_tests; i++) {
    if (!selected(tests[i].name, argc, argv)) continue;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    failed_now = 0;
    tests[i].fn();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    printf("%s %s (%.0f ms)\n", failed_now ? "FAIL" : "ok  ", tests[i].name, ms);
    failed_now ? failed++ : passed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
