/* A fleet job's link (fleet.h): forming at the coordinator, the trainer's
 * options on every shard, and what the coordinator forwards. */
#include "server/fleet.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/escape.h"
#include "common/file.h"
#include "common/validate.h"
#include "server/kv.h"
#include "server/kvpeer.h"
#include "server/log.h"
#include "server/peer.h"
#include "server/rendezvous.h"

#define DEFAULT_TIMEOUT_MS 60000 /* a Rendezvous message's default timeout_ms */

struct dpmd_fleet_link {
  int shard_id, num_shards;           /* fixed once made */
  char formation[DPMD_FORMATION_MAX]; /* fixed once made */
  char *coordinator;                  /* shard 0's endpoint; fixed once made */
  /* model thread only */
  int formation_open;  /* coordinator: the formation is open in the daemon's store */
  int joined;          /* coordinator: shards 1 .. joined accepted their join */
  dpmd_kv_local local; /* coordinator, store "daemon": the store in process */
  dpmd_kvpeer *remote; /* other shards, store "daemon": the store over RPC */
};

int dpmd_fleet_shards(const Dpm__ModelSpec *spec) {
  return spec->parallel ? (int)spec->parallel->n_shards : 0;
}

static const Dpm__Rendezvous *rendezvous_of(const Dpm__ModelSpec *spec) {
  return spec->parallel ? spec->parallel->rendezvous : NULL;
}

const char *dpmd_fleet_store(const Dpm__ModelSpec *spec) {
  const Dpm__Rendezvous *rv = rendezvous_of(spec);
  return rv && rv->store && *rv->store ? rv->store : "daemon";
}

static int timeout_of(const Dpm__ModelSpec *spec) {
  const Dpm__Rendezvous *rv = rendezvous_of(spec);
  return rv && rv->timeout_ms ? (int)rv->timeout_ms : DEFAULT_TIMEOUT_MS;
}

static int daemon_store(const Dpm__ModelSpec *spec) {
  return !strcmp(dpmd_fleet_store(spec), "daemon");
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
  if (getrandom(&r, sizeof r, 0) != sizeof r)
    return dpm_errf(err, DPM_IO, "no randomness for the formation's name");
  dpmd_fleet_link *l = new_link(0, (int)p->n_shards, p->shards[0]);
  if (!l) return dpm_errf(err, DPM_NOMEM, "out of memory");
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
  return DPM_OK;
}

dpm_status dpmd_fleet_join(const Dpm__JoinRequest *j, dpmd_fleet_link **out,
                           dpm_err *err) {
  *out = new_link((int)j->shard_id, (int)j->num_shards, j->coordinator);
  if (!*out) return dpm_errf(err, DPM_NOMEM, "out of memory");
  memcpy((*out)->formation, j->formation, strlen(j->formation) + 1); /* checked */
  return DPM_OK;
}

void dpmd_fleet_link_free(dpmd_fleet_link *l) {
  if (!l) return;
  dpmd_kvpeer_close(l->remote);
  free(l->coordinator);
  free(l);
}

int dpmd_fleet_shard_id(const dpmd_fleet_link *l) { return l->shard_id; }
int dpmd_fleet_num_shards(const dpmd_fleet_link *l) { return l->num_shards; }
const char *dpmd_fleet_coordinator(const dpmd_fleet_link *l) { return l->coordinator; }
const char *dpmd_fleet_formation(const dpmd_fleet_link *l) { return l->formation; }
int dpmd_fleet_checkpoints(const dpmd_fleet_link *l) { return l->shard_id == 0; }

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

