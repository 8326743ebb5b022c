/* The request/reply core of dpm's RPC (common/rpc.h), under the client
 * library (include/dpm/client.h) and dpmd's calls to its peers.
 *
 * Raw REQ, never a resend: a cooked REQ socket resends a request whose
 * connection dropped as soon as it has another one, so a train, checkpoint
 * or eval in flight when dpmd was restarted ran again, by itself, on the
 * next daemon. The socket here is AF_SP_RAW, which never resends; the
 * client writes nanomsg's REQ header itself: 4 bytes, big-endian, the low 31
 * bits of the request id with the top bit set, before the packed Request.
 * dpmd's raw REP socket keeps that header and sends it back before the
 * packed Response (nanomsg's xreq splits it off; it is read back as the
 * SP_HDR control message of nn_recvmsg).
 *
 * Matching: by the Response's id, which dpmd copies from the Request's.
 * Answers to earlier requests (calls that timed out) are skipped; an id this
 * client never sent is DPM_CORRUPT. A Response with id 0 (dpmd could not
 * read the request) is matched by the header's id instead.
 *
 * Liveness: a call whose answer has not come within DPM_PING_AFTER_MS sends
 * a ping (its own id, on the same socket) every DPM_PING_AFTER_MS. Anything
 * that arrives counts as the daemon answering; after DPM_LIVENESS_MS without
 * anything the call fails (DPM_TIMEOUT). A ping answer carries the daemon's
 * instance (VersionInfo.instance, drawn at each start): the client keeps the
 * first nonzero one it sees, from a ping or version call or from a call's
 * pings, and a call whose ping is answered by another instance fails at once
 * (DPM_IO): the connection its request went out on is gone, and the request
 * with it. A daemon that sends no instance (0) is never taken for restarted.
 * Callers that may wait long ping once first (dpm_rpc_ping), so that a
 * restart before the call's first ping is noticed too; short calls cost
 * nothing extra.
 *
 * No daemon: while the socket has no connection, a request cannot leave.
 * For an ipc:// endpoint the client then tries connect() on the socket file
 * itself: a file that is missing, or that nobody listens on, fails the call
 * at once (DPM_IO, naming the path) instead of waiting for a daemon.
 * Otherwise the call waits for the connection up to its timeout, at most
 * DPM_LIVENESS_MS. */
#include "common/rpc.h"

#include <errno.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "dpm/protocol.h"
#include "dpm/wire.h"

#define HEADER_BYTES 4
#define HEADER_BOTTOM 0x80000000u /* the last word of a REQ backtrace */
#define HEADER_ID_MASK 0x7fffffffu

struct dpm_rpc {
  int sock;       /* AF_SP_RAW NN_REQ */
  int timeout_ms; /* < 0: forever */
  char *endpoint;
  char *ipc_path; /* the socket file of an ipc:// endpoint; NULL otherwise */
  char *token;    /* NULL: none */
  uint64_t next_id;
  uint64_t instance; /* the daemon's, from a ping answer; 0: not known */
};

static int set_int(int sock, int level, int option, int value) {
  return nn_setsockopt(sock, level, option, &value, sizeof value);
}

/* Milliseconds left before deadline (-1: none), at least 0. */
static int remaining(int64_t deadline) {
  if (deadline < 0) return -1;
  int64_t left = deadline - dpm_mono_ms();
  if (left < 0) left = 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

int dpm_nn_socket(int family, int protocol, const char *endpoint, dpm_err *err) {
  int s = nn_socket(family, protocol);
  if (s < 0) {
    dpm_errf(err, DPM_IO, "cannot create a nanomsg socket: %s", nn_strerror(nn_errno()));
    return -1;
  }
  /* IPv6 only for an IPv6 address: nanomsg 1.1's tcp connect with
   * NN_IPV4ONLY 0 to an IPv4 address aborts the process (an assertion in
   * usock_posix.inc), so tcp://127.0.0.1:P keeps the default */
  int v6 = !strncmp(endpoint, "tcp://[", 7);
  if (set_int(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, -1) < 0 ||
      (v6 && set_int(s, NN_SOL_SOCKET, NN_IPV4ONLY, 0) < 0)) {
    dpm_errf(err, DPM_IO, "nanomsg: socket options: %s", nn_strerror(nn_errno()));
    nn_close(s);
    return -1;
  }
  if (nn_connect(s, endpoint) < 0) {
    dpm_errf(err, DPM_IO, "cannot connect to '%s': %s", endpoint,
             nn_strerror(nn_errno()));
    nn_close(s);
    return -1;
  }
  return s;
}

dpm_status dpm_rpc_open(const char *endpoint, int timeout_ms, dpm_rpc **out,
                        dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "dpm_rpc_open: out is NULL");
  *out = NULL;
  if (!endpoint || !*endpoint) return dpm_errf(err, DPM_IO, "empty endpoint");
  dpm_rpc *c = calloc(1, sizeof *c);
  if (!c || !(c->endpoint = strdup(endpoint)) ||
      (!strncmp(endpoint, "ipc://", 6) && !(c->ipc_path = strdup(endpoint + 6)))) {
    if (c) free(c->endpoint);
    free(c);
    return dpm_nomem(err);
  }
  c->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
  c->next_id = 1;
  if ((c->sock = dpm_nn_socket(AF_SP_RAW, NN_REQ, endpoint, err)) < 0) {
    free(c->endpoint);
    free(c->ipc_path);
    free(c);
    return DPM_IO;
  }
  *out = c;
  return DPM_OK;
}

