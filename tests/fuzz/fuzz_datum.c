/* Fuzz target: the Caffe Datum parser (io/datum.h) on arbitrary bytes as one
 * LMDB record's value.
 *
 * Invariants: a parsed record's data field lies inside it, and writing the
 * parsed fields back (dpm_datum_write) and parsing that gives the same
 * fields; a refused record's message starts "not a Datum". */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/datum.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dpm_datum d, e;
  dpm_err err = {0};
  if (dpm_datum_parse(data, size, &d, &err)) {
    FUZZ_CHECK(!strncmp(err.msg, "not a Datum", 11));
    return 0;
  }
  FUZZ_CHECK(d.data_off <= size && d.data_len <= size - d.data_off);
  FUZZ_CHECK(d.has_data || (d.data_off == 0 && d.data_len == 0));
  fuzz_touch(data + d.data_off, d.data_len);
  FUZZ_CHECK(d.channels >= INT32_MIN && d.channels <= INT32_MAX && d.label >= INT32_MIN &&
             d.label <= INT32_MAX);
  /* dims are written only when positive: compare those */
  size_t cap = d.data_len + 64;
  uint8_t *out = malloc(cap);
  FUZZ_CHECK(out);
  size_t n = dpm_datum_write(out, cap, (int)d.channels, (int)d.height, (int)d.width,
                             data + d.data_off, d.data_len, (int32_t)d.label, d.encoded);
  FUZZ_CHECK(n > 0 && n <= d.data_len + 40);
  FUZZ_CHECK(dpm_datum_parse(out, n, &e, &err) == DPM_OK);
  FUZZ_CHECK(e.has_data && e.data_len == d.data_len &&
             !memcmp(out + e.data_off, data + d.data_off, d.data_len));
  FUZZ_CHECK(e.label == d.label && e.encoded == d.encoded);
  FUZZ_CHECK(e.channels == (d.channels > 0 ? d.channels : 0));
  FUZZ_CHECK(e.height == (d.height > 0 ? d.height : 0));
  FUZZ_CHECK(e.width == (d.width > 0 ? d.width : 0));
  free(out);
  return 0;
}
