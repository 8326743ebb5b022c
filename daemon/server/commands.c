/* The command table (commands.h): one row per RPC command, the argument
 * checks and model names the rows point at, the handlers that run on the
 * loop thread, and dispatch. The jobs that run on a model's thread are
 * model.c's (dpmd_job_*). */
#include "server/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/spec.h"
#include "common/validate.h"
#include "server/devices.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/model.h"
#include "server/paths.h"

enum {
  NEEDS_MODEL = 1, /* must name a registered model (any model named must be) */
  ON_MODEL = 2,    /* runs on the model's thread (a job) */
  MUTATING = 4,    /* refused once the daemon is stopping */
};

/* What a loop handler works with. */
typedef struct call {
  dpmd *d;
  dpmd_registry *models;
  Dpm__Request *rq;
  dpmd_reply_to *to;
  dpmd_model *m; /* the model the request names, registered; NULL when none */
} call;

typedef struct command {
  Dpm__Request__CommandCase cmd; /* the Request's oneof case */
  const char *name;              /* as dpmctl and the metrics name it */
  unsigned flags;
  /* The arguments' check that needs no model (may rewrite rq: submit's
   * overrides); NULL: none. */
  dpm_status (*check)(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err);
  /* The model the request names (NULL or "": none); NULL: names none. */
  const char *(*model)(const Dpm__Request *rq);
  void (*run)(const call *c); /* on the loop thread; NULL for ON_MODEL */
  dpmd_job_fn job;            /* on the model's thread; ON_MODEL only */
} command;

/* ---- argument checks ---------------------------------------------------------- */

/* Name, devices and checkpoint policy from a submit override its spec's
 * (moved from the request into the spec); a spec naming no devices gets
 * cpu:0. */
static dpm_status check_submit(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  (void)paths;
  Dpm__SubmitRequest *r = rq->submit;
  Dpm__ModelSpec *spec = r->spec;
  if (r->name && *r->name) {
    char *t = spec->name;
    spec->name = r->name;
    r->name = t;
  }
  if (r->checkpoint) {
    if (dpm_checkpoint_policy_validate(r->checkpoint, err)) return err->code;
    Dpm__CheckpointPolicy *t = spec->checkpoint;
    spec->checkpoint = r->checkpoint;
    r->checkpoint = t;
  }
  if (!spec->parallel) {
    if (!(spec->parallel = malloc(sizeof *spec->parallel)))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    dpm__parallel_spec__init(spec->parallel);
  }
  Dpm__ParallelSpec *p = spec->parallel;
  if (r->n_devices) {
    char **t = p->devices;
    size_t n = p->n_devices;
    p->devices = r->devices, p->n_devices = r->n_devices;
    r->devices = t, r->n_devices = n;
  }
  if (!p->n_devices) {
    if (!(p->devices = malloc(sizeof *p->devices)) || !(p->devices[0] = strdup("cpu:0")))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    p->n_devices = 1;
  }
  if (!dpm_model_name_valid(spec->name)) {
    char b[80];
    return dpm_errf(
        err, DPM_INVALID,
        "model name '%s': use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.'",
        dpm_escape(spec->name, b, sizeof b));
  }
  return DPM_OK;
}

static dpm_status check_train(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  (void)paths;
  if (rq->train->iters == 0 || rq->train->iters > DPMD_MAX_ITERS)
    return dpm_errf(err, DPM_INVALID, "iters must be 1..2^40");
  return DPM_OK;
}

static dpm_status check_checkpoint(const dpmd_paths *paths, Dpm__Request *rq,
                                   dpm_err *err) {
  const char *out = rq->checkpoint->out;
  return out && *out ? dpmd_paths_check(paths, out, err) : DPM_OK;
}

static dpm_status check_load(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  return dpmd_paths_check(paths, rq->load->path, err);
}

static dpm_status check_extract(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  const Dpm__ExtractRequest *r = rq->extract_predictor;
  char b[80];
  if (strcmp(r->format, "dpm") != 0)
    return dpm_errf(err, DPM_UNSUPPORTED,
                    "predictor format '%s': this dpmd writes 'dpm' only",
                    dpm_escape(r->format, b, sizeof b));
  if (!r->n_inputs || !r->n_outputs)
    return dpm_errf(err, DPM_INVALID, "extract-predictor needs inputs and outputs");
  return dpmd_paths_check(paths, r->out, err);
}

/* ---- model names -------------------------------------------------------------- */

/* name_FIELD: the name in the request's FIELD (every such message has one). */
#define MODEL_NAME(field)                                                                \
  static const char *name_##field(const Dpm__Request *rq) { return rq->field->name; }
MODEL_NAME(train)
MODEL_NAME(status)
MODEL_NAME(watch)
MODEL_NAME(checkpoint)
MODEL_NAME(load)
MODEL_NAME(sync)
MODEL_NAME(extract_predictor)
MODEL_NAME(eval)
MODEL_NAME(get_blob)
MODEL_NAME(pause)
MODEL_NAME(resume)
MODEL_NAME(delete_)
#undef MODEL_NAME

