/* The rendezvous store: where the processes of one job publish, and find,
 * what they need to meet (Gloo's addresses, NCCL's unique id). A store is
 * a const ops table (dpm_store_ops) behind a handle; the kinds:
 *   file      file:///DIR: one file per key in DIR, reached through the
 *             caller's file access (common/file.h: dpmd's confined client
 *             paths, server/paths.h), so a store lies only where a client's
 *             files may, and no symlink is followed out of it. DIR is made
 *             at the store's first use. A key's file name is the key with
 *             every byte outside [A-Za-z0-9_-] written %XX (never a '/',
 *             never a leading '.'); a key is set by linking a finished
 *             temporary to its name, so a second set fails, race-free.
 *   redis     redis://HOST:PORT: that server (hiredis), connected at the
 *             first use within 2 s, each reply awaited at most the store's
 *             timeout; a set is a SETNX. Every failure of the server, of
 *             whatever kind, is one message ("no usable Redis server
 *             there"): what a port or a server answered is not for the
 *             caller to learn, since a spec names the server and dpmd's
 *             clients must not probe a network through it. A server
 *             gone mid-write raises SIGPIPE in the calling thread: dpmd
 *             and dpm-train ignore it, and the Gloo shim blocks it while
 *             it forms a group.
 *   callback  the caller's key-value callbacks (comm.h: dpm_comm_store):
 *             dpmd's own store ("daemon": server/kv.c on the coordinator,
 *             server/kvpeer.c on the other shards), or a test's.
 * The communicator factory (factory.c) opens the store of a config's
 * rendezvous for the create of a group across processes and closes it
 * after; the Gloo shim and the cuda plugin's NCCL group use it through
 * these ops only (the plugin links nothing of the engine: the dispatch
 * below is inline, and the plugin opens no path).
 *
 * Keys are set once and never replaced (a second set: DPM_EXISTS, so a
 * formation needs a new prefix). Waits poll every 5 ms (file, redis) or
 * are the callbacks' own.
 *
 * Ownership: dpm_store_open copies what it keeps of the rendezvous except
 * fs and kv, which must outlive the store. Values returned by get are
 * malloc'd; free them. Threads: a store is used by one thread at a time.
 * Errors: DPM_INVALID (a bad URL, a key that cannot name a file),
 * DPM_EXISTS (a key set before), DPM_TIMEOUT (a wait ran out: the message
 * names the key), DPM_NOT_FOUND (get of a key not set, timeout 0),
 * DPM_IO (the server, or a file's I/O), DPM_DENIED (the file access
 * refused a path), DPM_UNSUPPORTED (delete on a callback store),
 * DPM_NOMEM. */
#ifndef DPM_COMM_STORE_H
#define DPM_COMM_STORE_H

#include <stddef.h>

#include "comm/comm.h"
#include "dpm/status.h"

typedef struct dpm_store dpm_store;

typedef struct dpm_store_ops {
  const char *kind; /* "file", "redis", "callback" */
  /* Sets key to len bytes of value, once. */
  dpm_status (*set)(dpm_store *s, const char *key, const void *value, size_t len,
                    dpm_err *err);
  /* Waits up to timeout_ms (0: looks once) for key, then returns a malloc'd
   * copy of its value in *value (*len bytes). */
  dpm_status (*get)(dpm_store *s, const char *key, int timeout_ms, void **value,
                    size_t *len, dpm_err *err);
  /* Waits up to timeout_ms for every one of the n keys to be set. */
  dpm_status (*wait)(dpm_store *s, const char *const *keys, int n, int timeout_ms,
                     dpm_err *err);
  /* Removes key (a key not set: DPM_OK). */
  dpm_status (*del)(dpm_store *s, const char *key, dpm_err *err);
  void (*destroy)(dpm_store *s); /* frees the whole store */
} dpm_store_ops;

struct dpm_store {
  const dpm_store_ops *ops; /* the kind's table; never NULL */
};

/* The store of rv: rv->store "file:///DIR" (through rv->fs; NULL: plain
 * paths) or "redis://HOST:PORT", else (NULL, "" or "daemon") rv->kv's
 * callbacks. timeout_ms (> 0) bounds each reply of a server. Opening only
 * parses: nothing is created or contacted before the first use. Bad URLs
 * are DPM_INVALID with a message naming the form expected; *out is NULL on
 * failure. */
dpm_status dpm_store_open(const dpm_comm_rendezvous *rv, int timeout_ms, dpm_store **out,
                          dpm_err *err);

static inline dpm_status dpm_store_set(dpm_store *s, const char *key, const void *value,
                                       size_t len, dpm_err *err) {
  return s->ops->set(s, key, value, len, err);
}
static inline dpm_status dpm_store_get(dpm_store *s, const char *key, int timeout_ms,
                                       void **value, size_t *len, dpm_err *err) {
  return s->ops->get(s, key, timeout_ms, value, len, err);
}
static inline dpm_status dpm_store_wait(dpm_store *s, const char *const *keys, int n,
                                        int timeout_ms, dpm_err *err) {
  return s->ops->wait(s, keys, n, timeout_ms, err);
}
static inline dpm_status dpm_store_delete(dpm_store *s, const char *key, dpm_err *err) {
  return s->ops->del(s, key, err);
}
/* The kind's name: "file", "redis", "callback". */
static inline const char *dpm_store_kind(const dpm_store *s) { return s->ops->kind; }
/* NULL is ignored. */
static inline void dpm_store_close(dpm_store *s) {
  if (s) s->ops->destroy(s);
}

#endif
