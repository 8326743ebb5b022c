/* dpmctl's documentation, all of it from the command list (names, usage,
 * help and examples: common/commands.h) and dpmctl's tables (each verb's
 * options: verbs.c; the options: args.c): `dpmctl help [VERB]` and `VERB --help`, the man
 * page (`dpmctl --man`, dpmctl.1) and the bash completion (`dpmctl
 * --completion bash`). The Makefile writes the last two into build/ and
 * `make install` installs them, so none of it is written twice. */
#include <ctype.h>
#include <string.h>

#include "common/manpage.h"
#include "dpmctl/dpmctl.h"

#define WIDTH 79   /* of the help's wrapped text */
#define OPT_COL 26 /* where an option's help starts */

static const char exit_text[] =
    "0 ok; 1 the daemon refused or failed (its message on stderr), or a local "
    "failure (a bad spec, an unwritable file); 2 usage; 3 the daemon could not be "
    "reached, stopped answering or restarted while a call waited.";
static const char env_endpoint[] = "the daemon's address when --endpoint is not given";
static const char env_token[] = "the token file when --token-file is not given";

const char *ctl_option_help(const ctl_verb *v, int o) {
  if (v && v->opt_help && v->opt_help[o]) return v->opt_help[o];
  return ctl_options[o].help;
}

/* text, wrapped at WIDTH, each line indented by indent; the first line
 * starts at column `at` (already written). */
static void wrap(FILE *f, const char *text, int indent, int at) {
  int col = at;
  const char *p = text;
  while (*p) {
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ");
    if (!n) break;
    if (col > indent && col + 1 + (int)n > WIDTH) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fwrite(p, 1, n, f);
    col += (int)n;
    p += n;
  }
  fputc('\n', f);
}

/* "  --iters N" then its help from OPT_COL. */
static void option_line(FILE *f, const ctl_verb *v, int o) {
  const ctl_option *op = &ctl_options[o];
  int n = fprintf(f, "  %s%s%s", op->name, op->arg ? " " : "", op->arg ? op->arg : "");
  if (n >= OPT_COL - 1) {
    fprintf(f, "\n%*s", OPT_COL, "");
    n = OPT_COL;
  } else {
    fprintf(f, "%*s", OPT_COL - n, "");
    n = OPT_COL;
  }
  wrap(f, ctl_option_help(v, o), OPT_COL, n);
}

static void global_options(FILE *f, const ctl_verb *v) {
  for (int o = 0; o < CTL_N_GLOBAL; o++)
    if (o != O_COMPLETION && o != O_MAN) option_line(f, v, o);
}

void ctl_usage(FILE *f, const ctl_verb *v) {
  if (v) {
    fputs("usage: dpmctl [global options]", f);
    wrap(f, v->cmd->usage, 8, 30);
    fputc('\n', f);
    wrap(f, v->cmd->text, 0, 0);
    if (v->opts) {
      fprintf(f, "\noptions:\n");
      for (int o = CTL_N_GLOBAL; o < O_N_OPTIONS; o++)
        if (v->opts & OPT(o)) option_line(f, v, o);
    }
    fprintf(f, "\nglobal options:\n");
    global_options(f, v);
    fprintf(f, "\nexample:\n  %s\n", v->cmd->example);
    return;
  }
  fprintf(f, "usage: dpmctl " CTL_GLOBAL_USAGE " COMMAND\n"
             "       dpmctl --version | --man | --completion bash\n\ncommands:\n");
  for (int i = 0; i < ctl_n_verbs; i++)
    fprintf(f, "  %-18s %s\n", ctl_verbs[i].cmd->name, ctl_verbs[i].cmd->summary);
  fprintf(f, "\n'dpmctl help COMMAND' (or 'dpmctl COMMAND --help') shows what a command "
             "does and takes.\n\nglobal options:\n");
  global_options(f, NULL);
  fprintf(f, "\nexit: ");
  wrap(f, exit_text, 2, 6);
}

/* ---- the man page ------------------------------------------------------ */

static void man_options(FILE *f, const ctl_verb *v, int from, int to, unsigned only) {
  for (int o = from; o < to; o++)
    if (!only || (only & OPT(o)))
      dpm_man_option(f, ctl_options[o].name, ctl_options[o].arg, ctl_option_help(v, o));
}

void ctl_print_man(FILE *f) {
  dpm_man_begin(f, "dpmctl", "1", DPM_VERSION,
                "drive dpmd, the data-parallel training daemon");
  dpm_man_section(f, "SYNOPSIS");
  fputs(".nf\n", f);
  dpm_man_text(f, "dpmctl " CTL_GLOBAL_USAGE " COMMAND [ARGS]");
  dpm_man_text(f, "dpmctl --version | --man | --completion bash");
  fputs(".fi\n", f);
  dpm_man_section(f, "DESCRIPTION");
  dpm_man_para(f, "dpmctl sends one command to dpmd (dpmd(8)) over its socket and prints "
                  "the answer: it submits model specs, trains them on the daemon's "
                  "devices, reads their state, checkpoints, loads and syncs them, "
                  "extracts predictors and runs them. Global options may come before "
                  "or after the command.");
  dpm_man_section(f, "GLOBAL OPTIONS");
  man_options(f, NULL, 0, CTL_N_GLOBAL, 0);
  dpm_man_section(f, "COMMANDS");
  for (int i = 0; i < ctl_n_verbs; i++) {
    const ctl_verb *v = &ctl_verbs[i];
    dpm_man_subsection(f, v->cmd->name);
    fputs(".PP\n.B dpmctl\n", f);
    dpm_man_text(f, v->cmd->usage);
    dpm_man_para(f, v->cmd->text);
    if (v->opts) man_options(f, v, CTL_N_GLOBAL, O_N_OPTIONS, v->opts);
    dpm_man_para(f, "Example:");
    dpm_man_example(f, v->cmd->example);
  }
  dpm_man_section(f, "ENVIRONMENT");
  dpm_man_option(f, "DPM_ENDPOINT", NULL, env_endpoint);
  dpm_man_option(f, "DPM_TOKEN_FILE", NULL, env_token);
  dpm_man_section(f, "EXIT STATUS");
  dpm_man_para(f, exit_text);
  dpm_man_section(f, "SEE ALSO");
  dpm_man_para(f, "dpmd(8), dpm-train(1); the model spec reference, docs/SPEC.md");
}

