/* The rendezvous store (store.h): the URL parsed once, and the three kinds
 * (file, redis, callback) behind one ops table each. */
#include "comm/store.h"

#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/escape.h"
#include "common/file.h"
#include "common/validate.h"

#define POLL_MS 5
#define MAX_VALUE (16u << 20) /* a key's value: an address per process, an id */
#define REDIS_CONNECT_MS 2000

/* ---- what every kind shares ---------------------------------------------- */

static dpm_status timed_out(dpm_err *err, int timeout_ms, const char *key) {
  char b[160];
  return dpm_errf(err, DPM_TIMEOUT, "timed out after %d ms waiting for store key '%s'",
                  timeout_ms, dpm_escape(key, b, sizeof b));
}

static dpm_status not_set(dpm_err *err, const char *key) {
  char b[160];
  return dpm_errf(err, DPM_NOT_FOUND, "store key '%s' is not set",
                  dpm_escape(key, b, sizeof b));
}

/* Polls has(key) for each key until all are set or timeout_ms passed; for
 * the kinds that can only ask whether a key is set (file, redis). */
typedef dpm_status (*has_fn)(dpm_store *s, const char *key, int *set, dpm_err *err);

static dpm_status poll_keys(dpm_store *s, has_fn has, const char *const *keys, int n,
                            int timeout_ms, dpm_err *err) {
  int64_t until = dpm_mono_ns() / 1000 + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
  for (int i = 0; i < n;) {
    int set = 0;
    if (has(s, keys[i], &set, err)) return err->code;
    if (set) {
      i++;
      continue;
    }
    if (dpm_mono_ns() / 1000 >= until) return timed_out(err, timeout_ms, keys[i]);
    nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
  }
  return DPM_OK;
}

/* get for the kinds that poll: wait for the key, then read it. */
static dpm_status poll_get(dpm_store *s, has_fn has, const char *key, int timeout_ms,
                           dpm_status (*read)(dpm_store *, const char *, void **,
                                              size_t *, dpm_err *),
                           void **value, size_t *len, dpm_err *err) {
  *value = NULL, *len = 0;
  if (timeout_ms <= 0) {
    int set = 0;
    if (has(s, key, &set, err)) return err->code;
    if (!set) return not_set(err, key);
  } else if (poll_keys(s, has, &key, 1, timeout_ms, err)) {
    return err->code;
  }
  return read(s, key, value, len, err);
}

/* ---- file:///DIR ------------------------------------------------------- */

typedef struct {
  dpm_store base;
  const dpm_fs *fs; /* NULL: plain paths */
  int made;         /* DIR exists (made at the first use) */
  char dir[PATH_MAX];
} file_store;

/* DIR/NAME of key into path (n bytes): the key's bytes outside
 * [A-Za-z0-9_-] as %XX; DPM_INVALID when the name would be empty or longer
 * than NAME_MAX. DIR is made at the first call. */
static dpm_status file_path(file_store *f, const char *key, char *path, size_t n,
                            dpm_err *err) {
  static const char hex[] = "0123456789ABCDEF";
  char name[NAME_MAX + 4], b[160];
  size_t at = 0;
  for (const unsigned char *c = (const unsigned char *)key; *c && at <= NAME_MAX; c++) {
    if (isalnum(*c) || *c == '_' || *c == '-') {
      name[at++] = (char)*c;
    } else {
      name[at++] = '%', name[at++] = hex[*c >> 4], name[at++] = hex[*c & 15];
    }
  }
  name[at] = 0;
  if (!at || at > NAME_MAX)
    return dpm_errf(err, DPM_INVALID,
                    "store key '%s': its file name would be %s (1 to %d bytes)",
                    dpm_escape(key, b, sizeof b), at ? "longer" : "empty", NAME_MAX);
  if (snprintf(path, n, "%s/%s", f->dir, name) >= (int)n)
    return dpm_errf(err, DPM_INVALID, "store key '%s': its path is too long",
                    dpm_escape(key, b, sizeof b));
  if (!f->made) {
    if (dpm_file_mkdirs(f->fs, f->dir, err))
      return dpm_err_prefix(err, "rendezvous store directory: ");
    f->made = 1;
  }
  return DPM_OK;
}

static dpm_status file_set(dpm_store *s, const char *key, const void *value, size_t len,
                           dpm_err *err) {
  file_store *f = (file_store *)s;
  char path[PATH_MAX], b[160];
  if (file_path(f, key, path, sizeof path, err)) return err->code;
  dpm_status st = dpm_file_create_buffer(f->fs, path, 0, value, len, err);
  if (st == DPM_EXISTS)
    return dpm_errf(err, DPM_EXISTS, "store key '%s' exists",
                    dpm_escape(key, b, sizeof b));
  return st;
}

