/* Secrets dpmd holds: the auth token clients send, the per-job secret a
 * fleet's coordinator hands its shards (fleet.h). Drawn from the kernel's
 * CSPRNG; compared in constant time, so that the time a refusal takes
 * says nothing about how much of a guess was right.
 *
 * Threads: any. */
#ifndef DPMD_SECRET_H
#define DPMD_SECRET_H

#include <stddef.h>

#include "dpm/status.h"

/* Fills buf with n random bytes (getrandom(2)); DPM_IO naming `what` when
 * the kernel gives none. */
dpm_status dpmd_secret_draw(void *buf, size_t n, const char *what, dpm_err *err);
/* Whether got (m bytes; NULL when m is 0) equals want (n bytes), in time
 * that depends on n only. */
int dpmd_secret_equal(const void *want, size_t n, const void *got, size_t m);

#endif
