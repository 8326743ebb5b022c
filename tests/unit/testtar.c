/* Tar archives built in memory for tests (testtar.h). */
#include "testtar.h"

#include <stdlib.h>
#include <string.h>

#include "io/tar.h"

void test_tar_put(test_tar *t, const void *p, size_t n) {
  if (t->n + n > t->cap) {
    t->cap = (t->n + n) * 2;
    if (!(t->b = realloc(t->b, t->cap))) abort();
  }
  memcpy(t->b + t->n, p, n);
  t->n += n;
}

void test_tar_member(test_tar *t, const char *name, const void *data, size_t len) {
  uint8_t h[DPM_TAR_BLOCK], zero[DPM_TAR_BLOCK] = {0};
  if (dpm_tar_header(h, name, len, 1700000000)) abort();
  test_tar_put(t, h, sizeof h);
  test_tar_put(t, data, len);
  test_tar_put(t, zero, dpm_tar_pad(len));
}

void test_tar_end(test_tar *t) {
  uint8_t zero[DPM_TAR_END] = {0};
  test_tar_put(t, zero, sizeof zero);
}