/* ---- bash completion --------------------------------------------------- */

/* The words an option's value is one of ("dpm|onnx"), or NULL. */
static int value_words(const char *arg, char *buf, size_t cap) {
  if (!arg || !strchr(arg, '|')) return 0;
  size_t n = 0;
  for (const char *p = arg; *p && n + 1 < cap; p++) {
    if (isupper((unsigned char)*p)) return 0; /* a placeholder: N|Ns */
    buf[n++] = *p == '|' ? ' ' : *p;
  }
  buf[n] = 0;
  return 1;
}

static int takes_path(const char *arg) {
  return arg && (strstr(arg, "FILE") || strstr(arg, "PATH") || strstr(arg, "DIR"));
}

int ctl_print_completion(FILE *f, const char *shell) {
  if (!shell || strcmp(shell, "bash")) return -1;
  char words[128];
  fprintf(f, "# bash completion for dpmctl, written by `dpmctl --completion bash`\n"
             "# from dpmctl's tables: do not edit.\n"
             "_dpmctl() {\n"
             "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
             "  local verb='' i=1\n"
             "  while [ $i -lt $COMP_CWORD ]; do\n"
             "    case ${COMP_WORDS[i]} in\n"
             "    ");
  int first = 1;
  for (int o = 0; o < O_N_OPTIONS; o++)
    if (ctl_options[o].has_value) {
      fprintf(f, "%s%s", first ? "" : "|", ctl_options[o].name);
      first = 0;
    }
  fprintf(f, ") i=$((i + 1)) ;;\n"
             "    -*) ;;\n"
             "    *) verb=${COMP_WORDS[i]}; break ;;\n"
             "    esac\n"
             "    i=$((i + 1))\n"
             "  done\n"
             "  case $prev in\n");
  for (int o = 0; o < O_N_OPTIONS; o++) {
    const ctl_option *op = &ctl_options[o];
    if (!op->has_value) continue;
    if (o == O_COMPLETION)
      fprintf(f, "  %s) COMPREPLY=($(compgen -W 'bash' -- \"$cur\")); return ;;\n",
              op->name);
    else if (value_words(op->arg, words, sizeof words))
      fprintf(f, "  %s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return ;;\n",
              op->name, words);
    else if (takes_path(op->arg))
      fprintf(f, "  %s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", op->name);
    else
      fprintf(f, "  %s) COMPREPLY=(); return ;;\n", op->name);
  }
  fprintf(f, "  esac\n  local verbs='");
  for (int i = 0; i < ctl_n_verbs; i++)
    fprintf(f, "%s%s", i ? " " : "", ctl_verbs[i].cmd->name);
  fprintf(f, "'\n  local global='");
  for (int o = 0; o < CTL_N_GLOBAL; o++)
    fprintf(f, "%s%s", o ? " " : "", ctl_options[o].name);
  fprintf(f, "'\n  local opts=''\n  case $verb in\n"
             "  '') case $cur in\n"
             "      -*) COMPREPLY=($(compgen -W \"$global\" -- \"$cur\")) ;;\n"
             "      *) COMPREPLY=($(compgen -W \"$verbs\" -- \"$cur\")) ;;\n"
             "      esac\n"
             "      return ;;\n");
  for (int i = 0; i < ctl_n_verbs; i++) {
    const ctl_verb *v = &ctl_verbs[i];
    fprintf(f, "  %s) opts='", v->cmd->name);
    int n = 0;
    for (int o = CTL_N_GLOBAL; o < O_N_OPTIONS; o++)
      if (v->opts & OPT(o)) fprintf(f, "%s%s", n++ ? " " : "", ctl_options[o].name);
    fprintf(f, "' ;;\n");
  }
  fprintf(f, "  esac\n"
             "  case $cur in\n"
             "  -*) COMPREPLY=($(compgen -W \"$opts $global\" -- \"$cur\")) ;;\n"
             "  *) if [ \"$verb\" = help ]; then\n"
             "       COMPREPLY=($(compgen -W \"$verbs\" -- \"$cur\"))\n"
             "     else\n"
             "       COMPREPLY=($(compgen -f -- \"$cur\"))\n"
             "     fi ;;\n"
             "  esac\n"
             "}\n"
             "complete -o filenames -F _dpmctl dpmctl\n");
  return 0;
}
