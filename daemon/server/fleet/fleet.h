/* A job over several daemons (a fleet): the spec's parallel.shards name
 * them, one shard per daemon, each running the spec's devices. The daemon
 * that takes the submit must be shards[0]: it coordinates the job as
 * shard 0 and serves the rendezvous store when the spec's store is
 * "daemon" (server/fleet/kv.h). A model of such a job holds a link (this file):
 * its shard, the job's formation and the store its trainer meets the other
 * shards through.
 *
 * Rule for shards[0]: it must reach the daemon that takes the submit: one
 * of its listen addresses as written, or an endpoint where a ping is
 * answered with this daemon's instance. Anything else is refused
 * (DPM_INVALID), naming the endpoint.
 *
 * Forming (dpmd_fleet_form, on the coordinator's model thread, before its
 * trainer is built): the check above; the formation opened in this
 * daemon's store (store "daemon"); then every other daemon is asked to
 * join, all at once (a JoinRequest: the spec as the coordinator took it,
 * the shard's id, the number of shards, the formation, the coordinator's
 * endpoint, the job's secret, the job's priority and weight: every shard
 * is scheduled as the coordinator's model is when the job forms). A daemon accepts a join once it has checked the spec and
 * started building its shard (commands.c, "join"); the shards' trainers
 * then meet at the rendezvous, the coordinator's in process
 * (dpmd_kv_local), the others' over RPC (server/fleet/kvpeer.h) or through the
 * spec's Redis or file store. A join refused, or a daemon that cannot be
 * reached, fails the forming, naming the shard and its endpoint; so does
 * the coordinator's own shard failing to build (the rendezvous timed out,
 * a peer's shard failed: dpmd_fleet_abort; a shard that fails to build
 * reports it to the store, dpmd_fleet_report). Either way the formation is
 * dropped first (the other shards' stores then fail at once instead of
 * waiting out the timeout), and the shards that joined are deleted.
 * Each formation is named afresh ("NAME/" and 16 random hex digits, drawn
 * when the coordinator takes the submit), so no key of an earlier
 * formation of the job is ever read by a later one.
 *
 * The job's secret: with each formation's name the coordinator draws
 * DPMD_JOB_SECRET_BYTES random bytes (getrandom) and hands them to every
 * shard in its join. The commands it forwards to a shard (train, load,
 * sync) carry them, and a shard accepts the commands only its coordinator
 * may send (DPM_CMDF_COORDINATOR, common/commands.h) only with them
 * (dpmd_fleet_from_coordinator, a constant-time comparison): `forwarded`
 * alone is a flag any client with the token can set. The secret lives in
 * the links only: no reply, log line, event or file shows it (spec.pb
 * holds the spec, not the join). A restart needs none kept: a restarted
 * shard drops its part of the job, and a restarted coordinator re-forms it
 * under a new link, deleting the old shards (delete is not a
 * coordinator-only command) and joining them again with a new secret.
 *
 * The whole job: train at the coordinator is forwarded to every other
 * shard (dpmd_fleet_train: each must stand at the coordinator's iteration),
 * delete at the coordinator deletes every shard and drops the formation
 * (dpmd_fleet_delete), status and list at the coordinator ask every shard
 * (server/fleet/gather.h). Periodic and shutdown checkpoints are shard 0's alone
 * (dpmd_fleet_checkpoints). Stops are agreed in band by the trainers
 * (train/trainer.h, dpm_trainer_stop; model.c decides when): pause at the
 * coordinator stops every shard at one iteration, resume there is a train
 * forwarded to every shard towards the same target. A shard whose devices
 * a model of higher priority wants makes the job yield in band
 * (dpm_trainer_yield): the coordinator tries again with a train forwarded
 * to every shard (server/models/lifecycle.c, run_gang). A shard that dies or
 * stops stepping makes the others fail their step at once (a closed
 * connection) or at the collectives' timeout; the failure names the
 * process, which is the shard (dpmd_fleet_name_shards adds its endpoint).
 * load and sync at the coordinator are forwarded to every other shard
 * while it runs its part (dpmd_fleet_forward_begin/end). Re-forming
 * (resume at the coordinator: dpmd_fleet_delete of the old job, a new link
 * from dpmd_fleet_coordinate, dpmd_fleet_form) and restarts are the
 * model's (server/models/model.h); the elastic batch rule is here
 * (dpmd_fleet_elastic_batch).
 *
 * Bounds: every call to another daemon of the job (the check of
 * shards[0], joins, trains, deletes, the store over RPC, a failure
 * reported) waits at most the job's timeout (parallel.rendezvous.
 * timeout_ms), and the calls to the other shards run at once, each on a
 * thread of its own: a dead or bogus peer costs the job's timeout once,
 * whatever the number of shards. A forwarded collective (load, sync) waits
 * DPMD_FLEET_FORWARD_TIMEOUTS timeouts: the shard's part is itself a
 * collective that may wait one timeout for the coordinator's.
 *
 * Threads: the links are made on the loop thread, without the network;
 * form, abort, train and delete wait for the network, on the model's
 * thread; the accessors are safe on any thread (what they read never
 * changes after the link is made). A link is owned by its model. */
