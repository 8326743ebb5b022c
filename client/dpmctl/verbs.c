/* dpmctl's verb table (for each verb of the command list,
 * common/commands.h, which declares its name, usage and help: its
 * positional counts, options and handler) and the handlers of the verbs that are one
 * request and one response (their calls: call.c).
 *
 * Paths sent to the daemon (checkpoint --out, load FILE, extract-predictor
 * --out, the spec's data files) are made absolute against dpmctl's working
 * directory: the daemon runs elsewhere and only takes absolute paths.
 *
 * Long verbs (the daemon answers when the work is done: submit, checkpoint,
 * load, sync, eval, extract-predictor, get-blob, shutdown) first ping the
 * daemon within --timeout, so that an absent daemon is reported as quickly
 * as for any verb and the client knows the daemon's instance, then wait for
 * the answer max(--timeout, 120 s). While they wait the library pings: a
 * daemon that dies or restarts fails the verb with exit 3 within seconds
 * (include/dpm/client.h, Liveness). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spec.h"
#include "dpmctl/dpmctl.h"

/* ---- helpers ---- */

/* Sends req and prints the answer (ok_text: the human line of an answer
 * without a result). */
static int call_print(ctl_ctx *ctx, Dpm__Request *req, const char *ok_text) {
  Dpm__Response *r;
  int rc = ctl_call(ctx, req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, ok_text);
  dpm_client_free_response(r);
  return rc;
}

static int long_call_print(ctl_ctx *ctx, Dpm__Request *req, const char *ok_text) {
  Dpm__Response *r;
  int rc = ctl_long_call(ctx, req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, ok_text);
  dpm_client_free_response(r);
  return rc;
}

/* A new absolute, lexically normalised ("." and ".." resolved) copy of path
 * against the working directory; NULL when out of memory or no cwd. */
static char *absolute(const char *path) {
  char *cwd = NULL;
  if (path[0] != '/' && !(cwd = getcwd(NULL, 0))) return NULL;
  size_t n = (cwd ? strlen(cwd) : 0) + strlen(path) + 2;
  char *joined = malloc(n), *outp = malloc(n);
  if (!joined || !outp) {
    free(cwd);
    free(joined);
    free(outp);
    return NULL;
  }
  snprintf(joined, n, "%s/%s", cwd ? cwd : "", path);
  free(cwd);
  size_t len = 0;
  for (char *save = NULL, *part = strtok_r(joined, "/", &save); part;
       part = strtok_r(NULL, "/", &save)) {
    if (!strcmp(part, ".")) continue;
    if (!strcmp(part, "..")) {
      while (len > 0 && outp[len - 1] != '/') len--;
      if (len > 0) len--; /* the slash */
      continue;
    }
    outp[len++] = '/';
    size_t pl = strlen(part);
    memcpy(outp + len, part, pl);
    len += pl;
  }
  if (len == 0) outp[len++] = '/';
  outp[len] = 0;
  free(joined);
  return outp;
}

/* *field (a malloc'd string or NULL) made absolute in place. */
static int absolutize(char **field) {
  if (!*field || !**field || (*field)[0] == '/') return 0;
  char *a = absolute(*field);
  if (!a) return -1;
  free(*field);
  *field = a;
  return 0;
}

static int absolutize_all(char **fields, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (absolutize(&fields[i])) return -1;
  return 0;
}

static int no_memory(ctl_ctx *ctx) {
  ctl_error(ctx, "NOMEM", "out of memory");
  return CTL_FAILED;
}

static int usage_error(ctl_ctx *ctx, const char *msg) {
  ctl_error(ctx, "USAGE", "%s", msg);
  ctl_usage_short(stderr, ctx->a->verb);
  return CTL_USAGE;
}

static const char *pos(const ctl_ctx *ctx, int i) {
  return i < ctx->a->npos ? ctx->a->pos[i] : NULL;
}

/* ---- handlers ---- */

static Dpm__Empty empty_msg = DPM__EMPTY__INIT;

static int cmd_ping(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_PING;
  req.ping = &empty_msg;
  int64_t t0 = dpm_mono_ns();
  Dpm__Response *r;
  int rc = ctl_call(ctx, &req, &r);
  if (rc) return rc;
  double ms = (double)(dpm_mono_ns() - t0) / 1e6;
  rc = ctl_print_ping(ctx, r, ms);
  dpm_client_free_response(r);
  return rc;
}

static int cmd_version(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_VERSION_INFO;
  req.version_info = &empty_msg;
  return call_print(ctx, &req, NULL);
}

