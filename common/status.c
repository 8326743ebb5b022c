/* dpm_status text and dpm_err helpers (include/dpm/status.h). */
#include "dpm/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_text[] = {
#define XX(name, text) text,
    DPM_STATUS_MAP(XX)
#undef XX
};
static const char *const status_name[] = {
#define XX(name, text) #name,
    DPM_STATUS_MAP(XX)
#undef XX
};
_Static_assert(sizeof status_text / sizeof *status_text == DPM_STATUS_COUNT,
               "status table");

const char *dpm_strerror(dpm_status s) {
  return (unsigned)s < DPM_STATUS_COUNT ? status_text[s] : "unknown status";
}

const char *dpm_status_name(dpm_status s) {
  return (unsigned)s < DPM_STATUS_COUNT ? status_name[s] : "UNKNOWN";
}

dpm_status dpm_errf(dpm_err *err, dpm_status code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

dpm_status dpm_err_prefix(dpm_err *err, const char *fmt, ...) {
  if (!err) return DPM_INTERNAL;
  char prefix[256], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  size_t n = strlen(prefix);
  if (n >= sizeof err->msg) n = sizeof err->msg - 1;
  memcpy(err->msg, prefix, n);
  size_t rest = strnlen(old, sizeof old - 1);
  if (rest > sizeof err->msg - 1 - n) rest = sizeof err->msg - 1 - n;
  memcpy(err->msg + n, old, rest);
  err->msg[n + rest] = 0;
  return err->code;
}
