/* Rate-limited repeats (ratelimit.h): a window per limiter. */
#include "server/ratelimit.h"

int dpmd_ratelimit_allow(dpmd_ratelimit *r, double now_s, uint64_t *held) {
  if (r->last_s >= 0 && now_s - r->last_s < r->interval_s) {
    r->held++;
    return 0;
  }
  *held = r->held;
  r->held = 0;
  r->last_s = now_s;
  return 1;
}

uint64_t dpmd_ratelimit_end(dpmd_ratelimit *r) {
  uint64_t held = r->held;
  r->held = 0;
  r->last_s = -1;
  return held;
}
