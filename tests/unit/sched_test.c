/* dpmd's scheduler (server/sched.h) on its own, with turns whose costs the
 * test reports: priorities hold lower models back and interrupt their
 * turns; equal priorities share time by weight whatever a step costs;
 * spill is asked of a resident model only; models on other devices never
 * wait; memory is admitted, queued in priority order and refused with the
 * bytes named. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "server/sched.h"
#include "test.h"

static const char *const both[] = {"cpu:0", "cpu:1"}, *const zero[] = {"cpu:0"},
                         *const one[] = {"cpu:1"};

typedef struct {
  atomic_int interrupts, wakes;
} hooks_log;

static void on_interrupt(void *arg) {
  atomic_fetch_add(&((hooks_log *)arg)->interrupts, 1);
}
static void on_wake(void *arg) { atomic_fetch_add(&((hooks_log *)arg)->wakes, 1); }

static dpmd_sched_entry *join(dpmd_sched *s, const char *name, const char *const *devs,
                              size_t n, int priority, double weight, hooks_log *log) {
  dpmd_schedule sc = {.priority = priority, .weight = weight};
  dpmd_sched_hooks h = {.interrupt = on_interrupt, .wake = on_wake, .arg = log};
  return dpmd_sched_join(s, name, devs, n, &sc, &h);
}

static void sleep_ms(int ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }

/* ---- priorities ---------------------------------------------------------- */

typedef struct {
  dpmd_sched_entry *e;
  atomic_int got; /* 0 waiting; else the dpmd_turn + 1 */
} waiter;

static void *acquire_thread(void *arg) {
  waiter *w = arg;
  atomic_store(&w->got, (int)dpmd_sched_acquire(w->e, 1) + 1);
  return NULL;
}

TEST(sched_higher_priority_holds_lower_back_and_interrupts_its_turn) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 0, &s, &err), DPM_OK);
  hooks_log lo_log = {0}, hi_log = {0};
  dpmd_sched_entry *lo = join(s, "lo", both, 2, 0, 1, &lo_log);
  dpmd_sched_entry *hi = join(s, "hi", zero, 1, 5, 1, &hi_log);
  dpmd_sched_want(lo, 1);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_GRANTED);
  dpmd_sched_want(hi, 1); /* shares cpu:0: the running lower turn is interrupted */
  CHECK_INT(atomic_load(&lo_log.interrupts), 1);
  dpmd_sched_done(lo, 0.01);
  dpmd_sched_view v;
  dpmd_sched_view_of(lo, &v);
  CHECK_INT(v.state, DPMD_SCHED_PREEMPTED);
  CHECK(!strcmp(v.by, "hi"));
  CHECK(!strcmp(v.group, "cpu:0,cpu:1"));
  /* told once, then it waits while hi wants its devices */
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_PREEMPTED);
  waiter w = {.e = lo};
  pthread_t th;
  CHECK_INT(pthread_create(&th, NULL, acquire_thread, &w), 0);
  for (int i = 0; i < 5; i++) {
    CHECK_INT(dpmd_sched_acquire(hi, 1), DPMD_TURN_GRANTED);
    dpmd_sched_done(hi, 0.01);
  }
  sleep_ms(20);
  CHECK_INT(atomic_load(&w.got), 0);
  dpmd_sched_want(hi, 0); /* idle: the lower one runs */
  pthread_join(th, NULL);
  CHECK_INT(atomic_load(&w.got), DPMD_TURN_GRANTED + 1);
  dpmd_sched_done(lo, 0.01);
  /* a kick ends a wait at once, for a job */
  dpmd_sched_want(hi, 1);
  dpmd_sched_kick(lo);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_KICKED);
  dpmd_sched_leave(hi);
  dpmd_sched_leave(lo);
  dpmd_sched_free(s);
}

TEST(sched_spill_is_asked_of_a_resident_model_only) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 0, &s, &err), DPM_OK);
  hooks_log log = {0};
  dpmd_sched_entry *lo = join(s, "lo", both, 2, 0, 1, &log);
  dpmd_sched_entry *hi = join(s, "hi", both, 2, 1, 1, &log);
  dpmd_schedule sc = dpmd_sched_schedule(lo);
  sc.spill = 1;
  dpmd_sched_set(lo, &sc);
  dpmd_sched_want(lo, 1);
  dpmd_sched_want(hi, 1);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_SPILL);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_SPILL); /* until it spills */
  CHECK_INT(dpmd_sched_acquire(lo, 0), DPMD_TURN_PREEMPTED);
  /* keep: never asked to spill */
  sc.spill = 0;
  dpmd_sched_set(lo, &sc);
  dpmd_sched_kick(lo);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_KICKED);
  dpmd_sched_want(hi, 0);
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(lo, 0);
  dpmd_sched_leave(hi);
  dpmd_sched_leave(lo);
  dpmd_sched_free(s);
}

