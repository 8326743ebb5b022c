/* The Datum wire-format parser (io/datum.h). */
#include "io/datum.h"

#include <string.h>

/* A varint at p[*i], below n; -1 when it runs off the end or is longer
 * than 10 bytes. */
static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*i >= n) return -1;
    uint8_t b = p[(*i)++];
    if (shift == 63 && b > 1) return -1;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

static dpm_status bad(dpm_err *err, const char *why) {
  return dpm_errf(err, DPM_CORRUPT, "not a Datum: %s", why);
}

dpm_status dpm_datum_parse(const uint8_t *p, size_t n, dpm_datum *out, dpm_err *err) {
  memset(out, 0, sizeof *out);
  size_t i = 0;
  while (i < n) {
    uint64_t tag, v;
    if (varint(p, n, &i, &tag)) return bad(err, "a truncated field tag");
    uint64_t field = tag >> 3;
    unsigned wt = (unsigned)(tag & 7);
    if (field == 0 || field > 536870911u) return bad(err, "a field number out of range");
    switch (wt) {
    case 0: /* varint */
      if (varint(p, n, &i, &v)) return bad(err, "a truncated varint");
      if (field == 4 || field == 6) return bad(err, "a varint where bytes belong");
      /* int32 fields: a negative value comes as a 10-byte varint; the low
       * 32 bits are its value, as protobuf reads it */
      if (field == 1) out->channels = (int32_t)v;
      if (field == 2) out->height = (int32_t)v;
      if (field == 3) out->width = (int32_t)v;
      if (field == 5) out->label = (int32_t)v;
      if (field == 7) out->encoded = v != 0;
      break;
    case 1: /* 64-bit */
      if (field <= 7) return bad(err, "a fixed64 where another type belongs");
      if (n - i < 8) return bad(err, "a truncated fixed64");
      i += 8;
      break;
    case 2: /* length-delimited */
      if (varint(p, n, &i, &v)) return bad(err, "a truncated length");
      if (v > n - i) return bad(err, "a length past the end of the record");
      if (field == 4) {
        out->has_data = 1;
        out->data_off = i;
        out->data_len = (size_t)v;
      } else if (field == 6) {
        if (v % 4) return bad(err, "packed float_data not a multiple of 4 bytes");
        out->has_float_data = 1;
      } else if (field <= 7) {
        return bad(err, "bytes where a scalar belongs");
      }
      i += (size_t)v;
      break;
    case 5: /* 32-bit */
      if (field != 6 && field <= 7) return bad(err, "a fixed32 where another type belongs");
      if (n - i < 4) return bad(err, "a truncated fixed32");
      if (field == 6) out->has_float_data = 1;
      i += 4;
      break;
    default:
      return bad(err, "a group or an unknown wire type");
    }
  }
  return DPM_OK;
}
