/* Brace ranges in shard lists (common/shards.h). */
#include "common/shards.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"

#define RANGE_MAX_DIGITS 18 /* below 10^18: no overflow in uint64 */

/* Parses n decimal digits at s (1..RANGE_MAX_DIGITS of them). */
static int digits(const char *s, size_t n, uint64_t *v) {
  if (n < 1 || n > RANGE_MAX_DIGITS) return 0;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    x = x * 10 + (uint64_t)(s[i] - '0');
  }
  *v = x;
  return 1;
}

static void free_names(char **a, size_t n) {
  for (size_t i = 0; i < n; i++) free(a[i]);
  free(a);
}

dpm_status dpm_shards_expand(const char *pattern, size_t max, char ***out, size_t *n,
                             dpm_err *err) {
  char shown[96];
  *out = NULL;
  *n = 0;
  const char *open = strchr(pattern, '{'), *close = strchr(pattern, '}');
  if (!open && !close) { /* one name */
    char **a = malloc(sizeof *a);
    if (!a || !(a[0] = strdup(pattern))) {
      free(a);
      return dpm_errf(err, DPM_NOMEM, "shards: out of memory");
    }
    *out = a;
    *n = 1;
    return DPM_OK;
  }
  const char *dots = open ? strstr(open, "..") : NULL;
  uint64_t lo = 0, hi = 0;
  if (!open || !close || close < open || !dots || dots > close || strchr(open + 1, '{') ||
      strchr(close + 1, '}') || !digits(open + 1, (size_t)(dots - open - 1), &lo) ||
      !digits(dots + 2, (size_t)(close - dots - 2), &hi))
    return dpm_errf(err, DPM_INVALID,
                    "shards: %s: a name may hold one range {A..B} of decimal digits",
                    dpm_escape(pattern, shown, sizeof shown));
  if (hi < lo || hi - lo >= max)
    return dpm_errf(err, DPM_INVALID,
                    "shards: %s: the range must run upwards and name at most %zu files",
                    dpm_escape(pattern, shown, sizeof shown), max);
  size_t count = (size_t)(hi - lo + 1), width = (size_t)(dots - open - 1);
  size_t head = (size_t)(open - pattern), tail = strlen(close + 1);
  char **a = calloc(count, sizeof *a);
  if (!a) return dpm_errf(err, DPM_NOMEM, "shards: out of memory");
  for (size_t i = 0; i < count; i++) {
    size_t cap = head + RANGE_MAX_DIGITS + tail + 1;
    if (!(a[i] = malloc(cap))) {
      free_names(a, i);
      return dpm_errf(err, DPM_NOMEM, "shards: out of memory");
    }
    snprintf(a[i], cap, "%.*s%0*llu%s", (int)head, pattern, (int)width,
             (unsigned long long)(lo + i), close + 1);
  }
  *out = a;
  *n = count;
  return DPM_OK;
}