static int cmd_submit(ctl_ctx *ctx) {
  const char *path = pos(ctx, 0);
  Dpm__CheckpointPolicy policy = DPM__CHECKPOINT_POLICY__INIT;
  const char *every = ctx->a->opt[O_CHECKPOINT_EVERY];
  if (every) {
    if (ctl_parse_checkpoint_every(every, &policy.every_iters, &policy.every_seconds))
      return usage_error(ctx, "--checkpoint-every takes iterations (1000) or seconds "
                              "(600s); 0 disables");
    policy.has_every_iters = policy.has_every_seconds = 1; /* both: 0 is never */
  }
  Dpm__Schedule sched = DPM__SCHEDULE__INIT; /* sent when an option set part of it */
  char msg[256];
  int n_sched = ctl_parse_schedule(ctx->a, 0, &sched, msg, sizeof msg);
  if (n_sched < 0) return usage_error(ctx, msg);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_spec_load(path, &spec, &err);
  if (s) {
    ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
    return CTL_FAILED;
  }
  int rc;
  char **devices = NULL;
  size_t n_devices = 0;
  const char *dev = ctx->a->opt[O_DEVICES];
  if (dev && ctl_split(dev, &devices, &n_devices)) {
    dpm_spec_free(spec);
    return usage_error(ctx, "--devices takes a list such as cpu:0,cpu:1");
  }
  char **shards = NULL; /* the daemons of a fleet job; the first is the endpoint */
  size_t n_shards = 0;
  const char *sh = ctx->a->opt[O_SHARDS];
  if (sh && ctl_split(sh, &shards, &n_shards)) {
    ctl_free_list(devices, n_devices);
    dpm_spec_free(spec);
    return usage_error(ctx, "--shards takes a list such as tcp://10.0.0.1:7070,"
                            "tcp://10.0.0.2:7070");
  }
  if ((spec->input &&
       (absolutize(&spec->input->images) || absolutize(&spec->input->labels) ||
        absolutize(&spec->input->path) ||
        absolutize_all(spec->input->shards, spec->input->n_shards))) ||
      (spec->eval && (absolutize(&spec->eval->images) ||
                      absolutize(&spec->eval->labels) || absolutize(&spec->eval->path) ||
                      absolutize_all(spec->eval->shards, spec->eval->n_shards))) ||
      absolutize(&spec->source)) {
    rc = no_memory(ctx);
  } else {
    Dpm__SubmitRequest sub = DPM__SUBMIT_REQUEST__INIT;
    sub.spec = spec;
    sub.name = (char *)ctx->a->opt[O_NAME];
    sub.devices = devices;
    sub.n_devices = n_devices;
    sub.checkpoint = every ? &policy : NULL;
    sub.shards = shards;
    sub.n_shards = n_shards;
    sub.schedule = n_sched ? &sched : NULL;
    sub.has_no_queue = ctx->a->opt[O_NO_QUEUE] != NULL;
    sub.no_queue = sub.has_no_queue;
    Dpm__Request req = DPM__REQUEST__INIT;
    req.command_case = DPM__REQUEST__COMMAND_SUBMIT;
    req.submit = &sub;
    rc = long_call_print(ctx, &req, NULL);
  }
  ctl_free_list(devices, n_devices);
  ctl_free_list(shards, n_shards);
  dpm_spec_free(spec);
  return rc;
}

/* --iters N, or --epochs N (the daemon turns them into steps). */
static int cmd_train(ctl_ctx *ctx) {
  const char *it = ctx->a->opt[O_ITERS], *ep = ctx->a->opt[O_EPOCHS];
  if (!it == !ep)
    return usage_error(ctx, "train takes --iters N or --epochs N (one of them)");
  uint64_t n;
  if (ctl_parse_u64(it ? it : ep, UINT64_MAX, &n) || n == 0)
    return usage_error(ctx, it ? "--iters takes a positive whole number"
                               : "--epochs takes a positive whole number");
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = (char *)pos(ctx, 0);
  if (it) {
    tr.iters = n;
  } else {
    tr.has_epochs = 1;
    tr.epochs = n;
  }
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_TRAIN;
  req.train = &tr;
  if (!ctx->a->opt[O_WAIT]) return call_print(ctx, &req, NULL);
  tr.has_wait = 1;
  tr.wait = 1;
  Dpm__Response *r;
  int rc = ctl_train_wait(ctx, &req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, NULL);
  dpm_client_free_response(r);
  return rc;
}

