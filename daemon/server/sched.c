/* dpmd's scheduler (sched.h): turns on shared devices by priority and
 * weighted time, and memory admission with a queue.
 *
 * A handful of models at most (max_models): every decision walks the list
 * of entries under the one mutex, and one condition variable wakes every
 * waiter, which rechecks its own turn. */
#include "server/sched.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

#define SHARE_WINDOW 60 /* seconds of history behind `share` */

struct dpmd_sched_entry {
  dpmd_sched *s;
  dpmd_sched_entry *next;
  char name[128];
  char **dev;
  size_t n_dev;
  dpmd_schedule sc;
  dpmd_sched_hooks hooks;
  uint64_t seq; /* join order: the queue's and the turns' tie-break */
  double joined;
  /* time */
  int want, running, kicked;
  int gang; /* a shard of a job over several daemons: takes no turns */
  int told; /* acquire said PREEMPTED in this spell of preemption */
  double vtime, turn_start;
  double run_s[SHARE_WINDOW];   /* seconds run in each second of the window */
  int64_t run_at[SHARE_WINDOW]; /* which second each slot holds */
  /* memory */
  int admitted, queued;
  uint64_t total, device_bytes; /* held (admitted) or asked for (queued) */
};

struct dpmd_sched {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t device_cap, total_cap; /* 0: unbounded */
  uint64_t next_seq;
  dpmd_sched_entry *entries;
};