static dpm_status file_has(dpm_store *s, const char *key, int *set, dpm_err *err) {
  file_store *f = (file_store *)s;
  char path[PATH_MAX];
  if (file_path(f, key, path, sizeof path, err)) return err->code;
  return dpm_file_exists(f->fs, path, set, err);
}

static dpm_status file_read(dpm_store *s, const char *key, void **value, size_t *len,
                            dpm_err *err) {
  file_store *f = (file_store *)s;
  char path[PATH_MAX];
  if (file_path(f, key, path, sizeof path, err)) return err->code;
  return dpm_file_read_all(f->fs, path, MAX_VALUE, value, len, err);
}

static dpm_status file_get(dpm_store *s, const char *key, int timeout_ms, void **value,
                           size_t *len, dpm_err *err) {
  return poll_get(s, file_has, key, timeout_ms, file_read, value, len, err);
}

static dpm_status file_wait(dpm_store *s, const char *const *keys, int n, int timeout_ms,
                            dpm_err *err) {
  return poll_keys(s, file_has, keys, n, timeout_ms, err);
}

/* The key's file removed through the file access's directory. */
static dpm_status file_del(dpm_store *s, const char *key, dpm_err *err) {
  file_store *f = (file_store *)s;
  const dpm_fs *fs = f->fs ? f->fs : &dpm_fs_plain;
  char path[PATH_MAX], base[NAME_MAX + 1], b[160];
  int dirfd = -1;
  if (file_path(f, key, path, sizeof path, err)) return err->code;
  if (fs->open_dir(fs, path, 0, &dirfd, base, sizeof base, err)) return err->code;
  int gone = unlinkat(dirfd, base, 0) == 0 || errno == ENOENT;
  int e = errno;
  close(dirfd);
  if (!gone)
    return dpm_errf(err, DPM_IO, "store key '%s': removing its file: %s",
                    dpm_escape(key, b, sizeof b), strerror(e));
  return DPM_OK;
}

static void file_destroy(dpm_store *s) { free(s); }

static const dpm_store_ops file_ops = {
    .kind = "file",
    .set = file_set,
    .get = file_get,
    .wait = file_wait,
    .del = file_del,
    .destroy = file_destroy,
};

/* ---- redis://HOST:PORT -------------------------------------------------- */

typedef struct {
  dpm_store base;
  redisContext *c; /* connected at the first use; NULL before, or after a failure */
  int failed;      /* the server failed once: every later call fails alike */
  int timeout_ms;  /* each reply's bound */
  int port;
  char host[256];
  char url[300]; /* as given, escaped: for the one message */
} redis_store;

/* The one message for a server that cannot be used. */
static dpm_status unusable(redis_store *r, dpm_err *err) {
  if (r->c) redisFree(r->c);
  r->c = NULL, r->failed = 1;
  return dpm_errf(err, DPM_IO,
                  "rendezvous store '%s': no usable Redis server there (not reachable, "
                  "or not answering as one)",
                  r->url);
}

/* A command's reply of the type wanted (NULL for any failure: the store is
 * then unusable; free the reply with freeReplyObject). */
static redisReply *command(redis_store *r, int type, dpm_err *err, const char *fmt, ...) {
  if (!r->failed && !r->c) {
    struct timeval tv = {REDIS_CONNECT_MS / 1000, 0};
    if (!(r->c = redisConnectWithTimeout(r->host, r->port, tv))) {
      dpm_errf(err, DPM_NOMEM, "redis store: out of memory");
      return NULL;
    }
    struct timeval reply = {r->timeout_ms / 1000, r->timeout_ms % 1000 * 1000};
    if (r->c->err || redisSetTimeout(r->c, reply) != REDIS_OK) r->failed = 1;
  }
  if (r->failed) {
    unusable(r, err);
    return NULL;
  }
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(r->c, fmt, ap);
  va_end(ap);
  if (!rep || rep->type != type) {
    if (rep) freeReplyObject(rep);
    unusable(r, err);
    return NULL;
  }
  return rep;
}

