/* The way out of dpmd (dpmd.h): answers and events from any thread, queued
 * under a lock and brought to the loop thread by a uv_async wake-up, which
 * sends them on the nanomsg sockets and counts every answer. */
#include "server/dpmd.h"

#include <nanomsg/nn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "common/escape.h"
#include "server/log.h"
#include "server/notify.h"

typedef enum { OUT_REPLY, OUT_EVENT, OUT_EXITED } out_kind;

/* A queued message. */
typedef struct outmsg {
  struct outmsg *next;
  out_kind kind;
  void *header; /* OUT_REPLY, OUT_EXITED: the request's header, or NULL */
  int command;  /* ... and its command, for the counters */
  dpm_status status;
  uint8_t *body; /* packed Response, or "NAME\n" + packed Event */
  size_t len;
  struct dpmd_model *model; /* OUT_EXITED */
} outmsg;

struct dpmd_core {
  dpmd *d; /* its owner */
  pthread_t loop_thread;
  int rep, pub;           /* nanomsg: raw REP (every listen address), PUB or -1 */
  uv_async_t wake;        /* model threads -> loop */
  dpmd_core_hooks hooks;  /* to the loop's owner (loop thread) */
  pthread_mutex_t mu;     /* guards out, out_tail */
  outmsg *out, *out_tail; /* queued for the loop */
  /* guarded by mu: the models that could not save themselves at shutdown,
     ", "-separated (cut short when too many to name) */
  char shutdown_failed[DPMD_SHUTDOWN_FAILED_MAX];
  /* loop thread only */
  int stopping; /* shutdown begun: new mutating commands are refused */
  uint64_t requests[DPMD_MAX_COMMAND][DPM_STATUS_COUNT];
  uint64_t dropped;
  dpmd_ratelimit dropped_log; /* "reply dropped" lines */
};

double dpmd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int on_loop(const dpmd_core *c) {
  return pthread_equal(pthread_self(), c->loop_thread);
}

/* ---- the loop's state ------------------------------------------------------ */

int dpmd_stopping(const dpmd *d) { return d->core->stopping; }

int dpmd_begin_stopping(dpmd *d) {
  if (d->core->stopping) return -1;
  d->core->stopping = 1;
  dpmd_notify("STOPPING=1\nSTATUS=stopping");
  return 0;
}

void dpmd_notify_serving(dpmd *d, int n_models) {
  if (!d->core->stopping) dpmd_notifyf("STATUS=serving %d model(s)", n_models);
}

uint64_t dpmd_requests(const dpmd *d, int command, dpm_status s) {
  if (command < 0 || command >= DPMD_MAX_COMMAND || (unsigned)s >= DPM_STATUS_COUNT)
    return 0;
  return d->core->requests[command][s];
}

uint64_t dpmd_dropped(const dpmd *d) { return d->core->dropped; }
void dpmd_count_dropped(dpmd *d) { d->core->dropped++; }

void dpmd_shutdown_failed(dpmd *d, const char *model) {
  dpmd_core *c = d->core;
  pthread_mutex_lock(&c->mu);
  size_t used = strlen(c->shutdown_failed), cap = sizeof c->shutdown_failed;
  int n =
      snprintf(c->shutdown_failed + used, cap - used, "%s%s", used ? ", " : "", model);
  if (n < 0 || (size_t)n >= cap - used) /* cut: say so */
    memcpy(c->shutdown_failed + cap - 4, "...", 4);
  pthread_mutex_unlock(&c->mu);
}

void dpmd_core_shutdown_failed(dpmd *d, char *out, size_t cap) {
  pthread_mutex_lock(&d->core->mu);
  snprintf(out, cap, "%s", d->core->shutdown_failed);
  pthread_mutex_unlock(&d->core->mu);
}

/* ---- sending (loop thread) ------------------------------------------------- */

static void count(dpmd_core *c, int command, dpm_status status) {
  if (command < 0 || command >= DPMD_MAX_COMMAND) command = 0;
  if ((unsigned)status >= DPM_STATUS_COUNT) status = DPM_INTERNAL;
  c->requests[command][status]++;
}

static void send_reply(dpmd_core *c, outmsg *o) {
  count(c, o->command, o->status);
  if (!o->header) return;
  struct nn_iovec iov = {o->body, o->len};
  struct nn_msghdr h = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = &o->header,
                        .msg_controllen = NN_MSG};
  if (nn_sendmsg(c->rep, &h, NN_DONTWAIT) < 0) {
    dpmd_warn_limited(&c->dropped_log, "reply dropped: %s", nn_strerror(nn_errno()));
    nn_freemsg(o->header);
  }
}

