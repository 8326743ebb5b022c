/* dpmd's calls to other daemons: the peers of a fleet job (server/fleet/fleet.h),
 * over the same RPC clients use (common/rpc.h: never resent, liveness
 * pings, bounded by a timeout).
 *
 * Token: every call carries this daemon's own token (auth_token_file), and
 * every daemon requires its token from whoever calls it, so the daemons of
 * a job share one token; a peer that refuses it answers DPM_DENIED, which
 * comes back as DPM_DENIED naming the peer and saying so. Every call is
 * marked `forwarded` (sent by a daemon of the job, not by a user).
 *
 * Bounds: a peer's reply is taken only up to this daemon's
 * max_message_bytes (a larger one fails the call as a silent peer would).
 * What a peer says is text from the network: the messages built from it
 * are escaped.
 *
 * Threads: a call waits for the network, so never on the loop thread: a
 * model's thread or the fleet's gatherer (server/fleet/gather.h). A dpmd_peer is
 * used by one thread at a time.
 *
 * Errors: the transport's (DPM_TIMEOUT, DPM_IO, DPM_CORRUPT) with "cannot
 * reach ENDPOINT: ..."; a refusal keeps the peer's status, with "ENDPOINT
 * refused: its message"; DPM_NOMEM. Callers add which shard it is. */
#ifndef DPMD_PEER_H
#define DPMD_PEER_H

#include "proto/dpm.pb-c.h"
#include "server/dpmd.h"

/* A connection's timeout until a call sets its own (every call does: the
 * fleet's are bounded by the job's timeout, server/fleet/fleet.h). */
#define DPMD_PEER_TIMEOUT_MS 10000

typedef struct dpmd_peer dpmd_peer;

/* A connection to endpoint with d's token and reply bound (no network
 * yet: the first call connects). */
dpm_status dpmd_peer_open(const dpmd *d, const char *endpoint, dpmd_peer **out,
                          dpm_err *err);
/* Sends rq (its version, id, token and forwarded set here) and waits up to
 * timeout_ms for the answer. DPM_OK: *out is the peer's Response with
 * status OK (the caller frees it with dpm__response__free_unpacked(r,
 * NULL)); otherwise *out is NULL and err says why (see Errors). */
dpm_status dpmd_peer_call(dpmd_peer *p, Dpm__Request *rq, int timeout_ms,
                          Dpm__Response **out, dpm_err *err);
const char *dpmd_peer_endpoint(const dpmd_peer *p);
/* The instance of the daemon that answered last (VersionInfo of a ping);
 * 0 when none has. */
uint64_t dpmd_peer_instance(const dpmd_peer *p);
void dpmd_peer_close(dpmd_peer *p);

/* One call on a connection of its own (open, call, close). */
dpm_status dpmd_peer_call_once(const dpmd *d, const char *endpoint, Dpm__Request *rq,
                               int timeout_ms, Dpm__Response **out, dpm_err *err);

#endif
