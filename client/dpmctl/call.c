/* The calls verbs make (dpmctl.h): one request and its answer, every
 * failure printed and turned into an exit code; a ping before a call that
 * may wait long; the long calls themselves; the events endpoint. */
#include <stdlib.h>
#include <string.h>

#include "dpmctl/dpmctl.h"

int ctl_transport_exit(dpm_status s) {
  return s == DPM_TIMEOUT || s == DPM_IO || s == DPM_CORRUPT ? CTL_UNREACHABLE
                                                             : CTL_FAILED;
}

int ctl_check(ctl_ctx *ctx, dpm_status s, const dpm_err *err, Dpm__Response **resp) {
  if (s) {
    ctl_error(ctx, dpm_status_name(s), "%s", err->msg);
    dpm_client_free_response(*resp);
    *resp = NULL;
    return ctl_transport_exit(s);
  }
  Dpm__Response *r = *resp;
  if (r->status) {
    dpm_status st = dpm_status_from_wire(r->status);
    const char *msg = r->message && *r->message ? r->message : dpm_strerror(st);
    ctl_error(ctx, dpm_status_name(st), "%s", msg);
    dpm_client_free_response(r);
    *resp = NULL;
    return CTL_FAILED;
  }
  return CTL_OK;
}

int ctl_send(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp) {
  dpm_err err = {0};
  *resp = NULL;
  dpm_status s = dpm_client_call(ctx->client, req, resp, &err);
  return s ? ctl_check(ctx, s, &err, resp) : CTL_OK;
}

int ctl_call(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp) {
  int rc = ctl_send(ctx, req, resp);
  return rc ? rc : ctl_check(ctx, DPM_OK, NULL, resp);
}

int ctl_ping_first(ctl_ctx *ctx) {
  dpm_err err = {0};
  Dpm__Response *r = NULL;
  /* a refused ping still proves the daemon is there */
  dpm_status s = dpm_client_ping(ctx->client, NULL, &err);
  return s ? ctl_check(ctx, s, &err, &r) : CTL_OK;
}

int ctl_long_call(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp) {
  *resp = NULL;
  int rc = ctl_ping_first(ctx);
  if (rc) return rc;
  int t = ctx->timeout_ms;
  if (t >= 0 && t < CTL_LONG_TIMEOUT_MS) t = CTL_LONG_TIMEOUT_MS;
  dpm_client_set_timeout(ctx->client, t);
  rc = ctl_call(ctx, req, resp);
  dpm_client_set_timeout(ctx->client, ctx->timeout_ms);
  return rc;
}

/* host of a "tcp://[iface;]host:port" endpoint into buf; 0 if it has one. */
static int tcp_host(const char *ep, char *buf, size_t cap) {
  if (strncmp(ep, "tcp://", 6)) return -1;
  const char *h = ep + 6, *semi = strchr(h, ';');
  if (semi) h = semi + 1;
  const char *colon = strrchr(h, ':');
  if (!colon || colon == h || (size_t)(colon - h) >= cap) return -1;
  memcpy(buf, h, (size_t)(colon - h));
  buf[colon - h] = 0;
  return 0;
}

/* A daemon may name its PUB socket by its bind address, with a wildcard host
 * (* or 0.0.0.0): connect to the host the control endpoint names instead. */
static char *connectable(const char *events, const char *control) {
  static const char *const wild[] = {"tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"};
  for (size_t i = 0; i < sizeof wild / sizeof *wild; i++) {
    size_t n = strlen(wild[i]);
    if (strncmp(events, wild[i], n)) continue;
    char host[256];
    if (tcp_host(control, host, sizeof host) || !strcmp(host, "*") ||
        !strcmp(host, "0.0.0.0"))
      snprintf(host, sizeof host, "127.0.0.1");
    size_t len = strlen(host) + strlen(events) + 8;
    char *s = malloc(len);
    if (s) snprintf(s, len, "tcp://%s:%s", host, events + n);
    return s;
  }
  return strdup(events);
}

int ctl_events_open(ctl_ctx *ctx, const char *name, int quiet, dpm_events **events) {
  *events = NULL;
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)name;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_WATCH;
  req.watch = &nr;
  Dpm__Response *r;
  int rc = quiet ? ctl_send(ctx, &req, &r) : ctl_call(ctx, &req, &r);
  if (rc) return rc;
  int known = !r->status && r->result_case == DPM__RESPONSE__RESULT_WATCH;
  const char *ev = known && r->watch->events ? r->watch->events : "";
  int stream = known && r->watch->stream;
  char *ep = connectable(ev, ctx->endpoint);
  dpm_client_free_response(r);
  if (!ep) {
    ctl_error(ctx, "NOMEM", "out of memory");
    return CTL_FAILED;
  }
  dpm_err err = {0};
  dpm_status s = DPM_OK;
  if (*ep)
    s = dpm_events_open(ep, name, events, &err);
  else if (stream)
    s = dpm_events_open_stream(ctx->client, name, events, &err);
  else if (!quiet)
    s = dpm_errf(&err, DPM_UNSUPPORTED, "dpmd at %s publishes no events", ctx->endpoint);
  free(ep);
  if (!s) return CTL_OK;
  if (quiet) {
    fprintf(stderr, "dpmctl: warning: no progress: %s\n", err.msg);
    return CTL_OK;
  }
  ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
  return ctl_transport_exit(s);
}
