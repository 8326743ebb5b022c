/* dpmctl's shared declarations: options, the verb table's shape, the
 * context a verb runs in, and the helpers the files share.
 *
 *   main.c      global options, environment, dispatch, exit codes
 *   args.c      the command-line parser over the verb table
 *   rate.c      the progress bar's ETA from the iterations seen (pure)
 *   verbs.c     the verb table (the arguments of the command list's verbs,
 *               common/commands.h) and the request/response verbs
 *   doc.c       help, the man page and the bash completion, from the list
 *               and the tables
 *   call.c      the calls verbs make: a request and its checked answer, a
 *               ping first, long calls, the events endpoint
 *   output.c    JSON and human output of results, errors and usage lines
 *   progress.c  train --wait: the progress bar and its events thread
 *   watch.c     watch: events as lines
 *   predict.c   predict: runs an extracted predictor, no daemon
 *
 * Calls run down this list, never back up: main; verbs; doc, progress,
 * watch, predict; call; output; args, rate.
 *
 * Exit codes (README.md, "dpmd and dpmctl"): 0 ok, 1 the daemon
 * refused or failed (or a local failure: bad spec, unwritable file), 2 usage,
 * 3 could not reach the daemon. */
#ifndef DPMCTL_H
#define DPMCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/commands.h"
#include "dpm/client.h"
#include "lib/json.h"

enum { CTL_OK = 0, CTL_FAILED = 1, CTL_USAGE = 2, CTL_UNREACHABLE = 3 };

#define CTL_DEFAULT_TIMEOUT_MS 10000
#define CTL_LONG_TIMEOUT_MS 120000 /* submit and other slow verbs (verbs.c) */
#define CTL_MAX_POS 4              /* positional arguments a verb may take */
#define CTL_PRIORITY_MAX 1000      /* --priority: -1000..1000 */
#define CTL_WEIGHT_MAX 1000        /* --weight: above 0, up to 1000 */

/* Every option; the first CTL_N_GLOBAL are global (accepted anywhere). */
typedef enum {
  O_ENDPOINT,
  O_TIMEOUT,
  O_JSON,
  O_TOKEN_FILE,
  O_COMPLETION,
  O_MAN,
  O_VERSION,
  O_HELP,
  O_NAME,
  O_DEVICES,
  O_ITERS,
  O_WAIT,
  O_NO_PROGRESS,
  O_OUT,
  O_INPUTS,
  O_OUTPUTS,
  O_FORMAT,
  O_DEVICE,
  O_INPUT,
  O_LABELS,
  O_COUNT,
  O_UNTIL_DONE,
  O_CHECKPOINT_EVERY,
  O_SHARDS,
  O_ALLOW_BATCH_CHANGE,
  O_EPOCHS,
  O_PRIORITY,
  O_WEIGHT,
  O_PREEMPT,
  O_MAX_MEMORY,
  O_NO_QUEUE,
  O_N_OPTIONS
} ctl_opt;
#define CTL_N_GLOBAL (O_HELP + 1)
#define OPT(o) (1u << (o))
_Static_assert(O_N_OPTIONS <= 32, "a verb's options are the bits of an unsigned");

typedef struct ctl_option {
  const char *name; /* "--iters" */
  int has_value;    /* takes a value (--iters N); else a flag */
  const char *arg;  /* the value's name in help ("N"); NULL for a flag */
  const char *help; /* what it does, for help and the man page */
} ctl_option;
extern const ctl_option ctl_options[O_N_OPTIONS];

struct ctl_ctx;
typedef int (*ctl_handler)(struct ctl_ctx *ctx); /* returns the exit code */

/* One verb of the table (verbs.c): dpmctl's rules for the arguments of a
 * command of the list (common/commands.h), which gives its name, usage and
 * help, and whether it sends a request (a verb that sends none runs without
 * a daemon). */
typedef struct ctl_verb {
  const dpm_command *cmd; /* its row in the command list */
  int min_pos, max_pos;
  unsigned opts;     /* OPT() bits of the verb's own options */
  unsigned required; /* of those, the ones that must be given */
  ctl_handler run;
  /* What an option means for this verb where it differs from the table's
   * help (ctl_options[o].help), indexed by ctl_opt; NULL: none differ. */
  const char *const *opt_help;
} ctl_verb;
extern const ctl_verb ctl_verbs[];
extern const int ctl_n_verbs;

/* A parsed command line. */
typedef struct ctl_args {
  const ctl_verb *verb; /* NULL: none given (with --help) */
  const char *pos[CTL_MAX_POS];
  int npos;
  const char *opt[O_N_OPTIONS]; /* value; "" for a flag given; NULL absent */
} ctl_args;

