/* dpmd's loop (server.h): nanomsg sockets watched by libuv, requests
 * decoded and dispatched, the registry's models restored at start and
 * dropped as their threads end, signals and the shutdown sequence.
 *
 * The RPC socket is a raw REP socket (AF_SP_RAW), so each request's header
 * is kept and a long command's answer can go out later, out of order, while
 * other requests are answered at once. nanomsg's NN_RCVFD is a
 * level-triggered eventfd watched for readability only; every receive is
 * NN_DONTWAIT and EAGAIN ends a drain (it stays readable while messages
 * wait, so a drain cut short is picked up on the next turn). Answers leave through
 * dpmd.c, which owns the queue from model threads. */
#include "server/server.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/checked_spec.h"
#include "common/clock.h"
#include "common/spec.h"
#include "io/datacache.h"
#include "server/commands.h"
#include "server/dpmd.h"
#include "server/fleet/gather.h"
#include "server/fleet/kv.h"
#include "server/fleet/secret.h"
#include "server/log.h"
#include "server/models/model.h"
#include "server/models/registry.h"
#include "server/models/store.h"
#include "server/notify.h"
#include "server/request.h"
#include "server/sched.h"
#include "server/stream.h"

typedef struct server {
  dpmd d;                /* what handlers and model threads see */
  dpmd_registry *models; /* the model registry */
  uv_loop_t *loop;
  int rep, pub; /* nanomsg: raw REP (every listen address), PUB or -1 */
  uv_poll_t rep_poll;
  uv_signal_t sig[2]; /* SIGTERM, SIGINT */
  uv_timer_t stop_timer;
  int closing; /* every model has ended: the handles close after stop_timer */
  /* log lines a client can repeat at will (loop thread) */
  dpmd_ratelimit bad_token_log, receive_log;
} server;

/* ---- stopping ---------------------------------------------------------------- */

static void close_all(uv_timer_t *t) {
  server *s = t->data;
  dpmd_gather_stop(s->d.gather); /* its answers leave before the core stops */
  s->d.gather = NULL;
  dpmd_stream_stop(s->d.stream); /* its answers too */
  uv_close((uv_handle_t *)&s->rep_poll, NULL);
  for (int i = 0; i < 2; i++) uv_close((uv_handle_t *)&s->sig[i], NULL);
  uv_close((uv_handle_t *)&s->stop_timer, NULL);
  dpmd_core_close(&s->d);
}

/* Once stopping and every model has ended: give the last replies a moment
 * to leave, then close the handles so uv_run returns. */
static void maybe_finish(server *s) {
  if (s->closing || !dpmd_stopping(&s->d) || dpmd_registry_count(s->models) > 0) return;
  s->closing = 1;
  uv_timer_start(&s->stop_timer, close_all, 100, 0);
}

/* dpmd_model_exited reached the loop: the model leaves the registry. */
static void on_model_exited(void *arg, struct dpmd_model *m) {
  server *s = arg;
  dpmd_registry_remove(s->models, m);
  dpmd_model_free(m);
  dpmd_notify_serving(&s->d, dpmd_registry_count(s->models));
  maybe_finish(s);
}

/* A published event reached the loop: the events stream keeps it. */
static void on_event(void *arg, const uint8_t *msg, size_t len) {
  server *s = arg;
  if (s->d.stream) dpmd_stream_add(s->d.stream, msg, len);
}

static void on_signal(uv_signal_t *sig, int signum) {
  server *s = sig->data;
  dpmd_info("%s: finishing the steps in flight and stopping", strsignal(signum));
  dpmd_shutdown(&s->d, s->models);
  maybe_finish(s);
}

/* ---- receiving ------------------------------------------------------------- */

static int token_ok(const char *want, const char *got) {
  return dpmd_secret_equal(want, strlen(want), got, got ? strlen(got) : 0);
}

static void on_request(server *s, const uint8_t *body, size_t len, void *header) {
  dpmd *d = &s->d;
  dpmd_reply_to to = {.header = header, .arrived = dpm_mono_ns() / 1e6};
  Dpm__Request *rq;
  dpm_err err = {0};
  if (dpmd_request_decode(body, len, d->cfg->max_message_bytes, &rq, &err)) {
    dpmd_count_dropped(d);
    return dpmd_reply_error(d, &to, err.code, "%s", err.msg);
  }
  to.id = rq->id;
  to.command = rq->command_case;
  if (d->cfg->token && !token_ok(d->cfg->token, rq->token)) {
    dpm__request__free_unpacked(rq, NULL);
    dpmd_warn_limited(&s->bad_token_log, "request refused: bad or missing token");
    return dpmd_reply_error(d, &to, DPM_DENIED, "bad or missing token");
  }
  if (rq->version != DPM_PROTOCOL_VERSION) {
    unsigned v = rq->version;
    dpm__request__free_unpacked(rq, NULL);
    return dpmd_reply_error(d, &to, DPM_UNSUPPORTED,
                            "protocol version %u; this dpmd speaks version %d", v,
                            DPM_PROTOCOL_VERSION);
  }
  dpmd_handle(d, s->models, rq, &to);
  maybe_finish(s); /* a shutdown with no model to wait for */
}