TEST(sched_models_on_other_devices_never_wait) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 0, &s, &err), DPM_OK);
  hooks_log log = {0};
  dpmd_sched_entry *a = join(s, "a", zero, 1, 0, 1, &log);
  dpmd_sched_entry *b = join(s, "b", one, 1, 9, 1, &log);
  dpmd_sched_want(a, 1);
  dpmd_sched_want(b, 1);
  CHECK_INT(dpmd_sched_acquire(b, 1), DPMD_TURN_GRANTED);
  CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED); /* both at once */
  dpmd_sched_done(a, 1);
  dpmd_sched_done(b, 1);
  CHECK_INT(atomic_load(&log.interrupts), 0);
  dpmd_sched_leave(a);
  dpmd_sched_leave(b);
  dpmd_sched_free(s);
}

/* ---- shares of time ----------------------------------------------------- */

typedef struct {
  dpmd_sched_entry *e;
  double cost;           /* seconds each turn reports */
  double ran;            /* seconds reported (this thread's; read after the join) */
  atomic_long *total_us; /* both threads' */
  long stop_us;
} turner;

/* Turns until both threads together reported stop_us; then it stops
 * wanting, which lets the other thread's last turn through. */
static void *turn_thread(void *arg) {
  turner *t = arg;
  while (atomic_load(t->total_us) < t->stop_us) {
    if (dpmd_sched_acquire(t->e, 1) != DPMD_TURN_GRANTED) continue;
    dpmd_sched_done(t->e, t->cost);
    t->ran += t->cost;
    atomic_fetch_add(t->total_us, (long)(t->cost * 1e6));
  }
  dpmd_sched_want(t->e, 0);
  return NULL;
}

/* Two models, weights wa:wb, turns of costa and costb seconds (virtual: a
 * turn takes no time): the first's share of the reported time once both
 * reported `total` seconds. */
