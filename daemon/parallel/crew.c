/* A device set's warm workers (crew.h).
 *
 * Lock-step: a run publishes fn/arg, sets `pending` to n-1 and bumps `gen`;
 * each worker, having seen the new gen, runs fn and decrements pending; the
 * last one signals `done`. Turns: callers take a ticket under mu and wait
 * on `turn` until it is served; the turn ends (serving++) under the same
 * lock that waits for the workers, so a run costs the two mutex sections it
 * cost before runs could come from several threads.
 *
 * Threads: mu guards fn, arg, the tickets and quit. gen and pending are atomics written
 * under mu (gen) or by the ranks (pending); a worker's acquire of gen orders its reads of
 * fn/arg and of whatever the caller wrote before the run, and the caller's acquire of
 * pending orders what the ranks wrote before its return. */
#include "parallel/crew.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "comm/spin.h"

/* Runs of one model follow each other within microseconds: waiters spin
 * that long before sleeping (comm/spin.h). */
#define SPIN_NS 200000

typedef struct {
  dpm_crew *c;
  int rank;
  int core; /* CPU the worker runs on; -1: anywhere */
  pthread_t thread;
} crew_worker;

struct dpm_crew {
  int n;
  int core0;      /* CPU for rank 0 (the caller) during runs; -1: anywhere */
  crew_worker *w; /* [n]; w[0] unused (the caller is rank 0) */
  int threads;    /* workers started */
  pthread_mutex_t mu;
  pthread_cond_t go, done, turn;
  void (*fn)(void *arg, int rank);
  void *arg;
  unsigned long next_ticket, serving; /* turns, FIFO */
  atomic_ulong gen;                   /* runs dispatched; written under mu */
  atomic_ulong pending;               /* workers still in the current run */
  int sleepers;                       /* workers waiting on go, under mu */
  atomic_int caller_sleeps;           /* the caller waits on done */
  int quit;
};

/* Pins the calling thread to one CPU (best effort: a CPU outside this
 * process's set, or a failing call, leaves the thread where it was). */
static void pin(int core) {
  if (core < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* A worker watches gen lock-free while it spins, and takes mu only to
 * sleep: a run then costs no system call when the threads are quick, which
 * matters in a VM, where each futex wake-up costs tens of microseconds.
 * fn and arg are written before gen is bumped, and read after it is seen. */
static void *worker(void *arg) {
  crew_worker *w = arg;
  dpm_crew *c = w->c;
  unsigned long seen = 0;
  pin(w->core);
  for (;;) {
    if (!dpm_spin_while(&c->gen, seen, SPIN_NS)) {
      pthread_mutex_lock(&c->mu);
      c->sleepers++;
      while (atomic_load(&c->gen) == seen && !c->quit) pthread_cond_wait(&c->go, &c->mu);
      c->sleepers--;
      int quit = c->quit;
      pthread_mutex_unlock(&c->mu);
      if (quit) return NULL;
    }
    seen = atomic_load(&c->gen);
    c->fn(c->arg, w->rank);
    /* The caller set caller_sleeps (under mu) before it last looked at
     * pending: if it is clear here, the caller sees pending reach 0. */
    if (atomic_fetch_sub(&c->pending, 1) == 1 && atomic_load(&c->caller_sleeps)) {
      pthread_mutex_lock(&c->mu);
      pthread_cond_signal(&c->done);
      pthread_mutex_unlock(&c->mu);
    }
  }
}

/* Under mu: wait for this caller's turn. */
static void take_turn(dpm_crew *c) {
  unsigned long mine = c->next_ticket++;
  while (c->serving != mine) pthread_cond_wait(&c->turn, &c->mu);
}

/* Under mu: hand the crew to the next caller. */
static void end_turn(dpm_crew *c) {
  c->serving++;
  if (c->next_ticket != c->serving) pthread_cond_broadcast(&c->turn);
}

void dpm_crew_run(dpm_crew *c, void (*fn)(void *arg, int rank), void *arg) {
  static _Thread_local int pinned = -1; /* the core this thread was pinned to */
  if (c->core0 >= 0 && pinned != c->core0) pin(pinned = c->core0);
  pthread_mutex_lock(&c->mu);
  take_turn(c);
  c->fn = fn;
  c->arg = arg;
  if (c->n > 1) {
    atomic_store(&c->pending, (unsigned long)c->n - 1);
    atomic_fetch_add(&c->gen, 1);
    if (c->sleepers) pthread_cond_broadcast(&c->go);
  }
  pthread_mutex_unlock(&c->mu);
  fn(arg, 0);
  unsigned long left = atomic_load(&c->pending);
  while (left && dpm_spin_while(&c->pending, left, SPIN_NS))
    left = atomic_load(&c->pending);
  pthread_mutex_lock(&c->mu);
  if (atomic_load(&c->pending)) {
    atomic_store(&c->caller_sleeps, 1);
    while (atomic_load(&c->pending)) pthread_cond_wait(&c->done, &c->mu);
    atomic_store(&c->caller_sleeps, 0);
  }
  end_turn(c);
  pthread_mutex_unlock(&c->mu);
}

int dpm_crew_size(const dpm_crew *c) { return c->n; }

int dpm_crew_cpus(const dpm_crew *c, cpu_set_t *set) {
  CPU_ZERO(set);
  for (int r = 0; r < c->n; r++) {
    int core = r ? c->w[r].core : c->core0;
    if (core >= 0 && core < CPU_SETSIZE) CPU_SET(core, set);
  }
  return CPU_COUNT(set);
}

dpm_status dpm_crew_create(int n, dpm_crew **out, dpm_err *err) {
  return dpm_crew_create_pinned(n, NULL, out, err);
}

dpm_status dpm_crew_create_pinned(int n, const int *cores, dpm_crew **out, dpm_err *err) {
  *out = NULL;
  if (n < 1 || n > DPM_CREW_MAX_RANKS)
    return dpm_errf(err, DPM_INVALID, "crew: %d ranks outside 1..%d", n,
                    DPM_CREW_MAX_RANKS);
  dpm_crew *c = calloc(1, sizeof *c);
  if (!c) return dpm_errf(err, DPM_NOMEM, "crew: out of memory");
  c->n = n;
  c->core0 = cores ? cores[0] : -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->go, NULL);
  pthread_cond_init(&c->done, NULL);
  pthread_cond_init(&c->turn, NULL);
  if (!(c->w = calloc((size_t)n, sizeof *c->w))) {
    dpm_crew_destroy(c);
    return dpm_errf(err, DPM_NOMEM, "crew: out of memory");
  }
  for (int r = 1; r < n; r++, c->threads++) {
    c->w[r] = (crew_worker){.c = c, .rank = r, .core = cores ? cores[r] : -1};
    if (pthread_create(&c->w[r].thread, NULL, worker, &c->w[r])) {
      dpm_crew_destroy(c);
      return dpm_errf(err, DPM_NOMEM, "crew: cannot start the worker of rank %d", r);
    }
  }
  *out = c;
  return DPM_OK;
}

void dpm_crew_destroy(dpm_crew *c) {
  if (!c) return;
  if (c->threads) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    for (int r = 1; r <= c->threads; r++) pthread_join(c->w[r].thread, NULL);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->go);
  pthread_cond_destroy(&c->done);
  pthread_cond_destroy(&c->turn);
  free(c->w);
  free(c);
}
