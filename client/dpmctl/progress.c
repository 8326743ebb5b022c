/* train --wait: the daemon answers the train request only when its steps
 * are done, so the main thread sends it with no timeout while a second
 * thread reads the model's events and shows progress:
 *   - stderr is a terminal: one bar line on stderr, redrawn with '\r'
 *     "[#####...............] 120/500 loss 0.4123 acc 0.875 1234 img/s ETA 0:42";
 *   - otherwise, without --json: a plain line on stdout per progress event
 *     "iter 120/500 loss 0.4123 acc 0.875 img/s 1234";
 *   - --no-progress, or --json without a terminal: nothing.
 * A ping and a watch request come first, within --timeout: the ping shows
 * that the daemon is there and teaches the client its instance (so that a
 * restart is noticed during the wait), the watch says where the events
 * are: its events socket, else the stream through the request socket
 * (ctl_events_open), which every dpmd serves. A daemon that refuses both
 * just gets no progress. The first events after subscribing may be missed (nanomsg
 * connects in the background); progress events keep coming, so the bar
 * catches up. The ETA is the time left at the wall-clock rate of the
 * iterations seen (rate.c), not the daemon's step time.
 *
 * The train call waits without a timeout, but not on a dead daemon: the
 * library pings while it waits and fails the call (exit 3) when dpmd stops
 * answering or restarted (include/dpm/client.h, Liveness). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "dpmctl/dpmctl.h"

#define BAR_WIDTH 20

enum { SHOW_NONE, SHOW_BAR, SHOW_LINES };

typedef struct progress {
  dpm_events *events;
  int wake[2]; /* a pipe: the main thread writes one byte when the answer came */
  int mode;
  uint64_t iters; /* steps of this train; 0 until known (--epochs) */
  uint64_t start; /* with --epochs: the model's iteration before the train */
  size_t drawn;   /* length of the bar line on screen; 0: none */
  ctl_rate rate;  /* for the ETA */
} progress;

void ctl_progress_bar(const Dpm__ModelInfo *m, uint64_t iters, double eta_s, char *buf,
                      size_t cap) {
  size_t n = 0;
#define ADD(...)                                                                         \
  do {                                                                                   \
    if (n < cap) {                                                                       \
      int k_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                  \
      if (k_ > 0) n += (size_t)k_;                                                       \
    }                                                                                    \
  } while (0)
  if (cap) buf[0] = 0;
  double frac = -1;
  if (m->has_iter && m->has_target_iter && m->target_iter > 0) {
    uint64_t start = m->target_iter >= iters ? m->target_iter - iters : 0;
    uint64_t span = m->target_iter - start;
    uint64_t done = m->iter > start ? m->iter - start : 0;
    frac = span ? (double)done / (double)span : 1;
    if (frac > 1) frac = 1;
  }
  int fill = frac < 0 ? 0 : (int)lround(frac * BAR_WIDTH);
  char bar[BAR_WIDTH + 1];
  for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
  bar[BAR_WIDTH] = 0;
  ADD("[%s]", bar);
  if (m->has_iter) {
    ADD(" %llu", (unsigned long long)m->iter);
    if (m->has_target_iter) ADD("/%llu", (unsigned long long)m->target_iter);
  }
  if (m->has_loss) ADD(" loss %.4f", m->loss);
  if (m->has_accuracy) ADD(" acc %.3f", m->accuracy);
  if (m->has_images_per_s) ADD(" %.0f img/s", m->images_per_s);
  if (eta_s >= 0 && isfinite(eta_s)) {
    char d[32];
    ctl_format_duration(eta_s, d, sizeof d);
    ADD(" ETA %s", d);
  }
#undef ADD
}

/* Seconds left, or -1 when unknown. */
static double eta(progress *p, const Dpm__ModelInfo *m) {
  if (!m->has_iter || !m->has_target_iter) return -1;
  return ctl_rate_eta(&p->rate, dpm_mono_s(), m->iter, m->target_iter);
}

static void show(progress *p, const Dpm__ModelInfo *m) {
  if (!p->iters && m->has_target_iter && m->target_iter > p->start)
    p->iters = m->target_iter - p->start; /* --epochs: the daemon chose the steps */
  if (p->mode == SHOW_LINES) {
    printf("iter %llu", (unsigned long long)m->iter);
    if (m->has_target_iter) printf("/%llu", (unsigned long long)m->target_iter);
    if (m->has_loss) printf(" loss %.4f", m->loss);
    if (m->has_accuracy) printf(" acc %.3f", m->accuracy);
    if (m->has_images_per_s) printf(" img/s %.0f", m->images_per_s);
    putchar('\n');
    fflush(stdout);
    return;
  }
  char line[256];
  ctl_progress_bar(m, p->iters, eta(p, m), line, sizeof line);
  size_t n = strlen(line);
  fprintf(stderr, "\r%s", line);
  for (size_t i = n; i < p->drawn; i++) fputc(' ', stderr); /* wipe a longer line */
  fflush(stderr);
  p->drawn = n > 0 ? n : 1;
}

