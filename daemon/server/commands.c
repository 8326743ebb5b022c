/* The command table (commands.h): the handling of each request of the
 * command list (common/commands.h), the argument checks and model names the
 * rows point at, the handlers that run on the loop thread, and dispatch.
 * The jobs that run on a model's thread are model.c's (dpmd_job_*). */
#include "server/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked_spec.h"
#include "common/commands.h"
#include "common/escape.h"
#include "common/spec.h"
#include "common/validate.h"
#include "server/devices.h"
#include "server/fleet/fleet.h"
#include "server/fleet/gather.h"
#include "server/fleet/kv.h"
#include "server/fleet/rendezvous.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/models/model.h"
#include "server/paths.h"
#include "server/sched.h"
#include "server/stream.h"

/* What a loop handler works with. */
typedef struct call {
  dpmd *d;
  dpmd_registry *models;
  Dpm__Request *rq;
  dpmd_reply_to *to;
  dpmd_model *m; /* the model the request names, registered; NULL when none */
} call;

/* A command's handling; its name, oneof case and flags are the list's
 * (common/commands.h). */
typedef struct command {
  /* The arguments' check that needs no model (may rewrite rq: submit's
   * overrides); NULL: none. */
  dpm_status (*check)(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err);
  /* The model the request names (NULL or "": none); NULL: names none. */
  const char *(*model)(const Dpm__Request *rq);
  void (*run)(const call *c); /* on the loop thread; NULL for a job */
  dpmd_job_fn job;            /* on the model's thread (its model must be named) */
} command;

/* ---- argument checks ---------------------------------------------------------- */

/* Name, devices and checkpoint policy from a submit override its spec's
 * (moved from the request into the spec); a spec naming no devices gets
 * cpu:0. */
/* A schedule's values (those given) within server/sched.h's bounds. */
static dpm_status check_schedule(int has_priority, int priority, int has_weight,
                                 double weight, int has_preempt, int preempt,
                                 dpm_err *err) {
  if (has_priority && (priority < -DPMD_PRIORITY_MAX || priority > DPMD_PRIORITY_MAX))
    return dpm_errf(err, DPM_INVALID, "priority %d: priorities are -%d..%d", priority,
                    DPMD_PRIORITY_MAX, DPMD_PRIORITY_MAX);
  if (has_weight && !(weight > 0 && weight <= DPMD_WEIGHT_MAX))
    return dpm_errf(err, DPM_INVALID, "weight %g: weights are above 0, at most %g",
                    weight, DPMD_WEIGHT_MAX);
  if (has_preempt && preempt != DPM__PREEMPT_POLICY__PREEMPT_KEEP &&
      preempt != DPM__PREEMPT_POLICY__PREEMPT_SPILL)
    return dpm_errf(err, DPM_INVALID, "preempt policy %d: keep (0) or spill (1)",
                    preempt);
  return DPM_OK;
}

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
  if (r->n_shards) {
    char **t = p->shards;
    size_t n = p->n_shards;
    p->shards = r->shards, p->n_shards = r->n_shards;
    r->shards = t, r->n_shards = n;
  }
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
  const Dpm__Schedule *sc = r->schedule;
  return sc ? check_schedule(sc->has_priority, sc->priority, sc->has_weight, sc->weight,
                             sc->has_preempt, sc->preempt, err)
            : DPM_OK;
}

/* A set names its model and changes something, within bounds. */
static dpm_status check_set(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  (void)paths;
  const Dpm__SetRequest *r = rq->set;
  if (!r->has_priority && !r->has_weight && !r->has_preempt)
    return dpm_errf(err, DPM_INVALID, "set needs a priority, a weight or a policy");
  return check_schedule(r->has_priority, r->priority, r->has_weight, r->weight,
                        r->has_preempt, r->preempt, err);
}

/* A join names its model and devices (the coordinator applied them) and
 * holds a consistent shard (fleet.h); the spec is validated as a submit's. */
static dpm_status check_join(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  (void)paths;
  const Dpm__JoinRequest *j = rq->join;
  if (!dpm_model_name_valid(j->spec->name))
    return dpm_errf(err, DPM_INVALID, "join: not a model name");
  if (!j->spec->parallel || !j->spec->parallel->n_devices)
    return dpm_errf(err, DPM_INVALID, "join: the spec names no devices");
  const Dpm__Schedule *sc = j->schedule;
  if (sc && check_schedule(sc->has_priority, sc->priority, sc->has_weight, sc->weight,
                           sc->has_preempt, sc->preempt, err))
    return err->code;
  return dpmd_fleet_check_join(j, err);
}