static void deliver(dpmd_core *c, outmsg *o) {
  switch (o->kind) {
  case OUT_REPLY:
    send_reply(c, o);
    break;
  case OUT_EVENT:
    if (c->pub >= 0 && nn_send(c->pub, o->body, o->len, NN_DONTWAIT) < 0)
      dpmd_debug("event dropped: %s", nn_strerror(nn_errno()));
    if (c->hooks.event) c->hooks.event(c->hooks.arg, o->body, o->len);
    break;
  case OUT_EXITED:
    c->hooks.exited(c->hooks.arg, o->model);
    send_reply(c, o);
    break;
  }
  free(o->body);
  free(o);
}

static void post(dpmd_core *c, outmsg *o) {
  if (on_loop(c)) return deliver(c, o);
  pthread_mutex_lock(&c->mu);
  if (c->out_tail)
    c->out_tail->next = o;
  else
    c->out = o;
  c->out_tail = o;
  pthread_mutex_unlock(&c->mu);
  uv_async_send(&c->wake);
}

static outmsg *take_all(dpmd_core *c) {
  pthread_mutex_lock(&c->mu);
  outmsg *o = c->out;
  c->out = c->out_tail = NULL;
  pthread_mutex_unlock(&c->mu);
  return o;
}

static void on_wake(uv_async_t *a) {
  dpmd_core *c = a->data;
  for (outmsg *o = take_all(c), *next; o; o = next) {
    next = o->next;
    deliver(c, o);
  }
}

/* ---- answers and events (any thread) --------------------------------------- */

static outmsg *pack_response(dpmd_reply_to *to, Dpm__Response *resp, out_kind kind) {
  char escaped[2048]; /* messages carry client text (names, paths, sources) */
  if (resp->message && dpm_has_control(resp->message))
    resp->message = dpm_escape(resp->message, escaped, sizeof escaped);
  outmsg *o = calloc(1, sizeof *o);
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
  o->status = dpm_status_from_wire(resp->status);
  if (to) {
    o->header = to->header;
    o->command = to->command;
    to->header = NULL;
  }
  return o;
}

void dpmd_reply(dpmd *d, dpmd_reply_to *to, Dpm__Response *resp) {
  outmsg *o = pack_response(to, resp, OUT_REPLY);
  if (o) return post(d->core, o);
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

void dpmd_model_exited(dpmd *d, struct dpmd_model *m, dpmd_reply_to *to,
                       Dpm__Response *resp) {
  Dpm__Response ok = DPM__RESPONSE__INIT;
  outmsg *o = pack_response(to, resp ? resp : &ok, OUT_EXITED);
  if (!o) { /* the loop must learn of the exit: a bare notice */
    while (!(o = calloc(1, sizeof *o))) nanosleep(&(struct timespec){0, 1000000}, NULL);
    o->kind = OUT_EXITED;
  }
  o->model = m;
  post(d->core, o);
}

void dpmd_publish(dpmd *d, const char *name, Dpm__Event *ev) {
  size_t n = strlen(name), len = dpm__event__get_packed_size(ev);
  outmsg *o = calloc(1, sizeof *o);
  if (!o || !(o->body = malloc(n + 1 + len))) {
    free(o);
    return;
  }
  memcpy(o->body, name, n);
  o->body[n] = '\n';
  dpm__event__pack(ev, o->body + n + 1);
  o->len = n + 1 + len;
  o->kind = OUT_EVENT;
  post(d->core, o);
}

/* ---- the core's life -------------------------------------------------------- */

dpm_status dpmd_core_start(dpmd *d, uv_loop_t *loop, int rep, int pub,
                           const dpmd_core_hooks *hooks, dpm_err *err) {
  dpmd_core *c = calloc(1, sizeof *c);
  if (!c) return dpm_errf(err, DPM_NOMEM, "out of memory");
  c->d = d;
  c->loop_thread = pthread_self();
  c->rep = rep;
  c->pub = pub;
  c->hooks = *hooks;
  c->dropped_log = (dpmd_ratelimit)DPMD_RATELIMIT_INIT;
  pthread_mutex_init(&c->mu, NULL);
  int rc = uv_async_init(loop, &c->wake, on_wake);
  if (rc) {
    pthread_mutex_destroy(&c->mu);
    free(c);
    return dpm_errf(err, DPM_IO, "libuv: %s", uv_strerror(rc));
  }
  c->wake.data = c;
  d->core = c;
  return DPM_OK;
}

static void on_closed(uv_handle_t *h) { (void)h; }

void dpmd_core_close(dpmd *d) { uv_close((uv_handle_t *)&d->core->wake, on_closed); }

void dpmd_core_free(dpmd *d) {
  dpmd_core *c = d->core;
  if (!c) return;
  for (outmsg *o = take_all(c), *next; o; o = next) { /* nothing is left to send */
    next = o->next;
    if (o->header) nn_freemsg(o->header);
    free(o->body);
    free(o);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
  d->core = NULL;
}
