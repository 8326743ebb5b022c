/* NUL bytes in protobuf string fields (pbcheck.h). */
#include "common/pbcheck.h"

#include <stdio.h>
#include <string.h>

/* Reads a varint at *p (< end); returns 0 on success. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

/* 1: a NUL found (why filled), 0: clean, -1: cannot walk. */
static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                const uint8_t *end, int depth, char *why, size_t cap) {
  if (depth > DPM_PB_MAX_DEPTH) return -1;
  while (p < end) {
    uint64_t key, n;
    if (varint(&p, end, &key)) return -1;
    switch (key & 7) {
    case 0:
      if (varint(&p, end, &n)) return -1;
      continue;
    case 1:
      if (end - p < 8) return -1;
      p += 8;
      continue;
    case 5:
      if (end - p < 4) return -1;
      p += 4;
      continue;
    case 2:
      break;
    default:
      return -1;
    }
    if (varint(&p, end, &n) || n > (uint64_t)(end - p)) return -1;
    const ProtobufCFieldDescriptor *f =
        key >> 3 <= UINT32_MAX
            ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
            : NULL;
    if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, (size_t)n)) {
      snprintf(why, cap, "%s", f->name);
      return 1;
    }
    if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
      int r = walk(f->descriptor, p, p + n, depth + 1, why, cap);
      if (r == 1) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", why);
        snprintf(why, cap, "%s.%s", f->name, inner);
      }
      if (r) return r;
    }
    p += n;
  }
  return 0;
}

int dpm_pb_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                         size_t len, char *why, size_t cap) {
  if (cap) why[0] = 0;
  return walk(desc, data, data + len, 0, why, cap) == 1 ? -1 : 0;
}
