/* A fleet job's link (fleet.h): forming at the coordinator, the trainer's
 * options on every shard, and what the coordinator forwards. */
#include "server/fleet/fleet.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/file.h"
#include "common/validate.h"
#include "server/fleet/kv.h"
#include "server/fleet/kvpeer.h"
#include "server/fleet/peer.h"
#include "server/fleet/rendezvous.h"
#include "server/fleet/secret.h"
#include "server/log.h"

#define DEFAULT_TIMEOUT_MS 60000 /* a Rendezvous message's default timeout_ms */

struct dpmd_fleet_link {
  int shard_id, num_shards;           /* fixed once made */
  char formation[DPMD_FORMATION_MAX]; /* fixed once made */
  char *coordinator;                  /* shard 0's endpoint; fixed once made */
  /* the job's secret (drawn by the coordinator, handed over in the join);
     fixed once made, never shown */
  uint8_t secret[DPMD_JOB_SECRET_BYTES];
  /* model thread only */
  int formation_open; /* coordinator: the formation is open in the daemon's store */
  unsigned char joined[DPM_SPEC_MAX_SHARDS]; /* coordinator: [i] shard i accepted */
  dpmd_kv_local local; /* coordinator, store "daemon": the store in process */
  dpmd_kvpeer *remote; /* other shards, store "daemon": the store over RPC */
};

int dpmd_fleet_shards(const Dpm__ModelSpec *spec) {
  return spec->parallel ? (int)spec->parallel->n_shards : 0;
}

static const Dpm__Rendezvous *rendezvous_of(const Dpm__ModelSpec *spec) {
  return spec->parallel ? spec->parallel->rendezvous : NULL;
}

static int timeout_of(const Dpm__ModelSpec *spec) {
  const Dpm__Rendezvous *rv = rendezvous_of(spec);
  return rv && rv->timeout_ms ? (int)rv->timeout_ms : DEFAULT_TIMEOUT_MS;
}

static int daemon_store(const Dpm__ModelSpec *spec) {
  return !strcmp(dpmd_rendezvous_store(spec), "daemon");
}

/* ---- links ------------------------------------------------------------------- */

static dpmd_fleet_link *new_link(int shard_id, int num_shards, const char *coordinator) {
  dpmd_fleet_link *l = calloc(1, sizeof *l);
  if (!l || !(l->coordinator = strdup(coordinator))) {
    free(l);
    return NULL;
  }
  l->shard_id = shard_id;
  l->num_shards = num_shards;
  return l;
}

dpm_status dpmd_fleet_coordinate(Dpm__ModelSpec *spec, dpmd_fleet_link **out,
                                 dpm_err *err) {
  *out = NULL;
  Dpm__ParallelSpec *p = spec->parallel;
  if (!p || !p->n_shards) return dpm_errf(err, DPM_INVALID, "the spec names no shards");
  if (!p->rendezvous) { /* explicit, so that every shard builds the same spec */
    if (!(p->rendezvous = malloc(sizeof *p->rendezvous)))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    dpm__rendezvous__init(p->rendezvous);
  }
  uint64_t r;
  if (dpmd_secret_draw(&r, sizeof r, "the formation's name", err)) return err->code;
  dpmd_fleet_link *l = new_link(0, (int)p->n_shards, p->shards[0]);
  if (!l) return dpm_errf(err, DPM_NOMEM, "out of memory");
  if (dpmd_secret_draw(l->secret, sizeof l->secret, "the job's secret", err)) {
    dpmd_fleet_link_free(l);
    return err->code;
  }
  /* the name is 1..64 bytes (checked before): it fits */
  snprintf(l->formation, sizeof l->formation, "%s/%016" PRIx64, spec->name, r);
  *out = l;
  return DPM_OK;
}

dpm_status dpmd_fleet_check_join(const Dpm__JoinRequest *j, dpm_err *err) {
  const Dpm__ParallelSpec *p = j->spec->parallel;
  size_t n = p ? p->n_shards : 0;
  if (j->num_shards < 2 || j->num_shards != n)
    return dpm_errf(err, DPM_INVALID,
                    "join: num_shards %u, but the spec names %zu shards (at least 2)",
                    j->num_shards, n);
  if (j->shard_id < 1 || j->shard_id >= j->num_shards)
    return dpm_errf(err, DPM_INVALID, "join: shard_id %u is not in 1..%u", j->shard_id,
                    j->num_shards - 1);
  if (strcmp(j->coordinator, p->shards[0]) != 0)
    return dpm_errf(err, DPM_INVALID,
                    "join: the coordinator is not the spec's parallel.shards[0]");
  size_t f = strlen(j->formation);
  if (f == 0 || f >= DPMD_FORMATION_MAX)
    return dpm_errf(err, DPM_INVALID, "join: a formation is named by 1 to %d bytes",
                    DPMD_FORMATION_MAX - 1);
  if (!j->has_job_secret || j->job_secret.len != DPMD_JOB_SECRET_BYTES)
    return dpm_errf(err, DPM_INVALID, "join: the job's secret must be %d bytes",
                    DPMD_JOB_SECRET_BYTES);
  return DPM_OK;
}

