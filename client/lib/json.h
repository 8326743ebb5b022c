/* A tiny JSON writer: builds one JSON text in a growing buffer, for dpmctl's
 * --json output (and any other client that reports to scripts).
 *
 *   dpm_json j;
 *   dpm_json_init(&j);
 *   dpm_json_object(&j, NULL);              // top level: no key
 *   dpm_json_str(&j, "name", "mlp");
 *   dpm_json_num(&j, "loss", 0.25);         // NaN and infinities -> null
 *   dpm_json_array(&j, "devices");
 *   dpm_json_str(&j, NULL, "cpu:0");        // in an array: no key
 *   dpm_json_end(&j);
 *   dpm_json_end(&j);
 *   puts(dpm_json_text(&j));                // {"name":"mlp","loss":0.25,...}
 *   dpm_json_fini(&j);
 *
 * Strings are escaped as RFC 8259 asks (quote, backslash, control
 * characters); bytes that are not valid UTF-8 become U+FFFD, so the output
 * is always valid UTF-8 whatever a message holds. Numbers are written with
 * the fewest digits that read back to the same double.
 *
 * Errors: none reported per call. Running out of memory, nesting deeper than
 * DPM_JSON_MAX_DEPTH or ending more containers than were begun makes
 * dpm_json_text return NULL; the writer stays safe to use and to finalise.
 *
 * Ownership: the writer owns its buffer until dpm_json_fini. Threads: one
 * writer per thread; no global state. */
#ifndef DPM_CLIENT_JSON_H
#define DPM_CLIENT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define DPM_JSON_MAX_DEPTH 32

typedef struct dpm_json {
  char *buf;
  size_t len, cap;
  int failed; /* out of memory or misuse */
  int depth;
  unsigned char first[DPM_JSON_MAX_DEPTH]; /* no member written yet */
  unsigned char is_array[DPM_JSON_MAX_DEPTH];
} dpm_json;

void dpm_json_init(dpm_json *j);
void dpm_json_fini(dpm_json *j);
/* Clears the text (keeps the buffer) for the next document. */
void dpm_json_reset(dpm_json *j);

/* key names the member inside an object; it is ignored (pass NULL) at the
 * top level and inside an array. */
void dpm_json_object(dpm_json *j, const char *key);
void dpm_json_array(dpm_json *j, const char *key);
/* Ends the innermost object or array. */
void dpm_json_end(dpm_json *j);

void dpm_json_str(dpm_json *j, const char *key, const char *s); /* NULL: null */
void dpm_json_strn(dpm_json *j, const char *key, const char *s, size_t n);
void dpm_json_num(dpm_json *j, const char *key, double v);
/* A float32 value: the fewest digits that read back to the same float. */
void dpm_json_float(dpm_json *j, const char *key, float v);
void dpm_json_int(dpm_json *j, const char *key, int64_t v);
void dpm_json_uint(dpm_json *j, const char *key, uint64_t v);
void dpm_json_bool(dpm_json *j, const char *key, int v);
void dpm_json_null(dpm_json *j, const char *key);

/* The text written so far, NUL-terminated, or NULL after a failure. */
const char *dpm_json_text(const dpm_json *j);

#endif
