/* The request/reply core of dpm's RPC: one Request to a dpmd, one Response
 * back, over a raw nanomsg REQ socket (proto/dpm.proto). Shared by design:
 * the client library (include/dpm/client.h, client/lib/) is a thin layer
 * over it, and dpmd calls its peer daemons with it (daemon/server/fleet/peer.h).
 *
 * The semantics are those include/dpm/client.h documents for dpm_client_*:
 * a request is never sent twice; answers are matched by id and answers to
 * earlier calls that timed out are skipped; a call that waits pings the
 * daemon every DPM_PING_AFTER_MS and fails after DPM_LIVENESS_MS without a
 * word (DPM_TIMEOUT), or at once when another daemon instance answers a
 * ping (DPM_IO "restarted"); an ipc:// endpoint without a listener fails
 * at once (DPM_IO). common/rpc.c describes the wire.
 *
 * Errors: DPM_TIMEOUT, DPM_IO (transport), DPM_CORRUPT (a reply that is not
 * a Response for this request), DPM_NOMEM, DPM_INVALID (NULL arguments). A
 * daemon's refusal is not an error here: dpm_rpc_call returns DPM_OK and
 * the Response's status and message say why.
 *
 * Ownership: responses returned are the caller's, freed with
 * dpm__response__free_unpacked(r, NULL). The request stays the caller's;
 * dpm_rpc_call sets its version, id and token fields (the token pointing
 * into the handle, valid until the next call).
 *
 * Threads: a handle is used by one thread at a time; handles are
 * independent of each other. */
#ifndef DPM_COMMON_RPC_H
#define DPM_COMMON_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

typedef struct dpm_rpc dpm_rpc;

/* A handle for calls to endpoint (ipc:// or tcp://; required), each call
 * bounded by timeout_ms (< 0: as long as the daemon answers pings).
 * Connects in the background: opening contacts nobody. DPM_IO for an
 * endpoint nanomsg refuses, DPM_NOMEM. */
dpm_status dpm_rpc_open(const char *endpoint, int timeout_ms, dpm_rpc **out,
                        dpm_err *err);
/* Replies larger than bytes are not taken (nanomsg drops the connection:
 * the call then fails as for a silent daemon); the default takes any size.
 * For a caller that must bound what a remote end can make it hold. */
dpm_status dpm_rpc_set_max_reply(dpm_rpc *r, size_t bytes, dpm_err *err);
/* The token sent with every request (copied); NULL for none. */
dpm_status dpm_rpc_set_token(dpm_rpc *r, const char *token, dpm_err *err);
void dpm_rpc_set_timeout(dpm_rpc *r, int timeout_ms);
const char *dpm_rpc_endpoint(const dpm_rpc *r);
/* The token set with dpm_rpc_set_token (owned by r), or NULL. */
const char *dpm_rpc_token(const dpm_rpc *r);
/* Sends req and waits for its Response (see above). */
dpm_status dpm_rpc_call(dpm_rpc *r, Dpm__Request *req, Dpm__Response **resp,
                        dpm_err *err);
/* A ping call that also checks the daemon is the instance this handle knew
 * (DPM_IO "restarted" otherwise); the first answer teaches the instance.
 * resp may be NULL; a refused ping (bad token) is DPM_OK with the refusal
 * in *resp. */
dpm_status dpm_rpc_ping(dpm_rpc *r, Dpm__Response **resp, dpm_err *err);
/* The daemon instance last heard from (VersionInfo.instance); 0: unknown. */
uint64_t dpm_rpc_instance(const dpm_rpc *r);
void dpm_rpc_close(dpm_rpc *r);

/* A nanomsg socket of family (AF_SP, AF_SP_RAW) and protocol, taking
 * messages of any size, connecting to endpoint in the background (over
 * IPv6 for a tcp://[ADDR]:PORT endpoint): the socket, or -1 with err set
 * (DPM_IO). */
int dpm_nn_socket(int family, int protocol, const char *endpoint, dpm_err *err);

#endif
