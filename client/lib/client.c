/* The dpm client library (include/dpm/client.h): a nanomsg REQ socket for
 * Request -> Response, a SUB socket for events.
 *
 * Matching: nanomsg's REQ matches replies to requests itself (a request id
 * in its own header) and drops replies to requests it has given up on, so
 * the reply a call receives answers the request it sent. Every Request also
 * carries an increasing id; a Response whose id is set and differs means a
 * daemon that mixed up its answers: DPM_CORRUPT (REQ cannot wait for a
 * second reply to one request). A Response without an id, from a daemon
 * that could not parse the request, is taken as this call's.
 *
 * Resending: REQ resends a request that got no answer after NN_REQ_RESEND_IVL
 * (60 s by default). A daemon answers long commands (train --wait, submit)
 * only when they are done, and a resent train would train twice, so the
 * interval is set beyond the call's timeout: a call never resends. nanomsg
 * still resends at once when the connection the request went out on drops
 * (a restarted daemon gets it again).
 *
 * Events: each message is "MODEL\n" + a packed Event; a message without the
 * '\n' or whose Event does not unpack is skipped (dpm_events_next keeps
 * waiting): a subscriber should not die of one bad publication. */
#include "dpm/client.h"

#include <errno.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dpm_client {
  int sock;
  int timeout_ms; /* < 0: forever */
  char *endpoint;
  char *token; /* NULL: none */
  uint64_t next_id;
};

struct dpm_events {
  int sock;
  char *endpoint;
};

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int set_int(int sock, int level, int option, int value) {
  return nn_setsockopt(sock, level, option, &value, sizeof value);
}

