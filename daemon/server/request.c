/* Decoding requests within bounds (request.h). */
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

#include "common/pbcheck.h"

/* protobuf-c's allocator, counting what one unpack takes. Frees are plain
 * free(), so the message can be freed with the default allocator later. */
typedef struct {
  size_t used, limit;
  int refused; /* an allocation was refused: the bound, not the bytes, failed */
} budget;

static void *counted_alloc(void *data, size_t size) {
  budget *b = data;
  size_t cost = size + 32; /* malloc's own overhead, roughly */
  if (cost < size || cost > b->limit - b->used) {
    b->refused = 1;
    return NULL;
  }
  b->used += cost;
  return malloc(size);
}

static void plain_free(void *data, void *p) {
  (void)data;
  free(p);
}

dpm_status dpmd_request_decode(const uint8_t *buf, size_t len, size_t max_bytes,
                               Dpm__Request **out, dpm_err *err) {
  *out = NULL;
  if (len > max_bytes)
    return dpm_errf(err, DPM_DENIED, "request of %zu bytes; max_message_bytes is %zu",
                    len, max_bytes);
  char field[160];
  if (dpm_pb_check_strings(&dpm__request__descriptor, buf, len, field, sizeof field))
    return dpm_errf(err, DPM_INVALID, "request field '%s' holds a NUL byte", field);
  budget b = {.limit = DPMD_DECODE_SLACK + DPMD_DECODE_FACTOR * len};
  ProtobufCAllocator a = {
      .alloc = counted_alloc, .free = plain_free, .allocator_data = &b};
  *out = dpm__request__unpack(&a, len, buf);
  if (*out) return DPM_OK;
  if (b.refused)
    return dpm_errf(err, DPM_DENIED,
                    "request of %zu bytes would take more than %zu bytes "
                    "decoded",
                    len, b.limit);
  return dpm_errf(err, DPM_CORRUPT, "not a dpm request (%zu bytes)", len);
}
