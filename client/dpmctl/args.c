/* dpmctl's command-line parser: checks argv against the verb table (names,
 * positional counts, which options a verb takes, required options) and
 * leaves values to the verbs. Also the small number and list parsers the
 * verbs share. No output, no global state: the unit tests drive it. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/suggest.h"
#include "dpmctl/dpmctl.h"

/* clang-format off */
const ctl_option ctl_options[O_N_OPTIONS] = {
    [O_ENDPOINT] = {"--endpoint", 1, "ADDR", "the daemon's address, ipc:///PATH or tcp://HOST:PORT (default: $DPM_ENDPOINT, else " DPM_DEFAULT_ENDPOINT ")"},
    [O_TIMEOUT] = {"--timeout", 1, "MS", "how long to wait for an answer, in milliseconds (default 10000; -1 waits forever); the long commands wait at least 120000"},
    [O_JSON] = {"--json", 0, NULL, "print one JSON object per command on stdout, errors too ({\"error\":..,\"status\":..}), for scripts"},
    [O_TOKEN_FILE] = {"--token-file", 1, "FILE", "send the token in FILE with every request (default: $DPM_TOKEN_FILE)"},
    [O_COMPLETION] = {"--completion", 1, "SHELL", "print the completion script for SHELL (bash) and exit"},
    [O_MAN] = {"--man", 0, NULL, "print dpmctl's manual page (roff) and exit"},
    [O_VERSION] = {"--version", 0, NULL, "print dpmctl's version and protocol and exit"},
    [O_HELP] = {"--help", 0, NULL, "print the help of the command (or the list of commands) and exit"},
    [O_NAME] = {"--name", 1, "N", "the model's name (default: the spec's name)"},
    [O_DEVICES] = {"--devices", 1, "LIST", "the devices to train on, one replica each: cpu:0,cpu:1 or cuda:0,cuda:1 (default: the spec's parallel.devices, else every device of the daemon)"},
    [O_ITERS] = {"--iters", 1, "N", "the number of steps to run from now"},
    [O_WAIT] = {"--wait", 0, NULL, "answer when the steps are done, with a progress bar on a terminal (default: answer at once)"},
    [O_NO_PROGRESS] = {"--no-progress", 0, NULL, "with --wait: no progress bar"},
    [O_OUT] = {"--out", 1, "PATH", "where to write the result"},
    [O_INPUTS] = {"--inputs", 1, "A[,B]", "the blobs the predictor is fed (data)"},
    [O_OUTPUTS] = {"--outputs", 1, "X[,Y]", "the blobs the predictor answers (softmax)"},
    [O_FORMAT] = {"--format", 1, "dpm|onnx", "dpm: DIR/predictor.pb, for dpmctl predict and libdpmpredict (default); onnx: DIR/model.onnx, for onnxruntime"},
    [O_DEVICE] = {"--device", 1, "DEV", "the device to use"},
    [O_INPUT] = {"--input", 1, "FILE", "an IDX image file (MNIST layout, .gz or raw)"},
    [O_LABELS] = {"--labels", 1, "FILE", "an IDX label file: also print the accuracy"},
    [O_COUNT] = {"--count", 1, "N", "how many to take"},
    [O_UNTIL_DONE] = {"--until-done", 0, NULL, "stop at the end of the training run (a done or error event); at once when the model is not training"},
    [O_CHECKPOINT_EVERY] = {"--checkpoint-every", 1, "N|Ns", "checkpoint every N iterations, or every N seconds (600s); 0 never (default: the spec's checkpoint_every, else the daemon's)"},
    [O_SHARDS] = {"--shards", 1, "EP,EP...", "the daemons of a job over several hosts (tcp://HOST:PORT each), this one first"},
    [O_ALLOW_BATCH_CHANGE] = {"--allow-batch-change", 0, NULL, "let an elastic resume change the global batch (fewer devices in all)"},
    [O_EPOCHS] = {"--epochs", 1, "N", "the number of epochs to run from now (steps per epoch: the data set over the global batch of every replica and shard)"},
    [O_PRIORITY] = {"--priority", 1, "N", "the model's priority, -1000 to 1000 (default 0): a higher one runs first, and one that trains preempts lower ones on its devices"},
    [O_WEIGHT] = {"--weight", 1, "W", "its share of its devices' time among the models of its priority, above 0 up to 1000 (0.5, 3; default 1)"},
    [O_PREEMPT] = {"--preempt", 1, "keep|spill", "what it does while preempted: keep (default) stays resident, just not scheduled; spill checkpoints and frees its memory"},
    [O_MAX_MEMORY] = {"--max-memory", 1, "BYTES", "refuse the model when it counts more than BYTES of memory; a number, or with a suffix K, M, G (powers of 1000) or Ki, Mi, Gi (of 1024): 512Mi"},
    [O_NO_QUEUE] = {"--no-queue", 0, NULL, "refuse the model when its memory does not fit beside the others now, instead of queueing it until it does"},
};
/* clang-format on */