/* Shows events as they come until this train's done event, or, once the
 * main thread has its answer and writes to wake, for at most LAST_EVENTS_S
 * more: the last events travel on another socket than the answer and may
 * arrive just after it. */
#define LAST_EVENTS_S 0.2
/* A stream (no descriptor to poll) waits in dpm_events_next this long at a
 * time, then looks at the wake pipe. */
#define STREAM_WAIT_MS 100
static void *run(void *arg) {
  progress *p = arg;
  int fd = dpm_events_fd(p->events);
  struct pollfd fds[2] = {{.fd = p->wake[0], .events = POLLIN},
                          {.fd = fd, .events = POLLIN}};
  double until = -1; /* woken: when to stop waiting for the last events */
  for (;;) {
    int wait_ms = until < 0 ? -1 : (int)((until - dpm_mono_s()) * 1e3);
    if (until >= 0 && wait_ms <= 0) return NULL;
    if (poll(fds, fd < 0 ? 1 : 2, fd < 0 ? 0 : wait_ms) < 0 && errno != EINTR)
      return NULL;
    if (fds[0].revents) {
      until = dpm_mono_s() + LAST_EVENTS_S;
      fds[0].fd = -1; /* woken once */
    }
    if (fd >= 0 && !fds[1].revents) continue;
    Dpm__Event *e;
    dpm_err err;
    dpm_status s;
    int first = fd < 0 ? STREAM_WAIT_MS : 0;
    while ((s = dpm_events_next(p->events, first, &e, &err)) == DPM_OK) {
      first = 0;
      int done = e->kind == DPM__EVENT_KIND__EVENT_DONE;
      if (e->kind == DPM__EVENT_KIND__EVENT_PROGRESS || (done && p->mode == SHOW_BAR))
        show(p, e->model); /* a done event fills the bar */
      dpm_event_free(e);
      if (done) return NULL;
    }
    if (s != DPM_TIMEOUT)
      return NULL; /* no more progress; the train answer still comes */
  }
}

int ctl_train_wait(ctl_ctx *ctx, Dpm__Request *req, Dpm__Response **resp) {
  *resp = NULL;
  progress p;
  memset(&p, 0, sizeof p);
  p.wake[0] = p.wake[1] = -1;
  p.iters = req->train->iters;
  if (ctx->a->opt[O_NO_PROGRESS])
    p.mode = SHOW_NONE;
  else if (isatty(STDERR_FILENO))
    p.mode = SHOW_BAR;
  else if (!ctx->json)
    p.mode = SHOW_LINES;
  else
    p.mode = SHOW_NONE;

  /* the daemon is there (and which instance), and where its events are */
  int rc = ctl_ping_first(ctx);
  if (rc) return rc;
  if (!p.iters && p.mode == SHOW_BAR) { /* --epochs: the bar starts where the model is */
    Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
    nr.name = req->train->name;
    Dpm__Request st = DPM__REQUEST__INIT;
    st.command_case = DPM__REQUEST__COMMAND_STATUS;
    st.status = &nr;
    Dpm__Response *r;
    if ((rc = ctl_send(ctx, &st, &r))) return rc;
    if (!r->status && r->result_case == DPM__RESPONSE__RESULT_MODEL && r->model->has_iter)
      p.start = r->model->iter;
    dpm_client_free_response(r);
  }
  if (p.mode != SHOW_NONE && (rc = ctl_events_open(ctx, req->train->name, 1, &p.events)))
    return rc;
  pthread_t thread;
  int threaded = p.events && pipe2(p.wake, O_CLOEXEC) == 0 &&
                 pthread_create(&thread, NULL, run, &p) == 0;

  dpm_client_set_timeout(ctx->client, -1);
  dpm_err err = {0};
  dpm_status s = dpm_client_call(ctx->client, req, resp, &err);
  dpm_client_set_timeout(ctx->client, ctx->timeout_ms);

  if (threaded) {
    char one = 1;
    while (write(p.wake[1], &one, 1) < 0 && errno == EINTR) {
    }
    pthread_join(thread, NULL);
  }
  for (int i = 0; i < 2; i++)
    if (p.wake[i] >= 0) close(p.wake[i]);
  dpm_events_close(p.events);
  if (p.drawn) fputc('\n', stderr);
  return ctl_check(ctx, s, &err, resp); /* errors after the bar's line */
}