/* ---- loop handlers ------------------------------------------------------------ */

static void run_version(const call *c) {
  dpmd *d = c->d;
  int n = dpmd_devices_count(d->devices);
  const char **names = malloc((size_t)n * sizeof *names);
  if (!names) return dpmd_reply_error(d, c->to, DPM_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) names[i] = dpmd_devices_name(d->devices, i);
  Dpm__VersionInfo v = DPM__VERSION_INFO__INIT;
  v.version = DPMD_VERSION;
  v.protocol = DPM_PROTOCOL_VERSION;
  v.n_devices = (size_t)n;
  v.devices = (char **)names;
  v.has_uptime_s = 1;
  v.uptime_s = dpmd_now() - d->started;
  v.has_instance = 1;
  v.instance = d->instance;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_VERSION;
  rs.version = &v;
  dpmd_reply(d, c->to, &rs);
  free(names);
}

static void run_submit(const call *c) {
  dpmd *d = c->d;
  Dpm__ModelSpec *spec = c->rq->submit->spec; /* overrides applied (check_submit) */
  dpm_err err = {0};
  if (dpmd_registry_find(c->models, spec->name))
    return dpmd_reply_error(d, c->to, DPM_EXISTS, "a model named %s exists", spec->name);
  if (dpmd_registry_count(c->models) >= d->cfg->max_models)
    return dpmd_reply_error(d, c->to, DPM_DENIED,
                            "this dpmd holds at most %d models (max_models)",
                            d->cfg->max_models);
  if (dpmd_devices_check(d->devices, spec->parallel->devices, spec->parallel->n_devices,
                         &err))
    return dpmd_reply_error(d, c->to, err.code, "%s: %s", spec->name, err.msg);
  if (dpm_spec_validate(spec, &err))
    return dpmd_reply_error(d, c->to, err.code, "%s", err.msg);
  if (dpmd_registry_reserve(c->models, &err))
    return dpmd_reply_error(d, c->to, err.code, "%s", err.msg);
  dpmd_model *m;
  c->rq->submit->spec = NULL; /* the model owns it now */
  if (dpmd_model_new(d, spec, 0, c->to, &m, &err))
    return dpmd_reply_error(d, c->to, err.code, "%s", err.msg);
  dpmd_registry_add(c->models, dpmd_model_name(m), m);
  dpmd_notify_serving(d, dpmd_registry_count(c->models));
  dpmd_info("model %s: submitted on %zu device(s)", dpmd_model_name(m),
            spec->parallel->n_devices);
}

static void reply_models(const call *c) {
  int n = dpmd_registry_count(c->models);
  Dpm__ModelInfo *info = calloc((size_t)n + 1, sizeof *info);
  Dpm__ModelInfo **ptr = calloc((size_t)n + 1, sizeof *ptr);
  dpmd_info_buf *buf = calloc((size_t)n + 1, sizeof *buf);
  if (!info || !ptr || !buf) {
    dpmd_reply_error(c->d, c->to, DPM_NOMEM, "out of memory");
  } else {
    for (int i = 0; i < n; i++) {
      dpmd_model_info(dpmd_registry_at(c->models, i), &info[i], &buf[i]);
      ptr[i] = &info[i];
    }
    Dpm__ModelList list = DPM__MODEL_LIST__INIT;
    list.n_model = (size_t)n;
    list.model = ptr;
    Dpm__Response rs = DPM__RESPONSE__INIT;
    rs.result_case = DPM__RESPONSE__RESULT_MODELS;
    rs.models = &list;
    dpmd_reply(c->d, c->to, &rs);
  }
  free(info);
  free(ptr);
  free(buf);
}

static void run_status(const call *c) {
  if (!c->m) return reply_models(c); /* no name: every model */
  dpmd_model_reply_info(c->m, c->to);
}

static void run_list(const call *c) { reply_models(c); }

static void run_watch(const call *c) {
  const dpmd_config *cfg = c->d->cfg;
  if (!cfg->events)
    return dpmd_reply_error(c->d, c->to, DPM_UNSUPPORTED,
                            "this dpmd publishes no events (set events in its config)");
  Dpm__WatchInfo w = DPM__WATCH_INFO__INIT;
  w.events = cfg->events;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_WATCH;
  rs.watch = &w;
  dpmd_reply(c->d, c->to, &rs);
}

static void run_delete(const call *c) {
  dpmd_info("model %s: deleting", dpmd_model_name(c->m));
  dpmd_model_end(c->m, 1, c->to);
}

static void run_metrics(const call *c) {
  char *text = dpmd_metrics_text(c->d, c->models, dpmd_command_name);
  if (!text) return dpmd_reply_error(c->d, c->to, DPM_NOMEM, "out of memory");
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_METRICS;
  rs.metrics = text;
  dpmd_reply(c->d, c->to, &rs);
  free(text);
}