dpm_status dpmd_fleet_join(const Dpm__JoinRequest *j, dpmd_fleet_link **out,
                           dpm_err *err) {
  *out = new_link((int)j->shard_id, (int)j->num_shards, j->coordinator);
  if (!*out) return dpm_errf(err, DPM_NOMEM, "out of memory");
  memcpy((*out)->formation, j->formation, strlen(j->formation) + 1); /* checked */
  memcpy((*out)->secret, j->job_secret.data, sizeof(*out)->secret);  /* checked */
  return DPM_OK;
}

void dpmd_fleet_link_free(dpmd_fleet_link *l) {
  if (!l) return;
  explicit_bzero(l->secret, sizeof l->secret);
  dpmd_kvpeer_close(l->remote);
  free(l->coordinator);
  free(l);
}

int dpmd_fleet_shard_id(const dpmd_fleet_link *l) { return l->shard_id; }
int dpmd_fleet_num_shards(const dpmd_fleet_link *l) { return l->num_shards; }
const char *dpmd_fleet_coordinator(const dpmd_fleet_link *l) { return l->coordinator; }
const char *dpmd_fleet_formation(const dpmd_fleet_link *l) { return l->formation; }
int dpmd_fleet_checkpoints(const dpmd_fleet_link *l) { return l->shard_id == 0; }

int dpmd_fleet_from_coordinator(const dpmd_fleet_link *l, const Dpm__Request *rq) {
  if (!rq->forwarded || !rq->has_job_secret) return 0;
  return dpmd_secret_equal(l->secret, sizeof l->secret, rq->job_secret.data,
                           rq->job_secret.len);
}

void dpmd_fleet_name_shards(const Dpm__ModelSpec *spec, int self, const char *msg,
                            char *out, size_t cap) {
  if (!cap) return;
  int n = dpmd_fleet_shards(spec);
  size_t used = (size_t)snprintf(out, cap, "%s", msg);
  unsigned char seen[256] = {0}; /* a spec names at most 256 shards (validate.c) */
  int named = 0;
  for (const char *p = msg; (p = strstr(p, "process ")); p += 8) {
    const char *q = p + 8;
    int k = 0, digits = 0;
    for (; *q >= '0' && *q <= '9' && digits < 4; q++, digits++) k = k * 10 + (*q - '0');
    if (!digits || k >= n || k >= 256 || seen[k]) continue;
    seen[k] = 1;
    named++;
    if (used >= cap - 1) break;
    int w = snprintf(out + used, cap - used, "; process %d is shard %d at %s", k, k,
                     spec->parallel->shards[k]);
    if (w < 0) break;
    used = (size_t)w >= cap - used ? cap - 1 : used + (size_t)w;
  }
  if (!named && n == 2 && (self == 0 || self == 1) && used < cap - 1)
    snprintf(out + used, cap - used, "; the other process is shard %d at %s", 1 - self,
             spec->parallel->shards[1 - self]);
}

dpm_status dpmd_fleet_elastic_batch(uint32_t batch, int devices, int shards,
                                    int new_shards, int allow, uint32_t *device_batch,
                                    int *changed, dpm_err *err) {
  if (batch < 1 || devices < 1 || shards < 1 || new_shards < 1)
    return dpm_errf(err, DPM_INVALID, "elastic batch: nothing to divide");
  uint64_t global = (uint64_t)batch * (uint64_t)devices * (uint64_t)shards;
  uint64_t ranks = (uint64_t)devices * (uint64_t)new_shards;
  if (global % ranks == 0 && global / ranks <= DPM_SPEC_MAX_BATCH) {
    *device_batch = (uint32_t)(global / ranks);
    *changed = 0;
    return DPM_OK;
  }
  if (!allow)
    return dpm_errf(err, DPM_INVALID,
                    "the global batch of %llu does not divide among %llu devices (%d "
                    "shard(s) of %d); --allow-batch-change keeps the per-device batch of "
                    "%u, making the global batch %llu",
                    (unsigned long long)global, (unsigned long long)ranks, new_shards,
                    devices, batch, (unsigned long long)batch * ranks);
  *device_batch = batch;
  *changed = 1;
  return DPM_OK;
}