dpm_status dpmd_fleet_elastic_batch(uint32_t batch, int devices, int shards, int new_shards,
                                    int allow, uint32_t *device_batch, int *changed,
                                    dpm_err *err) {
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

/* ---- forming ----------------------------------------------------------------- */

/* shards[0] must reach this daemon (fleet.h, "Rule for shards[0]"). */
static dpm_status check_self(dpmd *d, const char *ep, dpm_err *err) {
  for (int i = 0; i < d->cfg->n_listen; i++)
    if (!strcmp(d->cfg->listen[i], ep)) return DPM_OK;
  Dpm__Empty empty = DPM__EMPTY__INIT;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &empty;
  Dpm__Response *r;
  if (dpmd_peer_call_once(d, ep, &rq, DPMD_PEER_TIMEOUT_MS, &r, err))
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

static dpm_status join_shard(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                             int i, dpm_err *err) {
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT;
  j.spec = (Dpm__ModelSpec *)spec; /* only packed */
  j.shard_id = (uint32_t)i;
  j.num_shards = (uint32_t)l->num_shards;
  j.formation = l->formation;
  j.coordinator = l->coordinator;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_JOIN;
  rq.join = &j;
  Dpm__Response *r;
  if (dpmd_peer_call_once(d, spec->parallel->shards[i], &rq, DPMD_PEER_TIMEOUT_MS, &r,
                          err))
    return dpm_err_prefix(err, "shard %d did not join: ", i);
  dpm__response__free_unpacked(r, NULL);
  return DPM_OK;
}

/* Deletes the job on shard i; a shard without it counts as done. */
static dpm_status delete_shard(dpmd *d, const Dpm__ModelSpec *spec, int i, dpm_err *err) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = spec->name;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_DELETE;
  rq.delete_ = &nr;
  Dpm__Response *r;
  /* the shard may finish a step first, or wait in a collective until the timeout */
  int ms = timeout_of(spec) + DPMD_PEER_TIMEOUT_MS;
  dpm_status s = dpmd_peer_call_once(d, spec->parallel->shards[i], &rq, ms, &r, err);
  if (!s) dpm__response__free_unpacked(r, NULL);
  return s == DPM_NOT_FOUND ? DPM_OK : s;
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
  if (dpmd_peer_call_once(d, l->coordinator, &rq, DPMD_PEER_TIMEOUT_MS, &r, &e))
    dpmd_warn("model %s: could not tell the coordinator this shard failed: %s",
              spec->name, e.msg);
  else
    dpm__response__free_unpacked(r, NULL);
}

void dpmd_fleet_abort(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec) {
  drop_formation(d, l); /* first: the shards' waits at the store end at once */
  for (int i = 1; i <= l->joined; i++) {
    dpm_err e = {0};
    if (delete_shard(d, spec, i, &e))
      dpmd_warn("model %s: shard %d not deleted after the job failed to form: %s",
                spec->name, i, e.msg);
  }
  l->joined = 0;
}

dpm_status dpmd_fleet_form(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                           dpm_err *err) {
  dpm_status s = check_self(d, spec->parallel->shards[0], err);
  if (!s && daemon_store(spec)) {
    s = dpmd_kv_open(d->kv, l->formation, err);
    l->formation_open = !s;
  }
  for (int i = 1; !s && i < l->num_shards; i++) {
    s = join_shard(d, l, spec, i, err);
    if (!s) l->joined = i;
  }
  if (s)
    dpmd_fleet_abort(d, l, spec);
  else
    dpmd_info("model %s: formation %s, %d shard(s) joined", spec->name, l->formation,
              l->joined);
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
    r.store = dpmd_fleet_store(spec); /* the spec's: lives as long as the model */
    if (!strncmp(r.store, "file://", 7)) {
      /* made here, through the confined paths, before any backend opens it
         (Gloo's store goes through r.fs; NCCL's opens DIR by its path) */
      r.fs = dpmd_rendezvous_fs(d);
      if (dpm_file_mkdirs(r.fs, r.store + 7, err))
        return dpm_err_prefix(err, "rendezvous store directory: ");
    }
  } else if (l->shard_id == 0) {
    dpmd_kv_local_init(&l->local, d->kv, l->formation);
    r.kv = &l->local.store;
  } else {
    if (!l->remote && dpmd_kvpeer_open(d, l->coordinator, l->formation, &l->remote, err))
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
  for (int i = 1; i < l->num_shards; i++) {
    Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
    tr.name = spec->name;
    tr.iters = iters;
    tr.has_from_iter = 1;
    tr.from_iter = from_iter;
    Dpm__Request rq = DPM__REQUEST__INIT;
    rq.command_case = DPM__REQUEST__COMMAND_TRAIN;
    rq.train = &tr;
    Dpm__Response *r;
    if (dpmd_peer_call_once(d, spec->parallel->shards[i], &rq, DPMD_PEER_TIMEOUT_MS, &r,
                            err)) {
      if (i > 1)
        return dpm_err_prefix(err,
                              "shard %d did not start (shards 1..%d did, and will fail "
                              "their first step at the timeout): ",
                              i, i - 1);
      return dpm_err_prefix(err, "shard %d did not start: ", i);
    }
    dpm__response__free_unpacked(r, NULL);
  }
  return DPM_OK;
}

dpm_status dpmd_fleet_delete(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                             dpm_err *err) {
  drop_formation(d, l);
  char msg[sizeof err->msg] = "";
  size_t used = 0;
  dpm_status first = DPM_OK;
  for (int i = 1; i < l->num_shards; i++) {
    dpm_err e = {0};
    if (!delete_shard(d, spec, i, &e)) continue;
    if (!first) first = e.code;
    int n = snprintf(msg + used, sizeof msg - used, "%sshard %d: %s", used ? "; " : "", i,
                     e.msg);
    if (n > 0) used = (size_t)n >= sizeof msg - used ? sizeof msg - 1 : used + (size_t)n;
  }
  if (first) return dpm_errf(err, first, "%s", msg);
  return DPM_OK;
}

/* ---- collectives forwarded ------------------------------------------------------ */

typedef struct fleet_call {
  dpmd *d;
  const char *endpoint; /* the spec's */
  Dpm__Request rq;      /* a shallow copy: the peer call sets its header fields */
  int ms, shard, started;
  pthread_t thread;
  dpm_status status;
  dpm_err err;
} fleet_call;

struct dpmd_fleet_calls {
  int n;
  fleet_call *calls; /* [n]: shards 1 .. n */
};

static void *call_main(void *arg) {
  fleet_call *c = arg;
  Dpm__Response *r;
  c->status = dpmd_peer_call_once(c->d, c->endpoint, &c->rq, c->ms, &r, &c->err);
  if (!c->status) dpm__response__free_unpacked(r, NULL);
  return NULL;
}

dpm_status dpmd_fleet_forward_begin(dpmd *d, const dpmd_fleet_link *l,
                                    const Dpm__ModelSpec *spec, const Dpm__Request *rq,
                                    dpmd_fleet_calls **out, dpm_err *err) {
  dpmd_fleet_calls *fc = calloc(1, sizeof *fc);
  int n = l->num_shards - 1;
  if (!fc || (n > 0 && !(fc->calls = calloc((size_t)n, sizeof *fc->calls)))) {
    free(fc);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    fleet_call *c = &fc->calls[i];
    *c = (fleet_call){.d = d, .endpoint = spec->parallel->shards[i + 1], .rq = *rq,
                      .ms = timeout_of(spec) + DPMD_PEER_TIMEOUT_MS, .shard = i + 1};
    c->started = !pthread_create(&c->thread, NULL, call_main, c);
    if (!c->started) c->status = dpm_errf(&c->err, DPM_NOMEM, "cannot start a thread");
    fc->n = i + 1;
  }
  *out = fc;
  return DPM_OK;
}

dpm_status dpmd_fleet_forward_end(dpmd_fleet_calls *fc, dpm_err *err) {
  dpm_status first = DPM_OK;
  for (int i = 0; i < fc->n; i++) {
    fleet_call *c = &fc->calls[i];
    if (c->started) pthread_join(c->thread, NULL);
    if (c->status && !first) {
      first = c->status;
      *err = c->err;
      dpm_err_prefix(err, "shard %d: ", c->shard);
    }
  }
  free(fc->calls);
  free(fc);
  return first;
}