/* Milliseconds left before deadline (-1: none), at least 0. */
static int remaining(int64_t deadline) {
  if (deadline < 0) return -1;
  int64_t left = deadline - now_ms();
  if (left < 0) left = 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

/* A socket of the given protocol with unlimited message size. Returns the
 * socket or -1 with err set. */
static int open_socket(int protocol, dpm_err *err) {
  int s = nn_socket(AF_SP, protocol);
  if (s < 0) {
    dpm_errf(err, DPM_IO, "cannot create a nanomsg socket: %s", nn_strerror(nn_errno()));
    return -1;
  }
  if (set_int(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, -1) < 0) {
    dpm_errf(err, DPM_IO, "nanomsg: NN_RCVMAXSIZE: %s", nn_strerror(nn_errno()));
    nn_close(s);
    return -1;
  }
  return s;
}

static int connect_socket(int s, const char *endpoint, dpm_err *err) {
  if (nn_connect(s, endpoint) < 0) {
    int e = nn_errno();
    dpm_errf(err, DPM_IO, "cannot connect to '%s': %s", endpoint, nn_strerror(e));
    return -1;
  }
  return 0;
}

/* Send timeout and resend interval for a call of timeout_ms (< 0: forever);
 * the receive timeout is set before each receive. */
static dpm_status apply_timeout(dpm_client *c, int timeout_ms) {
  int t = timeout_ms < 0 ? -1 : timeout_ms;
  /* never resend within a call (see the top of the file) */
  int resend = (t < 0 || t > INT_MAX - 60000) ? INT_MAX : t + 60000;
  if (set_int(c->sock, NN_SOL_SOCKET, NN_SNDTIMEO, t) < 0 ||
      set_int(c->sock, NN_REQ, NN_REQ_RESEND_IVL, resend) < 0)
    return DPM_IO;
  return DPM_OK;
}

dpm_status dpm_client_open(const char *endpoint, int timeout_ms, dpm_client **out,
                           dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "dpm_client_open: out is NULL");
  *out = NULL;
  if (!endpoint) {
    const char *env = getenv("DPM_ENDPOINT");
    endpoint = env && *env ? env : DPM_DEFAULT_ENDPOINT;
  }
  if (!*endpoint) return dpm_errf(err, DPM_IO, "empty endpoint");
  dpm_client *c = calloc(1, sizeof *c);
  if (!c || !(c->endpoint = strdup(endpoint))) {
    free(c);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  c->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
  c->next_id = 1;
  c->sock = open_socket(NN_REQ, err);
  if (c->sock < 0) goto fail;
  if (apply_timeout(c, c->timeout_ms)) {
    dpm_errf(err, DPM_IO, "nanomsg: cannot set timeouts: %s", nn_strerror(nn_errno()));
    goto fail;
  }
  if (connect_socket(c->sock, endpoint, err)) goto fail;
  *out = c;
  return DPM_OK;
fail:
  if (c->sock >= 0) nn_close(c->sock);
  free(c->endpoint);
  free(c);
  return DPM_IO;
}

dpm_status dpm_client_set_token(dpm_client *c, const char *token, dpm_err *err) {
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_client_set_token: client is NULL");
  char *t = NULL;
  if (token && !(t = strdup(token))) return dpm_errf(err, DPM_NOMEM, "out of memory");
  free(c->token);
  c->token = t;
  return DPM_OK;
}

void dpm_client_set_timeout(dpm_client *c, int timeout_ms) {
  if (c) c->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
}

const char *dpm_client_endpoint(const dpm_client *c) { return c ? c->endpoint : NULL; }

static dpm_status timed_out(const dpm_client *c, dpm_err *err) {
  return dpm_errf(err, DPM_TIMEOUT, "no answer from %s within %d ms (is dpmd running?)",
                  c->endpoint, c->timeout_ms);
}

dpm_status dpm_client_call(dpm_client *c, Dpm__Request *req, Dpm__Response **resp,
                           dpm_err *err) {
  if (resp) *resp = NULL;
  if (!c || !req || !resp)
    return dpm_errf(err, DPM_INVALID, "dpm_client_call: NULL argument");
  uint64_t id = c->next_id++;
  req->version = DPM_PROTOCOL_VERSION;
  req->has_id = 1;
  req->id = id;
  req->token = c->token;

  size_t n = dpm__request__get_packed_size(req);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return dpm_errf(err, DPM_NOMEM, "out of memory (request of %zu bytes)", n);
  dpm__request__pack(req, buf);

  int64_t deadline = c->timeout_ms < 0 ? -1 : now_ms() + c->timeout_ms;
  if (apply_timeout(c, c->timeout_ms) != DPM_OK) {
    free(buf);
    return dpm_errf(err, DPM_IO, "nanomsg: cannot set timeouts: %s",
                    nn_strerror(nn_errno()));
  }
  int rc;
  for (;;) {
    rc = nn_send(c->sock, buf, n, 0);
    if (rc >= 0 || nn_errno() != EINTR) break;
  }
  free(buf);
  if (rc < 0) {
    int e = nn_errno();
    if (e == ETIMEDOUT || e == EAGAIN) return timed_out(c, err);
    return dpm_errf(err, DPM_IO, "cannot send to %s: %s", c->endpoint, nn_strerror(e));
  }

  for (;;) {
    int left = remaining(deadline);
    if (deadline >= 0 && left == 0) return timed_out(c, err);
    if (set_int(c->sock, NN_SOL_SOCKET, NN_RCVTIMEO, left) < 0)
      return dpm_errf(err, DPM_IO, "nanomsg: NN_RCVTIMEO: %s", nn_strerror(nn_errno()));
    void *msg = NULL;
    int got = nn_recv(c->sock, &msg, NN_MSG, 0);
    if (got < 0) {
      int e = nn_errno();
      if (e == EINTR) continue;
      if (e == ETIMEDOUT || e == EAGAIN) return timed_out(c, err);
      return dpm_errf(err, DPM_IO, "cannot receive from %s: %s", c->endpoint,
                      nn_strerror(e));
    }
    Dpm__Response *r = dpm__response__unpack(NULL, (size_t)got, msg);
    nn_freemsg(msg);
    if (!r)
      return dpm_errf(err, DPM_CORRUPT,
                      "the reply from %s is not a dpm Response (%d bytes)", c->endpoint,
                      got);
    if (r->has_id && r->id != id) {
      uint64_t other = r->id;
      dpm__response__free_unpacked(r, NULL);
      return dpm_errf(err, DPM_CORRUPT,
                      "%s answered request %llu with the response to request %llu",
                      c->endpoint, (unsigned long long)id, (unsigned long long)other);
    }
    *resp = r;
    return DPM_OK;
  }
}

void dpm_client_free_response(Dpm__Response *resp) {
  if (resp) dpm__response__free_unpacked(resp, NULL);
}

void dpm_client_close(dpm_client *c) {
  if (!c) return;
  nn_close(c->sock);
  free(c->endpoint);
  free(c->token);
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
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  if (name) {
    memcpy(topic, name, tlen);
    topic[tlen++] = '\n';
  }
  e->sock = open_socket(NN_SUB, err);
  if (e->sock < 0) goto fail;
  if (nn_setsockopt(e->sock, NN_SUB, NN_SUB_SUBSCRIBE, topic ? topic : "", tlen) < 0) {
    dpm_errf(err, DPM_IO, "nanomsg: cannot subscribe: %s", nn_strerror(nn_errno()));
    goto fail;
  }
  if (connect_socket(e->sock, endpoint, err)) goto fail;
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

dpm_status dpm_events_next(dpm_events *e, int timeout_ms, Dpm__Event **ev, dpm_err *err) {
  if (ev) *ev = NULL;
  if (!e || !ev) return dpm_errf(err, DPM_INVALID, "dpm_events_next: NULL argument");
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
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
  nn_close(e->sock);
  free(e->endpoint);
  free(e);
}
