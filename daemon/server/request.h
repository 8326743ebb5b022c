/* A client's bytes -> a Request, before it is dispatched (the checks of its
 * arguments are the command table's: commands.h).
 *
 * Decoding is bounded in every way a client controls:
 * the message size (max_message_bytes), the memory the unpacked message
 * may take (DPMD_DECODE_FACTOR times its size, plus DPMD_DECODE_SLACK:
 * protobuf-c allocates per field, so a message of many empty fields would
 * otherwise grow tenfold), and strings that would lose bytes in C (a NUL
 * inside a string field is refused, not truncated).
 *
 * Threads: any; no shared state. Ownership: on success *out is the
 * caller's, freed with dpm__request__free_unpacked(rq, NULL). */
#ifndef DPMD_REQUEST_H
#define DPMD_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

#define DPMD_DECODE_FACTOR 8
#define DPMD_DECODE_SLACK (1u << 20)

/* DPM_DENIED: over max_bytes, or the unpacked form over its bound;
 * DPM_INVALID: a string field holds a NUL byte (err names the field);
 * DPM_CORRUPT: not a Request. */
dpm_status dpmd_request_decode(const uint8_t *buf, size_t len, size_t max_bytes,
                               Dpm__Request **out, dpm_err *err);

#endif
