/* Shards' status off the loop thread (gather.h): a queue of packed
 * answers and one worker that completes and sends them. */
#include "server/fleet/gather.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/escape.h"
#include "server/fleet/peer.h"
#include "server/log.h"

#define MAX_STATE 32 /* a shard's state name, as kept */

typedef struct task {
  struct task *next;
  uint8_t *body; /* the packed Response */
  size_t len;
  dpmd_reply_to to;
} task;

struct dpmd_gather {
  dpmd *d;
  pthread_t thread;
  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;
  task *head, *tail;
  int n;
  int stop;
};

/* A new copy of peer text, escaped and bounded; NULL when out of memory. */
static char *text(const char *s, size_t cap) {
  char buf[600];
  if (cap > sizeof buf) cap = sizeof buf;
  return strdup(dpm_escape(s ? s : "", buf, cap));
}

static void set_error(Dpm__ShardInfo *si, const char *msg) {
  free(si->error);
  si->error = text(msg, 512);
}

/* Asks the shard of si about model `name`, within ms. */
static void ask(dpmd *d, const char *name, Dpm__ShardInfo *si, int ms) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)name;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_STATUS;
  rq.status = &nr;
  Dpm__Response *r;
  dpm_err err = {0};
  if (dpmd_peer_call_once(d, si->endpoint, &rq, ms, &r, &err))
    return set_error(si, err.msg);
  if (r->result_case != DPM__RESPONSE__RESULT_MODEL) {
    set_error(si, "its answer holds no model");
  } else {
    const Dpm__ModelInfo *m = r->model;
    si->state = text(m->state, MAX_STATE);
    si->has_iter = m->has_iter;
    si->iter = m->iter;
    si->has_target_iter = m->has_target_iter;
    si->target_iter = m->target_iter;
    if (m->error && *m->error) set_error(si, m->error);
  }
  dpm__response__free_unpacked(r, NULL);
}

static void complete(dpmd *d, Dpm__ModelInfo *m, int64_t deadline) {
  for (size_t i = 0; i < m->n_shards; i++) {
    Dpm__ShardInfo *si = m->shards[i];
    if (si->state) continue;
    int64_t left = deadline - dpm_mono_ms();
    if (left <= 0) {
      set_error(si, "not asked: the shards took too long to answer");
      continue;
    }
    ask(d, m->name, si, left < DPMD_GATHER_CALL_MS ? (int)left : DPMD_GATHER_CALL_MS);
  }
}

static void run(dpmd *d, task *t) {
  Dpm__Response *r = dpm__response__unpack(NULL, t->len, t->body);
  if (!r) return dpmd_reply_error(d, &t->to, DPM_NOMEM, "out of memory");
  int64_t deadline = dpm_mono_ms() + DPMD_GATHER_TOTAL_MS;
  if (r->result_case == DPM__RESPONSE__RESULT_MODEL) complete(d, r->model, deadline);
  if (r->result_case == DPM__RESPONSE__RESULT_MODELS)
    for (size_t i = 0; i < r->models->n_model; i++)
      complete(d, r->models->model[i], deadline);
  dpmd_reply(d, &t->to, r);
  dpm__response__free_unpacked(r, NULL);
}

static void *worker(void *arg) {
  dpmd_gather *g = arg;
  for (;;) {
    pthread_mutex_lock(&g->mu);
    while (!g->head && !g->stop) pthread_cond_wait(&g->cv, &g->mu);
    task *t = g->stop ? NULL : g->head;
    if (t && !(g->head = t->next)) g->tail = NULL;
    if (t) g->n--;
    pthread_mutex_unlock(&g->mu);
    if (!t) return NULL;
    run(g->d, t);
    free(t->body);
    free(t);
  }
}

dpm_status dpmd_gather_start(dpmd *d, dpmd_gather **out, dpm_err *err) {
  *out = NULL;
  dpmd_gather *g = calloc(1, sizeof *g);
  if (!g) return dpm_errf(err, DPM_NOMEM, "out of memory");
  g->d = d;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  if (pthread_create(&g->thread, NULL, worker, g)) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
    return dpm_errf(err, DPM_NOMEM, "cannot start the shards' status thread");
  }
  *out = g;
  return DPM_OK;
}

void dpmd_gather_stop(dpmd_gather *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stop = 1;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  for (task *t; (t = g->head);) {
    g->head = t->next;
    dpmd_reply_error(g->d, &t->to, DPM_STATE, "dpmd is shutting down");
    free(t->body);
    free(t);
  }
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
}

void dpmd_gather_post(dpmd_gather *g, const Dpm__Response *resp, dpmd_reply_to *to) {
  task *t = calloc(1, sizeof *t);
  size_t len = dpm__response__get_packed_size(resp);
  if (!t || !(t->body = malloc(len ? len : 1))) {
    free(t);
    return dpmd_reply_error(g->d, to, DPM_NOMEM, "out of memory");
  }
  t->len = dpm__response__pack(resp, t->body);
  t->to = *to;
  pthread_mutex_lock(&g->mu);
  int full = g->n >= DPMD_GATHER_MAX_TASKS;
  if (!full) {
    if (g->tail)
      g->tail->next = t;
    else
      g->head = t;
    g->tail = t;
    g->n++;
    pthread_cond_signal(&g->cv);
  }
  pthread_mutex_unlock(&g->mu);
  if (!full) return;
  free(t->body);
  free(t);
  dpmd_reply_error(g->d, to, DPM_DENIED,
                   "%d status answers are already waiting for fleet shards; try again",
                   DPMD_GATHER_MAX_TASKS);
}