dpm_status dpm_rpc_set_max_reply(dpm_rpc *c, size_t bytes, dpm_err *err) {
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_rpc_set_max_reply: handle is NULL");
  /* nanomsg counts its own header: leave room for it */
  int max = bytes > (size_t)INT_MAX - 64 ? -1 : (int)bytes + 64;
  if (set_int(c->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, max) < 0)
    return dpm_errf(err, DPM_IO, "nanomsg: NN_RCVMAXSIZE: %s", nn_strerror(nn_errno()));
  return DPM_OK;
}

dpm_status dpm_rpc_set_token(dpm_rpc *c, const char *token, dpm_err *err) {
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_rpc_set_token: handle is NULL");
  char *t = NULL;
  if (token && !(t = strdup(token))) return dpm_nomem(err);
  free(c->token);
  c->token = t;
  return DPM_OK;
}

void dpm_rpc_set_timeout(dpm_rpc *c, int timeout_ms) {
  if (c) c->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
}

const char *dpm_rpc_endpoint(const dpm_rpc *c) { return c ? c->endpoint : NULL; }

const char *dpm_rpc_token(const dpm_rpc *c) { return c ? c->token : NULL; }

uint64_t dpm_rpc_instance(const dpm_rpc *c) { return c ? c->instance : 0; }

static dpm_status timed_out(const dpm_rpc *c, dpm_err *err) {
  return dpm_errf(err, DPM_TIMEOUT, "no answer from %s within %d ms (is dpmd running?)",
                  c->endpoint, c->timeout_ms);
}

static dpm_status stopped_answering(const dpm_rpc *c, dpm_err *err) {
  return dpm_errf(err, DPM_TIMEOUT,
                  "dpmd at %s stopped answering: nothing came back for %d s, not even "
                  "to pings (whether the request ran is unknown)",
                  c->endpoint, DPM_LIVENESS_MS / 1000);
}

static dpm_status restarted(const dpm_rpc *c, uint64_t was, uint64_t now, dpm_err *err) {
  return dpm_errf(err, DPM_IO,
                  "dpmd at %s restarted; the request was lost (instance %016llx, was "
                  "%016llx)",
                  c->endpoint, (unsigned long long)now, (unsigned long long)was);
}

/* For an ipc:// endpoint: 1 when connect() on its socket file says that
 * nobody can be listening (missing, refused, not a socket, no access), with
 * the reason in why; 0 when something listens or it cannot tell. */
static int ipc_unreachable(const char *path, char *why, size_t cap) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  if (!path || !*path || strlen(path) >= sizeof a.sun_path) return 0;
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, path, strlen(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  int e = errno;
  close(fd);
  if (rc == 0 ||
      !(e == ENOENT || e == ECONNREFUSED || e == ENOTDIR || e == EACCES || e == ENOTSOCK))
    return 0; /* listening (EAGAIN: its backlog is full), or unknown */
  snprintf(why, cap, "%s", strerror(e));
  return 1;
}

/* buf: HEADER_BYTES of REQ header for id, then req packed. Sets the
 * request's version, id and token. NULL when out of memory. */
static uint8_t *pack(dpm_rpc *c, Dpm__Request *req, uint64_t id, size_t *len) {
  req->version = DPM_PROTOCOL_VERSION;
  req->has_id = 1;
  req->id = id;
  req->token = c->token;
  size_t n = dpm__request__get_packed_size(req);
  *len = HEADER_BYTES + n;
  uint8_t *buf = malloc(HEADER_BYTES + n);
  if (!buf) return NULL;
  uint32_t h = HEADER_BOTTOM | (uint32_t)(id & HEADER_ID_MASK);
  buf[0] = (uint8_t)(h >> 24);
  buf[1] = (uint8_t)(h >> 16);
  buf[2] = (uint8_t)(h >> 8);
  buf[3] = (uint8_t)h;
  dpm__request__pack(req, buf + HEADER_BYTES);
  return buf;
}

