/* A rate limit for log lines that can repeat (a checkpoint failing at
 * every step on a full disk, a client sending bad tokens in a loop): the
 * first event of a run is logged, then at most one line per interval,
 * which carries how many events were held back since the line before.
 * When the condition clears, the caller asks how many were held back
 * (dpmd_ratelimit_end) to say so once; the next event is logged at once.
 *
 * The limiter is a plain value (embed it; DPMD_RATELIMIT_INIT); the time
 * is the caller's (monotonic seconds), so tests need no clock.
 *
 * Threads: one thread at a time per limiter (its owner's). */
#ifndef DPMD_RATELIMIT_H
#define DPMD_RATELIMIT_H

#include <stdint.h>

#define DPMD_RATELIMIT_S 10.0 /* the interval of dpmd's limited log lines */

typedef struct dpmd_ratelimit {
  double interval_s; /* after the first line, at most one per interval */
  double last_s;     /* when the last line was allowed; < 0: none in this run */
  uint64_t held;     /* events held back since that line */
} dpmd_ratelimit;

#define DPMD_RATELIMIT_INIT                                                              \
  { .interval_s = DPMD_RATELIMIT_S, .last_s = -1 }

/* An event at now_s: 1 when it is to be logged (*held: the events held
 * back since the last line, now cleared, for the line to say), 0 when it
 * is held back (counted). */
int dpmd_ratelimit_allow(dpmd_ratelimit *r, double now_s, uint64_t *held);
/* The run of events ended: the events held back since the last line (now
 * cleared); the next event is logged at once. */
uint64_t dpmd_ratelimit_end(dpmd_ratelimit *r);

#endif
