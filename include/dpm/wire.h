/* dpm_status on the wire: Response.status is the proto enum Status
 * (proto/dpm.proto), whose values are those of DPM_STATUS_MAP, number for
 * number. The bytes are what they were when the field was a uint32 (a varint
 * either way), so older and newer peers read each other.
 *
 * The C list and the proto list are checked against each other at compile
 * time, in every file that includes this header (dpmd's and the client
 * library's among them): a status added to DPM_STATUS_MAP without its
 * STATUS_ value in dpm.proto, or numbered differently, does not compile.
 * (The other way round, a STATUS_ value with no dpm_status, is caught by
 * tests/unit/wire_test.c.) Values cross only through these two functions.
 *
 * A peer built from a newer dpm.proto may answer with a status this build
 * does not know: it reads as DPM_INTERNAL, and the response's message still
 * says what happened.
 *
 * Pure; safe from any thread. (dpm_dtype, which only the daemon knows, has
 * its own pair: daemon/engine/dtype_wire.h.) */
#ifndef DPM_WIRE_H
#define DPM_WIRE_H

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

#ifdef __cplusplus
#define DPM_WIRE_ASSERT_ static_assert
#else
#define DPM_WIRE_ASSERT_ _Static_assert
#endif

#define DPM_WIRE_CHECK_(name, text)                                                      \
  DPM_WIRE_ASSERT_((int)DPM__STATUS__STATUS_##name == (int)DPM_##name,                   \
                   "proto/dpm.proto's Status must hold STATUS_" #name                    \
                   " with the number of DPM_" #name);
DPM_STATUS_MAP(DPM_WIRE_CHECK_)
#undef DPM_WIRE_CHECK_

/* The wire value of s (a status outside the list: STATUS_INTERNAL). */
static inline Dpm__Status dpm_status_to_wire(dpm_status s) {
  return (unsigned)s < DPM_STATUS_COUNT ? (Dpm__Status)(int)s
                                        : DPM__STATUS__STATUS_INTERNAL;
}

/* The status a peer sent; one this build does not know is DPM_INTERNAL. */
static inline dpm_status dpm_status_from_wire(Dpm__Status w) {
  return (unsigned)w < DPM_STATUS_COUNT ? (dpm_status)(int)w : DPM_INTERNAL;
}

#endif