#ifndef DPMD_FLEET_H
#define DPMD_FLEET_H

#include <stdint.h>

#include "proto/dpm.pb-c.h"
#include "server/dpmd.h"
#include "train/trainer.h"

typedef struct dpmd_fleet_link dpmd_fleet_link;

/* The spec's shards: 0 when it names none (a job of one daemon). */
int dpmd_fleet_shards(const Dpm__ModelSpec *spec);

/* Loop thread. The link of the coordinator (shard 0) of spec, a job over
 * dpmd_fleet_shards(spec) >= 1 daemons; gives spec a rendezvous section
 * (store "daemon") when it has none, so every shard builds the same spec.
 * Draws the formation's name. DPM_NOMEM, DPM_IO (no randomness). */
dpm_status dpmd_fleet_coordinate(Dpm__ModelSpec *spec, dpmd_fleet_link **out,
                                 dpm_err *err);
/* Loop thread. What a join must hold before anything is built: a shard id
 * in 1 .. num_shards-1, num_shards equal to the spec's shards, the
 * coordinator equal to shards[0], a formation of 1 .. DPMD_FORMATION_MAX-1
 * bytes. DPM_INVALID naming what is wrong. */
dpm_status dpmd_fleet_check_join(const Dpm__JoinRequest *j, dpm_err *err);
/* Loop thread. The link of the shard a (checked) join asks this daemon to
 * run. DPM_NOMEM. */
dpm_status dpmd_fleet_join(const Dpm__JoinRequest *j, dpmd_fleet_link **out,
                           dpm_err *err);
void dpmd_fleet_link_free(dpmd_fleet_link *l);

/* Any thread. */
int dpmd_fleet_shard_id(const dpmd_fleet_link *l);
int dpmd_fleet_num_shards(const dpmd_fleet_link *l);
const char *dpmd_fleet_coordinator(const dpmd_fleet_link *l); /* shard 0's endpoint */
const char *dpmd_fleet_formation(const dpmd_fleet_link *l);
/* Whether this shard writes periodic and shutdown checkpoints (shard 0). */
int dpmd_fleet_checkpoints(const dpmd_fleet_link *l);
#define DPMD_JOB_SECRET_BYTES 32
/* Whether rq came from the job's coordinator: forwarded, with the job's
 * secret (compared in constant time). */
int dpmd_fleet_from_coordinator(const dpmd_fleet_link *l, const Dpm__Request *rq);

/* Any thread. msg (a collective's error on shard self: its processes are
 * the job's shards, "process K" is shard K) into out (cap bytes,
 * truncated), with "; process K is shard K at ENDPOINT" added once for
 * each process it names that is one of the spec's shards. A message that
 * names none (a send that timed out says not to whom) in a job of two
 * shards gets "; the other process is shard K at ENDPOINT": there is no
 * other peer. */
void dpmd_fleet_name_shards(const Dpm__ModelSpec *spec, int self, const char *msg,
                            char *out, size_t cap);

