/* The coordinator's rendezvous store (server/fleet/kv.h) seen from another shard
 * of the job: a dpm_comm_store (comm/comm.h) whose set and get are kv-set
 * and kv-get calls to the coordinating daemon, for one formation.
 *
 * get never makes the coordinator wait: kv-get answers at once ("not
 * yet" while the key is unset), and this side asks again after a short
 * backoff (DPMD_KVPEER_FIRST_MS, doubling to DPMD_KVPEER_MAX_MS) until the
 * get's timeout; each call is bounded by what is left of it, but given at
 * least a second (so a get may end up to a second late rather than fail
 * a call on a sliver of time).
 *
 * Errors: the coordinator's refusals and transport failures come back as
 * they are (server/fleet/peer.h), with the key named; a formation the
 * coordinator no longer has (the job was deleted or failed to form) is
 * DPM_NOT_FOUND at once, so a shard stops waiting when its coordinator gave
 * up; DPM_TIMEOUT when the key was not set in time; DPM_CORRUPT for a
 * value larger than a store may hold (DPMD_KV_MAX_VALUE).
 *
 * Threads: the store is called by the thread that creates the
 * communicator (a model's thread); one at a time. Ownership: the owner
 * keeps it open as long as a communicator built on it may call it. */
#ifndef DPMD_KVPEER_H
#define DPMD_KVPEER_H

#include "comm/comm.h"
#include "server/dpmd.h"

#define DPMD_KVPEER_FIRST_MS 2
#define DPMD_KVPEER_MAX_MS 100

typedef struct dpmd_kvpeer dpmd_kvpeer;

/* A store on formation at the daemon at coordinator (no network yet);
 * each set, and each call of a get, waits at most call_ms (the job's
 * timeout). */
dpm_status dpmd_kvpeer_open(const dpmd *d, const char *coordinator, const char *formation,
                            int call_ms, dpmd_kvpeer **out, dpm_err *err);
/* What the communicator is given; valid until close. */
const dpm_comm_store *dpmd_kvpeer_store(dpmd_kvpeer *k);
void dpmd_kvpeer_close(dpmd_kvpeer *k);

#endif
