/* Replays fuzz inputs without libFuzzer: `replay-TARGET [-v] PATH...` runs
 * the target's LLVMFuzzerTestOneInput once on every file of the directories
 * (recursively; names starting with '.' skipped) and files given, in sorted
 * order, and prints how many ran. -v names each input on stderr before it
 * runs (whatever kills the program, the last name is the culprit); other
 * arguments starting with '-' (libFuzzer flags) are ignored. Built with gcc and
 * ASan+UBSan, so `make test` replays the corpora and the regression inputs on any
 * machine.
 *
 * A crash names the input it was running (sanitizer death callback); with
 * LeakSanitizer a leak is checked after every input and the first input
 * that leaked is named in the last line. Each input has FUZZ_REPLAY_TIMEOUT
 * seconds (default 60). Exit status: 0 when every input ran clean, 1 when
 * one leaked, 2 for a bad argument, 3 for a timeout; a crash aborts. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static const char *current; /* the input being run, for crash reports */

static void name_current(void) {
  if (current) fprintf(stderr, "replay: crashed on input %s\n", current);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "replay: input ran past FUZZ_REPLAY_TIMEOUT: ";
  if (write(2, msg, sizeof msg - 1) < 0 || !current ||
      write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0) {
  }
  _exit(3);
}

typedef struct paths {
  char **v;
  size_t n, cap;
} paths;

static int push(paths *p, const char *s) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    char **v = realloc(p->v, cap * sizeof *v);
    if (!v) return -1;
    p->v = v;
    p->cap = cap;
  }
  return (p->v[p->n++] = strdup(s)) ? 0 : -1;
}

/* Every regular file under path (path itself when it is one). */
static int collect(paths *p, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (S_ISREG(st.st_mode)) return push(p, path);
  if (!S_ISDIR(st.st_mode)) return 0;
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    size_t n = strlen(path) + strlen(e->d_name) + 2;
    char *sub = malloc(n);
    if (!sub)
      rc = -1;
    else {
      snprintf(sub, n, "%s/%s", path, e->d_name);
      rc = collect(p, sub);
      free(sub);
    }
  }
  closedir(d);
  return rc;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *b = realloc(buf, cap *= 2);
      if (!b) free(buf);
      buf = b;
    }
  }
  if (buf && ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (!buf) return NULL;
  /* An exact-size copy, so that a read past the input's end is caught. */
  uint8_t *exact = malloc(n ? n : 1);
  if (exact) memcpy(exact, buf, n);
  free(buf);
  *len = n;
  return exact;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  paths p = {0};
  int verbose = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-v"))
      verbose = 1;
    else if (argv[i][0] != '-' && collect(&p, argv[i]) != 0)
      return 2;
  if (p.n) qsort(p.v, p.n, sizeof *p.v, cmp);
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_set_death_callback(name_current);
#endif
  signal(SIGALRM, on_alarm);
  const char *t = getenv("FUZZ_REPLAY_TIMEOUT");
  unsigned timeout = t && atoi(t) > 0 ? (unsigned)atoi(t) : 60;
  const char *leaked = NULL; /* the first input that leaked */
  size_t ran = 0;
  for (size_t i = 0; i < p.n; i++) {
    size_t len = 0;
    uint8_t *data = read_all(p.v[i], &len);
    if (!data) {
      fprintf(stderr, "replay: %s: cannot read\n", p.v[i]);
      return 2;
    }
    current = p.v[i];
    if (verbose) fprintf(stderr, "replay: running %s\n", current);
    alarm(timeout);
    LLVMFuzzerTestOneInput(data, len);
    alarm(0);
    free(data);
#ifdef __SANITIZE_ADDRESS__
    /* A leak stays reported by later checks: check until the first one. */
    if (!leaked && __lsan_do_recoverable_leak_check()) leaked = current;
#endif
    current = NULL;
    ran++;
  }
  if (leaked) {
    /* Named last, after LeakSanitizer's report; the exit skips its second
     * report of the same leak at exit. */
    printf("replay: %zu inputs ran; leak on input %s\n", ran, leaked);
    fflush(stdout);
    _exit(1);
  }
  printf("replay: %zu inputs ran\n", ran);
  for (size_t i = 0; i < p.n; i++) free(p.v[i]);
  free(p.v);
  return 0;
}