static dpm_status redis_set(dpm_store *s, const char *key, const void *value, size_t len,
                            dpm_err *err) {
  redis_store *r = (redis_store *)s;
  char b[160];
  redisReply *rep =
      command(r, REDIS_REPLY_INTEGER, err, "SETNX %b %b", key, strlen(key), value, len);
  if (!rep) return err->code;
  long long done = rep->integer;
  freeReplyObject(rep);
  if (!done)
    return dpm_errf(err, DPM_EXISTS, "store key '%s' exists",
                    dpm_escape(key, b, sizeof b));
  return DPM_OK;
}

static dpm_status redis_has(dpm_store *s, const char *key, int *set, dpm_err *err) {
  redis_store *r = (redis_store *)s;
  redisReply *rep = command(r, REDIS_REPLY_INTEGER, err, "EXISTS %b", key, strlen(key));
  if (!rep) return err->code;
  *set = rep->integer > 0;
  freeReplyObject(rep);
  return DPM_OK;
}

static dpm_status redis_read(dpm_store *s, const char *key, void **value, size_t *len,
                             dpm_err *err) {
  redis_store *r = (redis_store *)s;
  char b[160];
  redisReply *rep = command(r, REDIS_REPLY_STRING, err, "GET %b", key, strlen(key));
  if (!rep) return err->code;
  dpm_status st = DPM_OK;
  if (rep->len > MAX_VALUE)
    st = dpm_errf(err, DPM_CORRUPT, "store key '%s' holds more than %u bytes",
                  dpm_escape(key, b, sizeof b), MAX_VALUE);
  else if (!(*value = malloc(rep->len + 1)))
    st = dpm_errf(err, DPM_NOMEM, "redis store: out of memory");
  else
    memcpy(*value, rep->str, rep->len), ((char *)*value)[rep->len] = 0, *len = rep->len;
  freeReplyObject(rep);
  return st;
}

static dpm_status redis_get(dpm_store *s, const char *key, int timeout_ms, void **value,
                            size_t *len, dpm_err *err) {
  return poll_get(s, redis_has, key, timeout_ms, redis_read, value, len, err);
}

static dpm_status redis_wait(dpm_store *s, const char *const *keys, int n, int timeout_ms,
                             dpm_err *err) {
  return poll_keys(s, redis_has, keys, n, timeout_ms, err);
}

static dpm_status redis_del(dpm_store *s, const char *key, dpm_err *err) {
  redis_store *r = (redis_store *)s;
  redisReply *rep = command(r, REDIS_REPLY_INTEGER, err, "DEL %b", key, strlen(key));
  if (!rep) return err->code;
  freeReplyObject(rep);
  return DPM_OK;
}

static void redis_destroy(dpm_store *s) {
  redis_store *r = (redis_store *)s;
  if (r->c) redisFree(r->c);
  free(r);
}

static const dpm_store_ops redis_ops = {
    .kind = "redis",
    .set = redis_set,
    .get = redis_get,
    .wait = redis_wait,
    .del = redis_del,
    .destroy = redis_destroy,
};

/* ---- the caller's callbacks ------------------------------------------------ */

typedef struct {
  dpm_store base;
  const dpm_comm_store *kv;
} callback_store;

static dpm_status cb_set(dpm_store *s, const char *key, const void *value, size_t len,
                         dpm_err *err) {
  const dpm_comm_store *kv = ((callback_store *)s)->kv;
  dpm_status st = kv->set(kv->ctx, key, value, len, err);
  if (st && !err->msg[0]) dpm_errf(err, st, "%s", dpm_strerror(st));
  return st;
}

static dpm_status cb_get(dpm_store *s, const char *key, int timeout_ms, void **value,
                         size_t *len, dpm_err *err) {
  const dpm_comm_store *kv = ((callback_store *)s)->kv;
  *value = NULL, *len = 0;
  dpm_status st = kv->get(kv->ctx, key, timeout_ms > 0 ? timeout_ms : 0, value, len, err);
  if (!st && !*value) st = DPM_TIMEOUT; /* a look at once: not yet set */
  if (st == DPM_TIMEOUT && timeout_ms <= 0) return not_set(err, key);
  if (st == DPM_TIMEOUT) return timed_out(err, timeout_ms, key);
  if (st && !err->msg[0]) dpm_errf(err, st, "%s", dpm_strerror(st));
  return st;
}

/* Each key fetched in turn (the callbacks wait themselves), within one
 * deadline. */
