/* dpmd's loop: nanomsg sockets watched by libuv, the queue model threads
 * answer through, signals and the shutdown sequence.
 *
 * The RPC socket is a raw REP socket (AF_SP_RAW), so each request's header
 * is kept and a long command's answer can go out later, out of order, while
 * other requests are answered at once. nanomsg's NN_RCVFD is a
 * level-triggered eventfd watched for readability only; every receive is
 * NN_DONTWAIT and EAGAIN ends a drain (DEPS.md). */
#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "common/escape.h"
#include "server/devices.h"
#include "server/dpmd.h"
#include "server/log.h"
#include "server/model.h"
#include "server/notify.h"
#include "server/request.h"

typedef enum { OUT_REPLY, OUT_EVENT, OUT_EXITED } out_kind;

struct dpmd_outmsg {
  dpmd_outmsg *next;
  out_kind kind;
  void *header; /* OUT_REPLY, OUT_EXITED: the request's header, or NULL */
  int command, status;
  uint8_t *body; /* packed Response, or "NAME\n" + packed Event */
  size_t len;
  dpmd_model *model; /* OUT_EXITED */
};

double dpmd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int on_loop(dpmd *d) { return pthread_equal(pthread_self(), d->loop_thread); }

/* ---- sending (loop thread) ------------------------------------------------ */

static void count(dpmd *d, int command, int status) {
  if (command < 0 || command >= DPMD_MAX_COMMAND) command = 0;
  if (status < 0 || status >= DPM_STATUS_COUNT) status = DPM_INTERNAL;
  d->requests[command][status]++;
}

static void send_reply(dpmd *d, void *header, int command, int status, uint8_t *body,
                       size_t len) {
  count(d, command, status);
  if (!header) return;
  struct nn_iovec iov = {body, len};
  struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &header,
                        .msg_controllen = NN_MSG};
  if (nn_sendmsg(d->rep, &h, NN_DONTWAIT) < 0) {
    dpmd_warn("reply dropped: %s", nn_strerror(nn_errno()));
    nn_freemsg(header);
  }
}

void dpmd_notify_status(dpmd *d) {
  if (!d->stopping) dpmd_notifyf("STATUS=serving %d model(s)", d->n_models);
}

static void remove_model(dpmd *d, dpmd_model *m) {
  for (int i = 0; i < d->n_models; i++)
    if (d->models[i] == m) {
      d->models[i] = d->models[--d->n_models];
      break;
    }
  dpmd_model_free(m);
  dpmd_notify_status(d);
}

static void finish_stop(dpmd *d);

static void deliver(dpmd *d, dpmd_outmsg *o) {
  switch (o->kind) {
  case OUT_REPLY:
    send_reply(d, o->header, o->command, o->status, o->body, o->len);
    break;
  case OUT_EVENT:
    if (d->pub >= 0 && nn_send(d->pub, o->body, o->len, NN_DONTWAIT) < 0)
      dpmd_debug("event dropped: %s", nn_strerror(nn_errno()));
    break;
  case OUT_EXITED:
    remove_model(d, o->model);
    send_reply(d, o->header, o->command, o->status, o->body, o->len);
    if (d->stopping && d->n_models == 0) finish_stop(d);
    break;
  }
  free(o->body);
  free(o);
}

static void post(dpmd *d, dpmd_outmsg *o) {
  if (on_loop(d)) return deliver(d, o);
  pthread_mutex_lock(&d->mu);
  if (d->out_tail)
    d->out_tail->next = o;
  else
    d->out = o;
  d->out_tail = o;
  pthread_mutex_unlock(&d->mu);
  uv_async_send(&d->wake);
}

static void on_wake(uv_async_t *a) {
  dpmd *d = a->data;
  pthread_mutex_lock(&d->mu);
  dpmd_outmsg *o = d->out;
  d->out = d->out_tail = NULL;
  pthread_mutex_unlock(&d->mu);
  while (o) {
    dpmd_outmsg *next = o->next;
    deliver(d, o);
    o = next;
  }
}

/* ---- replies and events (any thread) -------------------------------------- */

static dpmd_outmsg *pack_response(dpmd_reply_to *to, Dpm__Response *resp, out_kind kind) {
  char escaped[2048]; /* messages carry client text (names, paths, sources) */
  if (resp->message && dpm_has_control(resp->message))
    resp->message = dpm_escape(resp->message, escaped, sizeof escaped);
  dpmd_outmsg *o = calloc(1, sizeof *o);
  resp->has_id = 1;
  resp->id = to ? to->id : 0;
  size_t len = dpm__response__get_packed_size(resp);
  if (o && !(o->body = malloc(len ? len : 1))) {
    free(o);
    o = NULL;
  }
  if (!o) return NULL;
  dpm__response__pack(resp, o->body);
  o->len = len;
  o->kind = kind;
  o->status = (int)dpm_status_from_wire(resp->status);
  if (to) {
    o->header = to->header;
    o->command = to->command;
    to->header = NULL;
  }
  return o;
}