/* The NameRequest verbs. */
static int name_verb(ctl_ctx *ctx, Dpm__Request__CommandCase c, const char *ok_fmt,
                     int long_running) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)pos(ctx, 0);
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = c;
  switch (c) {
  case DPM__REQUEST__COMMAND_STATUS:
    req.status = &nr;
    break;
  case DPM__REQUEST__COMMAND_SYNC:
    req.sync = &nr;
    break;
  case DPM__REQUEST__COMMAND_EVAL:
    req.eval = &nr;
    break;
  case DPM__REQUEST__COMMAND_PAUSE:
    req.pause = &nr;
    break;
  case DPM__REQUEST__COMMAND_DELETE:
    req.delete_ = &nr;
    break;
  default:
    return CTL_FAILED;
  }
  char ok[512];
  snprintf(ok, sizeof ok, ok_fmt, nr.name ? nr.name : "");
  return long_running ? long_call_print(ctx, &req, ok) : call_print(ctx, &req, ok);
}

static int cmd_status(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_STATUS, "%s", 0);
}
static int cmd_sync(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_SYNC, "synced %s", 1);
}
static int cmd_eval(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_EVAL, "%s evaluated", 1);
}
static int cmd_pause(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_PAUSE, "paused %s", 0);
}
/* resume NAME [--shards EP,..] [--allow-batch-change]: a fleet job's
 * coordinator re-forms it over the shards given (elastic); a note from the
 * daemon (the global batch changed) goes to stderr. */
static int cmd_resume(ctl_ctx *ctx) {
  Dpm__ResumeRequest rr = DPM__RESUME_REQUEST__INIT;
  rr.name = (char *)pos(ctx, 0);
  char **shards = NULL;
  size_t n_shards = 0;
  const char *sh = ctx->a->opt[O_SHARDS];
  if (sh && ctl_split(sh, &shards, &n_shards))
    return usage_error(ctx, "--shards takes a list such as tcp://10.0.0.1:7070,"
                            "tcp://10.0.0.2:7070");
  rr.shards = shards;
  rr.n_shards = n_shards;
  rr.has_allow_batch_change = ctx->a->opt[O_ALLOW_BATCH_CHANGE] != NULL;
  rr.allow_batch_change = rr.has_allow_batch_change;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_RESUME;
  req.resume = &rr;
  char ok[512];
  snprintf(ok, sizeof ok, "resumed %s", rr.name ? rr.name : "");
  /* re-forming waits for the whole job to meet and load */
  Dpm__Response *resp;
  int rc = n_shards ? ctl_long_call(ctx, &req, &resp) : ctl_call(ctx, &req, &resp);
  ctl_free_list(shards, n_shards);
  if (rc) return rc;
  rc = ctl_print_response(ctx, resp, ok);
  /* what the daemon says besides (an elastic resume that changed the
   * global batch), on stderr: stdout keeps one JSON object */
  if (resp->message && *resp->message) fprintf(stderr, "dpmctl: %s\n", resp->message);
  dpm_client_free_response(resp);
  return rc;
}
static int cmd_delete(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_DELETE, "deleted %s", 0);
}

static int cmd_list(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_LIST;
  req.list = &empty_msg;
  return call_print(ctx, &req, "no models");
}

/* queue: the list's models, each device group under its name (output.c). */
static int cmd_queue(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_QUEUE;
  req.queue = &empty_msg;
  Dpm__Response *r;
  int rc = ctl_call(ctx, &req, &r);
  if (rc) return rc;
  rc = ctl_print_queue(ctx, r);
  dpm_client_free_response(r);
  return rc;
}

/* set NAME --priority N --weight W --preempt keep|spill, one or more; the
 * daemon answers with the model. */
static int cmd_set(ctl_ctx *ctx) {
  Dpm__Schedule sched = DPM__SCHEDULE__INIT;
  char msg[256];
  if (ctl_parse_schedule(ctx->a, 1, &sched, msg, sizeof msg) < 0)
    return usage_error(ctx, msg);
  Dpm__SetRequest sr = DPM__SET_REQUEST__INIT;
  sr.name = (char *)pos(ctx, 0);
  sr.has_priority = sched.has_priority;
  sr.priority = sched.priority;
  sr.has_weight = sched.has_weight;
  sr.weight = sched.weight;
  sr.has_preempt = sched.has_preempt;
  sr.preempt = sched.preempt;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_SET;
  req.set = &sr;
  char ok[512];
  snprintf(ok, sizeof ok, "set %s", sr.name ? sr.name : "");
  return call_print(ctx, &req, ok);
}

static int cmd_metrics(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_METRICS;
  req.metrics = &empty_msg;
  return call_print(ctx, &req, "");
}

