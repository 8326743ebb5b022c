/* Fuzz target: the IDX reader (common/idx.h) on arbitrary bytes, raw or
 * gzip (zlib reads both through the same path), from an in-memory file
 * (fuzz_fs):
 * dpm_idx_peek, then dpm_idx_load, which must agree.
 *
 * Memory: a header may legitimately promise up to DPM_IDX_MAX_BYTES (2 GiB)
 * of data; the reader allocates that much (untouched until data arrives)
 * before it finds the data short. libFuzzer's default -malloc_limit_mb
 * (2048) would report that bounded allocation, so the limit is set just
 * above the bound: an allocation larger than what the reader documents is
 * still a finding. The RSS limit leaves room for ASan's shadow of such a
 * block (1/8 of it) beside the fuzzer's own memory.
 * fuzz-flags: -malloc_limit_mb=2049 -rss_limit_mb=4096 */
#include <string.h>

#include "fuzz.h"
#include "common/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char path[] = "fuzz.idx";
  fuzz_bytes in = {data, size};
  dpm_fs fs = fuzz_fs(&in);
  dpm_idx head, x;
  dpm_err err = {0};
  dpm_status peeked = dpm_idx_peek(&fs, path, 0, &head, &err);
  if (peeked == DPM_OK) {
    FUZZ_CHECK(head.data == NULL && (head.ndim == 1 || head.ndim == 3));
    size_t n = 1;
    for (int i = 0; i < head.ndim; i++) {
      FUZZ_CHECK(head.dim[i] >= 1);
      n *= (size_t)head.dim[i];
    }
    FUZZ_CHECK(n == head.size && n <= (size_t)DPM_IDX_MAX_BYTES);
  } else {
    FUZZ_CHECK(head.ndim == 0 && head.size == 0 && head.data == NULL);
    FUZZ_CHECK(!strncmp(err.msg, path, sizeof path - 1));
  }
  memset(&err, 0, sizeof err);
  dpm_status loaded = dpm_idx_load(&fs, path, 0, &x, &err);
  if (loaded == DPM_OK) {
    FUZZ_CHECK(peeked == DPM_OK && x.ndim == head.ndim && x.size == head.size &&
               !memcmp(x.dim, head.dim, sizeof x.dim));
    FUZZ_CHECK(x.data != NULL);
    fuzz_touch(x.data, x.size);
    /* Asking for the rank the file has gives the same; the other is refused. */
    dpm_idx y;
    FUZZ_CHECK(dpm_idx_peek(&fs, path, x.ndim, &y, &err) == DPM_OK && y.size == x.size);
    FUZZ_CHECK(dpm_idx_peek(&fs, path, x.ndim == 1 ? 3 : 1, &y, &err) == DPM_CORRUPT);
  } else {
    FUZZ_CHECK(x.data == NULL && x.size == 0 && x.ndim == 0);
    if (peeked != DPM_OK) FUZZ_CHECK(loaded == peeked);
  }
  dpm_idx_fini(&x);
  dpm_idx_fini(&x); /* documented as safe on a finalised x */
  return 0;
}
