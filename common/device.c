/* Canonical device names (device.h). */
#include "common/device.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/workcount.h"

static const char *const kind_names[DPM_DEVICE_KIND_COUNT] = {"cpu", "cuda", "fenced"};
static const char *const scope_names[DPM_DEVICE_KIND_COUNT] = {"cpu", "gpu", "fenced"};

const char *dpm_device_kind_name(dpm_device_kind k) {
  return (unsigned)k < DPM_DEVICE_KIND_COUNT ? kind_names[k] : "?";
}

int dpm_device_parse(const char *s, dpm_device *out) {
  DPM_WORK_DONE(DPM_WORK_DEVICE_PARSE);
  const char *colon = s ? strchr(s, ':') : NULL;
  if (!colon) return -1;
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++) {
    size_t n = strlen(kind_names[k]);
    if ((size_t)(colon - s) != n || memcmp(s, kind_names[k], n)) continue;
    const char *d = colon + 1;
    size_t digits = strspn(d, "0123456789");
    if (digits == 0 || digits > 4 || d[digits] || (digits > 1 && d[0] == '0')) return -1;
    int v = 0;
    for (size_t i = 0; i < digits; i++) v = v * 10 + (d[i] - '0');
    if (v > DPM_MAX_DEVICE_INDEX) return -1;
    *out = (dpm_device){.kind = (dpm_device_kind)k, .index = v};
    return 0;
  }
  return -1;
}

const char *dpm_device_hint(const char *s) {
  if (!s) return "";
  size_t n = strcspn(s, ":_");
  if (n == 3 && !strncasecmp(s, "gpu", 3))
    return "; GPUs are cuda:N (gpu is only the scope of blob names, gpu_0/fc1_w)";
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++)
    if (strlen(kind_names[k]) == n && !strncasecmp(s, kind_names[k], n))
      return s[n] == '_' ? "; devices are written KIND:N (cpu:0, cuda:0)"
                         : "; device kinds are lower case (cpu:N, cuda:N)";
  return "";
}

char *dpm_device_format(dpm_device d, char *buf, size_t n) {
  snprintf(buf, n, "%s:%d", dpm_device_kind_name(d.kind), d.index);
  return buf;
}

char *dpm_device_scope(dpm_device d, char *buf, size_t n) {
  snprintf(buf, n, "%s_%d", (unsigned)d.kind < DPM_DEVICE_KIND_COUNT ? scope_names[d.kind] : "?",
           d.index);
  return buf;
}
