/* dpmd's help and man page (help.h). */
#include "server/help.h"

#include <stdlib.h>
#include <string.h>

#include "common/manpage.h"
#include "dpm/protocol.h"
#include "server/config.h"

#define WIDTH 79
#define OPT_COL 26

/* The flags that are not config keys (config.h reads the others). */
static const struct {
  const char *flag, *arg, *help;
} other_flags[] = {
    {"--config", "FILE",
     "read the config from FILE (default " DPMD_DEFAULT_CONFIG ", skipped when absent); "
     "flags override it"},
    {"--foreground", NULL, "accepted for service managers; dpmd never forks"},
    {"--help", NULL, "print this help and exit"},
    {"--version", NULL, "print dpmd's version and protocol and exit"},
    {"--man", NULL, "print dpmd's manual page (roff) and exit"},
};
#define N_OTHER (sizeof other_flags / sizeof *other_flags)

static const char description[] =
    "dpmd keeps device workspaces and collective communicators warm and trains "
    "models on many devices (CPU replicas, CUDA GPUs) and many hosts, as Caffe2's "
    "data_parallel_model did. dpmctl(1) drives it over its sockets. It reads its "
    "config, discovers its devices, binds its sockets, brings back the models of its "
    "state dir (paused, at their last checkpoint) and serves until SIGTERM, SIGINT or "
    "a shutdown request.";
static const char signals[] =
    "SIGTERM and SIGINT: finish the steps in flight, checkpoint the models that are "
    "training (checkpoint_on_shutdown), exit. SIGPIPE is ignored.";
static const char exit_text[] =
    "0 stopped cleanly; 1 could not start (the reason is logged: another dpmd holds the "
    "state dir, ...), or a model could not be checkpointed at shutdown; 2 bad usage or "
    "config.";

/* ---- plain text -------------------------------------------------------- */

typedef struct {
  FILE *f;
  int col; /* the synopsis' current column */
} text_ctx;

/* Appends a word to the synopsis, wrapping at WIDTH under "usage: dpmd ". */
static void syn_word(text_ctx *t, const char *w) {
  int n = (int)strlen(w);
  if (t->col + 1 + n > WIDTH) {
    fprintf(t->f, "\n%*s", 11, "");
    t->col = 11;
  }
  t->col += fprintf(t->f, " %s", w);
}

static void syn_flag(text_ctx *t, const char *flag, const char *arg, int repeatable) {
  char w[96];
  snprintf(w, sizeof w, "[%s%s%s]%s", flag, arg ? " " : "", arg ? arg : "",
           repeatable ? "..." : "");
  syn_word(t, w);
}

static void syn_key(void *ctx, const char *key, const char *flag, const char *arg,
                    int repeatable, const char *help) {
  (void)key, (void)help;
  if (flag) syn_flag(ctx, flag, arg, repeatable);
}

void dpmd_usage(FILE *f) {
  text_ctx t = {f, fprintf(f, "usage: dpmd")};
  syn_flag(&t, other_flags[0].flag, other_flags[0].arg, 0);
  dpmd_config_describe(syn_key, &t);
  syn_flag(&t, "--foreground", NULL, 0);
  fputc('\n', f);
}

/* help, wrapped from column `at` with OPT_COL's indent */
static void wrap(FILE *f, const char *text, int at) {
  int col = at;
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ");
    if (!n) break;
    if (col > OPT_COL && col + 1 + (int)n > WIDTH) {
      fprintf(f, "\n%*s", OPT_COL, "");
      col = OPT_COL;
    } else if (col > OPT_COL) {
      col += fprintf(f, " ");
    }
    col += (int)fwrite(p, 1, n, f);
    p += n;
  }
  fputc('\n', f);
}

static void help_line(FILE *f, const char *flag, const char *arg, const char *help) {
  int n = fprintf(f, "  %s%s%s", flag, arg ? " " : "", arg ? arg : "");
  if (n >= OPT_COL - 1) {
    fprintf(f, "\n%*s", OPT_COL, "");
  } else {
    fprintf(f, "%*s", OPT_COL - n, "");
  }
  wrap(f, help, OPT_COL);
}

