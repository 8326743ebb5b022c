/* The events stream (stream.h): a ring of the last events and the list of
 * requests waiting for one, answered by dpmd_stream_add or, at their
 * deadline, by a timer that runs while any request waits. */
#include "server/stream.h"

#include <nanomsg/nn.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "server/log.h"

#define TICK_MS 100 /* deadlines are kept to this */

typedef struct kept {
  uint8_t *msg; /* "NAME\n" + packed Event */
  size_t len, name_len;
} kept;

typedef struct waiter {
  dpmd_reply_to to;
  char *name; /* NULL: every model */
  uint64_t after;
  double deadline; /* monotonic ms (common/clock.h) */
} waiter;

struct dpmd_stream {
  dpmd *d;
  uv_timer_t timer; /* runs while n_waiting > 0 */
  int timer_on, stopped;
  uint64_t seq; /* events ever kept; the newest is number seq */
  kept ring[DPMD_STREAM_KEEP];
  waiter waiting[DPMD_STREAM_MAX_WAITERS];
  int n_waiting;
};

static kept *at(dpmd_stream *s, uint64_t n) {
  return &s->ring[(n - 1) % DPMD_STREAM_KEEP];
}

static uint64_t oldest(const dpmd_stream *s) {
  return s->seq > DPMD_STREAM_KEEP ? s->seq - DPMD_STREAM_KEEP + 1 : 1;
}

static int matches(const kept *k, const char *name) {
  return !name || (strlen(name) == k->name_len && !memcmp(k->msg, name, k->name_len));
}

/* Answers with the events after `after` for name (up to DPMD_STREAM_BATCH);
 * with none unless `always`. Returns whether it answered. */
static int answer(dpmd_stream *s, dpmd_reply_to *to, const char *name, uint64_t after,
                  int always) {
  ProtobufCBinaryData ev[DPMD_STREAM_BATCH];
  size_t n = 0;
  uint64_t first = oldest(s), missed = 0, next = s->seq;
  if (after > s->seq) after = s->seq; /* numbers from another instance */
  if (s->seq && after + 1 < first) {
    missed = first - after - 1;
    after = first - 1;
  }
  for (uint64_t i = after + 1; i <= s->seq; i++) {
    kept *k = at(s, i);
    if (!matches(k, name)) continue;
    if (n == DPMD_STREAM_BATCH) {
      next = i - 1;
      break;
    }
    ev[n].data = k->msg + k->name_len + 1;
    ev[n++].len = k->len - k->name_len - 1;
  }
  if (!n && !always) return 0;
  Dpm__EventBatch b = DPM__EVENT_BATCH__INIT;
  b.n_event = n;
  b.event = ev;
  b.next = next;
  b.has_missed = missed > 0;
  b.missed = missed;
  Dpm__Response rs = DPM__RESPONSE__INIT;
  rs.result_case = DPM__RESPONSE__RESULT_EVENTS;
  rs.events = &b;
  dpmd_reply(s->d, to, &rs);
  return 1;
}

static void drop_waiter(dpmd_stream *s, int i) {
  free(s->waiting[i].name);
  s->waiting[i] = s->waiting[--s->n_waiting];
}

static void on_tick(uv_timer_t *t) {
  dpmd_stream *s = t->data;
  double now = dpm_mono_ns() / 1e6;
  for (int i = s->n_waiting - 1; i >= 0; i--) {
    waiter *w = &s->waiting[i];
    if (w->deadline > now) continue;
    answer(s, &w->to, w->name, w->after, 1);
    drop_waiter(s, i);
  }
  if (!s->n_waiting) {
    uv_timer_stop(&s->timer);
    s->timer_on = 0;
  }
}

dpm_status dpmd_stream_create(dpmd *d, uv_loop_t *loop, dpmd_stream **out, dpm_err *err) {
  dpmd_stream *s = calloc(1, sizeof *s);
  if (!s) return dpm_errf(err, DPM_NOMEM, "out of memory");
  int rc = uv_timer_init(loop, &s->timer);
  if (rc) {
    free(s);
    return dpm_errf(err, DPM_IO, "libuv: %s", uv_strerror(rc));
  }
  s->timer.data = s;
  s->d = d;
  *out = s;
  return DPM_OK;
}

void dpmd_stream_add(dpmd_stream *s, const uint8_t *msg, size_t len) {
  const uint8_t *nl = memchr(msg, '\n', len);
  uint8_t *copy = nl ? malloc(len) : NULL;
  if (!copy) {
    dpmd_count_dropped(s->d);
    return;
  }
  memcpy(copy, msg, len);
  kept *k = at(s, ++s->seq);
  free(k->msg);
  *k = (kept){.msg = copy, .len = len, .name_len = (size_t)(nl - msg)};
  for (int i = s->n_waiting - 1; i >= 0; i--) {
    waiter *w = &s->waiting[i];
    if (answer(s, &w->to, w->name, w->after, 0)) drop_waiter(s, i);
  }
}

void dpmd_stream_request(dpmd_stream *s, const Dpm__EventsRequest *r, dpmd_reply_to *to) {
  const char *name = r->name && *r->name ? r->name : NULL;
  if (!r->has_after || s->stopped || (r->has_wait_ms ? r->wait_ms : 0) == 0) {
    answer(s, to, name, r->has_after ? r->after : s->seq, 1);
    return;
  }
  if (answer(s, to, name, r->after, 0)) return;
  if (s->n_waiting == DPMD_STREAM_MAX_WAITERS)
    return dpmd_reply_error(s->d, to, DPM_DENIED,
                            "%d events requests already wait: try again",
                            DPMD_STREAM_MAX_WAITERS);
  char *copy = name ? strdup(name) : NULL;
  if (name && !copy) return dpmd_reply_error(s->d, to, DPM_NOMEM, "out of memory");
  uint32_t wait =
      r->wait_ms > DPMD_STREAM_MAX_WAIT_MS ? DPMD_STREAM_MAX_WAIT_MS : r->wait_ms;
  s->waiting[s->n_waiting++] = (waiter){.to = *to,
                                        .name = copy,
                                        .after = r->after > s->seq ? s->seq : r->after,
                                        .deadline = dpm_mono_ns() / 1e6 + wait};
  to->header = NULL; /* the waiter's now */
  if (!s->timer_on && !uv_timer_start(&s->timer, on_tick, TICK_MS, TICK_MS))
    s->timer_on = 1;
}

void dpmd_stream_stop(dpmd_stream *s) {
  if (!s || s->stopped) return;
  s->stopped = 1;
  while (s->n_waiting) {
    waiter *w = &s->waiting[s->n_waiting - 1];
    answer(s, &w->to, w->name, w->after, 1);
    drop_waiter(s, s->n_waiting - 1);
  }
  if (!uv_is_closing((uv_handle_t *)&s->timer)) uv_close((uv_handle_t *)&s->timer, NULL);
}

void dpmd_stream_free(dpmd_stream *s) {
  if (!s) return;
  for (int i = 0; i < s->n_waiting; i++) { /* after a failed start only */
    if (s->waiting[i].to.header) nn_freemsg(s->waiting[i].to.header);
    free(s->waiting[i].name);
  }
  for (size_t i = 0; i < DPMD_STREAM_KEEP; i++) free(s->ring[i].msg);
  free(s);
}
