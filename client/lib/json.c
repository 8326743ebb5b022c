/* The tiny JSON writer of json.h. */
#include "lib/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dpm_json_init(dpm_json *j) { memset(j, 0, sizeof *j); }

void dpm_json_fini(dpm_json *j) {
  free(j->buf);
  memset(j, 0, sizeof *j);
}

void dpm_json_reset(dpm_json *j) {
  j->len = 0;
  if (j->buf) j->buf[0] = 0;
  j->failed = 0;
  j->depth = 0;
}

static void put(dpm_json *j, const char *s, size_t n) {
  if (j->failed) return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (j->len + n + 1 > cap) cap *= 2;
    char *b = realloc(j->buf, cap);
    if (!b) {
      j->failed = 1;
      return;
    }
    j->buf = b;
    j->cap = cap;
  }
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = 0;
}

static void puts_(dpm_json *j, const char *s) { put(j, s, strlen(s)); }

static void string(dpm_json *j, const char *s, size_t n);

/* The separator and key before a value. */
static void member(dpm_json *j, const char *key) {
  if (j->depth == 0) {
    if (j->len) j->failed = 1; /* a second top-level value */
    return;
  }
  int d = j->depth - 1;
  if (!j->first[d]) puts_(j, ",");
  j->first[d] = 0;
  if (!j->is_array[d]) {
    string(j, key ? key : "", key ? strlen(key) : 0);
    puts_(j, ":");
  }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  uint32_t cp, min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2, cp = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3, cp = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

static void string(dpm_json *j, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  puts_(j, "\"");
  size_t i = 0;
  while (i < n) {
    size_t start = i; /* a run of bytes copied as they are */
    while (i < n && u[i] >= 0x20 && u[i] != '"' && u[i] != '\\' && u[i] < 0x80) i++;
    put(j, s + start, i - start);
    if (i >= n) break;
    unsigned c = u[i];
    char esc[8];
    if (c >= 0x80) {
      size_t len = utf8_len(u + i, n - i);
      if (len) {
        put(j, s + i, len);
        i += len;
      } else {
        puts_(j, "\\ufffd");
        i++;
      }
      continue;
    }
    switch (c) {
    case '"':
      puts_(j, "\\\"");
      break;
    case '\\':
      puts_(j, "\\\\");
      break;
    case '\n':
      puts_(j, "\\n");
      break;
    case '\r':
      puts_(j, "\\r");
      break;
    case '\t':
      puts_(j, "\\t");
      break;
    case '\b':
      puts_(j, "\\b");
      break;
    case '\f':
      puts_(j, "\\f");
      break;
    default:
      snprintf(esc, sizeof esc, "\\u%04x", c);
      puts_(j, esc);
    }
    i++;
  }
  puts_(j, "\"");
}

static void open_(dpm_json *j, const char *key, int array) {
  member(j, key);
  if (j->depth >= DPM_JSON_MAX_DEPTH) {
    j->failed = 1;
    return;
  }
  j->first[j->depth] = 1;
  j->is_array[j->depth] = (unsigned char)array;
  j->depth++;
  puts_(j, array ? "[" : "{");
}

void dpm_json_object(dpm_json *j, const char *key) { open_(j, key, 0); }
void dpm_json_array(dpm_json *j, const char *key) { open_(j, key, 1); }

void dpm_json_end(dpm_json *j) {
  if (j->depth <= 0) {
    j->failed = 1;
    return;
  }
  j->depth--;
  puts_(j, j->is_array[j->depth] ? "]" : "}");
}

void dpm_json_strn(dpm_json *j, const char *key, const char *s, size_t n) {
  member(j, key);
  if (s)
    string(j, s, n);
  else
    puts_(j, "null");
}

void dpm_json_str(dpm_json *j, const char *key, const char *s) {
  dpm_json_strn(j, key, s, s ? strlen(s) : 0);
}

void dpm_json_num(dpm_json *j, const char *key, double v) {
  member(j, key);
  if (!isfinite(v)) {
    puts_(j, "null");
    return;
  }
  char b[40];
  for (int prec = 15; prec <= 17; prec++) { /* shortest that reads back */
    snprintf(b, sizeof b, "%.*g", prec, v);
    if (strtod(b, NULL) == v) break;
  }
  puts_(j, b);
}

void dpm_json_float(dpm_json *j, const char *key, float v) {
  member(j, key);
  if (!isfinite(v)) {
    puts_(j, "null");
    return;
  }
  char b[40];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(b, sizeof b, "%.*g", prec, (double)v);
    if (strtof(b, NULL) == v) break;
  }
  puts_(j, b);
}

void dpm_json_int(dpm_json *j, const char *key, int64_t v) {
  char b[32];
  member(j, key);
  snprintf(b, sizeof b, "%" PRId64, v);
  puts_(j, b);
}

void dpm_json_uint(dpm_json *j, const char *key, uint64_t v) {
  char b[32];
  member(j, key);
  snprintf(b, sizeof b, "%" PRIu64, v);
  puts_(j, b);
}

void dpm_json_bool(dpm_json *j, const char *key, int v) {
  member(j, key);
  puts_(j, v ? "true" : "false");
}

void dpm_json_null(dpm_json *j, const char *key) {
  member(j, key);
  puts_(j, "null");
}

const char *dpm_json_text(const dpm_json *j) {
  if (j->failed) return NULL;
  return j->buf ? j->buf : "";
}