dpm_status dpmd_sched_new(uint64_t device_bytes, uint64_t total_bytes, dpmd_sched **out,
                          dpm_err *err) {
  dpmd_sched *s = calloc(1, sizeof *s);
  if (!(*out = s)) return dpm_errf(err, DPM_NOMEM, "scheduler: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->device_cap = device_bytes;
  s->total_cap = total_bytes;
  return DPM_OK;
}

void dpmd_sched_free(dpmd_sched *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- relations between entries --------------------------------------------- */

static int uses(const dpmd_sched_entry *e, const char *dev) {
  for (size_t i = 0; i < e->n_dev; i++)
    if (!strcmp(e->dev[i], dev)) return 1;
  return 0;
}

/* Whether a and b (distinct) share a device. */
static int overlap(const dpmd_sched_entry *a, const dpmd_sched_entry *b) {
  for (size_t i = 0; i < a->n_dev; i++)
    if (uses(b, a->dev[i])) return 1;
  return 0;
}

#define EACH_OTHER(x, e)                                                                 \
  for (dpmd_sched_entry *x = (e)->s->entries; x; x = x->next)                            \
    if (x != (e) && overlap(x, (e)))

/* The highest-priority model above e's that wants a device of e's; NULL:
 * none. */
static dpmd_sched_entry *preempter(dpmd_sched_entry *e) {
  dpmd_sched_entry *best = NULL;
  EACH_OTHER(x, e) {
    if (x->want && !x->queued && x->sc.priority > e->sc.priority &&
        (!best || x->sc.priority > best->sc.priority))
      best = x;
  }
  return best;
}

/* Whether a runs before b among equals: less virtual time, then earlier. */
static int before(const dpmd_sched_entry *a, const dpmd_sched_entry *b) {
  return a->vtime < b->vtime || (a->vtime == b->vtime && a->seq < b->seq);
}

/* Whether e may take its turn now: nobody on its devices runs (but a
 * gang of e's priority, which runs beside it), nobody above it wants them,
 * and no equal that wants them comes before it (gangs take no turns). */
static int may_run(dpmd_sched_entry *e) {
  if (e->queued) return 0;
  EACH_OTHER(x, e) {
    int equal = x->sc.priority == e->sc.priority;
    if (x->running && !(x->gang && equal)) return 0;
    if (!x->gang && x->want && !x->queued && equal && before(x, e)) return 0;
  }
  return !preempter(e);
}

/* Interrupts the turn of every model below e's priority on e's devices. */
static void preempt_lower(dpmd_sched_entry *e) {
  EACH_OTHER(x, e) {
    if (x->running && x->sc.priority < e->sc.priority) x->hooks.interrupt(x->hooks.arg);
  }
}

/* ---- memory ---------------------------------------------------------------- */

/* Bytes admitted: in all, and on device dev (NULL: in all only). */
static uint64_t held(const dpmd_sched *s, const char *dev) {
  uint64_t b = 0;
  for (const dpmd_sched_entry *x = s->entries; x; x = x->next)
    if (x->admitted) b += dev ? (uses(x, dev) ? x->device_bytes : 0) : x->total;
  return b;
}

/* The device of e's where the least is free, and how much is (device_cap
 * set). */
static uint64_t least_free(const dpmd_sched_entry *e, const char **where) {
  uint64_t least = UINT64_MAX;
  for (size_t i = 0; i < e->n_dev; i++) {
    uint64_t h = held(e->s, e->dev[i]),
             free_b = h < e->s->device_cap ? e->s->device_cap - h : 0;
    if (free_b < least) least = free_b, *where = e->dev[i];
  }
  return least;
}

static int fits(const dpmd_sched_entry *e, uint64_t total, uint64_t device_bytes) {
  const dpmd_sched *s = e->s;
  const char *where;
  if (s->total_cap && held(s, NULL) + total > s->total_cap) return 0;
  return !s->device_cap || least_free(e, &where) >= device_bytes;
}

/* Whether a comes before b in the queue: higher priority, then earlier. */
static int queue_before(const dpmd_sched_entry *a, const dpmd_sched_entry *b) {
  return a->sc.priority > b->sc.priority ||
         (a->sc.priority == b->sc.priority && a->seq < b->seq);
}

/* The queue's head after `after` in queue order (NULL: the first). */
static dpmd_sched_entry *queue_next(dpmd_sched *s, const dpmd_sched_entry *after) {
  dpmd_sched_entry *best = NULL;
  for (dpmd_sched_entry *x = s->entries; x; x = x->next)
    if (x->queued && (!after || queue_before(after, x)) &&
        (!best || queue_before(x, best)))
      best = x;
  return best;
}

/* Admits queued models in order while the head fits, waking each. */
static void pump(dpmd_sched *s) {
  dpmd_sched_entry *e;
  while ((e = queue_next(s, NULL)) && fits(e, e->total, e->device_bytes)) {
    e->queued = 0;
    e->admitted = 1;
    e->hooks.wake(e->hooks.arg);
  }
  pthread_cond_broadcast(&s->cv);
}

static dpmd_admit refuse_never(dpmd_sched_entry *e, uint64_t total, uint64_t dev,
                               dpm_err *err) {
  const dpmd_sched *s = e->s;
  if (e->sc.max_memory && total > e->sc.max_memory)
    dpm_errf(err, DPM_DENIED,
             "%s needs %" PRIu64 " bytes, more than its max_memory %" PRIu64, e->name,
             total, e->sc.max_memory);
  else if (s->total_cap && total > s->total_cap)
    dpm_errf(err, DPM_DENIED,
             "%s needs %" PRIu64 " bytes, more than this dpmd's max_total_bytes %" PRIu64,
             e->name, total, s->total_cap);
  else
    dpm_errf(err, DPM_DENIED,
             "%s needs %" PRIu64 " bytes on each of its devices, more than "
             "device_memory_bytes %" PRIu64,
             e->name, dev, s->device_cap);
  return DPMD_ADMIT_REFUSED;
}

/* Appends to err's message. */
static void add(dpm_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(dpm_err *err, const char *fmt, ...) {
  size_t n = strlen(err->msg);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg + n, sizeof err->msg - n, fmt, ap);
  va_end(ap);
}

static dpmd_admit refuse_now(dpmd_sched_entry *e, uint64_t total, uint64_t dev,
                             dpm_err *err) {
  const dpmd_sched *s = e->s;
  dpm_errf(err, DPM_DENIED,
           "%s needs %" PRIu64 " bytes (%" PRIu64 " on each of its devices) and does "
           "not fit now (--no-queue)",
           e->name, total, dev);
  if (s->total_cap)
    add(err, ": %" PRIu64 " of max_total_bytes %" PRIu64 " are held", held(s, NULL),
        s->total_cap);
  if (s->device_cap) {
    const char *where = "";
    uint64_t f = least_free(e, &where);
    add(err, "%s %" PRIu64 " of device_memory_bytes %" PRIu64 " are free on %s",
        s->total_cap ? "," : ":", f, s->device_cap, where);
  }
  if (queue_next(e->s, NULL)) add(err, "; other models queue before it");
  return DPMD_ADMIT_REFUSED;
}

dpmd_admit dpmd_sched_admit(dpmd_sched_entry *e, uint64_t total, uint64_t device_bytes,
                            int queue, dpm_err *err) {
  dpmd_sched *s = e->s;
  dpmd_admit r;
  pthread_mutex_lock(&s->mu);
  if (e->admitted && total <= e->total && device_bytes <= e->device_bytes) {
    e->total = total, e->device_bytes = device_bytes;
    r = DPMD_ADMIT_OK;
  } else if ((e->sc.max_memory && total > e->sc.max_memory) ||
             (s->total_cap && total > s->total_cap) ||
             (s->device_cap && device_bytes > s->device_cap)) {
    e->admitted = e->queued = 0;
    r = refuse_never(e, total, device_bytes, err);
  } else {
    e->admitted = 0;
    dpmd_sched_entry *head = queue_next(s, NULL);
    if (!e->queued && (!head || queue_before(e, head)) && fits(e, total, device_bytes)) {
      e->total = total, e->device_bytes = device_bytes, e->admitted = 1;
      r = DPMD_ADMIT_OK;
    } else if (!queue) {
      e->queued = 0;
      r = refuse_now(e, total, device_bytes, err);
    } else {
      e->total = total, e->device_bytes = device_bytes, e->queued = 1;
      r = DPMD_ADMIT_QUEUED;
    }
  }
  pump(s); /* the queue may have changed (this one refused, or a head that fits) */
  pthread_mutex_unlock(&s->mu);
  return r;
}

void dpmd_sched_release_memory(dpmd_sched_entry *e) {
  pthread_mutex_lock(&e->s->mu);
  e->admitted = e->queued = 0;
  pump(e->s);
  pthread_mutex_unlock(&e->s->mu);
}

/* ---- entries --------------------------------------------------------------- */

static void free_entry(dpmd_sched_entry *e) {
  for (size_t i = 0; e->dev && i < e->n_dev; i++) free(e->dev[i]);
  free(e->dev);
  free(e);
}

dpmd_sched_entry *dpmd_sched_join(dpmd_sched *s, const char *name,
                                  const char *const *devices, size_t n_devices,
                                  const dpmd_schedule *sc,
                                  const dpmd_sched_hooks *hooks) {
  dpmd_sched_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->dev = calloc(n_devices ? n_devices : 1, sizeof *e->dev))) {
    free(e);
    return NULL;
  }
  for (; e->n_dev < n_devices; e->n_dev++)
    if (!(e->dev[e->n_dev] = strdup(devices[e->n_dev]))) {
      free_entry(e);
      return NULL;
    }
  snprintf(e->name, sizeof e->name, "%s", name);
  e->s = s;
  e->sc = *sc;
  e->hooks = *hooks;
  e->joined = dpm_mono_s();
  pthread_mutex_lock(&s->mu);
  e->seq = s->next_seq++;
  e->next = s->entries;
  s->entries = e;
  pthread_mutex_unlock(&s->mu);
  return e;
}