/* ---- calls to the other shards, all at once ------------------------------------ */

/* Every call to the other shards of a job runs on a thread of its own, so
 * that a job waits for its slowest shard, not for the sum of them, and
 * each waits at most its bound (the job's timeout). */
typedef struct fleet_call {
  dpmd *d;
  const char *endpoint;  /* the spec's */
  Dpm__Request rq;       /* a shallow copy: the peer call sets its header fields */
  Dpm__JoinRequest join; /* a join's own copy, with this shard's id */
  int ms, shard, started;
  pthread_t thread;
  dpm_status status;
  dpm_err err;
} fleet_call;

struct dpmd_fleet_calls {
  int n;
  fleet_call *calls; /* [n]: shards 1 .. n; one not called has status DPM_OK and
                        shard 0 */
};

static void *call_main(void *arg) {
  fleet_call *c = arg;
  Dpm__Response *r;
  c->status = dpmd_peer_call_once(c->d, c->endpoint, &c->rq, c->ms, &r, &c->err);
  if (!c->status) dpm__response__free_unpacked(r, NULL);
  return NULL;
}

/* Sends rq to every other shard (only: those whose [i] is set; NULL: all),
 * each waiting up to ms; a join gets the shard's id. DPM_NOMEM (nothing
 * started). */
static dpm_status calls_begin(dpmd *d, const dpmd_fleet_link *l,
                              const Dpm__ModelSpec *spec, const Dpm__Request *rq, int ms,
                              const unsigned char *only, dpmd_fleet_calls **out,
                              dpm_err *err) {
  dpmd_fleet_calls *fc = calloc(1, sizeof *fc);
  int n = l->num_shards - 1;
  if (!fc || (n > 0 && !(fc->calls = calloc((size_t)n, sizeof *fc->calls)))) {
    free(fc);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    fleet_call *c = &fc->calls[i];
    fc->n = i + 1;
    if (only && !only[i + 1]) continue;
    *c = (fleet_call){.d = d,
                      .endpoint = spec->parallel->shards[i + 1],
                      .rq = *rq,
                      .ms = ms,
                      .shard = i + 1};
    if (rq->command_case == DPM__REQUEST__COMMAND_JOIN) {
      c->join = *rq->join;
      c->join.shard_id = (uint32_t)(i + 1);
      c->rq.join = &c->join;
    }
    c->started = !pthread_create(&c->thread, NULL, call_main, c);
    if (!c->started) c->status = dpm_errf(&c->err, DPM_NOMEM, "cannot start a thread");
  }
  *out = fc;
  return DPM_OK;
}

/* Waits for every call begun; the results stay in fc. */
static void calls_wait(dpmd_fleet_calls *fc) {
  for (int i = 0; i < fc->n; i++)
    if (fc->calls[i].started)
      pthread_join(fc->calls[i].thread, NULL), fc->calls[i].started = 0;
}

static void calls_free(dpmd_fleet_calls *fc) {
  if (!fc) return;
  calls_wait(fc);
  free(fc->calls);
  free(fc);
}

/* The first shard (in shard order) whose call failed, or NULL. */
static const fleet_call *first_failed(const dpmd_fleet_calls *fc) {
  for (int i = 0; i < fc->n; i++)
    if (fc->calls[i].status) return &fc->calls[i];
  return NULL;
}

/* rq, sent by the coordinator to another shard, carries the job's secret
 * (points into l: l must outlive the call). */
static void sign(const dpmd_fleet_link *l, Dpm__Request *rq) {
  rq->has_job_secret = 1;
  rq->job_secret.data = (uint8_t *)l->secret;
  rq->job_secret.len = sizeof l->secret;
}

/* ---- forming ----------------------------------------------------------------- */

/* shards[0] must reach this daemon (fleet.h, "Rule for shards[0]"). */
static dpm_status check_self(dpmd *d, const char *ep, int ms, dpm_err *err) {
  for (int i = 0; i < d->cfg->n_listen; i++)
    if (!strcmp(d->cfg->listen[i], ep)) return DPM_OK;
  Dpm__Empty empty = DPM__EMPTY__INIT;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &empty;
  Dpm__Response *r;
  if (dpmd_peer_call_once(d, ep, &rq, ms, &r, err))
    return dpm_err_prefix(err, "parallel.shards[0] must be the daemon that takes the "
                               "submit, which is not one of its listen addresses: ");
  uint64_t inst =
      r->result_case == DPM__RESPONSE__RESULT_VERSION && r->version->has_instance
          ? r->version->instance
          : 0;
  dpm__response__free_unpacked(r, NULL);
  if (inst != d->instance)
    return dpm_errf(
        err, DPM_INVALID,
        "parallel.shards[0] %s is another daemon: submit the job to the first "
        "daemon of its shards",
        ep);
  return DPM_OK;
}