/* args.c. Parses argv[1..argc) against the table: global options before the
 * command, then the command, then its positional arguments and options in
 * any order (global options too); "--opt=value" and "--opt value" both
 * work; "--" ends options. Returns CTL_OK, or CTL_USAGE with a message in
 * msg (a->verb is set when the command was recognised, for its usage). */
int ctl_parse(const ctl_verb *verbs, int n_verbs, int argc, char **argv, ctl_args *a,
              char *msg, size_t cap);
/* Whole decimal numbers, nothing else ("12", not "+12", " 12", "1e3").
 * Return 0 on success, -1 otherwise. */
int ctl_parse_u64(const char *s, uint64_t max, uint64_t *out);
int ctl_parse_int(const char *s, int min, int max, int *out);
/* submit --checkpoint-every: "N" iterations or "Ns" seconds (whole numbers;
 * 0 disables). Sets both of *iters and *seconds (the other one 0). Returns 0,
 * or -1 for anything else. */
int ctl_parse_checkpoint_every(const char *s, uint64_t *iters, double *seconds);
/* A size in bytes: a whole number, optionally with a suffix K, M, G, T
 * (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024): "4096", "512Mi", "2G".
 * Returns 0, or -1 for anything else and for more than UINT64_MAX. */
int ctl_parse_bytes(const char *s, uint64_t *out);
/* A plain decimal number: digits, a point and digits, or both ("3", "0.5",
 * ".5"; not "1.", "1e3", "-1", " 1", "inf"), within [min, max]; min_open:
 * min itself is out. Returns 0, or -1. */
int ctl_parse_number(const char *s, double min, int min_open, double max, double *out);
/* The words of proto/dpm.proto's PreemptPolicy ("keep", "spill"):
 * ctl_parse_preempt returns 0 and sets *out, or -1 for another word;
 * ctl_preempt_word gives the word of p, or NULL for a value this build does
 * not know (a newer daemon's). */
int ctl_parse_preempt(const char *s, Dpm__PreemptPolicy *out);
const char *ctl_preempt_word(int p);
/* The schedule options of a parsed command line (--priority, --weight,
 * --preempt, --max-memory: those the verb took) into s, each given one with
 * its has_ flag set. Returns how many were given, or -1 with a message in
 * msg: one naming the option and what it takes, or with need_one (set) and
 * none given, "set needs --priority, --weight or --preempt". */
int ctl_parse_schedule(const ctl_args *a, int need_one, Dpm__Schedule *s, char *msg,
                       size_t cap);
/* Splits a comma-separated list into a new array of new strings; empty items
 * are an error (-1). Free with ctl_free_list. */
int ctl_split(const char *s, char ***items, size_t *n);
void ctl_free_list(char **items, size_t n);

/* What a verb runs with. */
typedef struct ctl_ctx {
  const ctl_args *a;
  dpm_client *client; /* open for verbs that need the daemon */
  const char *endpoint;
  int timeout_ms;    /* from --timeout or the default; < 0 forever */
  int timeout_given; /* --timeout was on the command line */
  int json;
} ctl_ctx;

/* call.c: sends req and handles every failure (prints it, returns its exit
 * code: 3 transport, 1 refused). On CTL_OK *resp is the daemon's answer. */
int ctl_call(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp);
/* Like ctl_call, but a refusal is not a failure: only transport errors are
 * printed and returned; on CTL_OK *resp may carry a refusing status. */
int ctl_send(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp);
/* The second half of ctl_call: s and err from dpm_client_call (err may be
 * NULL when s is DPM_OK). */
int ctl_check(ctl_ctx *ctx, dpm_status s, const dpm_err *err, Dpm__Response **resp);
/* The exit code of a library failure: 3 for transport (TIMEOUT, IO,
 * CORRUPT), else 1. */
int ctl_transport_exit(dpm_status s);
/* dpm_client_ping, failures printed (exit code returned): proves the daemon
 * is there and teaches the client its instance before a call that may wait
 * long. */
int ctl_ping_first(ctl_ctx *ctx);
/* For the long verbs: a ping within the normal timeout, then req with
 * max(timeout, CTL_LONG_TIMEOUT_MS). Returns like ctl_call. */
int ctl_long_call(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp);
/* Subscribes to the daemon's events for name (NULL: every model): a watch
 * request says where they are; its events socket when it has one, else
 * the stream through the request socket (dpm_events_open_stream). Returns
 * CTL_OK with *events open, or an exit code after printing the error;
 * quiet (train --wait's progress): a daemon that has no events for it, or
 * refuses, is CTL_OK with *events NULL (a warning on stderr when opening
 * failed). */
int ctl_events_open(ctl_ctx *ctx, const char *name, int quiet, dpm_events **events);

/* doc.c. ctl_usage: the help of verb v (usage line, description, its
 * options, the global options, an example), or for NULL the list of verbs
 * with their summaries, to f. */
