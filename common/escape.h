/* Text from clients (spec sources, names, paths) on its way into replies
 * and logs: control bytes are written out, so a client cannot forge a log
 * line or drive a terminal. Pure functions: any thread. */
#ifndef DPM_COMMON_ESCAPE_H
#define DPM_COMMON_ESCAPE_H

#include <stddef.h>

/* Copies s into buf (cap >= 1 bytes, always NUL-terminated, cut to fit on
 * a whole escape) with \n, \r, \t as two characters and every other byte
 * below 0x20, and 0x7F, as \xNN. Returns buf. */
char *dpm_escape(const char *s, char *buf, size_t cap);
/* 1 if s holds a byte dpm_escape would rewrite. */
int dpm_has_control(const char *s);

#endif
