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
      if (field != 6 && field <= 7)
        return bad(err, "a fixed32 where another type belongs");
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

/* ---- writing ------------------------------------------------------------------- */

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

size_t dpm_datum_write(uint8_t *out, size_t cap, int channels, int height, int width,
                       const void *data, size_t len, int32_t label, int encoded) {
  uint8_t head[80];
  size_t h = 0;
  const int dims[3] = {channels, height, width};
  for (int f = 0; f < 3; f++)
    if (dims[f] > 0) {
      head[h++] = (uint8_t)((f + 1) << 3);
      h += put_varint(head + h, (uint64_t)dims[f]);
    }
  head[h++] = 4 << 3 | 2;
  h += put_varint(head + h, len);
  uint8_t tail[24];
  size_t t = 0;
  tail[t++] = 5 << 3;
  t += put_varint(tail + t, (uint64_t)(int64_t)label); /* negative: 10 bytes */
  tail[t++] = 7 << 3;
  tail[t++] = encoded ? 1 : 0;
  if (cap < h || cap - h < len || cap - h - len < t) return 0;
  memcpy(out, head, h);
  if (len) memcpy(out + h, data, len);
  memcpy(out + h + len, tail, t);
  return h + len + t;
}
