/* dpm client library: talks to dpmd over nanomsg with the protobuf RPC of
 * proto/dpm.proto (Request -> Response, Event on the events socket).
 * dpmctl is built on it; so can any program that drives the daemon.
 *
 *   dpm_client *c;
 *   if (dpm_client_open(NULL, 5000, &c, &err)) ...      // $DPM_ENDPOINT or default
 *   Dpm__Request rq = DPM__REQUEST__INIT;                 // fill the command oneof
 *   Dpm__Response *rs;
 *   if (dpm_client_call(c, &rq, &rs, &err)) ...          // transport failure
 *   if (rs->status) ... rs->message ...                   // the daemon refused
 *                                               // (dpm_status_from_wire(rs->status))
 *   dpm_client_free_response(rs);
 *   dpm_client_close(c);
 *
 * Errors: functions return a dpm_status with details in err. Transport
 * failures are DPM_TIMEOUT (no answer within the timeout, or the daemon
 * stopped answering: see Liveness) and DPM_IO (bad endpoint, no daemon
 * listening on an ipc socket, socket errors, the daemon restarted during the
 * call); a reply that is not a Response for this request is DPM_CORRUPT. A
 * daemon's refusal is not a transport failure: dpm_client_call returns
 * DPM_OK and the response's status and message say why.
 *
 * Requests are never sent twice: not by the library, not by nanomsg (a raw
 * REQ socket; client/lib/client.c describes the wire). A request whose
 * connection dropped is lost, and the call says so rather than having the
 * next daemon run it again.
 *
 * Liveness: a call that has waited DPM_PING_AFTER_MS without its answer pings
 * the daemon every DPM_PING_AFTER_MS; after DPM_LIVENESS_MS in which nothing
 * at all came back it fails with DPM_TIMEOUT ("stopped answering"), whatever
 * its timeout. A busy daemon still answers pings, so a long call (train with
 * wait, checkpoint, eval) runs as long as its timeout allows. When a ping is
 * answered by another daemon instance than the one this client knew, the
 * call fails at once with DPM_IO ("restarted; the request was lost"). The
 * client learns the instance from ping and version answers: before a call
 * that may wait long, call dpm_client_ping once, so that a restart early in
 * the call is caught too.
 *
 * Ownership: responses and events returned to the caller are freed with
 * dpm_client_free_response / dpm_event_free. The request stays the caller's;
 * dpm_client_call sets its version, id and token fields (pointing into the
 * client, valid until the next call).
 *
 * Threads: a dpm_client or dpm_events handle is used by one thread at a
 * time; separate handles are independent. */
#ifndef DPM_CLIENT_H
#define DPM_CLIENT_H

#include <stdint.h>

#include "dpm/protocol.h" /* DPM_PROTOCOL_VERSION, DPM_VERSION, the liveness timings */
#include "dpm/status.h"
#include "dpm/wire.h" /* dpm_status_from_wire */
#include "proto/dpm.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpm_client dpm_client;
typedef struct dpm_events dpm_events;

/* endpoint NULL: $DPM_ENDPOINT, else DPM_DEFAULT_ENDPOINT. timeout_ms bounds
 * each call (send and receive); < 0 waits forever (as long as the daemon
 * answers pings). Opening does not contact the daemon (nanomsg connects in
 * the background); a call to an ipc:// endpoint whose socket file is missing
 * or has no listener fails at once with DPM_IO. */
dpm_status dpm_client_open(const char *endpoint, int timeout_ms, dpm_client **out,
                           dpm_err *err);
/* The token sent with every request (copied); NULL for none. */
dpm_status dpm_client_set_token(dpm_client *c, const char *token, dpm_err *err);
/* Changes the timeout of later calls (< 0: forever). */
void dpm_client_set_timeout(dpm_client *c, int timeout_ms);
const char *dpm_client_endpoint(const dpm_client *c);
/* Sends req and waits for its response, pinging while it waits (Liveness
 * above). A call never resends (a resent train would train twice). Answers
 * to earlier calls that timed out are skipped; a Response with an id this
 * client never sent is DPM_CORRUPT. */
dpm_status dpm_client_call(dpm_client *c, Dpm__Request *req, Dpm__Response **resp,
                           dpm_err *err);
/* A ping call (within the client's timeout) that also checks the daemon is
 * the instance this client knew: DPM_IO "restarted" when another instance
 * answered (the client knows the new one from then on). The first answer
 * teaches the client the instance. resp may be NULL; a refused ping (bad
 * token) is DPM_OK with the refusal in *resp. */
dpm_status dpm_client_ping(dpm_client *c, Dpm__Response **resp, dpm_err *err);
/* The daemon instance the client last heard from (VersionInfo.instance); 0
 * while unknown, or when the daemon does not send one. */
uint64_t dpm_client_instance(const dpm_client *c);
void dpm_client_free_response(Dpm__Response *resp);
void dpm_client_close(dpm_client *c);

/* Subscribes to the daemon's events endpoint (from the watch command's
 * WatchInfo), for one model (name) or every model (NULL). */
dpm_status dpm_events_open(const char *endpoint, const char *name, dpm_events **out,
                           dpm_err *err);
/* The events of the daemon c talks to, through its request socket (the
 * events command; WatchInfo.stream says the daemon serves it): the same
 * transport and token as c's calls, so it works on every daemon, a tcp://
 * one without an events socket included. It opens a connection of its own
 * (c stays free for calls from another thread), asks where the stream
 * stands (within DPM_LIVENESS_MS) and delivers the events after that, for
 * one model (name) or every model (NULL). dpm_events_fd is -1 for it:
 * dpm_events_next waits by asking the daemon (a long poll). Errors: those
 * of a call; a refusal (bad token, no such model) with its status. */
dpm_status dpm_events_open_stream(const dpm_client *c, const char *name, dpm_events **out,
                                  dpm_err *err);
/* Waits up to timeout_ms (< 0: forever) for the next event: DPM_TIMEOUT when
 * none came, or when a signal interrupted the wait (the caller looks at its
 * own flags). Publications that are not "MODEL\n" + an Event are skipped. */
dpm_status dpm_events_next(dpm_events *e, int timeout_ms, Dpm__Event **ev, dpm_err *err);
/* A descriptor that polls readable (POLLIN) while an event may be waiting
 * (nanomsg's NN_RCVFD), for a caller that waits on it together with its own
 * descriptors, then takes the events with dpm_events_next(e, 0, ...); the
 * caller only polls it. Owned by e; -1 when nanomsg has none, and for a
 * stream (dpm_events_open_stream). */
int dpm_events_fd(dpm_events *e);
void dpm_event_free(Dpm__Event *ev);
void dpm_events_close(dpm_events *e);

#ifdef __cplusplus
}
#endif
#endif
