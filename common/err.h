/* The project's one wording of its commonest failure, so that every module
 * fills a dpm_err (include/dpm/status.h) with it the same way.
 *
 * Header-only (static inline): dpmd, dpm-train, dpmctl and both libraries
 * take it without linking anything new. Pure; safe from any thread. */
#ifndef DPM_COMMON_ERR_H
#define DPM_COMMON_ERR_H

#include "dpm/status.h"

/* err (if non-NULL) set to DPM_NOMEM, "out of memory"; returns DPM_NOMEM. */
static inline dpm_status dpm_nomem(dpm_err *err) {
  return dpm_errf(err, DPM_NOMEM, "out of memory");
}

#endif
