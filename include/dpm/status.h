/* dpm status codes: the project's one list of errors.
 *
 * DPM_STATUS_MAP generates the enum, dpm_strerror() and dpm_status_name();
 * on the wire a status is the proto enum Status, checked against this list
 * at compile time (include/dpm/wire.h: a status added here needs its
 * STATUS_ value in proto/dpm.proto). Functions that can
 * fail return dpm_status and pass details through a dpm_err out-parameter.
 * All functions here are pure and safe to call from any thread. */
#ifndef DPM_STATUS_H
#define DPM_STATUS_H

#include <stdarg.h>

#define DPM_STATUS_MAP(XX)                                                               \
  XX(OK, "ok")                                                                           \
  XX(INVALID, "invalid argument")                                                        \
  XX(SPEC, "invalid model spec")                                                         \
  XX(SHAPE, "shape mismatch")                                                            \
  XX(NOT_FOUND, "not found")                                                             \
  XX(EXISTS, "already exists")                                                           \
  XX(IO, "input/output error")                                                           \
  XX(CORRUPT, "corrupt data")                                                            \
  XX(NOMEM, "out of memory")                                                             \
  XX(UNSUPPORTED, "not supported")                                                       \
  XX(STATE, "wrong state")                                                               \
  XX(TIMEOUT, "timed out")                                                               \
  XX(NUMERIC, "numerical error")                                                         \
  XX(DENIED, "permission denied")                                                        \
  XX(INTERNAL, "internal error")

typedef enum {
#define XX(name, text) DPM_##name,
  DPM_STATUS_MAP(XX)
#undef XX
      DPM_STATUS_COUNT
} dpm_status;

/* Human-readable text of a status ("shape mismatch"); never NULL. */
const char *dpm_strerror(dpm_status s);
/* Symbolic name of a status ("SHAPE"); never NULL. */
const char *dpm_status_name(dpm_status s);

/* An error with detail: the code and a message for a person. Embedded by the
 * caller; filled by the callee on failure; never allocated. */
typedef struct dpm_err {
  dpm_status code; /* DPM_OK when nothing failed */
  char msg[512];   /* "spec.yaml:12:5: op #3 (FC): unknown argument 'dimout'" */
} dpm_err;

/* Set err (if non-NULL) to code and a printf-formatted message; returns code,
 * so a validator can `return dpm_errf(err, DPM_SPEC, "...")`. */
dpm_status dpm_errf(dpm_err *err, dpm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix the message already in err with a formatted context ("op #3: ").
 * Returns err->code. */
dpm_status dpm_err_prefix(dpm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