void ctl_usage(FILE *f, const ctl_verb *v);
/* dpmctl.1, the man page, in roff (common/manpage.h). */
void ctl_print_man(FILE *f);
/* The completion script for shell ("bash"): verbs, their options and,
 * where an option takes one of a few words, those words. Returns 0, or -1
 * for a shell it has none for. */
int ctl_print_completion(FILE *f, const char *shell);
/* The help of option o for verb v (v may be NULL: the table's). */
const char *ctl_option_help(const ctl_verb *v, int o);

/* output.c */
#define CTL_GLOBAL_USAGE "[--endpoint ADDR] [--timeout MS] [--json] [--token-file FILE]"
/* After a usage error: the verb's usage, or one line pointing at help. */
void ctl_usage_short(FILE *f, const ctl_verb *v);
/* An error of status name `status` ("NOT_FOUND", "USAGE"): "dpmctl: STATUS:
 * message" on stderr, and with --json {"error":..,"status":..} on stdout. */
void ctl_error(const ctl_ctx *ctx, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints the JSON document and a newline on stdout. Returns CTL_OK, or
 * CTL_FAILED when the writer failed (out of memory). */
int ctl_emit(dpm_json *j);
void ctl_json_model(dpm_json *j, const char *key, const Dpm__ModelInfo *m);
/* "mlp  training  iter 120/500  loss 0.4123  acc 0.875  1234 img/s"; a
 * model that waits says why after its state: "small  preempted (by big)" */
void ctl_model_line(FILE *f, const Dpm__ModelInfo *m);
/* queue: the models of a ModelList under their device group (the daemon
 * sends them grouped), a table of their schedule and state each; "no
 * models" for none. */
void ctl_queue_table(FILE *f, Dpm__ModelInfo **models, size_t n);
/* queue's answer: the table, or with --json {"models":[..]} as list. */
int ctl_print_queue(const ctl_ctx *ctx, const Dpm__Response *r);
/* bytes as "512 B", "12.5 KiB", "1.21 GiB" (three digits, powers of 1024). */
void ctl_format_bytes(uint64_t bytes, char *buf, size_t cap);
/* Prints a successful response by its result; ok_text is the human line
 * when there is no result ("deleted mlp"). Returns the exit code. */
int ctl_print_response(const ctl_ctx *ctx, const Dpm__Response *r, const char *ok_text);
/* --version: "dpmctl 0.5.0 (protocol 1)", or a JSON object. */
int ctl_print_version(const ctl_ctx *ctx);
/* ping: the answer and the round trip. */
int ctl_print_ping(const ctl_ctx *ctx, const Dpm__Response *r, double rtt_ms);
/* get-blob: prints the tensor (summary, or JSON); out: write its data. */
int ctl_print_blob(const ctl_ctx *ctx, const Dpm__TensorProto *t, const char *out);
uint64_t ctl_fnv1a64(const void *data, size_t n);
const char *ctl_event_kind(int kind); /* "progress" ... */
/* One event as one line (JSON object with --json). */
void ctl_print_event(const ctl_ctx *ctx, const Dpm__Event *ev);
/* Seconds as "0:42", "1:02:03". */
void ctl_format_duration(double s, char *buf, size_t cap);

/* rate.c: the wall-clock rate of a run's iterations as the client sees them
 * (progress events), over at most the last CTL_RATE_SAMPLES seconds, and the
 * time left at that rate. Pure: the caller passes the clock. */
#define CTL_RATE_SAMPLES 32 /* one kept per second at most */
typedef struct ctl_rate {
  int n, head; /* samples kept, the oldest's index */
  double t[CTL_RATE_SAMPLES];
  uint64_t iter[CTL_RATE_SAMPLES];
} ctl_rate;
/* Records that the run was at iter at now_s (seconds, any origin) and
 * returns the seconds until target at the rate seen since the oldest kept
 * sample; -1 while unknown (one sample, or no step seen yet). An iteration
 * lower than the last one (a checkpoint was loaded) starts over. */
double ctl_rate_eta(ctl_rate *r, double now_s, uint64_t iter, uint64_t target);

/* progress.c: train --wait: subscribes to NAME's events, sends req with no
 * timeout and shows progress until the answer comes. */
int ctl_train_wait(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp);
/* The bar line for a progress event of a train of `iters` steps, into buf:
 * "[#####.....] 120/500 loss 0.4123 acc 0.875 1234 img/s ETA 0:42". */
void ctl_progress_bar(const Dpm__ModelInfo *m, uint64_t iters, double eta_s, char *buf,
                      size_t cap);

/* The handlers of watch.c and predict.c, for the table. */
int ctl_cmd_watch(ctl_ctx *ctx);
int ctl_cmd_predict(ctl_ctx *ctx);

#endif
