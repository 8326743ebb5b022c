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
 *   dpm_client_free_response(rs);
 *   dpm_client_close(c);
 *
 * Errors: functions return a dpm_status with details in err. Transport
 * failures are DPM_TIMEOUT (no answer within the timeout: no daemon, or it
 * is busy) and DPM_IO (bad endpoint, socket errors); a reply that is not a
 * Response for this request is DPM_CORRUPT. A daemon's refusal is not a
 * transport failure: dpm_client_call returns DPM_OK and the response's
 * status and message say why.
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

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPM_PROTOCOL_VERSION 1
#define DPM_DEFAULT_ENDPOINT "ipc:///run/dpmd/dpmd.sock"
#define DPM_VERSION "0.5.0" /* dpmd, dpmctl, dpm-train and this library */

typedef struct dpm_client dpm_client;
typedef struct dpm_events dpm_events;

/* endpoint NULL: $DPM_ENDPOINT, else DPM_DEFAULT_ENDPOINT. timeout_ms bounds
 * each call (send and receive); < 0 waits forever. Opening does not contact
 * the daemon (nanomsg connects in the background). */
dpm_status dpm_client_open(const char *endpoint, int timeout_ms, dpm_client **out,
                           dpm_err *err);
/* The token sent with every request (copied); NULL for none. */
dpm_status dpm_client_set_token(dpm_client *c, const char *token, dpm_err *err);
/* Changes the timeout of later calls (< 0: forever). */
void dpm_client_set_timeout(dpm_client *c, int timeout_ms);
const char *dpm_client_endpoint(const dpm_client *c);
/* Sends req and waits for its response. A call never resends on its own
 * (a resent train would train twice); a Response whose id differs from the
 * request's is DPM_CORRUPT. */
dpm_status dpm_client_call(dpm_client *c, Dpm__Request *req, Dpm__Response **resp,
                           dpm_err *err);
void dpm_client_free_response(Dpm__Response *resp);
void dpm_client_close(dpm_client *c);

/* Subscribes to the daemon's events endpoint (from the watch command's
 * WatchInfo), for one model (name) or every model (NULL). */
dpm_status dpm_events_open(const char *endpoint, const char *name, dpm_events **out,
                           dpm_err *err);
/* Waits up to timeout_ms (< 0: forever) for the next event: DPM_TIMEOUT when
 * none came, or when a signal interrupted the wait (the caller looks at its
 * own flags). Publications that are not "MODEL\n" + an Event are skipped. */
dpm_status dpm_events_next(dpm_events *e, int timeout_ms, Dpm__Event **ev, dpm_err *err);
void dpm_event_free(Dpm__Event *ev);
void dpm_events_close(dpm_events *e);

#ifdef __cplusplus
}
#endif
#endif
