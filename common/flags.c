/* Command-line flags from a table (common/flags.h). */
#include "common/flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/manpage.h"

static const dpm_flag *find(const dpm_flag *flags, size_t n, const char *a, size_t len) {
  for (size_t f = 0; f < n; f++)
    if (strlen(flags[f].flag) == len && !strncmp(a, flags[f].flag, len)) return &flags[f];
  return NULL;
}

int dpm_flags_parse(int argc, char **argv, const dpm_flag *flags, size_t n, void *opts,
                    const char **positional, char *msg, size_t cap) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return DPM_FLAGS_HELP;
    if (!strcmp(argv[i], "--version")) return DPM_FLAGS_VERSION;
    if (!strcmp(argv[i], "--man")) return DPM_FLAGS_MAN;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
    const dpm_flag *f = find(flags, n, a, eq ? (size_t)(eq - a) : strlen(a));
    if (!f) {
      if (a[0] != '-' && positional && !*positional) {
        *positional = a;
        continue;
      }
      snprintf(msg, cap, "unexpected argument '%.200s'", a);
      return DPM_FLAGS_USAGE;
    }
    char *field = (char *)opts + f->offset;
    if (f->type == 'b') {
      if (eq) {
        snprintf(msg, cap, "%s takes no value", f->flag);
        return DPM_FLAGS_USAGE;
      }
      *(int *)field = 1;
      continue;
    }
    const char *v = eq ? eq + 1 : ++i < argc ? argv[i] : NULL;
    if (!v) {
      snprintf(msg, cap, "%s needs a value", f->flag);
      return DPM_FLAGS_USAGE;
    }
    if (f->type == 's') {
      *(const char **)field = v;
      continue;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno || x < 1) {
      snprintf(msg, cap, "%s takes a positive whole number, got '%.100s'", f->flag, v);
      return DPM_FLAGS_USAGE;
    }
    *(long *)field = x;
  }
  return DPM_FLAGS_OK;
}

void dpm_flags_usage(FILE *f, const dpm_flag *flags, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "  %-20s %s\n", flags[i].flag, flags[i].help);
}

void dpm_flags_man(FILE *f, const dpm_flag *flags, size_t n) {
  for (size_t i = 0; i < n; i++) dpm_man_option(f, flags[i].flag, NULL, flags[i].help);
  dpm_man_option(f, "--help", NULL, "print the options and exit");
  dpm_man_option(f, "--version", NULL, "print the version and exit");
  dpm_man_option(f, "--man", NULL, "print this manual page (roff) and exit");
}
