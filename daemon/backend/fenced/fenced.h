/* Test hooks of the fenced backend (backend/fenced/fenced.c; test builds
 * only, devices fenced:N). Any thread. */
#ifndef DPM_BACKEND_FENCED_H
#define DPM_BACKEND_FENCED_H

/* The next capture_begin on fenced:index fails (as a CUDA capture that
 * cannot begin). */
void dpm_fenced_fail_next_capture(int index);
/* Forgets fenced:index's sticky failure, so that a test that provoked one
 * leaves the device usable for the next. */
void dpm_fenced_clear_failure(int index);

#endif