/* Sends a call's request: at once when connected; else fails at once when
 * an ipc endpoint has no listener, or waits for the connection until the
 * deadline (-1: none), at most DPM_LIVENESS_MS. */
static dpm_status send_request(dpm_rpc *c, const uint8_t *buf, size_t n, int64_t deadline,
                               dpm_err *err) {
  int rc = nn_send(c->sock, buf, n, NN_DONTWAIT);
  if (rc >= 0) return DPM_OK;
  int e = nn_errno();
  if (e == EAGAIN) { /* not connected (yet) */
    char why[128];
    if (c->ipc_path && ipc_unreachable(c->ipc_path, why, sizeof why))
      return dpm_errf(err, DPM_IO, "no dpmd listens at %s: %s (is dpmd running?)",
                      c->endpoint, why);
    int64_t limit = dpm_mono_ms() + DPM_LIVENESS_MS;
    int wait_deadline = deadline >= 0 && deadline < limit;
    if (wait_deadline) limit = deadline;
    for (;;) {
      if (set_int(c->sock, NN_SOL_SOCKET, NN_SNDTIMEO, remaining(limit)) < 0)
        return dpm_errf(err, DPM_IO, "nanomsg: NN_SNDTIMEO: %s", nn_strerror(nn_errno()));
      rc = nn_send(c->sock, buf, n, 0);
      if (rc >= 0) return DPM_OK;
      e = nn_errno();
      if (e != EINTR) break;
    }
    if (e == ETIMEDOUT || e == EAGAIN) {
      if (wait_deadline) return timed_out(c, err);
      return dpm_errf(err, DPM_TIMEOUT,
                      "cannot reach dpmd at %s: no connection within %d s", c->endpoint,
                      DPM_LIVENESS_MS / 1000);
    }
  }
  return dpm_errf(err, DPM_IO, "cannot send to %s: %s", c->endpoint, nn_strerror(e));
}

/* A liveness ping; not connected or pushed back: not sent (the silence
 * then runs on). */
static void send_ping(dpm_rpc *c) {
  Dpm__Request ping = DPM__REQUEST__INIT;
  Dpm__Empty empty = DPM__EMPTY__INIT;
  ping.command_case = DPM__REQUEST__COMMAND_PING;
  ping.ping = &empty;
  size_t n;
  uint8_t *buf = pack(c, &ping, c->next_id++, &n);
  if (buf) nn_send(c->sock, buf, n, NN_DONTWAIT);
  free(buf);
}

/* The instance a ping answer names; 0 when none. */
static uint64_t instance_of(const Dpm__Response *r) {
  int ok = dpm_status_from_wire(r->status) == DPM_OK &&
           r->result_case == DPM__RESPONSE__RESULT_VERSION && r->version->has_instance;
  return ok ? r->version->instance : 0;
}

/* Receives one message: its body (nn_freemsg) and the REQ header's id (or
 * UINT32_MAX without one). Returns its size, or -1 with nn_errno set. */
static int receive(dpm_rpc *c, int timeout_ms, void **body, uint32_t *header) {
  union {
    size_t align;
    unsigned char bytes[128];
  } ctrl;
  memset(&ctrl, 0, sizeof ctrl);
  struct nn_iovec iov = {body, NN_MSG};
  struct nn_msghdr h = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctrl.bytes,
                        .msg_controllen = sizeof ctrl.bytes};
  *body = NULL;
  *header = UINT32_MAX;
  if (set_int(c->sock, NN_SOL_SOCKET, NN_RCVTIMEO, timeout_ms) < 0) return -1;
  int got = nn_recvmsg(c->sock, &h, 0);
  if (got < 0) return -1;
  struct nn_cmsghdr *cm = NN_CMSG_FIRSTHDR(&h);
  if (cm && cm->cmsg_level == PROTO_SP && cm->cmsg_type == SP_HDR) {
    const unsigned char *d = NN_CMSG_DATA(cm);
    size_t sz;
    memcpy(&sz, d, sizeof sz);
    d += sizeof sz;
    if (sz >= HEADER_BYTES)
      *header = ((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 |
                 (uint32_t)d[3]) &
                HEADER_ID_MASK;
  }
  return got;
}

