/* Secrets (secret.h): getrandom(2) and a constant-time comparison. */
#include "server/fleet/secret.h"

#include <errno.h>
#include <sys/random.h>

dpm_status dpmd_secret_draw(void *buf, size_t n, const char *what, dpm_err *err) {
  unsigned char *p = buf;
  for (size_t got = 0; got < n;) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return dpm_errf(err, DPM_IO, "no randomness for %s", what);
    got += (size_t)r;
  }
  return DPM_OK;
}

int dpmd_secret_equal(const void *want, size_t n, const void *got, size_t m) {
  const unsigned char *w = want, *g = got;
  unsigned char diff = (unsigned char)(n != m);
  for (size_t i = 0; i < n; i++) /* every byte of want, whatever got holds */
    diff |= (unsigned char)(w[i] ^ (i < m ? g[i] : 0));
  return diff == 0;
}