#define GLOBAL_OPTS ((1u << CTL_N_GLOBAL) - 1)

__attribute__((format(printf, 3, 4))) static int fail(char *msg, size_t cap,
                                                      const char *fmt, ...) {
  if (msg && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
  }
  return CTL_USAGE;
}

/* The option named by arg ("--iters" or "--iters=5"), or -1. */
static int find_option(const char *arg, const char **inline_value) {
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
  *inline_value = eq ? eq + 1 : NULL;
  if (n == 2 && !strncmp(arg, "-h", 2)) return O_HELP;
  for (int o = 0; o < O_N_OPTIONS; o++)
    if (strlen(ctl_options[o].name) == n && !strncmp(arg, ctl_options[o].name, n))
      return o;
  return -1;
}

/* Takes the option at argv[*i] (accepted: the OPT bits allowed here). */
static int take_option(int argc, char **argv, int *i, unsigned accepted, const char *verb,
                       ctl_args *a, char *msg, size_t cap) {
  const char *arg = argv[*i], *value;
  int o = find_option(arg, &value);
  if (o < 0) {
    dpm_suggest sg;
    char hint[DPM_SUGGEST_MAX_LEN + 32], word[DPM_SUGGEST_MAX_LEN + 1];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(arg, "="), arg);
    dpm_suggest_init(&sg, word);
    for (int k = 0; k < O_N_OPTIONS; k++)
      if (accepted & OPT(k)) dpm_suggest_add(&sg, ctl_options[k].name);
    return fail(msg, cap, "unknown option '%s'%s", arg,
                dpm_suggest_phrase(&sg, hint, sizeof hint));
  }
  if (!(accepted & OPT(o))) {
    if (verb) return fail(msg, cap, "%s does not take %s", verb, ctl_options[o].name);
    return fail(msg, cap, "%s comes after the command", ctl_options[o].name);
  }
  if (ctl_options[o].has_value) {
    if (!value) {
      if (*i + 1 >= argc) return fail(msg, cap, "%s needs a value", ctl_options[o].name);
      value = argv[++*i];
    }
  } else if (value) {
    return fail(msg, cap, "%s takes no value", ctl_options[o].name);
  } else {
    value = "";
  }
  a->opt[o] = value;
  return CTL_OK;
}

static int is_option(const char *s) { return s[0] == '-' && s[1] != 0; }

