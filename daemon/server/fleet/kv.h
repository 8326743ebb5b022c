/* The rendezvous store a coordinating dpmd serves: the "daemon" store of a
 * job's parallel.rendezvous (Caffe2's kv_handler), where the shards of one
 * formation of a fleet job publish and read what their communicators need
 * to meet.
 *
 * Namespaces: every key belongs to a formation (a fresh name for each time
 * a job forms, such as "NAME/HEX"). The coordinator opens a formation before it asks the
 * shards to join, and drops it, keys and all, when the job is deleted,
 * fails to form, or forms again (each formation has a fresh name). A key of
 * a formation that is not open is refused (DPM_NOT_FOUND): one job cannot
 * read or fill another's keys, and no key outlives its formation.
 *
 * Semantics: a key is set once; setting it again to the same bytes is
 * accepted, to other bytes refused (DPM_EXISTS). dpmd_kv_get answers at
 * once: the value, or "not yet" (DPM_OK with *value NULL) while the key is
 * unset; the other shards' stores poll it over RPC. Only the
 * coordinator's own shard waits in it (dpmd_kv_local, on its model's
 * thread); the loop thread never waits. A shard that cannot build marks
 * the formation failed (dpmd_kv_fail): from then on every get and set in
 * it, waiting or not, fails at once with that shard's message, so the
 * others stop waiting for a shard that will never come.
 *
 * Bounds: every byte is counted before it is allocated: a key is 1 to
 * DPMD_KV_MAX_KEY bytes, a value at most DPMD_KV_MAX_VALUE; a formation
 * holds at most DPMD_KV_MAX_KEYS keys and DPMD_KV_MAX_BYTES bytes (keys,
 * values and DPMD_KV_ENTRY_COST per key); the store holds at most
 * DPMD_KV_MAX_FORMATIONS formations and DPMD_KV_MAX_TOTAL bytes. Past a
 * bound the call is refused (DPM_DENIED, naming the bound) and nothing
 * changes.
 *
 * Threads: any; one mutex guards the store, and waiters sleep on a
 * condition variable that every set and drop wakes.
 *
 * Ownership: the store copies keys and values; dpmd_kv_get's *value is a
 * new copy, the caller's to free(). */
#ifndef DPMD_KV_H
#define DPMD_KV_H

#include <stddef.h>

#include "comm/comm.h"
#include "dpm/status.h"

#define DPMD_KV_MAX_KEY 512
#define DPMD_KV_MAX_VALUE (1u << 20)
#define DPMD_KV_MAX_KEYS 4096
#define DPMD_KV_ENTRY_COST 64
#define DPMD_KV_MAX_BYTES (16u << 20)
#define DPMD_KV_MAX_FORMATIONS 64
#define DPMD_KV_MAX_TOTAL (64u << 20)
/* A formation's name is shorter than this (its NUL included). */
#define DPMD_FORMATION_MAX 96

typedef struct dpmd_kv dpmd_kv;

dpm_status dpmd_kv_create(dpmd_kv **out, dpm_err *err);
/* Frees the store and everything in it; nobody may be waiting in it. */
void dpmd_kv_destroy(dpmd_kv *kv);

/* Opens an empty formation: DPM_INVALID for a name that is empty or too
 * long, DPM_EXISTS when it is open, DPM_DENIED at DPMD_KV_MAX_FORMATIONS. */
dpm_status dpmd_kv_open(dpmd_kv *kv, const char *formation, dpm_err *err);
/* Drops a formation and its keys (nothing happens when it is not open);
 * waiters in it return DPM_NOT_FOUND. */
void dpmd_kv_drop(dpmd_kv *kv, const char *formation);

/* Marks formation failed by shard_id with why (kept escaped and cut to
 * DPMD_KV_MAX_FAILURE bytes; the first failure stays) and wakes its
 * waiters. DPM_NOT_FOUND: the formation is not open; DPM_INVALID: a bad
 * name. */
#define DPMD_KV_MAX_FAILURE 400
dpm_status dpmd_kv_fail(dpmd_kv *kv, const char *formation, unsigned shard_id,
                        const char *why, dpm_err *err);

/* Sets key to the len bytes at value in formation. DPM_NOT_FOUND: the
 * formation is not open; DPM_INVALID: the key is empty or longer than
 * DPMD_KV_MAX_KEY; DPM_DENIED: over a bound; DPM_EXISTS: set before to
 * other bytes; DPM_IO: the formation failed (its message); DPM_NOMEM. */
dpm_status dpmd_kv_set(dpmd_kv *kv, const char *formation, const char *key,
                       const void *value, size_t len, dpm_err *err);
/* The value of key in formation: *value a malloc'd copy (of *len bytes;
 * never NULL once set, even for an empty value), or NULL while the key is
 * unset. timeout_ms 0 answers at once; above 0 waits up to that long for
 * the key (DPM_TIMEOUT after it). DPM_NOT_FOUND: the formation is not open
 * (or was dropped while waiting); DPM_IO: the formation failed (before or
 * while waiting; its message); DPM_INVALID: a bad key; DPM_NOMEM. */
dpm_status dpmd_kv_get(dpmd_kv *kv, const char *formation, const char *key,
                       int timeout_ms, void **value, size_t *len, dpm_err *err);

/* What the store holds now (for metrics); zeros for NULL. */
typedef struct dpmd_kv_usage {
  int formations;
  size_t keys, bytes;
} dpmd_kv_usage;
dpmd_kv_usage dpmd_kv_used(dpmd_kv *kv);

/* The store seen from the coordinator's own shard, in process: a
 * dpm_comm_store (comm/comm.h) on formation whose get waits in the store.
 * Embedded by its owner, which keeps it (and kv) alive as long as the
 * communicator built from it may call it. */
typedef struct dpmd_kv_local {
  dpm_comm_store store; /* what the communicator is given; ctx: this struct */
  dpmd_kv *kv;
  char formation[DPMD_FORMATION_MAX];
} dpmd_kv_local;
void dpmd_kv_local_init(dpmd_kv_local *l, dpmd_kv *kv, const char *formation);

#endif