void dpmd_sched_leave(dpmd_sched_entry *e) {
  if (!e) return;
  dpmd_sched *s = e->s;
  pthread_mutex_lock(&s->mu);
  for (dpmd_sched_entry **p = &s->entries; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  pump(s);
  pthread_mutex_unlock(&s->mu);
  free_entry(e);
}

dpmd_schedule dpmd_sched_schedule(dpmd_sched_entry *e) {
  pthread_mutex_lock(&e->s->mu);
  dpmd_schedule sc = e->sc;
  pthread_mutex_unlock(&e->s->mu);
  return sc;
}

void dpmd_sched_set(dpmd_sched_entry *e, const dpmd_schedule *sc) {
  pthread_mutex_lock(&e->s->mu);
  e->sc = *sc;
  if (e->want) preempt_lower(e);
  pump(e->s);
  pthread_mutex_unlock(&e->s->mu);
}

/* ---- time ------------------------------------------------------------------ */

void dpmd_sched_want(dpmd_sched_entry *e, int want) {
  dpmd_sched *s = e->s;
  pthread_mutex_lock(&s->mu);
  if (want && !e->want) { /* no credit for the time it did not want */
    int wanting = 0;
    double least = 0, most = 0;
    EACH_OTHER(x, e) {
      if (x->sc.priority != e->sc.priority) continue;
      if (x->want && (!wanting++ || x->vtime < least)) least = x->vtime;
      if (x->vtime > most) most = x->vtime;
    }
    double floor = wanting ? least : most;
    if (floor > e->vtime) e->vtime = floor;
    preempt_lower(e);
  }
  e->want = want;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

dpmd_turn dpmd_sched_acquire(dpmd_sched_entry *e, int resident) {
  dpmd_sched *s = e->s;
  dpmd_turn t;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (e->kicked || !e->want) {
      e->kicked = 0;
      t = DPMD_TURN_KICKED;
      break;
    }
    dpmd_sched_entry *by = preempter(e);
    if (by && resident && e->sc.spill) {
      t = DPMD_TURN_SPILL;
      break;
    }
    if (by && !e->told) {
      e->told = 1;
      t = DPMD_TURN_PREEMPTED;
      break;
    }
    if (!by) e->told = 0;
    if (may_run(e)) {
      e->running = 1;
      e->turn_start = dpm_mono_s();
      t = DPMD_TURN_GRANTED;
      break;
    }
    pthread_cond_wait(&s->cv, &s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return t;
}

int dpmd_sched_gang_run(dpmd_sched_entry *e) {
  pthread_mutex_lock(&e->s->mu);
  e->gang = 1;
  int run = e->want && !preempter(e);
  if (run) {
    e->running = 1;
    e->turn_start = dpm_mono_s();
  }
  pthread_mutex_unlock(&e->s->mu);
  return run;
}

void dpmd_sched_nap(dpmd_sched_entry *e, double seconds) {
  dpmd_sched *s = e->s;
  double end = dpm_mono_s() + seconds;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double at = (double)ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
  ts.tv_sec = (time_t)at;
  ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&s->mu);
  while (!e->kicked && dpm_mono_s() < end)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts)) break;
  e->kicked = 0;
  pthread_mutex_unlock(&s->mu);
}

