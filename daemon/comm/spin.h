/* Spin briefly before blocking: waiting threads of one step (replicas,
 * collectives) usually wait microseconds, less than a futex wake-up costs
 * in a VM. Yields every 64 checks so a runnable thread (the reader) is not
 * starved. Thread-safe; pure waiting, no side effects. */
#ifndef DPM_COMM_SPIN_H
#define DPM_COMM_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* Spin while *v == mine, for at most ns nanoseconds. Returns whether *v
 * changed (the caller blocks on its condvar otherwise). */
static inline int dpm_spin_while(const atomic_ulong *v, unsigned long mine, long ns) {
  struct timespec start = {0};
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(v, memory_order_acquire) != mine) return 1;
    if (i % 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    sched_yield();
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!start.tv_sec && !start.tv_nsec)
      start = now;
    else if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) >
             ns)
      return 0;
  }
}

#endif
