/* The dpm client library (include/dpm/client.h): the calls are the
 * request/reply core of common/rpc.h (shared with dpmd, which calls its
 * peers with it; common/rpc.c describes the wire, matching and liveness)
 * behind the public names, and this file adds the default endpoint and
 * the events socket.
 *
 * Events: a SUB socket; each message is "MODEL\n" + a packed Event; a
 * message without the '\n' or whose Event does not unpack is skipped
 * (dpm_events_next keeps waiting): a subscriber should not die of one bad
 * publication. Or a stream: events requests on an RPC handle of its own,
 * each waiting at most STREAM_WAIT_MS at the daemon, the batch answered
 * handed out one event at a time (an event that does not unpack is
 * skipped likewise). */
#include "dpm/client.h"

#include <errno.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rpc.h"

struct dpm_client {
  dpm_rpc *rpc;
};

#define STREAM_WAIT_MS 5000 /* one events request's wait at the daemon */

struct dpm_events {
  int sock; /* SUB; -1 for a stream */
  char *endpoint;
  /* a stream */
  dpm_rpc *rpc;
  char *name;           /* NULL: every model */
  uint64_t after;       /* the last event number seen */
  Dpm__Response *batch; /* the last answer, handed out from its event[next] */
  size_t next;
};

/* Milliseconds left before deadline (-1: none), at least 0. */
static int remaining(int64_t deadline) {
  if (deadline < 0) return -1;
  int64_t left = deadline - dpm_mono_ms();
  if (left < 0) left = 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

static int set_int(int sock, int level, int option, int value) {
  return nn_setsockopt(sock, level, option, &value, sizeof value);
}

dpm_status dpm_client_open(const char *endpoint, int timeout_ms, dpm_client **out,
                           dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "dpm_client_open: out is NULL");
  *out = NULL;
  if (!endpoint) {
    const char *env = getenv("DPM_ENDPOINT");
    endpoint = env && *env ? env : DPM_DEFAULT_ENDPOINT;
  }
  dpm_client *c = calloc(1, sizeof *c);
  if (!c) return dpm_nomem(err);
  dpm_status s = dpm_rpc_open(endpoint, timeout_ms, &c->rpc, err);
  if (s) {
    free(c);
    return s;
  }
  *out = c;
  return DPM_OK;
}

dpm_status dpm_client_set_token(dpm_client *c, const char *token, dpm_err *err) {
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_client_set_token: client is NULL");
  return dpm_rpc_set_token(c->rpc, token, err);
}

void dpm_client_set_timeout(dpm_client *c, int timeout_ms) {
  if (c) dpm_rpc_set_timeout(c->rpc, timeout_ms);
}

const char *dpm_client_endpoint(const dpm_client *c) {
  return c ? dpm_rpc_endpoint(c->rpc) : NULL;
}

uint64_t dpm_client_instance(const dpm_client *c) {
  return c ? dpm_rpc_instance(c->rpc) : 0;
}

dpm_status dpm_client_call(dpm_client *c, Dpm__Request *req, Dpm__Response **resp,
                           dpm_err *err) {
  if (resp) *resp = NULL;
  if (!c || !req || !resp)
    return dpm_errf(err, DPM_INVALID, "dpm_client_call: NULL argument");
  return dpm_rpc_call(c->rpc, req, resp, err);
}

dpm_status dpm_client_ping(dpm_client *c, Dpm__Response **resp, dpm_err *err) {
  if (resp) *resp = NULL;
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_client_ping: client is NULL");
  return dpm_rpc_ping(c->rpc, resp, err);
}

void dpm_client_free_response(Dpm__Response *resp) {
  if (resp) dpm__response__free_unpacked(resp, NULL);
}

void dpm_client_close(dpm_client *c) {
  if (!c) return;
  dpm_rpc_close(c->rpc);
  free(c);
}

dpm_status dpm_events_open(const char *endpoint, const char *name, dpm_events **out,
                           dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "dpm_events_open: out is NULL");
  *out = NULL;
  if (!endpoint || !*endpoint) return dpm_errf(err, DPM_IO, "empty events endpoint");
  dpm_events *e = calloc(1, sizeof *e);
  char *topic = NULL;
  size_t tlen = name ? strlen(name) : 0;
  if (!e || !(e->endpoint = strdup(endpoint)) || (name && !(topic = malloc(tlen + 1)))) {
    if (e) free(e->endpoint);
    free(e);
    return dpm_nomem(err);
  }
  if (name) {
    memcpy(topic, name, tlen);
    topic[tlen++] = '\n';
  }
  e->sock = dpm_nn_socket(AF_SP, NN_SUB, endpoint, err);
  if (e->sock < 0) goto fail;
  if (nn_setsockopt(e->sock, NN_SUB, NN_SUB_SUBSCRIBE, topic ? topic : "", tlen) < 0) {
    dpm_errf(err, DPM_IO, "nanomsg: cannot subscribe: %s", nn_strerror(nn_errno()));
    goto fail;
  }
  free(topic);
  *out = e;
  return DPM_OK;
fail:
  if (e->sock >= 0) nn_close(e->sock);
  free(topic);
  free(e->endpoint);
  free(e);
  return DPM_IO;
}

/* One events request: after e->after (has_after: else where the stream
 * stands), waiting at most wait_ms; the answer into e->batch. */