/* Asks every other shard to join, all at once; those that accept are
 * marked in l->joined. The first refusal (in shard order), named. */
static dpm_status join_all(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                           int priority, double weight, dpm_err *err) {
  Dpm__Schedule sc = DPM__SCHEDULE__INIT;
  sc.has_priority = sc.has_weight = 1;
  sc.priority = priority;
  sc.weight = weight;
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT;
  j.schedule = &sc;
  j.spec = (Dpm__ModelSpec *)spec; /* only packed */
  j.num_shards = (uint32_t)l->num_shards;
  j.formation = l->formation;
  j.coordinator = l->coordinator;
  j.has_job_secret = 1;
  j.job_secret.data = l->secret;
  j.job_secret.len = sizeof l->secret;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_JOIN;
  rq.join = &j;
  dpmd_fleet_calls *fc;
  if (calls_begin(d, l, spec, &rq, timeout_of(spec), NULL, &fc, err)) return err->code;
  calls_wait(fc);
  for (int i = 0; i < fc->n; i++) l->joined[i + 1] = !fc->calls[i].status;
  const fleet_call *bad = first_failed(fc);
  dpm_status s = DPM_OK;
  if (bad) {
    *err = bad->err;
    s = dpm_err_prefix(err, "shard %d did not join: ", bad->shard);
  }
  calls_free(fc);
  return s;
}

/* Deletes the job on every other shard (only: those set; NULL: all), all
 * at once, each within the job's timeout (a shard answers a delete once
 * its step in flight ends, which a collective's timeout bounds); a shard
 * without the job counts as done. The errors name each shard that failed;
 * the first one's status. */
static dpm_status delete_all(dpmd *d, const dpmd_fleet_link *l,
                             const Dpm__ModelSpec *spec, const unsigned char *only,
                             dpm_err *err) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = spec->name;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_DELETE;
  rq.delete_ = &nr;
  dpmd_fleet_calls *fc;
  if (calls_begin(d, l, spec, &rq, timeout_of(spec), only, &fc, err)) return err->code;
  calls_wait(fc);
  char msg[sizeof err->msg] = "";
  size_t used = 0;
  dpm_status first = DPM_OK;
  for (int i = 0; i < fc->n; i++) {
    const fleet_call *c = &fc->calls[i];
    if (!c->status || c->status == DPM_NOT_FOUND) continue;
    if (!first) first = c->status;
    int w = snprintf(msg + used, sizeof msg - used, "%sshard %d: %s", used ? "; " : "",
                     c->shard, c->err.msg);
    if (w > 0) used = (size_t)w >= sizeof msg - used ? sizeof msg - 1 : used + (size_t)w;
  }
  calls_free(fc);
  if (first) return dpm_errf(err, first, "%s", msg);
  return DPM_OK;
}

static void drop_formation(dpmd *d, dpmd_fleet_link *l) {
  if (!l->formation_open) return;
  dpmd_kv_drop(d->kv, l->formation);
  l->formation_open = 0;
}

void dpmd_fleet_report(dpmd *d, const dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                       const dpm_err *why) {
  if (l->shard_id == 0 || !daemon_store(spec)) return;
  Dpm__KvFailRequest f = DPM__KV_FAIL_REQUEST__INIT;
  f.formation = (char *)l->formation;
  f.shard_id = (uint32_t)l->shard_id;
  f.message = (char *)why->msg;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_KV_FAIL;
  rq.kv_fail = &f;
  Dpm__Response *r;
  dpm_err e = {0};
  if (dpmd_peer_call_once(d, l->coordinator, &rq, timeout_of(spec), &r, &e))
    dpmd_warn("model %s: could not tell the coordinator this shard failed: %s",
              spec->name, e.msg);
  else
    dpm__response__free_unpacked(r, NULL);
}

void dpmd_fleet_abort(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec) {
  drop_formation(d, l); /* first: the shards' waits at the store end at once */
  int any = 0;
  for (int i = 1; i < l->num_shards; i++) any |= l->joined[i];
  dpm_err e = {0};
  if (any && delete_all(d, l, spec, l->joined, &e))
    dpmd_warn("model %s: not deleted on every shard after the job failed to form: %s",
              spec->name, e.msg);
  memset(l->joined, 0, sizeof l->joined);
}

