/* The command table: the one place an RPC command is declared (name,
 * handler, flags), and the handlers that run on the loop thread. Commands
 * flagged ON_MODEL are checked here and then queued to the model's thread
 * (server/model.h), which answers when the work is done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/devices.h"
#include "server/dpmd.h"
#include "server/log.h"
#include "server/model.h"
#include "server/paths.h"
#include "server/request.h"
#include "server/store.h"
#include "common/validate.h"
#include "common/spec.h"

enum {
  NEEDS_MODEL = 1, /* names an existing model */
  ON_MODEL = 2,    /* runs on the model's thread */
  MUTATING = 4,    /* refused once the daemon is stopping */
};

typedef void (*handler)(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m);

typedef struct command {
  Dpm__Request__CommandCase cmd;
  const char *name;
  handler fn;  /* NULL: queue to the model (ON_MODEL) */
  unsigned flags;
} command;

/* ---- helpers --------------------------------------------------------------- */

static dpmd_model *find(dpmd *d, const char *name) {
  for (int i = 0; name && i < d->n_models; i++)
    if (strcmp(dpmd_model_name(d->models[i]), name) == 0) return d->models[i];
  return NULL;
}

/* The model a request names (NULL when the command names none). */
static const char *model_name(const Dpm__Request *rq) {
  switch (rq->command_case) {
  case DPM__REQUEST__COMMAND_TRAIN: return rq->train->name;
  case DPM__REQUEST__COMMAND_STATUS: return rq->status->name;
  case DPM__REQUEST__COMMAND_WATCH: return rq->watch->name;
  case DPM__REQUEST__COMMAND_CHECKPOINT: return rq->checkpoint->name;
  case DPM__REQUEST__COMMAND_LOAD: return rq->load->name;
  case DPM__REQUEST__COMMAND_SYNC: return rq->sync->name;
  case DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR: return rq->extract_predictor->name;
  case DPM__REQUEST__COMMAND_EVAL: return rq->eval->name;
  case DPM__REQUEST__COMMAND_GET_BLOB: return rq->get_blob->name;
  case DPM__REQUEST__COMMAND_PAUSE: return rq->pause->name;
  case DPM__REQUEST__COMMAND_RESUME: return rq->resume->name;
  case DPM__REQUEST__COMMAND_DELETE: return rq->delete_->name;
  default: return NULL;
  }
}

static void reply_ok(dpmd *d, dpmd_reply_to *to) {
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpmd_reply(d, to, &rs);
}

/* ---- handlers --------------------------------------------------------------- */

static void cmd_version(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)rq, (void)m;
  int n = dpmd_devices_count(d->devices);
  const char **names = malloc((size_t)n * sizeof *names);
  if (!names) return dpmd_reply_error(d, to, DPM_NOMEM, "out of memory");
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
  dpmd_reply(d, to, &rs);
  free(names);
}

static void cmd_submit(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)m;
  Dpm__ModelSpec *spec = rq->submit->spec; /* overrides applied (request.h) */
  dpm_err err = {0};
  if (find(d, spec->name))
    return dpmd_reply_error(d, to, DPM_EXISTS, "a model named %s exists", spec->name);
  if (d->n_models >= d->cfg->max_models)
    return dpmd_reply_error(d, to, DPM_DENIED, "this dpmd holds at most %d models (max_models)",
                            d->cfg->max_models);
  if (dpmd_devices_check(d->devices, spec->parallel->devices, spec->parallel->n_devices,
                         &err))
    return dpmd_reply_error(d, to, err.code, "%s: %s", spec->name, err.msg);
  if (dpm_spec_validate(spec, &err)) return dpmd_reply_error(d, to, err.code, "%s", err.msg);
  dpmd_model **grown = realloc(d->models, (size_t)(d->n_models + 1) * sizeof *grown);
  if (!grown) return dpmd_reply_error(d, to, DPM_NOMEM, "out of memory");
  d->models = grown;
  rq->submit->spec = NULL; /* the model owns it now */
  if (dpmd_model_new(d, spec, 0, to, &d->models[d->n_models], &err))
    return dpmd_reply_error(d, to, err.code, "%s", err.msg);
  d->n_models++;
  dpmd_notify_status(d);
  dpmd_info("model %s: submitted on %zu device(s)", spec->name, spec->parallel->n_devices);
}

static void reply_models(dpmd *d, dpmd_reply_to *to, dpmd_model **models, int n) {
  Dpm__ModelInfo *info = calloc((size_t)n + 1, sizeof *info);
  Dpm__ModelInfo **ptr = calloc((size_t)n + 1, sizeof *ptr);
  dpmd_info_buf *buf = calloc((size_t)n + 1, sizeof *buf);
  if (!info || !ptr || !buf) {
    dpmd_reply_error(d, to, DPM_NOMEM, "out of memory");
  } else {
    for (int i = 0; i < n; i++) {
      dpmd_model_info(models[i], &info[i], &buf[i]);
      ptr[i] = &info[i];
    }
    Dpm__ModelList list = DPM__MODEL_LIST__INIT;
    list.n_model = (size_t)n;
    list.model = ptr;
    Dpm__Response rs = DPM__RESPONSE__INIT;
    rs.result_case = DPM__RESPONSE__RESULT_MODELS;
    rs.models = &list;
    dpmd_reply(d, to, &rs);
  }
  free(info);
  free(ptr);
  free(buf);
}

