/* dpmctl watch [NAME] [--count N] [--until-done]: subscribes to the daemon's
 * events (ctl_events_open, call.c: its events socket, else the stream
 * through the request socket) and prints each as a line, a JSON object per
 * line with --json, until SIGINT or SIGTERM (exit 0), --count events, or
 * with --until-done a DONE or ERROR event.
 *
 * Without --until-done, watch first prints the current state of the model
 * (of every model without NAME) as state events, so that an idle model
 * shows something. With --timeout MS given, watch ends once MS pass
 * without an event: exit 0, or with --until-done 1 (TIMEOUT: the end it
 * waits for did not come).
 *
 * --until-done on a model that is not training (ready, paused, failed: it
 * already finished, or never started) has nothing to wait for: after
 * subscribing, watch asks for the model's status, and when it is not
 * training (or building, preempted, queued) prints it as a state event and
 * exits 0. It asks again every CHECK_EVERY_MS while it waits, so a DONE
 * event missed while the subscription was connecting does not leave it
 * waiting forever. A state printed from a status carries why the model
 * waits ("preempted by big") as the event's message.
 *
 * Events say nothing when the daemon dies: watch pings it every
 * CHECK_EVERY_MS (dpm_client_ping) and exits 3 with the reason when it
 * stopped answering or restarted (another instance answers). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "dpmctl/dpmctl.h"

#define CHECK_EVERY_MS 1000 /* liveness pings, and status with --until-done */
#define DRAIN_MS 200        /* events in flight when the status says done */

/* The states of a model whose run is not over: --until-done waits on them.
 * preempted: training, held back by a higher priority; queued: to build
 * when its memory fits. */
static const char *const busy_states[] = {"training", "building", "preempted", "queued"};

static int running(const Dpm__ModelInfo *m) {
  for (size_t i = 0; m->state && i < sizeof busy_states / sizeof *busy_states; i++)
    if (!strcmp(m->state, busy_states[i])) return 1;
  return 0;
}

/* Prints a model's status as watch prints a state event. */
static void print_state(const ctl_ctx *ctx, Dpm__ModelInfo *m) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  Dpm__Event ev = DPM__EVENT__INIT;
  ev.kind = DPM__EVENT_KIND__EVENT_STATE;
  ev.model = m;
  ev.has_time = 1;
  ev.time = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
  if (m->state && !strcmp(m->state, "failed") && m->error)
    ev.message = m->error;
  else if (m->waiting && *m->waiting)
    ev.message = m->waiting; /* "preempted by big" */
  ctl_print_event(ctx, &ev);
}

static int ends_watch(int kind) {
  return kind == DPM__EVENT_KIND__EVENT_DONE || kind == DPM__EVENT_KIND__EVENT_ERROR;
}

/* --until-done: whether there is nothing (left) to wait for. Asks for the
 * status of name (every model for NULL); when no model is training, first
 * prints the events still arriving (a DONE ends the watch as usual), else
 * the status, and sets *done. Returns an exit code. With events NULL
 * (watch's start, without --until-done): prints the status of each model
 * and sets nothing. */
static int check_done(ctl_ctx *ctx, const char *name, dpm_events *events, int *done) {
  *done = 0;
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)name;
  Dpm__Request req = DPM__REQUEST__INIT;
  Dpm__Empty empty = DPM__EMPTY__INIT;
  if (name) {
    req.command_case = DPM__REQUEST__COMMAND_STATUS;
    req.status = &nr;
  } else {
    req.command_case = DPM__REQUEST__COMMAND_LIST;
    req.list = &empty;
  }
  Dpm__Response *r;
  int rc = ctl_call(ctx, &req, &r);
  if (rc) return rc;
  Dpm__ModelInfo **models = NULL;
  size_t n = 0;
  if (r->result_case == DPM__RESPONSE__RESULT_MODEL) {
    models = &r->model;
    n = 1;
  } else if (r->result_case == DPM__RESPONSE__RESULT_MODELS) {
    models = r->models->model;
    n = r->models->n_model;
  }
  int busy = 0;
  for (size_t i = 0; i < n; i++) busy |= running(models[i]);
  if (!events) {
    for (size_t i = 0; i < n; i++) print_state(ctx, models[i]);
  } else if (!busy) {
    *done = 1;
    for (int64_t end = dpm_mono_ms() + DRAIN_MS;;) {
      Dpm__Event *e;
      dpm_err err;
      int64_t left = end - dpm_mono_ms();
      if (left <= 0 || dpm_events_next(events, (int)left, &e, &err)) break;
      ctl_print_event(ctx, e);
      int kind = e->kind;
      dpm_event_free(e);
      if (ends_watch(kind)) {
        dpm_client_free_response(r);
        return CTL_OK;
      }
    }
    for (size_t i = 0; i < n; i++) print_state(ctx, models[i]);
  }
  dpm_client_free_response(r);
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
  int rc = ctl_ping_first(ctx); /* the daemon is there; its instance */
  if (rc) return rc;
  dpm_events *events;
  dpm_err err = {0};
  rc = ctl_events_open(ctx, name, 0, &events);
  if (rc) return rc;

  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; /* no SA_RESTART: the wait returns */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  uint64_t seen = 0;
  int done = 0;
  rc = check_done(ctx, name, until_done ? events : NULL, &done);
  int64_t next_check = dpm_mono_ms() + CHECK_EVERY_MS;
  int idle_ms = ctx->timeout_given ? ctx->timeout_ms : -1; /* --timeout: idle bound */
  int64_t last = dpm_mono_ms();
  while (!stop && !rc && !done) {
    if (idle_ms >= 0 && dpm_mono_ms() - last >= idle_ms) {
      if (until_done) {
        ctl_error(ctx, "TIMEOUT", "no event within %d ms", idle_ms);
        rc = CTL_FAILED;
      }
      break;
    }
    if (dpm_mono_ms() >= next_check) {
      dpm_status s = dpm_client_ping(ctx->client, NULL, &err);
      if (s) {
        ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
        rc = ctl_transport_exit(s);
        break;
      }
      if (until_done && ((rc = check_done(ctx, name, events, &done)) || done)) break;
      next_check = dpm_mono_ms() + CHECK_EVERY_MS;
    }
    Dpm__Event *e;
    dpm_status s = dpm_events_next(events, 250, &e, &err);
    if (s == DPM_TIMEOUT) continue;
    if (s) {
      ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
      rc = CTL_UNREACHABLE;
      break;
    }
    ctl_print_event(ctx, e);
    last = dpm_mono_ms();
    int kind = e->kind;
    dpm_event_free(e);
    if (count && ++seen >= count) break;
    if (until_done && ends_watch(kind)) break;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  dpm_events_close(events);
  return rc;
}