dpm_status dpm_rpc_call(dpm_rpc *c, Dpm__Request *req, Dpm__Response **resp,
                        dpm_err *err) {
  if (resp) *resp = NULL;
  if (!c || !req || !resp)
    return dpm_errf(err, DPM_INVALID, "dpm_rpc_call: NULL argument");
  uint64_t id = c->next_id++;
  size_t n = 0;
  uint8_t *buf = pack(c, req, id, &n);
  if (!buf) return dpm_errf(err, DPM_NOMEM, "out of memory (request of %zu bytes)", n);
  int64_t deadline = c->timeout_ms < 0 ? -1 : dpm_mono_ms() + c->timeout_ms;
  dpm_status s = send_request(c, buf, n, deadline, err);
  free(buf);
  if (s) return s;

  int64_t heard = dpm_mono_ms(); /* silence counts from the request's departure */
  int64_t next_ping = heard + DPM_PING_AFTER_MS;
  for (;;) {
    int64_t now = dpm_mono_ms();
    if (deadline >= 0 && now >= deadline) return timed_out(c, err);
    if (now - heard >= DPM_LIVENESS_MS) return stopped_answering(c, err);
    if (now >= next_ping) {
      send_ping(c);
      next_ping = now + DPM_PING_AFTER_MS;
    }
    int64_t until =
        next_ping < heard + DPM_LIVENESS_MS ? next_ping : heard + DPM_LIVENESS_MS;
    if (deadline >= 0 && deadline < until) until = deadline;
    void *msg;
    uint32_t header;
    int got = receive(c, remaining(until), &msg, &header);
    if (got < 0) {
      int e = nn_errno();
      if (e == EINTR || e == ETIMEDOUT || e == EAGAIN) continue;
      return dpm_errf(err, DPM_IO, "cannot receive from %s: %s", c->endpoint,
                      nn_strerror(e));
    }
    heard = dpm_mono_ms();
    Dpm__Response *r = dpm__response__unpack(NULL, (size_t)got, msg);
    nn_freemsg(msg);
    /* which request this answers: the Response's id, else the header's */
    uint64_t rid = r && r->has_id && r->id ? r->id : 0;
    int mine = rid ? rid == id : header == (uint32_t)(id & HEADER_ID_MASK);
    if (!r) {
      if (!mine) continue; /* garbage for an earlier request or a ping */
      return dpm_errf(err, DPM_CORRUPT,
                      "the reply from %s is not a dpm Response (%d bytes)", c->endpoint,
                      got);
    }
    if (mine) {
      uint64_t inst = instance_of(r);
      if (inst && (req->command_case == DPM__REQUEST__COMMAND_PING ||
                   req->command_case == DPM__REQUEST__COMMAND_VERSION_INFO))
        c->instance = inst; /* the caller's own ping: dpm_rpc_ping compares */
      *resp = r;
      return DPM_OK;
    }
    if (rid > id && rid < c->next_id) { /* one of this call's pings */
      uint64_t inst = instance_of(r), was = c->instance;
      dpm__response__free_unpacked(r, NULL);
      if (!inst) continue;
      c->instance = inst;
      if (was && inst != was) return restarted(c, was, inst, err);
      continue;
    }
    dpm__response__free_unpacked(r, NULL);
    if (rid && rid >= c->next_id)
      return dpm_errf(err, DPM_CORRUPT,
                      "%s answered request %llu with the response to request %llu, "
                      "which this client never sent",
                      c->endpoint, (unsigned long long)id, (unsigned long long)rid);
    /* an answer to an earlier request that timed out: skipped */
  }
}

dpm_status dpm_rpc_ping(dpm_rpc *c, Dpm__Response **resp, dpm_err *err) {
  if (resp) *resp = NULL;
  if (!c) return dpm_errf(err, DPM_INVALID, "dpm_rpc_ping: handle is NULL");
  Dpm__Request ping = DPM__REQUEST__INIT;
  Dpm__Empty empty = DPM__EMPTY__INIT;
  ping.command_case = DPM__REQUEST__COMMAND_PING;
  ping.ping = &empty;
  uint64_t was = c->instance;
  Dpm__Response *r;
  dpm_status s = dpm_rpc_call(c, &ping, &r, err);
  if (s) return s;
  if (was && c->instance != was) {
    uint64_t now = c->instance;
    dpm__response__free_unpacked(r, NULL);
    return dpm_errf(err, DPM_IO, "dpmd at %s restarted (instance %016llx, was %016llx)",
                    c->endpoint, (unsigned long long)now, (unsigned long long)was);
  }
  if (resp)
    *resp = r;
  else
    dpm__response__free_unpacked(r, NULL);
  return DPM_OK;
}

void dpm_rpc_close(dpm_rpc *c) {
  if (!c) return;
  nn_close(c->sock);
  free(c->endpoint);
  free(c->ipc_path);
  free(c->token);
  free(c);
}