/* Adds the run from t0 to t1 (mono seconds) to the share window. */
static void account(dpmd_sched_entry *e, double t0, double t1) {
  for (double a = t0; a < t1;) {
    int64_t sec = (int64_t)a;
    double b = (double)(sec + 1) < t1 ? (double)(sec + 1) : t1;
    int k = (int)(sec % SHARE_WINDOW);
    if (e->run_at[k] != sec) e->run_at[k] = sec, e->run_s[k] = 0;
    e->run_s[k] += b - a;
    a = b;
  }
}

void dpmd_sched_done(dpmd_sched_entry *e, double seconds) {
  pthread_mutex_lock(&e->s->mu);
  e->running = 0;
  e->vtime += seconds / e->sc.weight;
  account(e, e->turn_start, e->turn_start + seconds);
  pthread_cond_broadcast(&e->s->cv);
  pthread_mutex_unlock(&e->s->mu);
}

void dpmd_sched_kick(dpmd_sched_entry *e) {
  pthread_mutex_lock(&e->s->mu);
  e->kicked = 1;
  pthread_cond_broadcast(&e->s->cv);
  pthread_mutex_unlock(&e->s->mu);
}

/* ---- views ----------------------------------------------------------------- */

void dpmd_sched_view_of(dpmd_sched_entry *e, dpmd_sched_view *v) {
  memset(v, 0, sizeof *v);
  size_t n = 0;
  for (size_t i = 0; i < e->n_dev && n + 1 < sizeof v->group; i++)
    n += (size_t)snprintf(v->group + n, sizeof v->group - n, "%s%s", i ? "," : "",
                          e->dev[i]);
  pthread_mutex_lock(&e->s->mu);
  double now = dpm_mono_s(), ran = 0;
  int64_t sec = (int64_t)now;
  for (int k = 0; k < SHARE_WINDOW; k++)
    if (e->run_at[k] > sec - SHARE_WINDOW) ran += e->run_s[k];
  if (e->running) ran += now - e->turn_start;
  double span = now - e->joined < SHARE_WINDOW ? now - e->joined : SHARE_WINDOW;
  v->share = span > 0 ? (ran / span > 1 ? 1 : ran / span) : 0;
  v->bytes = e->total;
  dpmd_sched_entry *by = preempter(e);
  if (e->queued) {
    v->state = DPMD_SCHED_QUEUED;
    v->position = 1;
    for (dpmd_sched_entry *x = queue_next(e->s, NULL); x && x != e;
         x = queue_next(e->s, x))
      v->position++;
  } else if (!e->want) {
    v->state = DPMD_SCHED_IDLE;
  } else if (e->running) {
    v->state = DPMD_SCHED_RUNNING;
  } else if (by) {
    v->state = DPMD_SCHED_PREEMPTED;
    snprintf(v->by, sizeof v->by, "%s", by->name);
  } else {
    v->state = DPMD_SCHED_WAITING;
  }
  pthread_mutex_unlock(&e->s->mu);
}