static void on_readable(uv_poll_t *p, int status, int events) {
  server *s = p->data;
  (void)events;
  if (status < 0) return;
  for (int i = 0; i < 64; i++) { /* then let the loop breathe */
    void *body = NULL, *header = NULL;
    struct nn_iovec iov = {&body, NN_MSG};
    struct nn_msghdr h = {.msg_iov = &iov,
                          .msg_iovlen = 1,
                          .msg_control = &header,
                          .msg_controllen = NN_MSG};
    int n = nn_recvmsg(s->rep, &h, NN_DONTWAIT);
    if (n < 0) {
      if (nn_errno() != EAGAIN)
        dpmd_warn_limited(&s->receive_log, "receive: %s", nn_strerror(nn_errno()));
      return;
    }
    on_request(s, body, (size_t)n, header);
    nn_freemsg(body);
  }
}

/* ---- start ------------------------------------------------------------------- */

/* Models found in the state dir come back at their last checkpoint. */
static void restore_models(server *s) {
  const char *state_dir = s->d.cfg->state_dir;
  int n = 0;
  char **names = dpmd_store_models(state_dir, &n);
  for (int i = 0; i < n; i++) {
    char dir[4096];
    Dpm__ModelSpec *spec = NULL;
    dpm_checked_spec *checked = NULL;
    dpm_err err = {.code = DPM_NOMEM, .msg = "out of memory"};
    dpmd_model *m;
    int ok = 0;
    if (dpmd_store_model_dir(state_dir, names[i], dir, sizeof dir))
      dpm_errf(&err, DPM_INVALID, "state dir path too long");
    else if (!dpmd_registry_reserve(s->models, &err) &&
             !dpmd_store_load_spec(dir, &spec, &err)) {
      free(spec->name); /* the model is its directory's name */
      /* a file's bytes: checked here, once, as a submit's are */
      if (!(spec->name = strdup(names[i])) || dpm_spec_check(spec, NULL, &checked, &err))
        dpm_spec_free(spec);
      else if ((ok = !dpmd_model_new(&s->d, checked, 1, NULL, 0, NULL, NULL, &m, &err)))
        dpmd_registry_add(s->models, dpmd_model_name(m), m);
      /* else dpmd_model_new freed the spec */
    }
    if (!ok) dpmd_error("model %s not restored: %s", names[i], err.msg);
    free(names[i]);
  }
  free(names);
}