static dpm_status stream_ask(dpm_events *e, int has_after, int wait_ms, dpm_err *err) {
  Dpm__EventsRequest er = DPM__EVENTS_REQUEST__INIT;
  er.name = e->name;
  er.has_after = has_after;
  er.after = e->after;
  er.has_wait_ms = 1;
  er.wait_ms = (uint32_t)wait_ms;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_EVENTS;
  req.events = &er;
  dpm__response__free_unpacked(e->batch, NULL);
  e->batch = NULL;
  dpm_rpc_set_timeout(e->rpc, wait_ms + DPM_LIVENESS_MS);
  Dpm__Response *r;
  dpm_status s = dpm_rpc_call(e->rpc, &req, &r, err);
  if (s) return s;
  if (r->status) {
    s = dpm_status_from_wire(r->status);
    dpm_errf(err, s, "%s", r->message && *r->message ? r->message : dpm_strerror(s));
  } else if (r->result_case != DPM__RESPONSE__RESULT_EVENTS) {
    s = dpm_errf(err, DPM_CORRUPT, "%s answered events without events", e->endpoint);
  }
  if (s) {
    dpm__response__free_unpacked(r, NULL);
    return s;
  }
  e->after = r->events->next;
  e->batch = r;
  e->next = 0;
  return DPM_OK;
}

dpm_status dpm_events_open_stream(const dpm_client *c, const char *name, dpm_events **out,
                                  dpm_err *err) {
  if (!out || !c)
    return dpm_errf(err, DPM_INVALID, "dpm_events_open_stream: NULL argument");
  *out = NULL;
  dpm_events *e = calloc(1, sizeof *e);
  if (e) e->sock = -1;
  if (!e || !(e->endpoint = strdup(dpm_rpc_endpoint(c->rpc))) ||
      (name && !(e->name = strdup(name)))) {
    dpm_events_close(e);
    return dpm_nomem(err);
  }
  dpm_status s = dpm_rpc_open(e->endpoint, DPM_LIVENESS_MS, &e->rpc, err);
  if (!s) s = dpm_rpc_set_token(e->rpc, dpm_rpc_token(c->rpc), err);
  if (!s) s = stream_ask(e, 0, 0, err);
  if (s) {
    dpm_events_close(e);
    return s;
  }
  *out = e;
  return DPM_OK;
}

static dpm_status stream_next(dpm_events *e, int timeout_ms, Dpm__Event **ev,
                              dpm_err *err) {
  int64_t deadline = timeout_ms < 0 ? -1 : dpm_mono_ms() + timeout_ms;
  for (;;) {
    const Dpm__EventBatch *b = e->batch ? e->batch->events : NULL;
    while (b && e->next < b->n_event) {
      const ProtobufCBinaryData *x = &b->event[e->next++];
      if ((*ev = dpm__event__unpack(NULL, x->len, x->data))) return DPM_OK;
    }
    int left = remaining(deadline);
    if (deadline >= 0 && left == 0 && e->batch)
      return dpm_errf(err, DPM_TIMEOUT, "no event from %s within %d ms", e->endpoint,
                      timeout_ms);
    dpm_status s =
        stream_ask(e, 1, left < 0 || left > STREAM_WAIT_MS ? STREAM_WAIT_MS : left, err);
    if (s) return s;
  }
}

int dpm_events_fd(dpm_events *e) {
  int fd = -1;
  size_t len = sizeof fd;
  if (!e || e->sock < 0 || nn_getsockopt(e->sock, NN_SOL_SOCKET, NN_RCVFD, &fd, &len) < 0)
    return -1;
  return fd;
}

dpm_status dpm_events_next(dpm_events *e, int timeout_ms, Dpm__Event **ev, dpm_err *err) {
  if (ev) *ev = NULL;
  if (!e || !ev) return dpm_errf(err, DPM_INVALID, "dpm_events_next: NULL argument");
  if (e->rpc) return stream_next(e, timeout_ms, ev, err);
  int64_t deadline = timeout_ms < 0 ? -1 : dpm_mono_ms() + timeout_ms;
  for (;;) {
    int left = remaining(deadline);
    if (set_int(e->sock, NN_SOL_SOCKET, NN_RCVTIMEO, left) < 0)
      return dpm_errf(err, DPM_IO, "nanomsg: NN_RCVTIMEO: %s", nn_strerror(nn_errno()));
    void *msg = NULL;
    int got = nn_recv(e->sock, &msg, NN_MSG, 0);
    if (got < 0) {
      int code = nn_errno();
      if (code == EINTR) /* a signal: let the caller look at its flags */
        return dpm_errf(err, DPM_TIMEOUT, "interrupted while waiting for events from %s",
                        e->endpoint);
      if (code == ETIMEDOUT || code == EAGAIN)
        return dpm_errf(err, DPM_TIMEOUT, "no event from %s within %d ms", e->endpoint,
                        timeout_ms);
      return dpm_errf(err, DPM_IO, "cannot receive from %s: %s", e->endpoint,
                      nn_strerror(code));
    }
    const uint8_t *m = msg, *nl = memchr(m, '\n', (size_t)got);
    Dpm__Event *x =
        nl ? dpm__event__unpack(NULL, (size_t)(m + got - (nl + 1)), nl + 1) : NULL;
    nn_freemsg(msg);
    if (x) {
      *ev = x;
      return DPM_OK;
    }
    if (deadline >= 0 && remaining(deadline) == 0)
      return dpm_errf(err, DPM_TIMEOUT, "no event from %s within %d ms", e->endpoint,
                      timeout_ms);
  }
}

void dpm_event_free(Dpm__Event *ev) {
  if (ev) dpm__event__free_unpacked(ev, NULL);
}

void dpm_events_close(dpm_events *e) {
  if (!e) return;
  if (e->sock >= 0) nn_close(e->sock);
  dpm_rpc_close(e->rpc);
  dpm__response__free_unpacked(e->batch, NULL);
  free(e->name);
  free(e->endpoint);
  free(e);
}
