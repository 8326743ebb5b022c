/* Escaping control bytes (escape.h). */
#include "common/escape.h"

#include <stdio.h>

static int is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

int dpm_has_control(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++)
    if (is_control(*p)) return 1;
  return 0;
}

char *dpm_escape(const char *s, char *buf, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    char e[5];
    size_t n = 1;
    e[0] = (char)*p;
    if (*p == '\n' || *p == '\r' || *p == '\t')
      e[0] = '\\', e[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't', n = 2;
    else if (is_control(*p))
      n = (size_t)snprintf(e, sizeof e, "\\x%02x", *p);
    if (o + n >= cap) break;
    for (size_t i = 0; i < n; i++) buf[o++] = e[i];
  }
  if (cap) buf[o < cap ? o : cap - 1] = 0;
  return buf;
}