static dpm_status bind_all(server *s, dpm_err *err) {
  const dpmd_config *cfg = s->d.cfg;
  if ((s->rep = nn_socket(AF_SP_RAW, NN_REP)) < 0)
    return dpm_errf(err, DPM_IO, "nn_socket: %s", nn_strerror(nn_errno()));
  int v4only = 0; /* tcp://[::1]:P binds too */
  nn_setsockopt(s->rep, NN_SOL_SOCKET, NN_IPV4ONLY, &v4only, sizeof v4only);
  /* nanomsg counts its own header: leave room, then check the body here */
  int max = cfg->max_message_bytes > (size_t)0x7fffff00
                ? 0x7fffffff
                : (int)cfg->max_message_bytes + 64;
  nn_setsockopt(s->rep, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  for (int i = 0; i < cfg->n_listen; i++) {
    const char *a = cfg->listen[i];
    if (nn_bind(s->rep, a) < 0)
      return dpm_errf(err, DPM_IO, "listen %s: %s%s", a, nn_strerror(nn_errno()),
                      nn_errno() == EADDRINUSE ? " (another dpmd listens there?)" : "");
    if (strncmp(a, "ipc://", 6) == 0) chmod(a + 6, 0660);
    dpmd_info("listening on %s", a);
  }
  if (!cfg->events) return DPM_OK;
  if ((s->pub = nn_socket(AF_SP, NN_PUB)) >= 0)
    nn_setsockopt(s->pub, NN_SOL_SOCKET, NN_IPV4ONLY, &v4only, sizeof v4only);
  if (s->pub < 0 || nn_bind(s->pub, cfg->events) < 0)
    return dpm_errf(err, DPM_IO, "events %s: %s%s", cfg->events, nn_strerror(nn_errno()),
                    nn_errno() == EADDRINUSE
                        ? " (another dpmd publishes there: give this one --events "
                          "ADDR of its own, or --events none; its clients then get "
                          "events through the request socket)"
                        : "");
  if (strncmp(cfg->events, "ipc://", 6) == 0) chmod(cfg->events + 6, 0660);
  dpmd_info("events on %s", cfg->events);
  return DPM_OK;
}

static dpm_status start_handles(server *s, dpm_err *err) {
  int fd;
  size_t sz = sizeof fd;
  if (nn_getsockopt(s->rep, NN_SOL_SOCKET, NN_RCVFD, &fd, &sz) < 0)
    return dpm_errf(err, DPM_IO, "NN_RCVFD: %s", nn_strerror(nn_errno()));
  int rc = uv_poll_init(s->loop, &s->rep_poll, fd);
  s->rep_poll.data = s;
  if (!rc) rc = uv_poll_start(&s->rep_poll, UV_READABLE, on_readable);
  for (int i = 0; i < 2 && !rc; i++) {
    rc = uv_signal_init(s->loop, &s->sig[i]);
    s->sig[i].data = s;
    if (!rc) rc = uv_signal_start(&s->sig[i], on_signal, i ? SIGINT : SIGTERM);
  }
  if (!rc) rc = uv_timer_init(s->loop, &s->stop_timer);
  s->stop_timer.data = s;
  if (rc) return dpm_errf(err, DPM_IO, "libuv: %s", uv_strerror(rc));
  return DPM_OK;
}

static void close_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

dpm_status dpmd_serve(const dpmd_config *cfg, struct dpmd_devices *devices,
                      const struct dpmd_paths *paths, char *shutdown_failed, size_t cap,
                      dpm_err *err) {
  server s = {.d = {.cfg = cfg, .devices = devices, .paths = paths},
              .loop = uv_default_loop(),
              .rep = -1,
              .pub = -1,
              .bad_token_log = DPMD_RATELIMIT_INIT,
              .receive_log = DPMD_RATELIMIT_INIT};
  if (cap) shutdown_failed[0] = 0;
  s.d.started = dpmd_now();
  if (getrandom(&s.d.instance, sizeof s.d.instance, 0) != sizeof s.d.instance)
    s.d.instance = (uint64_t)getpid() << 32 ^ (uint64_t)(s.d.started * 1e6);
  dpm_status st = dpmd_registry_create(&s.models, err);
  if (!st) st = dpmd_kv_create(&s.d.kv, err);
  if (!st) st = dpm_data_cache_create(cfg->data_cache_bytes, &s.d.data, err);
  if (!st)
    st = dpmd_sched_new(cfg->device_memory_bytes, cfg->max_total_bytes, &s.d.sched, err);
  if (!st) st = bind_all(&s, err);
  dpmd_core_hooks hooks = {.exited = on_model_exited, .event = on_event, .arg = &s};
  if (!st) st = dpmd_core_start(&s.d, s.loop, s.rep, s.pub, &hooks, err);
  if (!st) st = dpmd_gather_start(&s.d, &s.d.gather, err);
  if (!st) st = dpmd_stream_create(&s.d, s.loop, &s.d.stream, err);
  if (!st) st = start_handles(&s, err);
  if (!st) {
    restore_models(&s);
    dpmd_notify("READY=1");
    dpmd_notify_serving(&s.d, dpmd_registry_count(s.models));
    uv_run(s.loop, UV_RUN_DEFAULT);
    dpmd_core_shutdown_failed(&s.d, shutdown_failed, cap);
  }
  dpmd_gather_stop(s.d.gather); /* after a failed start (close_all stops it else) */
  uv_walk(s.loop, close_handle, NULL); /* a failed start leaves some open */
  uv_run(s.loop, UV_RUN_DEFAULT);
  uv_loop_close(s.loop);
  if (s.rep >= 0) nn_close(s.rep);
  if (s.pub >= 0) nn_close(s.pub);
  dpmd_core_free(&s.d);
  dpmd_stream_free(s.d.stream);
  dpmd_registry_destroy(s.models);
  dpmd_kv_destroy(s.d.kv);
  dpm_data_cache_destroy(s.d.data); /* every model, and so every hold, is gone */
  dpmd_sched_free(s.d.sched);        /* ... and every entry */
  return st;
}