static int cmd_shutdown(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_SHUTDOWN;
  req.shutdown = &empty_msg;
  return long_call_print(ctx, &req, "dpmd is shutting down");
}

static int cmd_checkpoint(ctl_ctx *ctx) {
  Dpm__CheckpointRequest cr = DPM__CHECKPOINT_REQUEST__INIT;
  cr.name = (char *)pos(ctx, 0);
  char *out = NULL;
  if (ctx->a->opt[O_OUT] && !(out = absolute(ctx->a->opt[O_OUT]))) return no_memory(ctx);
  cr.out = out;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_CHECKPOINT;
  req.checkpoint = &cr;
  int rc = long_call_print(ctx, &req, "checkpoint");
  free(out);
  return rc;
}

static int cmd_load(ctl_ctx *ctx) {
  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = (char *)pos(ctx, 0);
  char *path = absolute(pos(ctx, 1));
  if (!path) return no_memory(ctx);
  lr.path = path;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_LOAD;
  req.load = &lr;
  int rc = long_call_print(ctx, &req, NULL);
  free(path);
  return rc;
}

static int cmd_extract(ctl_ctx *ctx) {
  Dpm__ExtractRequest er = DPM__EXTRACT_REQUEST__INIT;
  er.name = (char *)pos(ctx, 0);
  int rc;
  char *out = absolute(ctx->a->opt[O_OUT]);
  if (!out) return no_memory(ctx);
  if (ctl_split(ctx->a->opt[O_INPUTS], &er.inputs, &er.n_inputs)) {
    rc = usage_error(ctx, "--inputs takes blob names separated by commas");
  } else if (ctl_split(ctx->a->opt[O_OUTPUTS], &er.outputs, &er.n_outputs)) {
    rc = usage_error(ctx, "--outputs takes blob names separated by commas");
  } else {
    er.out = out;
    er.format = (char *)ctx->a->opt[O_FORMAT]; /* NULL: the default, dpm */
    Dpm__Request req = DPM__REQUEST__INIT;
    req.command_case = DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR;
    req.extract_predictor = &er;
    rc = long_call_print(ctx, &req, "predictor");
  }
  ctl_free_list(er.inputs, er.n_inputs);
  ctl_free_list(er.outputs, er.n_outputs);
  free(out);
  return rc;
}

static int cmd_get_blob(ctl_ctx *ctx) {
  Dpm__GetBlobRequest gb = DPM__GET_BLOB_REQUEST__INIT;
  gb.name = (char *)pos(ctx, 0);
  gb.blob = (char *)pos(ctx, 1);
  gb.device = (char *)ctx->a->opt[O_DEVICE];
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_GET_BLOB;
  req.get_blob = &gb;
  Dpm__Response *r;
  int rc = ctl_long_call(ctx, &req, &r);
  if (rc) return rc;
  if (r->result_case == DPM__RESPONSE__RESULT_BLOB) {
    rc = ctl_print_blob(ctx, r->blob, ctx->a->opt[O_OUT]);
  } else {
    ctl_error(ctx, "CORRUPT", "dpmd answered get-blob without a tensor");
    rc = CTL_FAILED;
  }
  dpm_client_free_response(r);
  return rc;
}

static int cmd_help(ctl_ctx *ctx) {
  const char *name = pos(ctx, 0);
  for (int i = 0; name && i < ctl_n_verbs; i++)
    if (!strcmp(ctl_verbs[i].cmd->name, name)) {
      ctl_usage(stdout, &ctl_verbs[i]);
      return CTL_OK;
    }
  if (name) {
    char msg[256];
    snprintf(msg, sizeof msg, "no such command '%s' ('dpmctl help' lists them)", name);
    return usage_error(ctx, msg);
  }
  ctl_usage(stdout, NULL);
  return CTL_OK;
}

/* ---- the table ---- */

/* Help for an option that means something particular for a verb. */
#define OPT_HELP(...) ((const char *const[O_N_OPTIONS]){__VA_ARGS__})
/* The verb of the command list's row DPM_CMD_id (its name, usage and help). */
#define VERB(id) &dpm_commands[DPM_CMD_##id]
/* What submit and set may change of a model's schedule. */
#define SCHEDULE_OPTS (OPT(O_PRIORITY) | OPT(O_WEIGHT) | OPT(O_PREEMPT))