static void cmd_status(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  if (rq->command_case == DPM__REQUEST__COMMAND_LIST || !m)
    return reply_models(d, to, d->models, d->n_models);
  dpmd_model_reply_info(m, to);
}

static void cmd_watch(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)rq, (void)m;
  if (!d->cfg->events)
    return dpmd_reply_error(d, to, DPM_UNSUPPORTED, "this dpmd publishes no events "
                                                    "(set events in its config)");
  Dpm__WatchInfo w = DPM__WATCH_INFO__INIT;
  w.events = d->cfg->events;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_WATCH;
  rs.watch = &w;
  dpmd_reply(d, to, &rs);
}

static void cmd_delete(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)d, (void)rq;
  dpmd_info("model %s: deleting", dpmd_model_name(m));
  dpmd_model_end(m, 1, to);
}

static void cmd_metrics(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)rq, (void)m;
  char *text = dpmd_metrics_text(d);
  if (!text) return dpmd_reply_error(d, to, DPM_NOMEM, "out of memory");
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_METRICS;
  rs.metrics = text;
  dpmd_reply(d, to, &rs);
  free(text);
}

static void cmd_shutdown(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)rq, (void)m;
  dpmd_info("shutdown requested");
  reply_ok(d, to);
  dpmd_shutdown(d);
}

/* ---- the table -------------------------------------------------------------- */

#define C(case_, name, fn, flags) {DPM__REQUEST__COMMAND_##case_, name, fn, flags}
static const command commands[] = {
    C(PING, "ping", cmd_version, 0),
    C(VERSION_INFO, "version", cmd_version, 0),
    C(SUBMIT, "submit", cmd_submit, MUTATING),
    C(TRAIN, "train", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(STATUS, "status", cmd_status, 0),
    C(LIST, "list", cmd_status, 0),
    C(WATCH, "watch", cmd_watch, 0),
    C(CHECKPOINT, "checkpoint", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(LOAD, "load", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(SYNC, "sync", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(EXTRACT_PREDICTOR, "extract-predictor", NULL, NEEDS_MODEL | ON_MODEL),
    C(EVAL, "eval", NULL, NEEDS_MODEL | ON_MODEL),
    C(GET_BLOB, "get-blob", NULL, NEEDS_MODEL | ON_MODEL),
    C(PAUSE, "pause", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(RESUME, "resume", NULL, NEEDS_MODEL | ON_MODEL | MUTATING),
    C(DELETE, "delete", cmd_delete, NEEDS_MODEL | MUTATING),
    C(METRICS, "metrics", cmd_metrics, 0),
    C(SHUTDOWN, "shutdown", cmd_shutdown, MUTATING),
};
#undef C

static const command *lookup(Dpm__Request__CommandCase c) {
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (commands[i].cmd == c) return &commands[i];
  return NULL;
}

const char *dpmd_command_name(int c) {
  const command *k = lookup((Dpm__Request__CommandCase)c);
  return k ? k->name : "unknown";
}

void dpmd_handle(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to) {
  dpm_err err = {0};
  const command *c = lookup(rq->command_case);
  const char *name = model_name(rq);
  dpmd_model *m = find(d, name);
  if (!c)
    dpmd_reply_error(d, to, DPM_UNSUPPORTED, "unknown command %d", (int)rq->command_case);
  else if ((c->flags & MUTATING) && d->stopping)
    dpmd_reply_error(d, to, DPM_STATE, "dpmd is shutting down");
  else if ((c->flags & NEEDS_MODEL || (name && *name)) && (!m || dpmd_model_ending(m)))
    dpmd_reply_error(d, to, DPM_NOT_FOUND, "no model named '%s'", name ? name : "");
  else if (dpmd_request_check(d->paths, rq, &err))
    dpmd_reply_error(d, to, err.code, "%s", err.msg);
  else if (c->flags & ON_MODEL)
    return dpmd_model_post(m, rq, to); /* takes rq */
  else {
    dpmd_debug("%s", c->name);
    c->fn(d, rq, to, m);
  }
  dpm__request__free_unpacked(rq, NULL);
}

/* Models found in the state dir come back at their last checkpoint. */
void dpmd_restore_models(dpmd *d) {
  int n = 0;
  char **names = dpmd_store_models(d->cfg->state_dir, &n);
  for (int i = 0; i < n; i++) {
    char dir[4096];
    Dpm__ModelSpec *spec = NULL;
    dpm_err err = {.code = DPM_NOMEM, .msg = "out of memory"};
    int ok = 0;
    dpmd_model **grown = realloc(d->models, (size_t)(d->n_models + 1) * sizeof *grown);
    if (grown) d->models = grown;
    if (dpmd_store_model_dir(d->cfg->state_dir, names[i], dir, sizeof dir))
      dpm_errf(&err, DPM_INVALID, "state dir path too long");
    else if (grown && !dpmd_store_load_spec(dir, &spec, &err)) {
      free(spec->name); /* the model is its directory's name */
      if (!(spec->name = strdup(names[i])))
        dpm_spec_free(spec);
      else if ((ok = !dpmd_model_new(d, spec, 1, NULL, &d->models[d->n_models], &err)))
        d->n_models++;
      /* else dpmd_model_new freed the spec */
    }
    if (!ok) dpmd_error("model %s not restored: %s", names[i], err.msg);
    free(names[i]);
  }
  free(names);
}
