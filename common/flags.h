/* The command-line flags of the programs (dpm-train, dpm-pack): one table
 * per program, parsed by one loop, and printed from the same table in the
 * usage text and the man page.
 *
 * A flag is "--name value", "--name=value", or "--name" alone for a bool.
 * Types: 's' a string (a pointer into argv), 'l' a positive whole number
 * (long), 'b' a bool (int set to 1). --help (or -h), --version and --man
 * anywhere win over everything else.
 *
 * Threads: pure; no state. Errors: usage errors come back as
 * DPM_FLAGS_USAGE with the message in msg (quoting at most 200 bytes of the
 * offending argument). */
#ifndef DPM_COMMON_FLAGS_H
#define DPM_COMMON_FLAGS_H

#include <stddef.h>
#include <stdio.h>

typedef struct dpm_flag {
  const char *flag; /* "--epochs" */
  size_t offset;    /* of its field in the program's options struct */
  char type;        /* 's' string, 'l' positive long, 'b' bool */
  const char *help;
} dpm_flag;

enum {
  DPM_FLAGS_OK = 0,
  DPM_FLAGS_HELP,
  DPM_FLAGS_VERSION,
  DPM_FLAGS_MAN,
  DPM_FLAGS_USAGE
};

/* Parses argv[1..argc) into opts by the table. An argument that is no flag
 * and does not start with '-' goes to *positional when positional is given
 * and *positional is still NULL; any other is unexpected. */
int dpm_flags_parse(int argc, char **argv, const dpm_flag *flags, size_t n, void *opts,
                    const char **positional, char *msg, size_t cap);
/* One line per flag, "  --flag  help", for the usage text. */
void dpm_flags_usage(FILE *f, const dpm_flag *flags, size_t n);
/* The man page's options: the table's, then --help, --version and --man. */
void dpm_flags_man(FILE *f, const dpm_flag *flags, size_t n);

#endif