static void run_shutdown(const call *c) {
  dpmd_info("shutdown requested");
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpmd_reply(c->d, c->to, &rs);
  dpmd_shutdown(c->d, c->models);
}

/* ---- the table ---------------------------------------------------------------- */

/* LOOP: runs on the loop thread. JOB: runs on the named model's thread. */
// clang-format off
#define LOOP(case_, name, flags, check, model, fn)                                       \
  {DPM__REQUEST__COMMAND_##case_, name, flags, check, model, fn, NULL}
#define JOB(case_, name, flags, check, model, fn)                                        \
  {DPM__REQUEST__COMMAND_##case_, name, NEEDS_MODEL | ON_MODEL | (flags), check, model, \
   NULL, fn}
// clang-format on
static const command commands[] = {
    LOOP(PING, "ping", 0, NULL, NULL, run_version),
    LOOP(VERSION_INFO, "version", 0, NULL, NULL, run_version),
    LOOP(SUBMIT, "submit", MUTATING, check_submit, NULL, run_submit),
    JOB(TRAIN, "train", MUTATING, check_train, name_train, dpmd_job_train),
    LOOP(STATUS, "status", 0, NULL, name_status, run_status),
    LOOP(LIST, "list", 0, NULL, NULL, run_list),
    LOOP(WATCH, "watch", 0, NULL, name_watch, run_watch),
    JOB(CHECKPOINT, "checkpoint", MUTATING, check_checkpoint, name_checkpoint,
        dpmd_job_checkpoint),
    JOB(LOAD, "load", MUTATING, check_load, name_load, dpmd_job_load),
    JOB(SYNC, "sync", MUTATING, NULL, name_sync, dpmd_job_sync),
    JOB(EXTRACT_PREDICTOR, "extract-predictor", 0, check_extract, name_extract_predictor,
        dpmd_job_extract),
    JOB(EVAL, "eval", 0, NULL, name_eval, dpmd_job_eval),
    JOB(GET_BLOB, "get-blob", 0, NULL, name_get_blob, dpmd_job_get_blob),
    JOB(PAUSE, "pause", MUTATING, NULL, name_pause, dpmd_job_pause),
    JOB(RESUME, "resume", MUTATING, NULL, name_resume, dpmd_job_resume),
    LOOP(DELETE, "delete", NEEDS_MODEL | MUTATING, NULL, name_delete_, run_delete),
    LOOP(METRICS, "metrics", 0, NULL, NULL, run_metrics),
    LOOP(SHUTDOWN, "shutdown", MUTATING, NULL, NULL, run_shutdown),
};
#undef LOOP
#undef JOB

static const command *lookup(int c) {
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if ((int)commands[i].cmd == c) return &commands[i];
  return NULL;
}

const char *dpmd_command_name(int c) {
  const command *k = lookup(c);
  return k ? k->name : "unknown";
}

dpm_status dpmd_command_check(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  const command *c = lookup(rq->command_case);
  return c && c->check ? c->check(paths, rq, err) : DPM_OK;
}

/* ---- dispatch ----------------------------------------------------------------- */

void dpmd_handle(dpmd *d, dpmd_registry *models, Dpm__Request *rq, dpmd_reply_to *to) {
  dpm_err err = {0};
  const command *c = lookup(rq->command_case);
  const char *name = c && c->model ? c->model(rq) : NULL;
  dpmd_model *m = dpmd_registry_find(models, name);
  if (!c)
    dpmd_reply_error(d, to, DPM_UNSUPPORTED, "unknown command %d", (int)rq->command_case);
  else if ((c->flags & MUTATING) && dpmd_stopping(d))
    dpmd_reply_error(d, to, DPM_STATE, "dpmd is shutting down");
  else if ((c->flags & NEEDS_MODEL || (name && *name)) && (!m || dpmd_model_ending(m)))
    dpmd_reply_error(d, to, DPM_NOT_FOUND, "no model named '%s'", name ? name : "");
  else if (c->check && c->check(d->paths, rq, &err))
    dpmd_reply_error(d, to, err.code, "%s", err.msg);
  else if (c->flags & ON_MODEL)
    return dpmd_model_post(m, c->job, c->name, rq, to); /* takes rq */
  else {
    dpmd_debug("%s", c->name);
    c->run(&(call){.d = d, .models = models, .rq = rq, .to = to, .m = m});
  }
  dpm__request__free_unpacked(rq, NULL);
}

void dpmd_shutdown(dpmd *d, dpmd_registry *models) {
  if (dpmd_begin_stopping(d)) return;
  for (int i = 0; i < dpmd_registry_count(models); i++) {
    dpmd_model *m = dpmd_registry_at(models, i);
    if (!dpmd_model_ending(m)) dpmd_model_end(m, 0, NULL);
  }
}