int ctl_parse(const ctl_verb *verbs, int n_verbs, int argc, char **argv, ctl_args *a,
              char *msg, size_t cap) {
  memset(a, 0, sizeof *a);
  if (msg && cap) msg[0] = 0;
  int i = 1;
  for (; i < argc && is_option(argv[i]); i++) {
    if (!strcmp(argv[i], "--")) {
      i++;
      break;
    }
    int rc = take_option(argc, argv, &i, GLOBAL_OPTS, NULL, a, msg, cap);
    if (rc) return rc;
  }
  if (i >= argc) {
    if (a->opt[O_HELP] || a->opt[O_VERSION] || a->opt[O_MAN] || a->opt[O_COMPLETION])
      return CTL_OK;
    return fail(msg, cap, "no command given");
  }
  const char *name = argv[i++];
  for (int v = 0; v < n_verbs; v++)
    if (!strcmp(verbs[v].cmd->name, name)) a->verb = &verbs[v];
  if (!a->verb) {
    dpm_suggest sg;
    char hint[DPM_SUGGEST_MAX_LEN + 32];
    dpm_suggest_init(&sg, name);
    for (int v = 0; v < n_verbs; v++) dpm_suggest_add(&sg, verbs[v].cmd->name);
    return fail(msg, cap, "unknown command '%s'%s", name,
                dpm_suggest_phrase(&sg, hint, sizeof hint));
  }
  const ctl_verb *v = a->verb;
  int options_done = 0;
  for (; i < argc; i++) {
    if (!options_done && !strcmp(argv[i], "--")) {
      options_done = 1;
      continue;
    }
    if (!options_done && is_option(argv[i])) {
      int rc =
          take_option(argc, argv, &i, GLOBAL_OPTS | v->opts, v->cmd->name, a, msg, cap);
      if (rc) return rc;
      continue;
    }
    if (a->npos >= v->max_pos || a->npos >= CTL_MAX_POS)
      return fail(msg, cap, "unexpected argument '%s' for %s", argv[i], v->cmd->name);
    a->pos[a->npos++] = argv[i];
  }
  if (a->opt[O_HELP] || a->opt[O_VERSION]) return CTL_OK; /* "dpmctl train --help" */
  if (a->npos < v->min_pos)
    return fail(msg, cap, "%s needs more arguments", v->cmd->name);
  for (int o = 0; o < O_N_OPTIONS; o++)
    if ((v->required & OPT(o)) && !a->opt[o])
      return fail(msg, cap, "%s needs %s", v->cmd->name, ctl_options[o].name);
  return CTL_OK;
}

int ctl_parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (!s || !*s) return -1;
  for (const char *p = s; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, NULL, 10);
  if (errno || v > max) return -1;
  *out = v;
  return 0;
}

int ctl_parse_int(const char *s, int min, int max, int *out) {
  if (!s) return -1;
  int neg = s[0] == '-';
  uint64_t v;
  if (ctl_parse_u64(s + neg, (uint64_t)INT_MAX + 1, &v)) return -1;
  long long x = neg ? -(long long)v : (long long)v;
  if (x < min || x > max) return -1;
  *out = (int)x;
  return 0;
}

int ctl_parse_checkpoint_every(const char *s, uint64_t *iters, double *seconds) {
  if (!s) return -1;
  size_t n = strlen(s);
  uint64_t v;
  if (n > 1 && s[n - 1] == 's') {
    char digits[32];
    if (n - 1 >= sizeof digits) return -1;
    memcpy(digits, s, n - 1);
    digits[n - 1] = 0;
    if (ctl_parse_u64(digits, (uint64_t)1 << 40, &v)) return -1;
    *iters = 0;
    *seconds = (double)v;
    return 0;
  }
  if (ctl_parse_u64(s, (uint64_t)1 << 40, &v)) return -1;
  *iters = v;
  *seconds = 0;
  return 0;
}

int ctl_parse_bytes(const char *s, uint64_t *out) {
  static const struct {
    const char *suffix;
    uint64_t unit;
  } units[] = {
      {"", 1},
      {"K", 1000},
      {"M", 1000000},
      {"G", 1000000000},
      {"T", 1000000000000ull},
      {"Ki", (uint64_t)1 << 10},
      {"Mi", (uint64_t)1 << 20},
      {"Gi", (uint64_t)1 << 30},
      {"Ti", (uint64_t)1 << 40},
  };
  if (!s) return -1;
  size_t digits = strspn(s, "0123456789");
  char num[32];
  if (digits == 0 || digits >= sizeof num) return -1;
  memcpy(num, s, digits);
  num[digits] = 0;
  uint64_t v;
  if (ctl_parse_u64(num, UINT64_MAX, &v)) return -1;
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (!strcmp(s + digits, units[i].suffix)) {
      if (v > UINT64_MAX / units[i].unit) return -1;
      *out = v * units[i].unit;
      return 0;
    }
  return -1;
}

