/* Caffe's Datum record (BVLC/caffe src/caffe/proto/caffe.proto), as Caffe
 * and Caffe2 store images in an LMDB:
 *   channels = 1, height = 2, width = 3 (int32), data = 4 (bytes),
 *   label = 5 (int32), float_data = 6 (repeated float), encoded = 7 (bool).
 *
 * A small bounded hand parser of the protobuf wire format rather than
 * protobuf-c generated code: it allocates nothing and copies nothing (an
 * ImageNet LMDB holds 1.28 M records read once at index time), it reports
 * where the data bytes lie inside the record, which the index keeps instead
 * of the bytes, and it accepts exactly the wire types the fields have, so
 * there is less to trust. Unknown fields are skipped as protobuf does;
 * groups (wire types 3, 4) and types 6, 7 are refused; a repeated scalar
 * keeps its last value; varints are at most 10 bytes; lengths are checked
 * against what is left.
 *
 * Threads: pure; any thread. Errors: DPM_CORRUPT with a reason, never the
 * record's bytes. */
#ifndef DPM_IO_DATUM_H
#define DPM_IO_DATUM_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

typedef struct dpm_datum {
  int64_t channels, height, width; /* 0 when absent (proto2 default) */
  int64_t label;                   /* 0 when absent */
  int encoded;                     /* 0 when absent */
  int has_data;                    /* field 4 present */
  size_t data_off, data_len;       /* where its bytes lie in the record */
  int has_float_data;              /* field 6 present (any number of floats) */
} dpm_datum;

/* Parses the n bytes at p into *out (zeroed first). */
dpm_status dpm_datum_parse(const uint8_t *p, size_t n, dpm_datum *out, dpm_err *err);
/* Writes a Datum of channels, height, width (each written when > 0), data
 * (len bytes), label and encoded into out (cap bytes); its length, or 0
 * when cap is too small. At most len + 40 bytes. */
size_t dpm_datum_write(uint8_t *out, size_t cap, int channels, int height, int width,
                       const void *data, size_t len, int32_t label, int encoded);

#endif
