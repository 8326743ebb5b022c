/* Spin briefly before blocking: waiting threads of one step (replicas,
 * collectives) usually wait microseconds, less than a futex wake-up costs
 * in a VM. Yields every 64 checks so a runnable thread (the reader) is not
 * starved. Thread-safe; pure waiting, no side effects. */
#ifndef DPM_COMM_SPIN_H
#define DPM_COMM_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* Step i (from 1) of a bounded spin: a pause, and every 64th step a yield
 * of the CPU and a look at the clock. Returns 0 once more than ns
 * nanoseconds have passed since the first look (*start zeroed by the
 * caller), else 1. */
static inline int dpm_spin_step(unsigned i, struct timespec *start, long ns) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
  if (i % 64) return 1;
  sched_yield();
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!start->tv_sec && !start->tv_nsec) {
    *start = now;
    return 1;
  }
  long s = now.tv_sec - start->tv_sec, n = now.tv_nsec - start->tv_nsec;
  return s * 1000000000L + n <= ns;
}

/* Spin while *v == mine, for at most ns nanoseconds. Returns whether *v
 * changed (the caller blocks on its condvar otherwise). */
static inline int dpm_spin_while(const atomic_ulong *v, unsigned long mine, long ns) {
  struct timespec start = {0};
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(v, memory_order_acquire) != mine) return 1;
    if (!dpm_spin_step(i, &start, ns)) return 0;
  }
}

/* Spin until *v >= want, without bound: for work already running on a
 * peer's CPU (yielding in case that peer was preempted by a thread of
 * this one's). */
static inline void dpm_spin_until(const atomic_ulong *v, unsigned long want) {
  struct timespec start = {0};
  for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) < want; i++)
    dpm_spin_step(i, &start, 0);
}

#endif