int ctl_parse_number(const char *s, double min, int min_open, double max, double *out) {
  if (!s) return -1;
  size_t whole = strspn(s, "0123456789"), frac = 0;
  int point = s[whole] == '.';
  if (point) frac = strspn(s + whole + 1, "0123456789");
  if (point ? !frac : !whole) return -1;  /* "", ".", "1." */
  if (s[whole + point + frac]) return -1; /* anything else: "1e3", "-1", "1 " */
  double v = strtod(s, NULL); /* digits and a point (dpmctl keeps the C locale) */
  if (v < min || (min_open && v == min) || v > max) return -1;
  *out = v;
  return 0;
}

/* proto/dpm.proto's PreemptPolicy, indexed by value. */
static const char *const preempt_words[] = {
    [DPM__PREEMPT_POLICY__PREEMPT_KEEP] = "keep",
    [DPM__PREEMPT_POLICY__PREEMPT_SPILL] = "spill",
};
#define N_PREEMPT ((int)(sizeof preempt_words / sizeof *preempt_words))

int ctl_parse_preempt(const char *s, Dpm__PreemptPolicy *out) {
  for (int p = 0; s && p < N_PREEMPT; p++)
    if (preempt_words[p] && !strcmp(s, preempt_words[p])) {
      *out = (Dpm__PreemptPolicy)p;
      return 0;
    }
  return -1;
}

const char *ctl_preempt_word(int p) {
  return p >= 0 && p < N_PREEMPT ? preempt_words[p] : NULL;
}

/* A bad value of a schedule option: the message, and -1. */
__attribute__((format(printf, 3, 4))) static int bad_value(char *msg, size_t cap,
                                                           const char *fmt, ...) {
  if (msg && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int ctl_parse_schedule(const ctl_args *a, int need_one, Dpm__Schedule *s, char *msg,
                       size_t cap) {
  const char *prio = a->opt[O_PRIORITY], *weight = a->opt[O_WEIGHT],
             *preempt = a->opt[O_PREEMPT], *max_memory = a->opt[O_MAX_MEMORY];
  int p = 0;
  if (prio && ctl_parse_int(prio, -CTL_PRIORITY_MAX, CTL_PRIORITY_MAX, &p))
    return bad_value(msg, cap, "--priority takes a whole number from %d to %d, not '%s'",
                     -CTL_PRIORITY_MAX, CTL_PRIORITY_MAX, prio);
  if (weight && ctl_parse_number(weight, 0, 1, CTL_WEIGHT_MAX, &s->weight))
    return bad_value(msg, cap,
                     "--weight takes a number above 0 up to %d (0.5, 3), not '%s'",
                     CTL_WEIGHT_MAX, weight);
  if (preempt && ctl_parse_preempt(preempt, &s->preempt))
    return bad_value(msg, cap, "--preempt takes keep or spill, not '%s'", preempt);
  if (max_memory && (ctl_parse_bytes(max_memory, &s->max_memory) || !s->max_memory))
    return bad_value(msg, cap,
                     "--max-memory takes a positive number of bytes (4294967296, 512Mi, "
                     "4G), not '%s'",
                     max_memory);
  if (need_one && !prio && !weight && !preempt)
    return bad_value(msg, cap, "%s needs --priority, --weight or --preempt",
                     a->verb ? a->verb->cmd->name : "set");
  s->has_priority = prio != NULL;
  s->priority = prio ? p : 0;
  s->has_weight = weight != NULL;
  s->has_preempt = preempt != NULL;
  s->has_max_memory = max_memory != NULL;
  return s->has_priority + s->has_weight + s->has_preempt + s->has_max_memory;
}

void ctl_free_list(char **items, size_t n) {
  if (!items) return;
  for (size_t i = 0; i < n; i++) free(items[i]);
  free(items);
}

int ctl_split(const char *s, char ***items, size_t *n) {
  *items = NULL;
  *n = 0;
  if (!s) return -1;
  size_t count = 1;
  for (const char *p = s; *p; p++) count += *p == ',';
  char **v = calloc(count, sizeof *v);
  if (!v) return -1;
  const char *p = s;
  for (size_t k = 0; k < count; k++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == 0 || !(v[k] = strndup(p, len))) {
      ctl_free_list(v, count);
      return -1;
    }
    p = end ? end + 1 : p + len;
  }
  *items = v;
  *n = count;
  return 0;
}