/* The per-device batch of a job re-formed from `shards` to `new_shards`
 * shards of `devices` devices each, whose per-device batch is `batch`
 * (elastic resume). The global batch batch x devices x shards is kept when
 * the new devices divide it (into at most DPM_SPEC_MAX_BATCH per device):
 * *device_batch is its share, *changed 0. Otherwise, with allow (dpmctl
 * resume --allow-batch-change), the per-device batch stays (*device_batch
 * = batch) and the global batch becomes batch x devices x new_shards
 * (*changed 1); without, DPM_INVALID saying both. Pure. */
dpm_status dpmd_fleet_elastic_batch(uint32_t batch, int devices, int shards,
                                    int new_shards, int allow, uint32_t *device_batch,
                                    int *changed, dpm_err *err);

/* Model thread, coordinator: forms the job (see Forming). On failure
 * nothing of the formation is left (no formation, no joined shard). */
dpm_status dpmd_fleet_form(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                           int priority, double weight, dpm_err *err);
/* Model thread: fills opt->fleet (shard, shards, the rendezvous: the store
 * in process, over RPC, or the spec's URL, a file store with the daemon's
 * confined file access, its directory made through it here; the
 * formation; the interface) and
 * opt->comm_timeout_ms (the rendezvous timeout). A store this daemon does
 * not allow (server/fleet/rendezvous.h) is DPM_DENIED. The stores stay open in l
 * for as long as the trainer lives. */
dpm_status dpmd_fleet_options(const dpmd *d, dpmd_fleet_link *l,
                              const Dpm__ModelSpec *spec, dpm_trainer_options *opt,
                              dpm_err *err);
/* Model thread, another shard that did not build (why): tells the
 * coordinator's store (store "daemon"), so that every shard waiting at the
 * rendezvous fails at once with this shard's message instead of at the
 * timeout. A failure to tell is logged. */
void dpmd_fleet_report(dpmd *d, const dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                       const dpm_err *why);
/* Model thread, coordinator whose shard did not build: drops the formation
 * and deletes the shards that joined (failures are logged). */
void dpmd_fleet_abort(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec);
/* Model thread, coordinator: starts `iters` steps on every other shard,
 * all at once, each of which must be at iteration from_iter. The first
 * refusal or unreachable shard (in shard order) is the error, naming the
 * shard and how many others did start (they will fail their first step at
 * the collectives' timeout). */
dpm_status dpmd_fleet_train(dpmd *d, const dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                            uint64_t iters, uint64_t from_iter, dpm_err *err);
/* A collective forwarded to every other shard while the coordinator's own
 * shard runs its part (load, sync: each shard's trainer waits in the
 * collective for the others, so the calls cannot be made one after the
 * other). */
typedef struct dpmd_fleet_calls dpmd_fleet_calls;
#define DPMD_FLEET_FORWARD_TIMEOUTS 2
/* Model thread, coordinator: sends rq (copied per call, with the job's
 * secret; fields it points to must outlive dpmd_fleet_forward_end) to
 * every other shard, each call on a thread of its own, waiting up to
 * DPMD_FLEET_FORWARD_TIMEOUTS times the job's timeout for its answer.
 * DPM_NOMEM (nothing started). */
dpm_status dpmd_fleet_forward_begin(dpmd *d, const dpmd_fleet_link *l,
                                    const Dpm__ModelSpec *spec, const Dpm__Request *rq,
                                    dpmd_fleet_calls **out, dpm_err *err);
/* Model thread: waits for every call begun and frees c; the first shard
 * that failed or refused, named (DPM_OK when all answered OK). */
dpm_status dpmd_fleet_forward_end(dpmd_fleet_calls *c, dpm_err *err);

/* Model thread, coordinator: drops the formation and deletes the job on
 * every other shard, all at once (a shard that no longer has it counts as
 * deleted). Every shard is tried; the error names each one that failed. */
dpm_status dpmd_fleet_delete(dpmd *d, dpmd_fleet_link *l, const Dpm__ModelSpec *spec,
                             dpm_err *err);

#endif
