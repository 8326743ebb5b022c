/* The rate limit of repeated log lines (server/ratelimit.h), on a clock
 * the test moves. */
#include <stdint.h>

#include "server/ratelimit.h"
#include "test.h"

TEST(ratelimit_first_then_one_per_interval_with_the_count) {
  dpmd_ratelimit r = DPMD_RATELIMIT_INIT;
  uint64_t held = 99;
  int ok = r.interval_s == DPMD_RATELIMIT_S;
  r.interval_s = 10;
  ok &= dpmd_ratelimit_allow(&r, 100, &held) == 1 && held == 0; /* the first */
  int logged = 0;
  for (int i = 1; i <= 1000; i++) /* 1000 more within 9.99 s: none logged */
    logged += dpmd_ratelimit_allow(&r, 100 + i * 0.00999, &held);
  ok &= logged == 0;
  ok &= dpmd_ratelimit_allow(&r, 110, &held) == 1 && held == 1000; /* the count */
  ok &= dpmd_ratelimit_allow(&r, 115, &held) == 0;
  ok &= dpmd_ratelimit_end(&r) == 1; /* the run ended: one held back */
  ok &= dpmd_ratelimit_allow(&r, 116, &held) == 1 && held == 0; /* a new run: at once */
  ok &= dpmd_ratelimit_end(&r) == 0;
  CHECK(ok);
}
