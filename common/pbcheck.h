/* A check of protobuf bytes from a client before they are unpacked:
 * protobuf-c stores a string as a C string, so "a\0/../../evil" would
 * arrive as "a"; what the sender meant and what the daemon sees must not
 * differ. Walks the encoding with the message's descriptor, nested
 * messages included (to a depth of DPM_PB_MAX_DEPTH), without allocating.
 * Pure: any thread. */
#ifndef DPM_COMMON_PBCHECK_H
#define DPM_COMMON_PBCHECK_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#define DPM_PB_MAX_DEPTH 32

/* 0 when no string field of the message holds a NUL byte; -1 when one
 * does, with the field's name (as "spec.forward.input") in why. Encodings
 * it cannot walk (truncated, groups, too deep) are left to the unpacker:
 * 0. */
int dpm_pb_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                         size_t len, char *why, size_t cap);

#endif
