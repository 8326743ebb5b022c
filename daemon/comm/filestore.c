/* A file rendezvous store as key-value callbacks (filestore.h). */
#include "comm/filestore.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/file.h"

#define MAX_VALUE (1u << 20) /* a value: an NCCL unique id, an address or two */
#define POLL_MS 10

/* DIR/NAME for key into path; DPM_INVALID when too long. */
static dpm_status key_path(const dpm_file_store *s, const char *key, char *path, size_t n,
                           dpm_err *err) {
  static const char hex[] = "0123456789ABCDEF";
  int at = snprintf(path, n, "%s/", s->dir);
  size_t name = 0;
  for (const unsigned char *c = (const unsigned char *)key; *c; c++) {
    char esc[3] = {(char)*c, 0, 0};
    if (!isalnum(*c) && *c != '_' && *c != '-')
      esc[0] = '%', esc[1] = hex[*c >> 4], esc[2] = hex[*c & 15];
    size_t k = esc[1] ? 3 : 1;
    if (at < 0 || (size_t)at + k >= n || name + k > NAME_MAX) break;
    memcpy(path + at, esc, k);
    at += (int)k, name += k;
    path[at] = 0;
    if (!c[1]) return DPM_OK;
  }
  return dpm_errf(err, DPM_INVALID,
                  "store key '%.100s': empty, or its file name too long", key);
}

static dpm_status fs_set(void *ctx, const char *key, const void *value, size_t len,
                         dpm_err *err) {
  const dpm_file_store *s = ctx;
  char path[PATH_MAX];
  if (key_path(s, key, path, sizeof path, err)) return err->code;
  dpm_status st = dpm_file_create_buffer(s->fs, path, 0, value, len, err);
  if (st == DPM_EXISTS)
    dpm_errf(err, DPM_EXISTS, "store key '%.100s' was set before (a used prefix)", key);
  return st;
}

static dpm_status fs_get(void *ctx, const char *key, int timeout_ms, void **value,
                         size_t *len, dpm_err *err) {
  const dpm_file_store *s = ctx;
  char path[PATH_MAX];
  if (key_path(s, key, path, sizeof path, err)) return err->code;
  for (int waited = 0;; waited += POLL_MS) {
    int exists = 0;
    if (dpm_file_exists(s->fs, path, &exists, err)) return err->code;
    if (exists) return dpm_file_read_all(s->fs, path, MAX_VALUE, value, len, err);
    if (waited >= timeout_ms)
      return dpm_errf(err, DPM_TIMEOUT, "waited %d ms for store key '%.100s'", timeout_ms,
                      key);
    nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
  }
}

dpm_status dpm_file_store_init(dpm_file_store *s, const char *url, const dpm_fs *fs,
                               dpm_err *err) {
  if (!url || strncmp(url, "file:///", 8))
    return dpm_errf(err, DPM_INVALID, "a file store is file:///DIR");
  if (snprintf(s->dir, sizeof s->dir, "%s", url + 7) >= (int)sizeof s->dir)
    return dpm_errf(err, DPM_INVALID, "file store: path too long");
  s->fs = fs;
  s->kv = (dpm_comm_store){.ctx = s, .set = fs_set, .get = fs_get};
  return DPM_OK;
}
