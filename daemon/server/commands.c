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
#include "server/store.h"
#include "common/validate.h"
#include "spec/spec.h"

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

static int replace_str(char **field, const char *value) {
  char *s = strdup(value);
  if (!s) return -1;
  free(*field);
  *field = s;
  return 0;
}

/* Name, devices and checkpoint policy from the request override the spec's. */
static dpm_status apply_overrides(Dpm__ModelSpec *spec, Dpm__SubmitRequest *r,
                                  dpm_err *err) {
  if (r->name && *r->name && replace_str(&spec->name, r->name)) goto nomem;
  if (r->checkpoint) {
    if (dpm_checkpoint_policy_validate(r->checkpoint, err)) return err->code;
    dpm__checkpoint_policy__free_unpacked(spec->checkpoint, NULL);
    spec->checkpoint = r->checkpoint; /* the spec owns it now */
    r->checkpoint = NULL;
  }
  if (!spec->parallel) {
    if (!(spec->parallel = malloc(sizeof *spec->parallel))) goto nomem;
    dpm__parallel_spec__init(spec->parallel);
  }
  Dpm__ParallelSpec *p = spec->parallel;
  if (r->n_devices) {
    char **v = calloc(r->n_devices, sizeof *v);
    if (!v) goto nomem;
    for (size_t i = 0; i < r->n_devices; i++)
      if (!(v[i] = strdup(r->devices[i]))) {
        for (size_t j = 0; j < i; j++) free(v[j]);
        free(v);
        goto nomem;
      }
    for (size_t i = 0; i < p->n_devices; i++) free(p->devices[i]);
    free(p->devices);
    p->devices = v;
    p->n_devices = r->n_devices;
  }
  if (!p->n_devices) { /* the spec names none: cpu:0 */
    if (!(p->devices = malloc(sizeof *p->devices)) || !(p->devices[0] = strdup("cpu:0")))
      goto nomem;
    p->n_devices = 1;
  }
  return DPM_OK;
nomem:
  return dpm_errf(err, DPM_NOMEM, "out of memory");
}

static void cmd_submit(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to, dpmd_model *m) {
  (void)m;
  Dpm__ModelSpec *spec = rq->submit->spec;
  dpm_err err = {0};
  if (apply_overrides(spec, rq->submit, &err))
    return dpmd_reply_error(d, to, err.code, "%s", err.msg);
  if (!dpm_model_name_valid(spec->name))
    return dpmd_reply_error(d, to, DPM_INVALID,
                            "model name '%s': use 1-64 of A-Z a-z 0-9 . _ -, not starting "
                            "with '.'",
                            spec->name);
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

/* A path whose form alone is refused (paths.h: the model thread resolves
 * and confines it when it uses it). */
static int bad_path(dpmd *d, dpmd_reply_to *to, const char *path) {
  dpm_err err = {0};
  if (!dpmd_paths_check(d->paths, path, &err)) return 0;
  dpmd_reply_error(d, to, err.code, "%s", err.msg);
  return 1;
}

/* Argument checks of commands that run on the model, before queueing. */
static int bad_arguments(dpmd *d, const Dpm__Request *rq, dpmd_reply_to *to) {
  switch (rq->command_case) {
  case DPM__REQUEST__COMMAND_TRAIN:
    if (rq->train->iters == 0 || rq->train->iters > (1ull << 40)) {
      dpmd_reply_error(d, to, DPM_INVALID, "iters must be 1..2^40");
      return 1;
    }
    return 0;
  case DPM__REQUEST__COMMAND_CHECKPOINT:
    return rq->checkpoint->out && *rq->checkpoint->out &&
           bad_path(d, to, rq->checkpoint->out);
  case DPM__REQUEST__COMMAND_LOAD: return bad_path(d, to, rq->load->path);
  case DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR: {
    const Dpm__ExtractRequest *r = rq->extract_predictor;
    if (strcmp(r->format, "dpm") != 0) {
      dpmd_reply_error(d, to, DPM_UNSUPPORTED,
                       "predictor format '%s': this dpmd writes 'dpm' only", r->format);
      return 1;
    }
    if (!r->n_inputs || !r->n_outputs) {
      dpmd_reply_error(d, to, DPM_INVALID, "extract-predictor needs inputs and outputs");
      return 1;
    }
    return bad_path(d, to, r->out);
  }
  default: return 0;
  }
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
  const command *c = lookup(rq->command_case);
  const char *name = model_name(rq);
  dpmd_model *m = find(d, name);
  if (!c)
    dpmd_reply_error(d, to, DPM_UNSUPPORTED, "unknown command %d", (int)rq->command_case);
  else if ((c->flags & MUTATING) && d->stopping)
    dpmd_reply_error(d, to, DPM_STATE, "dpmd is shutting down");
  else if ((c->flags & NEEDS_MODEL || (name && *name)) && (!m || dpmd_model_ending(m)))
    dpmd_reply_error(d, to, DPM_NOT_FOUND, "no model named '%s'", name ? name : "");
  else if (c->flags & ON_MODEL) {
    if (!bad_arguments(d, rq, to)) return dpmd_model_post(m, rq, to); /* takes rq */
  } else {
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
    dpm_err err = {0};
    dpmd_model **grown = realloc(d->models, (size_t)(d->n_models + 1) * sizeof *grown);
    if (grown) d->models = grown;
    if (!grown || dpmd_store_model_dir(d->cfg->state_dir, names[i], dir, sizeof dir) ||
        dpmd_store_load_spec(dir, &spec, &err) ||
        replace_str(&spec->name, names[i]) ||
        dpmd_model_new(d, spec, 1, NULL, &d->models[d->n_models], &err)) {
      dpmd_error("model %s not restored: %s", names[i], err.msg);
      if (!err.code) dpm_spec_free(spec);
    } else {
      d->n_models++;
    }
    free(names[i]);
  }
  free(names);
}