/* In the list's order: every command of the list that is not internal. */
const ctl_verb ctl_verbs[] = {
    {VERB(PING), 0, 0, 0, 0, cmd_ping, NULL},
    {VERB(VERSION_INFO), 0, 0, 0, 0, cmd_version, NULL},
    {VERB(SUBMIT), 1, 1,
     OPT(O_NAME) | OPT(O_DEVICES) | OPT(O_CHECKPOINT_EVERY) | OPT(O_SHARDS) |
         SCHEDULE_OPTS | OPT(O_MAX_MEMORY) | OPT(O_NO_QUEUE),
     0, cmd_submit, NULL},
    {VERB(TRAIN), 1, 1, OPT(O_ITERS) | OPT(O_EPOCHS) | OPT(O_WAIT) | OPT(O_NO_PROGRESS),
     0, cmd_train, NULL},
    {VERB(STATUS), 0, 1, 0, 0, cmd_status, NULL},
    {VERB(LIST), 0, 0, 0, 0, cmd_list, NULL},
    {VERB(QUEUE), 0, 0, 0, 0, cmd_queue, NULL},
    {VERB(SET), 1, 1, SCHEDULE_OPTS, 0, cmd_set,
     .opt_help = OPT_HELP([O_PRIORITY] = "its new priority, -1000 to 1000: a higher one "
                                         "runs first, and one that trains preempts lower "
                                         "ones on its devices",
                          [O_WEIGHT] = "its new share of its devices' time among the "
                                       "models of its priority, above 0 up to 1000",
                          [O_PREEMPT] = "what it does while preempted from now on: keep "
                                        "stays resident, spill checkpoints and frees its "
                                        "memory")},
    {VERB(WATCH), 0, 1, OPT(O_COUNT) | OPT(O_UNTIL_DONE), 0, ctl_cmd_watch,
     .opt_help = OPT_HELP([O_COUNT] = "stop after N events")},
    {VERB(CHECKPOINT), 1, 1, OPT(O_OUT), 0, cmd_checkpoint,
     .opt_help = OPT_HELP([O_OUT] = "write the checkpoint to FILE instead (under the "
                                    "state dir or the config's allowed_paths)")},
    {VERB(LOAD), 2, 2, 0, 0, cmd_load, NULL},
    {VERB(SYNC), 1, 1, 0, 0, cmd_sync, NULL},
    {VERB(EXTRACT_PREDICTOR), 1, 1,
     OPT(O_INPUTS) | OPT(O_OUTPUTS) | OPT(O_OUT) | OPT(O_FORMAT),
     OPT(O_INPUTS) | OPT(O_OUTPUTS) | OPT(O_OUT), cmd_extract,
     .opt_help = OPT_HELP([O_OUT] = "the directory to write (under the state dir or "
                                    "the config's allowed_paths)")},
    {VERB(EVAL), 1, 1, 0, 0, cmd_eval, NULL},
    {VERB(PREDICT), 1, 1,
     OPT(O_INPUT) | OPT(O_LABELS) | OPT(O_COUNT) | OPT(O_DEVICE) | OPT(O_OUT),
     OPT(O_INPUT), ctl_cmd_predict,
     .opt_help =
         OPT_HELP([O_COUNT] = "how many images, from the first (default 10; 0: all)",
                  [O_DEVICE] = "cpu (default) or cuda:N",
                  [O_OUT] =
                      "also write output 0 of every image to FILE: raw little-endian "
                      "float32, one row per image")},
    {VERB(GET_BLOB), 2, 2, OPT(O_DEVICE) | OPT(O_OUT), 0, cmd_get_blob,
     .opt_help = OPT_HELP([O_DEVICE] = "the replica's device (default: the master, the "
                                       "first)",
                          [O_OUT] = "also write the raw little-endian bytes to FILE "
                                    "(here, not on the daemon's side)")},
    {VERB(PAUSE), 1, 1, 0, 0, cmd_pause, NULL},
    {VERB(RESUME), 1, 1, OPT(O_SHARDS) | OPT(O_ALLOW_BATCH_CHANGE), 0, cmd_resume,
     .opt_help = OPT_HELP([O_SHARDS] = "re-form the job over these daemons "
                                       "(tcp://HOST:PORT each), this one first")},
    {VERB(DELETE), 1, 1, 0, 0, cmd_delete, NULL},
    {VERB(METRICS), 0, 0, 0, 0, cmd_metrics, NULL},
    {VERB(SHUTDOWN), 0, 0, 0, 0, cmd_shutdown, NULL},
    {VERB(HELP), 0, 1, 0, 0, cmd_help, NULL},
};
const int ctl_n_verbs = (int)(sizeof ctl_verbs / sizeof *ctl_verbs);