void dpmd_reply(dpmd *d, dpmd_reply_to *to, Dpm__Response *resp) {
  dpmd_outmsg *o = pack_response(to, resp, OUT_REPLY);
  if (o) return post(d, o);
  dpmd_error("out of memory: a reply is lost");
  if (to->header) nn_freemsg(to->header);
  to->header = NULL;
}

void dpmd_reply_error(dpmd *d, dpmd_reply_to *to, dpm_status code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.status = dpm_status_to_wire(code);
  rs.message = msg;
  dpmd_reply(d, to, &rs);
}

void dpmd_model_exited(dpmd *d, dpmd_model *m, dpmd_reply_to *to, Dpm__Response *resp) {
  Dpm__Response ok = DPM__RESPONSE__INIT;
  dpmd_outmsg *o = pack_response(to, resp ? resp : &ok, OUT_EXITED);
  if (!o) { /* the loop must learn of the exit: a bare notice */
    while (!(o = calloc(1, sizeof *o))) nanosleep(&(struct timespec){0, 1000000}, NULL);
    o->kind = OUT_EXITED;
  }
  o->model = m;
  post(d, o);
}

void dpmd_publish(dpmd *d, const char *name, Dpm__Event *ev) {
  if (d->pub < 0) return;
  size_t n = strlen(name), len = dpm__event__get_packed_size(ev);
  dpmd_outmsg *o = calloc(1, sizeof *o);
  if (!o || !(o->body = malloc(n + 1 + len))) {
    free(o);
    return;
  }
  memcpy(o->body, name, n);
  o->body[n] = '\n';
  dpm__event__pack(ev, o->body + n + 1);
  o->len = n + 1 + len;
  o->kind = OUT_EVENT;
  post(d, o);
}

/* ---- receiving ------------------------------------------------------------- */

static int token_ok(const char *want, const char *got) {
  size_t n = strlen(want), m = got ? strlen(got) : 0;
  unsigned char diff = (unsigned char)(n != m);
  for (size_t i = 0; i < n; i++) /* constant time in the token's length */
    diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
  return diff == 0;
}

static void on_request(dpmd *d, const uint8_t *body, size_t len, void *header) {
  dpmd_reply_to to = {.header = header};
  Dpm__Request *rq;
  dpm_err err = {0};
  if (dpmd_request_decode(body, len, d->cfg->max_message_bytes, &rq, &err)) {
    d->dropped++;
    return dpmd_reply_error(d, &to, err.code, "%s", err.msg);
  }
  to.id = rq->id;
  to.command = rq->command_case;
  if (d->cfg->token && !token_ok(d->cfg->token, rq->token)) {
    dpm__request__free_unpacked(rq, NULL);
    dpmd_warn("request refused: bad or missing token");
    return dpmd_reply_error(d, &to, DPM_DENIED, "bad or missing token");
  }
  if (rq->version != DPM_PROTOCOL_VERSION) {
    unsigned v = rq->version;
    dpm__request__free_unpacked(rq, NULL);
    return dpmd_reply_error(d, &to, DPM_UNSUPPORTED,
                            "protocol version %u; this dpmd speaks version %d", v,
                            DPM_PROTOCOL_VERSION);
  }
  dpmd_handle(d, rq, &to);
}

static void on_readable(uv_poll_t *p, int status, int events) {
  dpmd *d = p->data;
  (void)events;
  if (status < 0) return;
  for (int i = 0; i < 64; i++) { /* then let the loop breathe */
    void *body = NULL, *header = NULL;
    struct nn_iovec iov = {&body, NN_MSG};
    struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &header,
                          .msg_controllen = NN_MSG};
    int n = nn_recvmsg(d->rep, &h, NN_DONTWAIT);
    if (n < 0) {
      if (nn_errno() != EAGAIN) dpmd_warn("receive: %s", nn_strerror(nn_errno()));
      return;
    }
    on_request(d, body, (size_t)n, header);
    nn_freemsg(body);
  }
}

/* ---- start and stop -------------------------------------------------------- */

static void on_signal(uv_signal_t *s, int sig) {
  dpmd_info("%s: finishing the steps in flight and stopping", strsignal(sig));
  dpmd_shutdown(s->data);
}

void dpmd_shutdown_failed(dpmd *d) {
  __atomic_store_n(&d->shutdown_failed, 1, __ATOMIC_RELAXED);
}

void dpmd_shutdown(dpmd *d) {
  if (d->stopping) return;
  d->stopping = 1;
  dpmd_notify("STOPPING=1\nSTATUS=stopping");
  for (int i = 0; i < d->n_models; i++)
    if (!dpmd_model_ending(d->models[i])) dpmd_model_end(d->models[i], 0, NULL);
  if (d->n_models == 0) finish_stop(d);
}