dpm_status dpmd_fleet_form(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                           int priority, double weight, dpm_err *err) {
  dpm_status s = check_self(d, spec->parallel->shards[0], timeout_of(spec), err);
  if (!s && daemon_store(spec)) {
    s = dpmd_kv_open(d->kv, l->formation, err);
    l->formation_open = !s;
  }
  if (!s && l->num_shards > 1) s = join_all(d, l, spec, priority, weight, err);
  if (s)
    dpmd_fleet_abort(d, l, spec);
  else
    dpmd_info("model %s: formation %s, %d shard(s) joined", spec->name, l->formation,
              l->num_shards - 1);
  return s;
}

dpm_status dpmd_fleet_options(const dpmd *d, dpmd_fleet_link *l,
                              const Dpm__ModelSpec *spec, dpm_trainer_options *opt,
                              dpm_err *err) {
  const Dpm__Rendezvous *rv = rendezvous_of(spec);
  dpm_comm_rendezvous r = {.prefix = l->formation};
  if (rv && rv->interface && *rv->interface) r.iface = rv->interface;
  if (dpmd_rendezvous_check(d, spec, err)) return err->code;
  if (!daemon_store(spec)) {
    r.store = dpmd_rendezvous_store(spec); /* the spec's: lives as long as the model */
    if (!strncmp(r.store, "file://", 7)) {
      /* made here, through the confined paths, so that a refused directory
         fails the options before the trainer starts (the store, comm/store.h,
         reaches DIR and its files through r.fs too) */
      r.fs = dpmd_rendezvous_fs(d);
      if (dpm_file_mkdirs(r.fs, r.store + 7, err))
        return dpm_err_prefix(err, "rendezvous store directory: ");
    }
  } else if (l->shard_id == 0) {
    dpmd_kv_local_init(&l->local, d->kv, l->formation);
    r.kv = &l->local.store;
  } else {
    if (!l->remote && dpmd_kvpeer_open(d, l->coordinator, l->formation, timeout_of(spec),
                                       &l->remote, err))
      return err->code;
    r.kv = dpmd_kvpeer_store(l->remote);
  }
  opt->fleet.shard_id = l->shard_id;
  opt->fleet.num_shards = l->num_shards;
  opt->fleet.rendezvous = r;
  opt->comm_timeout_ms = timeout_of(spec);
  return DPM_OK;
}

/* ---- the whole job ----------------------------------------------------------- */

dpm_status dpmd_fleet_train(dpmd *d, const dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                            uint64_t iters, uint64_t from_iter, dpm_err *err) {
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = spec->name;
  tr.iters = iters;
  tr.has_from_iter = 1;
  tr.from_iter = from_iter;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_TRAIN;
  rq.train = &tr;
  sign(l, &rq);
  dpmd_fleet_calls *fc;
  if (calls_begin(d, l, spec, &rq, timeout_of(spec), NULL, &fc, err)) return err->code;
  calls_wait(fc);
  const fleet_call *bad = first_failed(fc);
  int started = 0;
  for (int i = 0; i < fc->n; i++) started += !fc->calls[i].status;
  dpm_status s = DPM_OK;
  if (bad) {
    *err = bad->err;
    if (started)
      s = dpm_err_prefix(err,
                         "shard %d did not start (%d other shard(s) did, and will fail "
                         "their first step at the timeout): ",
                         bad->shard, started);
    else
      s = dpm_err_prefix(err, "shard %d did not start: ", bad->shard);
  }
  calls_free(fc);
  return s;
}

dpm_status dpmd_fleet_delete(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                             dpm_err *err) {
  drop_formation(d, l);
  return l->num_shards > 1 ? delete_all(d, l, spec, NULL, err) : DPM_OK;
}

/* ---- collectives forwarded ------------------------------------------------------ */

dpm_status dpmd_fleet_forward_begin(dpmd *d, const dpmd_fleet_link *l,
                                    const Dpm__ModelSpec *spec, const Dpm__Request *rq,
                                    dpmd_fleet_calls **out, dpm_err *err) {
  Dpm__Request signed_rq = *rq;
  sign(l, &signed_rq);
  return calls_begin(d, l, spec, &signed_rq,
                     DPMD_FLEET_FORWARD_TIMEOUTS * timeout_of(spec), NULL, out, err);
}

dpm_status dpmd_fleet_forward_end(dpmd_fleet_calls *fc, dpm_err *err) {
  calls_wait(fc);
  const fleet_call *bad = first_failed(fc);
  dpm_status s = DPM_OK;
  if (bad) {
    *err = bad->err;
    s = dpm_err_prefix(err, "shard %d: ", bad->shard);
  }
  calls_free(fc);
  return s;
}
