/* Counts of work a path must do once, for the tests that hold it to that:
 * a spec's validation (dpm_spec_validate, and dpm_spec_check, which
 * validates), its hash (dpm_spec_hash) and a device name's parse
 * (dpm_device_parse). Test builds (DPM_TEST_BUILD: the sanitizer build of
 * the unit tests and of the tests' dpmd) count; other builds count nothing
 * and the counters stay 0.
 *
 * Threads: the counters are atomic; any thread counts and reads. */
#ifndef DPM_COMMON_WORKCOUNT_H
#define DPM_COMMON_WORKCOUNT_H

#include <stdatomic.h>

typedef enum {
  DPM_WORK_SPEC_VALIDATE,
  DPM_WORK_SPEC_HASH,
  DPM_WORK_DEVICE_PARSE,
  DPM_WORK_COUNT
} dpm_work;

extern atomic_ulong dpm_work_done[DPM_WORK_COUNT];

#ifdef DPM_TEST_BUILD
#define DPM_WORK_DONE(k)                                                                 \
  atomic_fetch_add_explicit(&dpm_work_done[k], 1, memory_order_relaxed)
#else
#define DPM_WORK_DONE(k) ((void)0)
#endif

#endif