static void help_key(void *ctx, const char *key, const char *flag, const char *arg,
                     int repeatable, const char *help) {
  (void)repeatable;
  if (!flag) return;
  char text[400];
  snprintf(text, sizeof text, "%s (config key %s)", help, key);
  help_line(ctx, flag, arg, text);
}

void dpmd_help(FILE *f) {
  dpmd_usage(f);
  fputs("\nthe training daemon of dpm; dpmctl drives it.\n\noptions:\n", f);
  help_line(f, other_flags[0].flag, other_flags[0].arg, other_flags[0].help);
  dpmd_config_describe(help_key, f);
  for (size_t i = 1; i < N_OTHER; i++)
    help_line(f, other_flags[i].flag, other_flags[i].arg, other_flags[i].help);
  fputs("\nEvery config key: `dpmd --man`, or the comments of the default config "
        "(" DPMD_DEFAULT_CONFIG ").\n",
        f);
}

/* ---- the man page ------------------------------------------------------ */

static void man_flag(void *ctx, const char *key, const char *flag, const char *arg,
                     int repeatable, const char *help) {
  (void)repeatable;
  if (!flag) return;
  char text[400];
  snprintf(text, sizeof text, "%s (config key %s)", help, key);
  dpm_man_option(ctx, flag, arg, text);
}

static void man_key(void *ctx, const char *key, const char *flag, const char *arg,
                    int repeatable, const char *help) {
  (void)flag, (void)arg, (void)repeatable;
  dpm_man_option(ctx, key, NULL, help);
}

void dpmd_man(FILE *f) {
  dpm_man_begin(f, "dpmd", "8", DPM_VERSION, "the data-parallel training daemon of dpm");
  dpm_man_section(f, "SYNOPSIS");
  char *syn = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&syn, &n);
  if (m) {
    dpmd_usage(m);
    fclose(m);
    /* one filled paragraph: the wrapped lines joined */
    size_t o = 0;
    for (size_t i = strlen("usage: "); syn[i]; i++)
      if (syn[i] != '\n' && !(syn[i] == ' ' && o && syn[o - 1] == ' '))
        syn[o++] = syn[i];
      else if (syn[i] == '\n' && syn[i + 1] && o && syn[o - 1] != ' ')
        syn[o++] = ' ';
    syn[o] = 0;
    dpm_man_text(f, syn);
    free(syn);
  }
  dpm_man_section(f, "DESCRIPTION");
  dpm_man_para(f, description);
  dpm_man_section(f, "OPTIONS");
  dpm_man_option(f, other_flags[0].flag, other_flags[0].arg, other_flags[0].help);
  dpmd_config_describe(man_flag, f);
  for (size_t i = 1; i < N_OTHER; i++)
    dpm_man_option(f, other_flags[i].flag, other_flags[i].arg, other_flags[i].help);
  dpm_man_section(f, "CONFIGURATION");
  dpm_man_para(f, "A YAML file (default " DPMD_DEFAULT_CONFIG "); every key is optional, "
                  "and unknown keys, duplicates and bad values stop dpmd with "
                  "FILE:LINE:COLUMN. The default config's comments say more about each.");
  dpmd_config_describe(man_key, f);
  dpm_man_section(f, "SIGNALS");
  dpm_man_para(f, signals);
  dpm_man_section(f, "FILES");
  dpm_man_option(f, DPMD_DEFAULT_CONFIG, NULL, "the config");
  dpm_man_option(f, "STATE/models/NAME/", NULL,
                 "a model's spec (spec.pb) and checkpoints (checkpoints/)");
  dpm_man_option(f, "STATE/lock", NULL, "the pid of the dpmd serving the state dir");
  dpm_man_section(f, "EXIT STATUS");
  dpm_man_para(f, exit_text);
  dpm_man_section(f, "SEE ALSO");
  dpm_man_para(f, "dpmctl(1), dpm-train(1), systemd.service(5)");
}