static dpm_status cb_wait(dpm_store *s, const char *const *keys, int n, int timeout_ms,
                          dpm_err *err) {
  int64_t until = dpm_mono_ns() / 1000 + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
  for (int i = 0; i < n; i++) {
    int64_t left = (until - dpm_mono_ns() / 1000 + 999) / 1000; /* whole ms, rounded up */
    void *v = NULL;
    size_t len = 0;
    dpm_status st = cb_get(s, keys[i], left > 1 ? (int)left : 1, &v, &len, err);
    free(v);
    if (st == DPM_TIMEOUT) return timed_out(err, timeout_ms, keys[i]);
    if (st) return st;
  }
  return DPM_OK;
}

static dpm_status cb_del(dpm_store *s, const char *key, dpm_err *err) {
  (void)s;
  char b[160];
  return dpm_errf(err, DPM_UNSUPPORTED,
                  "store key '%s': the caller's key-value store removes no key (its keys "
                  "go with the formation)",
                  dpm_escape(key, b, sizeof b));
}

static void cb_destroy(dpm_store *s) { free(s); }

static const dpm_store_ops callback_ops = {
    .kind = "callback",
    .set = cb_set,
    .get = cb_get,
    .wait = cb_wait,
    .del = cb_del,
    .destroy = cb_destroy,
};

/* ---- open ------------------------------------------------------------------ */

static dpm_status open_file(const dpm_comm_rendezvous *rv, dpm_store **out,
                            dpm_err *err) {
  const char *dir = rv->store + strlen("file://");
  if (strlen(dir) >= PATH_MAX - NAME_MAX - 2)
    return dpm_errf(err, DPM_INVALID, "file store: path too long");
  file_store *f = calloc(1, sizeof *f);
  if (!f) return dpm_errf(err, DPM_NOMEM, "file store: out of memory");
  f->base.ops = &file_ops;
  f->fs = rv->fs;
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  *out = &f->base;
  return DPM_OK;
}

static dpm_status open_redis(const dpm_comm_rendezvous *rv, int timeout_ms,
                             dpm_store **out, dpm_err *err) {
  const char *hp = rv->store + strlen("redis://"), *colon = strrchr(hp, ':');
  redis_store *r = calloc(1, sizeof *r);
  if (!r) return dpm_errf(err, DPM_NOMEM, "redis store: out of memory");
  r->base.ops = &redis_ops;
  r->timeout_ms = timeout_ms;
  r->port = atoi(colon + 1); /* dpm_store_url_valid: 1..65535 */
  int bracket = hp[0] == '[';
  snprintf(r->host, sizeof r->host, "%.*s", (int)(colon - hp) - 2 * bracket,
           hp + bracket);
  dpm_escape(rv->store, r->url, sizeof r->url);
  *out = &r->base;
  return DPM_OK;
}

static dpm_status open_callback(const dpm_comm_rendezvous *rv, dpm_store **out,
                                dpm_err *err) {
  if (!rv->kv || !rv->kv->set || !rv->kv->get)
    return dpm_errf(err, DPM_INVALID,
                    "rendezvous: neither a store URL nor key-value callbacks");
  callback_store *c = calloc(1, sizeof *c);
  if (!c) return dpm_errf(err, DPM_NOMEM, "callback store: out of memory");
  c->base.ops = &callback_ops;
  c->kv = rv->kv;
  *out = &c->base;
  return DPM_OK;
}

dpm_status dpm_store_open(const dpm_comm_rendezvous *rv, int timeout_ms, dpm_store **out,
                          dpm_err *err) {
  *out = NULL;
  const char *url = rv->store;
  char b[240];
  if (timeout_ms <= 0)
    return dpm_errf(err, DPM_INVALID, "rendezvous store: timeout %d ms must be positive",
                    timeout_ms);
  if (!url || !*url || !strcmp(url, "daemon")) return open_callback(rv, out, err);
  int valid = dpm_store_url_valid(url);
  if (!strncmp(url, "file://", 7)) {
    if (!valid || !url[8])
      return dpm_errf(
          err, DPM_INVALID,
          "rendezvous store '%s': expected file:///DIR (an absolute path of at "
          "most 200 bytes)",
          dpm_escape(url, b, sizeof b));
    return open_file(rv, out, err);
  }
  if (!strncmp(url, "redis://", 8)) {
    if (!valid)
      return dpm_errf(err, DPM_INVALID,
                      "rendezvous store '%s': expected redis://HOST:PORT",
                      dpm_escape(url, b, sizeof b));
    return open_redis(rv, timeout_ms, out, err);
  }
  return dpm_errf(err, DPM_INVALID,
                  "rendezvous store '%s': expected file:///DIR or redis://HOST:PORT",
                  dpm_escape(url, b, sizeof b));
}
