/* A spec checked once (checked_spec.h): validated, hashed, its devices
 * parsed, all in dpm_spec_check. */
#include "common/checked_spec.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/spec.h"
#include "common/validate.h"

struct dpm_checked_spec {
  Dpm__ModelSpec *spec;
  int owns;
  uint64_t hash;
  size_t n_devices;
  dpm_device *devices; /* n_devices; NULL when 0 */
};

static dpm_status check(Dpm__ModelSpec *spec, const dpm_device *parsed, int owns,
                        dpm_checked_spec **out, dpm_err *err) {
  *out = NULL;
  if (!spec) return dpm_spec_validate(spec, err); /* "no spec" */
  size_t n = spec->parallel ? spec->parallel->n_devices : 0;
  dpm_checked_spec *s = calloc(1, sizeof *s);
  /* more than DPM_MAX_DEVICES is refused by the validation, unallocated */
  int room = n && n <= DPM_MAX_DEVICES;
  if (!s || (room && !(s->devices = malloc(n * sizeof *s->devices)))) {
    free(s);
    return dpm_nomem(err);
  }
  if (room && parsed) memcpy(s->devices, parsed, n * sizeof *s->devices);
  dpm_status st = dpm_spec_validate_devices(spec, s->devices, parsed != NULL, err);
  if (st) {
    free(s->devices);
    free(s);
    return st;
  }
  s->spec = spec;
  s->owns = owns;
  s->n_devices = n;
  s->hash = dpm_spec_hash(spec);
  *out = s;
  return DPM_OK;
}

dpm_status dpm_spec_check(Dpm__ModelSpec *spec, const dpm_device *parsed,
                          dpm_checked_spec **out, dpm_err *err) {
  return check(spec, parsed, 1, out, err);
}

dpm_status dpm_spec_check_borrowed(const Dpm__ModelSpec *spec, dpm_checked_spec **out,
                                   dpm_err *err) {
  return check((Dpm__ModelSpec *)spec, NULL, 0, out, err); /* never changed nor freed */
}

void dpm_checked_spec_free(dpm_checked_spec *s) {
  if (!s) return;
  if (s->owns) dpm_spec_free(s->spec);
  free(s->devices);
  free(s);
}

const Dpm__ModelSpec *dpm_checked_spec_pb(const dpm_checked_spec *s) { return s->spec; }
uint64_t dpm_checked_spec_hash(const dpm_checked_spec *s) { return s->hash; }

const dpm_device *dpm_checked_spec_devices(const dpm_checked_spec *s, size_t *n) {
  *n = s->n_devices;
  return s->devices;
}