/* iters, or epochs (which the model's thread turns into iters). */
static dpm_status check_train(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  (void)paths;
  const Dpm__TrainRequest *r = rq->train;
  if (r->has_epochs && r->iters)
    return dpm_errf(err, DPM_INVALID, "train takes iters or epochs, not both");
  if (r->has_epochs && (r->epochs == 0 || r->epochs > DPMD_MAX_ITERS))
    return dpm_errf(err, DPM_INVALID, "epochs must be 1..2^40");
  if (!r->has_epochs && (r->iters == 0 || r->iters > DPMD_MAX_ITERS))
    return dpm_errf(err, DPM_INVALID, "iters must be 1..2^40");
  return DPM_OK;
}

static dpm_status check_checkpoint(const dpmd_paths *paths, Dpm__Request *rq,
                                   dpm_err *err) {
  const char *out = rq->checkpoint->out;
  return out && *out ? dpmd_paths_check(paths, out, err) : DPM_OK;
}

/* A load a fleet's coordinator forwards names no file: the shard receives
 * shard 0's (model.c opens nothing for it, and refuses it elsewhere). */
static dpm_status check_load(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  if (rq->forwarded && !*rq->load->path) return DPM_OK;
  return dpmd_paths_check(paths, rq->load->path, err);
}

static dpm_status check_extract(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  const Dpm__ExtractRequest *r = rq->extract_predictor;
  char b[80];
  if (strcmp(r->format, "dpm") != 0 && strcmp(r->format, "onnx") != 0)
    return dpm_errf(err, DPM_UNSUPPORTED,
                    "predictor format '%s': this dpmd writes 'dpm' or 'onnx'",
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
MODEL_NAME(events)
MODEL_NAME(set)
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

/* What a submit and a join check before a model starts: a free name, room
 * for it, the daemon's devices, the spec, its rendezvous store (allowed
 * here, a file store's directory where a client's files may lie); then
 * room in the registry. The spec (network bytes) is checked here, once
 * (common/checked_spec.h), its device names parsed once by the device
 * check: *out takes *spec from the request (*spec NULL then). */
static dpm_status admit(const call *c, Dpm__ModelSpec **spec, dpm_checked_spec **out,
                        dpm_err *err) {
  dpmd *d = c->d;
  const Dpm__ModelSpec *s = *spec;
  dpm_device *devs = NULL;
  *out = NULL;
  if (dpmd_registry_find(c->models, s->name))
    return dpm_errf(err, DPM_EXISTS, "a model named %s exists", s->name);
  if (dpmd_registry_count(c->models) >= d->cfg->max_models)
    return dpm_errf(err, DPM_DENIED, "this dpmd holds at most %d models (max_models)",
                    d->cfg->max_models);
  if (dpmd_devices_check(d->devices, s->parallel->devices, s->parallel->n_devices, &devs,
                         err))
    return dpm_err_prefix(err, "%s: ", s->name);
  dpm_status st = dpm_spec_check(*spec, devs, out, err);
  free(devs);
  if (st) return st;
  *spec = NULL;
  if (dpmd_rendezvous_check(d, s, err) || dpmd_registry_reserve(c->models, err)) {
    dpm_checked_spec_free(*out);
    *out = NULL;
    return err->code;
  }
  return DPM_OK;
}

/* Starts the model of spec (taken) with fleet (taken; NULL: none); the
 * model answers `to` once built when it is not NULL. */
static dpmd_model *start(const call *c, dpm_checked_spec *spec, dpmd_fleet_link *fleet,
                         dpmd_reply_to *to) {
  dpm_err err = {0};
  dpmd_model *m;
  dpmd_schedule sc = {.weight = 1};
  int no_queue = 0;
  const Dpm__Schedule *s = NULL; /* checked (check_submit, check_join) */
  if (c->rq->command_case == DPM__REQUEST__COMMAND_SUBMIT) {
    s = c->rq->submit->schedule;
    no_queue = c->rq->submit->has_no_queue && c->rq->submit->no_queue;
  } else if (c->rq->command_case == DPM__REQUEST__COMMAND_JOIN) {
    s = c->rq->join->schedule; /* the job's priority and weight */
  }
  if (s && s->has_priority) sc.priority = s->priority;
  if (s && s->has_weight) sc.weight = s->weight;
  if (s && s->has_preempt) sc.spill = s->preempt == DPM__PREEMPT_POLICY__PREEMPT_SPILL;
  if (s && s->has_max_memory) sc.max_memory = s->max_memory;
  if (dpmd_model_new(c->d, spec, 0, &sc, no_queue, fleet, to, &m, &err)) {
    dpmd_reply_error(c->d, c->to, err.code, "%s", err.msg);
    return NULL;
  }
  dpmd_registry_add(c->models, dpmd_model_name(m), m);
  dpmd_notify_serving(c->d, dpmd_registry_count(c->models));
  return m;
}

static void run_submit(const call *c) {
  dpmd *d = c->d;
  Dpm__ModelSpec *spec = c->rq->submit->spec; /* overrides applied (check_submit) */
  dpm_checked_spec *checked;
  dpm_err err = {0};
  dpmd_fleet_link *fleet = NULL;
  int shards = dpmd_fleet_shards(spec);
  /* a fleet job's formation first: it makes the spec's rendezvous explicit,
   * before the spec is checked and then never changes */
  if ((shards && dpmd_fleet_coordinate(spec, &fleet, &err)) ||
      admit(c, &c->rq->submit->spec, &checked, &err)) {
    dpmd_fleet_link_free(fleet);
    return dpmd_reply_error(d, c->to, err.code, "%s", err.msg);
  }
  dpmd_model *m = start(c, checked, fleet, c->to); /* the model owns the spec now */
  if (!m) return;
  if (shards)
    dpmd_info("model %s: submitted on %zu device(s) as shard 0 of %d, forming %s",
              dpmd_model_name(m), spec->parallel->n_devices, shards,
              dpmd_fleet_formation(fleet));
  else
    dpmd_info("model %s: submitted on %zu device(s)", dpmd_model_name(m),
              spec->parallel->n_devices);
}

/* A coordinator asks this daemon to run a shard of its job: answered at
 * once (the model's snapshot, building) once the model has started; the
 * model then meets the other shards at the rendezvous. */
static void run_join(const call *c) {
  dpmd *d = c->d;
  Dpm__JoinRequest *j = c->rq->join;
  const Dpm__ModelSpec *spec = j->spec;
  dpm_checked_spec *checked = NULL;
  dpm_err err = {0};
  dpmd_fleet_link *fleet = NULL;
  if (admit(c, &j->spec, &checked, &err) || dpmd_fleet_join(j, &fleet, &err)) {
    dpm_checked_spec_free(checked);
    return dpmd_reply_error(d, c->to, err.code, "%s", err.msg);
  }
  dpmd_model *m = start(c, checked, fleet, NULL); /* the model owns the spec now */
  if (!m) return;
  dpmd_info("model %s: joined on %zu device(s) as shard %u of %u, coordinated by %s",
            dpmd_model_name(m), spec->parallel->n_devices, j->shard_id, j->num_shards,
            j->coordinator);
  dpmd_model_reply_info(m, c->to, NULL);
}

/* For the coordinator of a fleet job (unless the request came from a
 * coordinator itself): one ShardInfo per shard in info, shard 0's from
 * info, the others' endpoints only, for the gatherer to fill in
 * (gather.h). *mem holds them (free it once the answer is posted); 0 when
 * the model needs none, 1 when it has them, -1 when out of memory. */
static int shard_infos(const call *c, dpmd_model *m, Dpm__ModelInfo *info, void **mem) {
  const dpmd_fleet_link *l = dpmd_model_fleet(m);
  *mem = NULL;
  if (c->rq->forwarded || !l || dpmd_fleet_shard_id(l) != 0 ||
      dpmd_fleet_num_shards(l) < 2)
    return 0;
  const Dpm__ParallelSpec *p = dpmd_model_spec(m)->parallel;
  size_t n = p->n_shards; /* at most DPM_SPEC_MAX_SHARDS: validated */
  Dpm__ShardInfo *v = calloc(n, sizeof *v + sizeof(Dpm__ShardInfo *));
  if (!v) return -1;
  Dpm__ShardInfo **ptr = (Dpm__ShardInfo **)(v + n);
  for (size_t i = 0; i < n; i++) {
    dpm__shard_info__init(&v[i]);
    v[i].shard_id = (uint32_t)i;
    v[i].endpoint = p->shards[i];
    ptr[i] = &v[i];
  }
  v[0].state = info->state;
  v[0].has_iter = info->has_iter, v[0].iter = info->iter;
  v[0].has_target_iter = info->has_target_iter, v[0].target_iter = info->target_iter;
  v[0].error = info->error;
  info->n_shards = n;
  info->shards = ptr;
  *mem = v;
  return 1;
}

/* Answers with rs, through the gatherer when a model in it has shards to
 * ask (gather.h). */
static void reply_gathered(const call *c, Dpm__Response *rs, int gather) {
  if (gather)
    dpmd_gather_post(c->d->gather, rs, c->to);
  else
    dpmd_reply(c->d, c->to, rs);
}

/* dpmctl queue's order: by device group; in a group, training (running or
 * waiting its turn), then preempted, queued (by position), the rest; then
 * by priority, highest first, and name. */
static int queue_rank(const Dpm__ModelInfo *i) {
  static const char *const order[] = {"training", "preempted", "queued"};
  for (int k = 0; k < 3; k++)
    if (!strcmp(i->state, order[k])) return k;
  return 3;
}

static int queue_order(const void *pa, const void *pb) {
  const Dpm__ModelInfo *a = *(Dpm__ModelInfo *const *)pa,
                       *b = *(Dpm__ModelInfo *const *)pb;
  int g = strcmp(a->group, b->group), ra = queue_rank(a), rb = queue_rank(b);
  if (g || ra != rb) return g ? g : ra - rb;
  if (a->queue_position != b->queue_position)
    return a->queue_position < b->queue_position ? -1 : 1;
  if (a->schedule->priority != b->schedule->priority)
    return a->schedule->priority > b->schedule->priority ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* The models, as list (each with its shards' part, gathered) or as queue
 * (sorted in queue_order, this daemon's view alone) shows them. */
static void reply_models(const call *c, int queue) {
  int n = dpmd_registry_count(c->models), gather = 0, nomem = 0;
  Dpm__ModelInfo *info = calloc((size_t)n + 1, sizeof *info);
  Dpm__ModelInfo **ptr = calloc((size_t)n + 1, sizeof *ptr);
  dpmd_info_buf *buf = calloc((size_t)n + 1, sizeof *buf);
  void **mem = calloc((size_t)n + 1, sizeof *mem);
  if (!info || !ptr || !buf || !mem) {
    dpmd_reply_error(c->d, c->to, DPM_NOMEM, "out of memory");
  } else {
    for (int i = 0; i < n; i++) {
      dpmd_model *m = dpmd_registry_at(c->models, i);
      dpmd_model_info(m, &info[i], &buf[i]);
      int k = queue ? 0 : shard_infos(c, m, &info[i], &mem[i]);
      gather |= k > 0;
      nomem |= k < 0;
      ptr[i] = &info[i];
    }
    if (queue) qsort(ptr, (size_t)n, sizeof *ptr, queue_order);
    Dpm__ModelList list = DPM__MODEL_LIST__INIT;
    list.n_model = (size_t)n;
    list.model = ptr;
    Dpm__Response rs = DPM__RESPONSE__INIT;
    rs.result_case = DPM__RESPONSE__RESULT_MODELS;
    rs.models = &list;
    if (nomem)
      dpmd_reply_error(c->d, c->to, DPM_NOMEM, "out of memory");
    else
      reply_gathered(c, &rs, gather);
  }
  for (int i = 0; mem && i < n; i++) free(mem[i]);
  free(mem);
  free(info);
  free(ptr);
  free(buf);
}

static void run_queue(const call *c) { reply_models(c, 1); }

static void run_status(const call *c) {
  if (!c->m) return reply_models(c, 0); /* no name: every model */
  Dpm__ModelInfo info;
  dpmd_info_buf buf;
  void *mem;
  dpmd_model_info(c->m, &info, &buf);
  int k = shard_infos(c, c->m, &info, &mem);
  if (k < 0) return dpmd_reply_error(c->d, c->to, DPM_NOMEM, "out of memory");
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_MODEL;
  rs.model = &info;
  reply_gathered(c, &rs, k);
  free(mem);
}

static void run_list(const call *c) { reply_models(c, 0); }

/* Where the events are: the events socket, if any ("" else), and always the
 * stream through the request socket. */
static void run_watch(const call *c) {
  const dpmd_config *cfg = c->d->cfg;
  Dpm__WatchInfo w = DPM__WATCH_INFO__INIT;
  w.events = cfg->events ? cfg->events : "";
  w.has_stream = w.stream = 1;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_WATCH;
  rs.watch = &w;
  dpmd_reply(c->d, c->to, &rs);
}

static void run_events(const call *c) {
  if (!c->d->stream) /* a dpmd without its loop's handles (tests) */
    return dpmd_reply_error(c->d, c->to, DPM_UNSUPPORTED, "no events stream");
  dpmd_stream_request(c->d->stream, c->rq->events, c->to);
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

/* The rendezvous store (kv.h): answered at once, never waiting. */
static void run_kv_set(const call *c) {
  const Dpm__KvSetRequest *r = c->rq->kv_set;
  dpm_err err = {0};
  if (dpmd_kv_set(c->d->kv, r->formation, r->key, r->value.data, r->value.len, &err))
    return dpmd_reply_error(c->d, c->to, err.code, "%s", err.msg);
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpmd_reply(c->d, c->to, &rs);
}

static void run_kv_get(const call *c) {
  const Dpm__KvGetRequest *r = c->rq->kv_get;
  dpm_err err = {0};
  void *v;
  size_t n;
  if (dpmd_kv_get(c->d->kv, r->formation, r->key, 0, &v, &n, &err))
    return dpmd_reply_error(c->d, c->to, err.code, "%s", err.msg);
  Dpm__KvValue kv = DPM__KV_VALUE__INIT;
  kv.has_value = v != NULL; /* absent: not yet */
  kv.value.data = v;
  kv.value.len = n;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_KV;
  rs.kv = &kv;
  dpmd_reply(c->d, c->to, &rs);
  free(v);
}

static void run_kv_fail(const call *c) {
  const Dpm__KvFailRequest *r = c->rq->kv_fail;
  dpm_err err = {0};
  if (dpmd_kv_fail(c->d->kv, r->formation, r->shard_id, r->message, &err))
    return dpmd_reply_error(c->d, c->to, err.code, "%s", err.msg);
  char b[DPMD_FORMATION_MAX * 4];
  dpmd_warn("formation %s: shard %u could not build",
            dpm_escape(r->formation, b, sizeof b), r->shard_id);
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpmd_reply(c->d, c->to, &rs);
}

static void run_shutdown(const call *c) {
  dpmd_info("shutdown requested");
  Dpm__Response rs = DPM__RESPONSE__INIT;
  dpmd_reply(c->d, c->to, &rs);
  dpmd_shutdown(c->d, c->models);
}

/* ---- the table ---------------------------------------------------------------- */

/* One row per request of the command list, indexed by it (rows of dpmctl's
 * own verbs stay empty). LOOP: runs on the loop thread. JOB: runs on the
 * named model's thread. */
#define LOOP(id, check, model, fn) [DPM_CMD_##id] = {check, model, fn, NULL}
#define JOB(id, check, model, fn) [DPM_CMD_##id] = {check, model, NULL, fn}
static const command commands[DPM_CMD_COUNT] = {
    LOOP(PING, NULL, NULL, run_version),
    LOOP(VERSION_INFO, NULL, NULL, run_version),
    LOOP(SUBMIT, check_submit, NULL, run_submit),
    JOB(TRAIN, check_train, name_train, dpmd_job_train),
    LOOP(STATUS, NULL, name_status, run_status),
    LOOP(LIST, NULL, NULL, run_list),
    LOOP(WATCH, NULL, name_watch, run_watch),
    JOB(CHECKPOINT, check_checkpoint, name_checkpoint, dpmd_job_checkpoint),
    JOB(LOAD, check_load, name_load, dpmd_job_load),
    JOB(SYNC, NULL, name_sync, dpmd_job_sync),
    JOB(EXTRACT_PREDICTOR, check_extract, name_extract_predictor, dpmd_job_extract),
    JOB(EVAL, NULL, name_eval, dpmd_job_eval),
    JOB(GET_BLOB, NULL, name_get_blob, dpmd_job_get_blob),
    JOB(PAUSE, NULL, name_pause, dpmd_job_pause),
    JOB(RESUME, NULL, name_resume, dpmd_job_resume),
    LOOP(DELETE, NULL, name_delete_, run_delete),
    LOOP(METRICS, NULL, NULL, run_metrics),
    LOOP(SHUTDOWN, NULL, NULL, run_shutdown),
    LOOP(JOIN, check_join, NULL, run_join),
    LOOP(KV_SET, NULL, NULL, run_kv_set),
    LOOP(KV_GET, NULL, NULL, run_kv_get),
    LOOP(KV_FAIL, NULL, NULL, run_kv_fail),
    LOOP(EVENTS, NULL, name_events, run_events),
    JOB(SET, check_set, name_set, dpmd_job_set),
    LOOP(QUEUE, NULL, NULL, run_queue),
};
#undef LOOP
#undef JOB

/* The list's row of request case c and its handling here; NULL for a case
 * dpmd does not handle. */
static const command *lookup(int c, const dpm_command **k) {
  *k = dpm_command_of_request(c);
  if (!*k) return NULL;
  const command *h = &commands[*k - dpm_commands];
  return h->run || h->job ? h : NULL;
}

int dpmd_command_handled(int c) {
  const dpm_command *k;
  return lookup(c, &k) != NULL;
}

const char *dpmd_command_name(int c) {
  const dpm_command *k;
  return lookup(c, &k) ? k->name : "unknown";
}

dpm_status dpmd_command_check(const dpmd_paths *paths, Dpm__Request *rq, dpm_err *err) {
  const dpm_command *k;
  const command *c = lookup(rq->command_case, &k);
  return c && c->check ? c->check(paths, rq, err) : DPM_OK;
}

/* ---- dispatch ----------------------------------------------------------------- */

/* The row's fleet flags against a model that is a shard of a job over
 * several daemons. */
static dpm_status fleet_check(const dpm_command *k, const Dpm__Request *rq, dpmd_model *m,
                              dpm_err *err) {
  const dpmd_fleet_link *l = m ? dpmd_model_fleet(m) : NULL;
  if (!l || dpmd_fleet_num_shards(l) < 2) return DPM_OK;
  int id = dpmd_fleet_shard_id(l), n = dpmd_fleet_num_shards(l);
  if (!(k->flags & DPM_CMDF_COORDINATOR) || id == 0 || dpmd_fleet_from_coordinator(l, rq))
    return DPM_OK;
  if (rq->forwarded) /* not by its coordinator: a client set the flag */
    return dpm_errf(err, DPM_DENIED,
                    "%s is shard %d of %d of a job coordinated by %s: a forwarded %s "
                    "without the job's secret is refused",
                    dpmd_model_name(m), id, n, dpmd_fleet_coordinator(l), k->name);
  return dpm_errf(err, DPM_STATE,
                  "%s is shard %d of %d of a job coordinated by %s: send %s there",
                  dpmd_model_name(m), id, n, dpmd_fleet_coordinator(l), k->name);
}

void dpmd_handle(dpmd *d, dpmd_registry *models, Dpm__Request *rq, dpmd_reply_to *to) {
  dpm_err err = {0};
  const dpm_command *k;
  const command *c = lookup(rq->command_case, &k);
  const char *name = c && c->model ? c->model(rq) : NULL;
  dpmd_model *m = dpmd_registry_find(models, name);
  if (!c)
    dpmd_reply_error(d, to, DPM_UNSUPPORTED, "unknown command %d", (int)rq->command_case);
  else if ((k->flags & DPM_CMDF_MUTATING) && dpmd_stopping(d))
    dpmd_reply_error(d, to, DPM_STATE, "dpmd is shutting down");
  else if ((k->flags & DPM_CMDF_NAMES_MODEL || c->job || (name && *name)) &&
           (!m || dpmd_model_ending(m)))
    dpmd_reply_error(d, to, DPM_NOT_FOUND, "no model named '%s'", name ? name : "");
  else if (fleet_check(k, rq, m, &err) || (c->check && c->check(d->paths, rq, &err)))
    dpmd_reply_error(d, to, err.code, "%s", err.msg);
  else if (c->job)
    return dpmd_model_post(m, c->job, k->name, rq, to); /* takes rq */
  else {
    dpmd_debug("%s", k->name);
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