static double share_of(double wa, double costa, double wb, double costb, double total) {
  dpm_err err = {0};
  dpmd_sched *s;
  if (dpmd_sched_new(0, 0, &s, &err)) return -1;
  hooks_log log = {0};
  atomic_long sum = 0;
  turner a = {join(s, "a", both, 2, 0, wa, &log), costa, 0, &sum, (long)(total * 1e6)},
         b = {join(s, "b", both, 2, 0, wb, &log), costb, 0, &sum, (long)(total * 1e6)};
  dpmd_sched_want(a.e, 1);
  dpmd_sched_want(b.e, 1);
  pthread_t ta, tb;
  pthread_create(&ta, NULL, turn_thread, &a);
  pthread_create(&tb, NULL, turn_thread, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  double share = a.ran / (a.ran + b.ran);
  dpmd_sched_leave(a.e);
  dpmd_sched_leave(b.e);
  dpmd_sched_free(s);
  return share;
}

/* The share is off by at most one turn's cost of the total either way (the
 * last turn, and the tie at the start): the tolerance is two of the
 * costlier turn's. */
#define CHECK_SHARE(wa, ca, wb, cb, want)                                                \
  CHECK_NEAR(share_of(wa, ca, wb, cb, 200), want, 2 * ((ca) > (cb) ? (ca) : (cb)) / 200)

TEST(sched_equal_weights_share_time_not_steps) {
  CHECK_SHARE(1, 0.001, 1, 0.1, 0.5); /* turns 100x apart in cost: half the time each */
  CHECK_SHARE(1, 0.05, 1, 0.05, 0.5);
}

TEST(sched_weights_three_to_one_give_three_quarters) {
  CHECK_SHARE(3, 0.05, 1, 0.05, 0.75);
  CHECK_SHARE(3, 0.002, 1, 0.08, 0.75);
}

TEST(sched_a_model_that_starts_wanting_gets_no_credit_for_idle_time) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 0, &s, &err), DPM_OK);
  hooks_log log = {0};
  dpmd_sched_entry *a = join(s, "a", both, 2, 0, 1, &log);
  dpmd_sched_entry *b = join(s, "b", both, 2, 0, 1, &log);
  dpmd_sched_want(a, 1);
  for (int i = 0; i < 10; i++) { /* a runs 10 s alone */
    CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED);
    dpmd_sched_done(a, 1);
  }
  dpmd_sched_want(b, 1); /* b joins at a's virtual time: they alternate */
  CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED); /* a came first (tie) */
  dpmd_sched_done(a, 1);
  CHECK_INT(dpmd_sched_acquire(b, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(b, 1);
  CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(a, 1);
  /* both idle; c, idle all along, starts alone: it joins at the most an
   * equal has (a's 12), not at 0 */
  dpmd_sched_want(a, 0);
  dpmd_sched_want(b, 0);
  hooks_log lc = {0};
  dpmd_sched_entry *c = join(s, "c", both, 2, 0, 1, &lc);
  dpmd_sched_want(c, 1);
  CHECK_INT(dpmd_sched_acquire(c, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(c, 1); /* c 13 */
  dpmd_sched_want(a, 1); /* a, at 12, joins at c's 13: they alternate */
  CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED); /* tie: a joined first */
  dpmd_sched_done(a, 1);                                  /* a 14 */
  CHECK_INT(dpmd_sched_acquire(c, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(c, 1); /* c 14 */
  CHECK_INT(dpmd_sched_acquire(a, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(a, 1);
  dpmd_sched_leave(c);
  dpmd_sched_leave(a);
  dpmd_sched_leave(b);
  dpmd_sched_free(s);
}

/* ---- memory -------------------------------------------------------------- */

TEST(sched_admits_what_fits_queues_the_rest_in_priority_order) {
  dpm_err err = {0};
  dpmd_sched *s;
  /* 100 bytes a device: two models of 40 fit, a third waits */
  CHECK_INT(dpmd_sched_new(100, 0, &s, &err), DPM_OK);
  hooks_log la = {0}, lb = {0}, lc = {0}, ld = {0};
  dpmd_sched_entry *a = join(s, "a", both, 2, 0, 1, &la);
  dpmd_sched_entry *b = join(s, "b", both, 2, 0, 1, &lb);
  dpmd_sched_entry *c = join(s, "c", both, 2, 0, 1, &lc);
  dpmd_sched_entry *d = join(s, "d", both, 2, 2, 1, &ld);
  CHECK_INT(dpmd_sched_admit(a, 80, 40, 1, &err), DPMD_ADMIT_OK);
  CHECK_INT(dpmd_sched_admit(b, 80, 40, 1, &err), DPMD_ADMIT_OK);
  CHECK_INT(dpmd_sched_admit(c, 80, 40, 0, &err), DPMD_ADMIT_REFUSED); /* --no-queue */
  CHECK_HAS(err.msg, "c needs 80 bytes (40 on each of its devices)");
  CHECK_HAS(err.msg, "20 of device_memory_bytes 100 are free on cpu:0");
  CHECK_INT(dpmd_sched_admit(c, 80, 40, 1, &err), DPMD_ADMIT_QUEUED);
  CHECK_INT(dpmd_sched_admit(d, 80, 40, 1, &err), DPMD_ADMIT_QUEUED);
  dpmd_sched_view v;
  dpmd_sched_view_of(c, &v); /* d's priority puts it first */
  CHECK_INT(v.state, DPMD_SCHED_QUEUED);
  CHECK_INT(v.position, 2);
  dpmd_sched_leave(a); /* room for one: d, woken; c stays */
  CHECK_INT(atomic_load(&ld.wakes), 1);
  CHECK_INT(atomic_load(&lc.wakes), 0);
  CHECK_INT(dpmd_sched_admit(d, 80, 40, 1, &err), DPMD_ADMIT_OK);
  dpmd_sched_view_of(c, &v);
  CHECK_INT(v.position, 1);
  dpmd_sched_release_memory(b); /* a spill: c comes in */
  CHECK_INT(atomic_load(&lc.wakes), 1);
  CHECK_INT(dpmd_sched_admit(c, 80, 40, 1, &err), DPMD_ADMIT_OK);
  /* bigger than a device can ever hold, or than its own bound: refused */
  CHECK_INT(dpmd_sched_admit(b, 500, 250, 1, &err), DPMD_ADMIT_REFUSED);
  CHECK_HAS(err.msg,
            "250 bytes on each of its devices, more than device_memory_bytes 100");
  dpmd_schedule sc = dpmd_sched_schedule(b);
  sc.max_memory = 50;
  dpmd_sched_set(b, &sc);
  CHECK_INT(dpmd_sched_admit(b, 60, 10, 1, &err), DPMD_ADMIT_REFUSED);
  CHECK_HAS(err.msg, "b needs 60 bytes, more than its max_memory 50");
  dpmd_sched_leave(b);
  dpmd_sched_leave(c);
  dpmd_sched_leave(d);
  dpmd_sched_free(s);
}

TEST(sched_total_bound_holds_across_models_and_devices) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 1000, &s, &err), DPM_OK);
  hooks_log log = {0};
  dpmd_sched_entry *a = join(s, "a", zero, 1, 0, 1, &log);
  dpmd_sched_entry *b = join(s, "b", one, 1, 0, 1, &log);
  CHECK_INT(dpmd_sched_admit(a, 600, 600, 1, &err), DPMD_ADMIT_OK);
  CHECK_INT(dpmd_sched_admit(b, 600, 600, 0, &err), DPMD_ADMIT_REFUSED);
  CHECK_HAS(err.msg, "600 of max_total_bytes 1000 are held");
  CHECK_INT(dpmd_sched_admit(b, 400, 400, 0, &err), DPMD_ADMIT_OK);
  CHECK_INT(dpmd_sched_admit(a, 2000, 10, 1, &err), DPMD_ADMIT_REFUSED);
  CHECK_HAS(err.msg, "more than this dpmd's max_total_bytes 1000");
  dpmd_sched_leave(a);
  dpmd_sched_leave(b);
  dpmd_sched_free(s);
}

TEST(sched_a_gang_runs_beside_its_equals_holds_lower_back_and_yields_to_higher) {
  dpm_err err = {0};
  dpmd_sched *s;
  CHECK_INT(dpmd_sched_new(0, 0, &s, &err), DPM_OK);
  hooks_log gl = {0}, ol = {0};
  dpmd_sched_entry *g = join(s, "gang", zero, 1, 0, 1, &gl);
  dpmd_sched_entry *eq = join(s, "eq", zero, 1, 0, 1, &ol);
  dpmd_sched_entry *lo = join(s, "lo", zero, 1, -1, 1, &ol);
  dpmd_sched_entry *hi = join(s, "hi", zero, 1, 5, 1, &ol);
  CHECK_INT(dpmd_sched_gang_run(g), 0); /* not training: no run */
  dpmd_sched_want(g, 1);
  CHECK_INT(dpmd_sched_gang_run(g), 1);
  dpmd_sched_want(eq, 1); /* an equal takes its turns beside the running gang */
  CHECK_INT(dpmd_sched_acquire(eq, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(eq, 0.01);
  dpmd_sched_want(eq, 0);
  dpmd_sched_want(lo, 1); /* a lower one waits while the gang trains */
  CHECK_INT(dpmd_sched_acquire(lo, 1), DPMD_TURN_PREEMPTED);
  waiter w = {.e = lo};
  pthread_t th;
  CHECK_INT(pthread_create(&th, NULL, acquire_thread, &w), 0);
  sleep_ms(20);
  CHECK_INT(atomic_load(&w.got), 0);
  dpmd_sched_done(g, 0.02);
  dpmd_sched_want(g, 0);
  pthread_join(th, NULL);
  CHECK_INT(atomic_load(&w.got), DPMD_TURN_GRANTED + 1);
  dpmd_sched_done(lo, 0.01);
  dpmd_sched_want(lo, 0);
  /* a higher one that wants the device: the gang's chunk is interrupted,
   * and it may not run (its job yields) until the higher one is idle */
  dpmd_sched_want(g, 1);
  CHECK_INT(dpmd_sched_gang_run(g), 1);
  dpmd_sched_want(hi, 1);
  CHECK_INT(atomic_load(&gl.interrupts), 1);
  dpmd_sched_done(g, 0.01);
  CHECK_INT(dpmd_sched_gang_run(g), 0);
  dpmd_sched_view v;
  dpmd_sched_view_of(g, &v);
  CHECK_INT(v.state, DPMD_SCHED_PREEMPTED);
  CHECK(!strcmp(v.by, "hi"));
  CHECK_INT(dpmd_sched_acquire(hi, 1), DPMD_TURN_GRANTED);
  dpmd_sched_done(hi, 0.01);
  dpmd_sched_want(hi, 0);
  CHECK_INT(dpmd_sched_gang_run(g), 1);
  dpmd_sched_done(g, 0.01);
  /* a nap ends at once when kicked, else after its time */
  dpmd_sched_kick(g);
  double t0 = dpm_mono_s();
  dpmd_sched_nap(g, 5);
  CHECK(dpm_mono_s() - t0 < 1);
  dpmd_sched_nap(g, 0.05);
  CHECK(dpm_mono_s() - t0 >= 0.05);
  dpmd_sched_leave(g);
  dpmd_sched_leave(eq);
  dpmd_sched_leave(lo);
  dpmd_sched_leave(hi);
  dpmd_sched_free(s);
}
