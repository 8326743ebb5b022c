/* A model spec checked once and carried typed: the protobuf spec together
 * with what its one check found, its hash (dpm_spec_hash) and its devices
 * parsed (common/device.h). A stage that takes a dpm_checked_spec takes a
 * spec that passed dpm_spec_validate; it neither validates, hashes nor
 * parses device names again, and no text or unchecked protobuf can be
 * passed in its place (the type is opaque: dpm_spec_check is the only way
 * to make one).
 *
 * Where a spec is checked: where its bytes enter a process. dpmctl checks
 * the YAML it reads (common/spec.h); dpmd checks every spec it receives
 * (submit, join) and every spec.pb it restores, and dpm-train the file it
 * reads (dpm_spec_load_checked); from there the checked value goes down to
 * the model, its devices' crew and the trainer (train/trainer.h,
 * dpm_trainer_create_checked).
 *
 * Ownership: a checked spec owns its protobuf spec (freed with it), or
 * borrows one (dpm_spec_check_borrowed) that must outlive it. The spec is
 * immutable while checked. Errors as dpm_spec_validate's (validate.h),
 * DPM_NOMEM. Threads: a checked spec is read-only: any thread, several at
 * once. */
#ifndef DPM_COMMON_CHECKED_SPEC_H
#define DPM_COMMON_CHECKED_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/device.h"
#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

typedef struct dpm_checked_spec dpm_checked_spec;

/* Validates spec (validate.h) and hashes it, once. parsed: its
 * parallel.devices as the caller parsed them already (dpmd's device check,
 * which refuses bad names with its own messages), not parsed again; NULL:
 * parsed here. On success *out owns spec; on failure *out is NULL and spec
 * stays the caller's. */
dpm_status dpm_spec_check(Dpm__ModelSpec *spec, const dpm_device *parsed,
                          dpm_checked_spec **out, dpm_err *err);
/* The same for a spec the caller keeps: *out borrows it. */
dpm_status dpm_spec_check_borrowed(const Dpm__ModelSpec *spec, dpm_checked_spec **out,
                                   dpm_err *err);
/* Frees s and the spec it owns; NULL is fine. */
void dpm_checked_spec_free(dpm_checked_spec *s);

const Dpm__ModelSpec *dpm_checked_spec_pb(const dpm_checked_spec *s);
/* dpm_spec_hash of the spec, taken at the check. */
uint64_t dpm_checked_spec_hash(const dpm_checked_spec *s);
/* parallel.devices parsed, *n of them (0 and NULL when the spec names none). */
const dpm_device *dpm_checked_spec_devices(const dpm_checked_spec *s, size_t *n);

#endif
