/* A client's bytes -> a Request, then the checks of its arguments that need
 * no model: both before a request is dispatched.
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

#define DPMD_MAX_ITERS (1ull << 40) /* train --iters */

struct dpmd_paths;
/* The arguments of rq that can be judged without a model: train's iters,
 * extract's format, inputs and outputs, the form of client paths
 * (dpmd_paths_check; they are confined when used), and for a submit the
 * overrides, which it moves into the spec (name, devices, checkpoint policy;
 * cpu:0 when none), then the model name. The spec itself is validated once
 * the daemon's devices have been checked (commands.c). DPM_INVALID,
 * DPM_UNSUPPORTED, DPM_DENIED or DPM_SPEC with a message to send back. */
dpm_status dpmd_request_check(const struct dpmd_paths *paths, Dpm__Request *rq,
                              dpm_err *err);

#endif
