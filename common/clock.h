/* The monotonic clock (CLOCK_MONOTONIC), the one every timeout, deadline,
 * rate and duration in dpm reads; wall time (CLOCK_REALTIME) is only for
 * what a person reads, and stays with the code that shows it.
 *
 * Header-only (static inline): the daemon, the client, the CUDA plugin and
 * the benchmarks take it without linking anything new. No state; safe from
 * any thread. */
#ifndef DPM_COMMON_CLOCK_H
#define DPM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary start (the boot): only differences mean
 * anything. */
static inline int64_t dpm_mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whole milliseconds on the same clock, for timeouts and deadlines. */
static inline int64_t dpm_mono_ms(void) { return dpm_mono_ns() / 1000000; }

/* Seconds on the same clock, with their fraction, for rates and durations. */
static inline double dpm_mono_s(void) { return (double)dpm_mono_ns() / 1e9; }

/* The absolute time ms milliseconds from now on the same clock, for
 * pthread_cond_timedwait on a condition variable set to CLOCK_MONOTONIC
 * (pthread_condattr_setclock). */
static inline struct timespec dpm_mono_deadline(int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

#endif
