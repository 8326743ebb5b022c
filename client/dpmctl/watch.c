/* dpmctl watch [NAME] [--count N] [--until-done]: subscribes to the daemon's
 * events (the endpoint its watch command names) and prints each as a line,
 * a JSON object per line with --json, until SIGINT or SIGTERM (exit 0),
 * --count events, or with --until-done a DONE or ERROR event. Also finds
 * the events endpoint for train --wait. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "dpmctl/dpmctl.h"

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

int ctl_events_endpoint(ctl_ctx *ctx, const char *name, int quiet_refusal,
                        char **endpoint) {
  *endpoint = NULL;
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)name;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_WATCH;
  req.watch = &nr;
  Dpm__Response *r;
  int rc = quiet_refusal ? ctl_send(ctx, &req, &r) : ctl_call(ctx, &req, &r);
  if (rc) return rc;
  const char *ev =
      !r->status && r->result_case == DPM__RESPONSE__RESULT_WATCH && r->watch->events
          ? r->watch->events
          : "";
  *endpoint = connectable(ev, ctx->endpoint);
  dpm_client_free_response(r);
  if (!*endpoint) {
    ctl_error(ctx, "NOMEM", "out of memory");
    return CTL_FAILED;
  }
  return CTL_OK;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int ctl_cmd_watch(ctl_ctx *ctx) {
  uint64_t count = 0;
  if (ctx->a->opt[O_COUNT] &&
      (ctl_parse_u64(ctx->a->opt[O_COUNT], UINT64_MAX, &count) || count == 0)) {
    ctl_error(ctx, "USAGE", "--count takes a positive whole number");
    ctl_usage_short(stderr, ctx->a->verb);
    return CTL_USAGE;
  }
  int until_done = ctx->a->opt[O_UNTIL_DONE] != NULL;
  const char *name = ctx->a->npos ? ctx->a->pos[0] : NULL;
  char *ep;
  int rc = ctl_events_endpoint(ctx, name, 0, &ep);
  if (rc) return rc;
  if (!*ep) {
    ctl_error(ctx, "UNSUPPORTED", "dpmd at %s publishes no events", ctx->endpoint);
    free(ep);
    return CTL_FAILED;
  }
  dpm_events *events;
  dpm_err err = {0};
  if (dpm_events_open(ep, name, &events, &err)) {
    ctl_error(ctx, dpm_status_name(err.code), "%s", err.msg);
    free(ep);
    return ctl_transport_exit(err.code);
  }
  free(ep);

  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; /* no SA_RESTART: the wait returns */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  uint64_t seen = 0;
  while (!stop) {
    Dpm__Event *e;
    dpm_status s = dpm_events_next(events, 250, &e, &err);
    if (s == DPM_TIMEOUT) continue;
    if (s) {
      ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
      rc = CTL_UNREACHABLE;
      break;
    }
    ctl_print_event(ctx, e);
    int kind = e->kind;
    dpm_event_free(e);
    if (count && ++seen >= count) break;
    if (until_done &&
        (kind == DPM__EVENT_KIND__EVENT_DONE || kind == DPM__EVENT_KIND__EVENT_ERROR))
      break;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  dpm_events_close(events);
  return rc;
}