static void on_closed(uv_handle_t *h) { (void)h; }

static void close_all(uv_timer_t *t) {
  dpmd *d = t->data;
  uv_close((uv_handle_t *)&d->rep_poll, on_closed);
  uv_close((uv_handle_t *)&d->wake, on_closed);
  for (int i = 0; i < 2; i++) uv_close((uv_handle_t *)&d->sig[i], on_closed);
  uv_close((uv_handle_t *)&d->stop_timer, on_closed);
}

/* Every model has ended: give the last replies a moment to leave, then
 * close the handles so uv_run returns. */
static void finish_stop(dpmd *d) { uv_timer_start(&d->stop_timer, close_all, 100, 0); }

static dpm_status bind_all(dpmd *d, dpm_err *err) {
  if ((d->rep = nn_socket(AF_SP_RAW, NN_REP)) < 0)
    return dpm_errf(err, DPM_IO, "nn_socket: %s", nn_strerror(nn_errno()));
  int v4only = 0; /* tcp://[::1]:P binds too */
  nn_setsockopt(d->rep, NN_SOL_SOCKET, NN_IPV4ONLY, &v4only, sizeof v4only);
  /* nanomsg counts its own header: leave room, then check the body here */
  int max = d->cfg->max_message_bytes > (size_t)0x7fffff00 ? 0x7fffffff
                                                            : (int)d->cfg->max_message_bytes + 64;
  nn_setsockopt(d->rep, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  for (int i = 0; i < d->cfg->n_listen; i++) {
    const char *a = d->cfg->listen[i];
    if (nn_bind(d->rep, a) < 0)
      return dpm_errf(err, DPM_IO, "listen %s: %s", a, nn_strerror(nn_errno()));
    if (strncmp(a, "ipc://", 6) == 0) chmod(a + 6, 0660);
    dpmd_info("listening on %s", a);
  }
  if (!d->cfg->events) return DPM_OK;
  if ((d->pub = nn_socket(AF_SP, NN_PUB)) >= 0)
    nn_setsockopt(d->pub, NN_SOL_SOCKET, NN_IPV4ONLY, &v4only, sizeof v4only);
  if (d->pub < 0 || nn_bind(d->pub, d->cfg->events) < 0)
    return dpm_errf(err, DPM_IO, "events %s: %s", d->cfg->events, nn_strerror(nn_errno()));
  if (strncmp(d->cfg->events, "ipc://", 6) == 0) chmod(d->cfg->events + 6, 0660);
  dpmd_info("events on %s", d->cfg->events);
  return DPM_OK;
}

static dpm_status watch(dpmd *d, dpm_err *err) {
  int fd;
  size_t sz = sizeof fd;
  if (nn_getsockopt(d->rep, NN_SOL_SOCKET, NN_RCVFD, &fd, &sz) < 0)
    return dpm_errf(err, DPM_IO, "NN_RCVFD: %s", nn_strerror(nn_errno()));
  int rc = uv_poll_init(d->loop, &d->rep_poll, fd);
  if (!rc) rc = uv_poll_start(&d->rep_poll, UV_READABLE, on_readable);
  if (!rc) rc = uv_async_init(d->loop, &d->wake, on_wake);
  for (int i = 0; i < 2 && !rc; i++) {
    rc = uv_signal_init(d->loop, &d->sig[i]);
    d->sig[i].data = d;
    if (!rc) rc = uv_signal_start(&d->sig[i], on_signal, i ? SIGINT : SIGTERM);
  }
  if (!rc) rc = uv_timer_init(d->loop, &d->stop_timer);
  if (rc) return dpm_errf(err, DPM_IO, "libuv: %s", uv_strerror(rc));
  d->rep_poll.data = d->wake.data = d->stop_timer.data = d;
  return DPM_OK;
}

dpm_status dpmd_serve(dpmd *d, dpm_err *err) {
  d->rep = d->pub = -1;
  d->loop_thread = pthread_self();
  d->started = dpmd_now();
  if (getrandom(&d->instance, sizeof d->instance, 0) != sizeof d->instance)
    d->instance = (uint64_t)getpid() << 32 ^ (uint64_t)(d->started * 1e6);
  pthread_mutex_init(&d->mu, NULL);
  dpm_status s = bind_all(d, err);
  if (!s) s = watch(d, err);
  if (!s) {
    dpmd_restore_models(d);
    dpmd_notify("READY=1");
    dpmd_notify_status(d);
    uv_run(d->loop, UV_RUN_DEFAULT);
  }
  if (d->rep >= 0) nn_close(d->rep);
  if (d->pub >= 0) nn_close(d->pub);
  pthread_mutex_destroy(&d->mu);
  return s;
}
