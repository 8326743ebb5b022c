/* The coordinator's rendezvous store (kv.h): formations in a fixed table,
 * each a growing array of entries searched in order (a formation holds a
 * few keys per shard), one mutex and one condition variable. */
#include "server/fleet/kv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/escape.h"

typedef struct entry {
  char *key;
  void *value; /* never NULL (an empty value is a 1-byte allocation) */
  size_t len;
} entry;

typedef struct formation {
  char name[DPMD_FORMATION_MAX];
  char failed[DPMD_KV_MAX_FAILURE + 64]; /* "" or why a shard failed (dpmd_kv_fail) */
  entry *v;
  size_t n, cap;
  size_t bytes; /* counted against DPMD_KV_MAX_BYTES */
} formation;

struct dpmd_kv {
  pthread_mutex_t mu;
  pthread_cond_t cv;                    /* CLOCK_MONOTONIC: a set or a drop happened */
  formation *f[DPMD_KV_MAX_FORMATIONS]; /* NULL: a free slot */
  size_t total;                         /* bytes of every formation */
};

dpm_status dpmd_kv_create(dpmd_kv **out, dpm_err *err) {
  *out = NULL;
  dpmd_kv *kv = calloc(1, sizeof *kv);
  if (!kv) return dpm_errf(err, DPM_NOMEM, "out of memory");
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&kv->cv, &a);
  pthread_condattr_destroy(&a);
  pthread_mutex_init(&kv->mu, NULL);
  *out = kv;
  return DPM_OK;
}

static void free_formation(formation *f) {
  if (!f) return;
  for (size_t i = 0; i < f->n; i++) {
    free(f->v[i].key);
    free(f->v[i].value);
  }
  free(f->v);
  free(f);
}

void dpmd_kv_destroy(dpmd_kv *kv) {
  if (!kv) return;
  for (int i = 0; i < DPMD_KV_MAX_FORMATIONS; i++) free_formation(kv->f[i]);
  pthread_mutex_destroy(&kv->mu);
  pthread_cond_destroy(&kv->cv);
  free(kv);
}

/* ---- under the lock ---------------------------------------------------------- */

static int find_slot(const dpmd_kv *kv, const char *name) {
  for (int i = 0; i < DPMD_KV_MAX_FORMATIONS; i++)
    if (kv->f[i] && !strcmp(kv->f[i]->name, name)) return i;
  return -1;
}

static formation *find(const dpmd_kv *kv, const char *name) {
  int i = find_slot(kv, name);
  return i < 0 ? NULL : kv->f[i];
}

static entry *lookup(const formation *f, const char *key) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->v[i].key, key)) return &f->v[i];
  return NULL;
}

/* ---- checks (no lock) -------------------------------------------------------- */

static dpm_status check_formation(const char *name, dpm_err *err) {
  size_t n = name ? strnlen(name, DPMD_FORMATION_MAX) : 0;
  if (n == 0 || n >= DPMD_FORMATION_MAX)
    return dpm_errf(err, DPM_INVALID, "a formation is named by 1 to %d bytes",
                    DPMD_FORMATION_MAX - 1);
  return DPM_OK;
}

static dpm_status check_key(const char *key, dpm_err *err) {
  size_t n = key ? strnlen(key, DPMD_KV_MAX_KEY + 1) : 0;
  if (n == 0 || n > DPMD_KV_MAX_KEY)
    return dpm_errf(err, DPM_INVALID, "a rendezvous key is 1 to %d bytes",
                    DPMD_KV_MAX_KEY);
  return DPM_OK;
}

static dpm_status gone(const char *name, dpm_err *err) {
  char b[DPMD_FORMATION_MAX * 4];
  return dpm_errf(err, DPM_NOT_FOUND,
                  "no formation '%s' in this dpmd's rendezvous store (the job was "
                  "deleted, formed again or never formed here)",
                  dpm_escape(name, b, sizeof b));
}

static dpm_status failed(const formation *f, dpm_err *err) {
  return dpm_errf(err, DPM_IO, "%s", f->failed);
}

/* ---- formations -------------------------------------------------------------- */

dpm_status dpmd_kv_open(dpmd_kv *kv, const char *name, dpm_err *err) {
  if (check_formation(name, err)) return err->code;
  formation *f = calloc(1, sizeof *f);
  if (!f) return dpm_errf(err, DPM_NOMEM, "out of memory");
  memcpy(f->name, name, strlen(name) + 1);
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&kv->mu);
  int slot = -1;
  for (int i = 0; i < DPMD_KV_MAX_FORMATIONS && slot < 0; i++)
    if (!kv->f[i]) slot = i;
  if (find(kv, name))
    s = dpm_errf(err, DPM_EXISTS, "formation %s is open already", name);
  else if (slot < 0)
    s = dpm_errf(err, DPM_DENIED,
                 "the rendezvous store holds %d formations (jobs forming or formed "
                 "here); delete a job first",
                 DPMD_KV_MAX_FORMATIONS);
  else
    kv->f[slot] = f;
  pthread_mutex_unlock(&kv->mu);
  if (s) free(f);
  return s;
}

void dpmd_kv_drop(dpmd_kv *kv, const char *name) {
  if (!name) return;
  pthread_mutex_lock(&kv->mu);
  int i = find_slot(kv, name);
  formation *f = i < 0 ? NULL : kv->f[i];
  if (f) {
    kv->f[i] = NULL;
    kv->total -= f->bytes;
    pthread_cond_broadcast(&kv->cv);
  }
  pthread_mutex_unlock(&kv->mu);
  free_formation(f);
}

dpm_status dpmd_kv_fail(dpmd_kv *kv, const char *name, unsigned shard_id, const char *why,
                        dpm_err *err) {
  if (check_formation(name, err)) return err->code;
  char text[DPMD_KV_MAX_FAILURE + 1];
  dpm_escape(why ? why : "", text, sizeof text);
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&kv->mu);
  formation *f = find(kv, name);
  if (!f) {
    s = gone(name, err);
  } else if (!f->failed[0]) {
    snprintf(f->failed, sizeof f->failed, "shard %u could not build: %s", shard_id, text);
    pthread_cond_broadcast(&kv->cv);
  }
  pthread_mutex_unlock(&kv->mu);
  return s;
}

/* ---- keys -------------------------------------------------------------------- */

dpm_status dpmd_kv_set(dpmd_kv *kv, const char *name, const char *key, const void *value,
                       size_t len, dpm_err *err) {
  if (check_formation(name, err) || check_key(key, err)) return err->code;
  if (len > DPMD_KV_MAX_VALUE)
    return dpm_errf(err, DPM_DENIED, "a rendezvous value of %zu bytes; at most %u", len,
                    DPMD_KV_MAX_VALUE);
  if (len && !value)
    return dpm_errf(err, DPM_INVALID, "a value of %zu bytes at NULL", len);
  size_t klen = strlen(key);
  size_t cost = klen + 1 + len + DPMD_KV_ENTRY_COST; /* each term bounded above */
  /* copies made before the lock, freed if unused */
  char *k = malloc(klen + 1);
  void *v = malloc(len ? len : 1);
  if (!k || !v) {
    free(k);
    free(v);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  memcpy(k, key, klen + 1);
  if (len) memcpy(v, value, len);
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&kv->mu);
  formation *f = find(kv, name);
  entry *e = f ? lookup(f, key) : NULL;
  if (!f) {
    s = gone(name, err);
  } else if (f->failed[0]) {
    s = failed(f, err);
  } else if (e) {
    if (e->len != len || (len && memcmp(e->value, value, len))) {
      char b[DPMD_KV_MAX_KEY * 4];
      s = dpm_errf(err, DPM_EXISTS, "rendezvous key '%s' is set already, to other bytes",
                   dpm_escape(key, b, sizeof b));
    }
  } else if (f->n >= DPMD_KV_MAX_KEYS) {
    s = dpm_errf(err, DPM_DENIED, "formation %s holds %d keys, the most a formation may",
                 name, DPMD_KV_MAX_KEYS);
  } else if (cost > DPMD_KV_MAX_BYTES - f->bytes) {
    s = dpm_errf(err, DPM_DENIED, "formation %s would hold more than %u bytes", name,
                 DPMD_KV_MAX_BYTES);
  } else if (cost > DPMD_KV_MAX_TOTAL - kv->total) {
    s = dpm_errf(err, DPM_DENIED,
                 "the rendezvous store would hold more than %u bytes in all",
                 DPMD_KV_MAX_TOTAL);
  } else {
    if (f->n == f->cap) { /* cap <= DPMD_KV_MAX_KEYS: no overflow */
      size_t cap = f->cap ? 2 * f->cap : 8;
      entry *nv = realloc(f->v, cap * sizeof *nv);
      if (!nv)
        s = dpm_errf(err, DPM_NOMEM, "out of memory");
      else
        f->v = nv, f->cap = cap;
    }
    if (!s) {
      f->v[f->n++] = (entry){.key = k, .value = v, .len = len};
      k = NULL, v = NULL; /* the store's now */
      f->bytes += cost;
      kv->total += cost;
      pthread_cond_broadcast(&kv->cv);
    }
  }
  pthread_mutex_unlock(&kv->mu);
  free(k);
  free(v);
  return s;
}

dpm_status dpmd_kv_get(dpmd_kv *kv, const char *name, const char *key, int timeout_ms,
                       void **value, size_t *len, dpm_err *err) {
  *value = NULL;
  *len = 0;
  if (check_formation(name, err) || check_key(key, err)) return err->code;
  struct timespec until = dpm_mono_deadline(timeout_ms > 0 ? timeout_ms : 0);
  dpm_status s = DPM_OK;
  int timed_out = 0;
  pthread_mutex_lock(&kv->mu);
  for (;;) { /* a wait may have dropped the formation: look it up each time */
    formation *f = find(kv, name);
    entry *e = f ? lookup(f, key) : NULL;
    if (!f) {
      s = gone(name, err);
      break;
    }
    if (f->failed[0]) {
      s = failed(f, err);
      break;
    }
    if (e) {
      void *copy = malloc(e->len ? e->len : 1);
      if (!copy) {
        s = dpm_errf(err, DPM_NOMEM, "out of memory");
        break;
      }
      memcpy(copy, e->value, e->len);
      *value = copy;
      *len = e->len;
      break;
    }
    if (timeout_ms <= 0) break; /* not yet */
    if (timed_out) {
      char b[DPMD_KV_MAX_KEY * 4];
      s = dpm_errf(err, DPM_TIMEOUT, "rendezvous key '%s' of %s not set within %d ms",
                   dpm_escape(key, b, sizeof b), name, timeout_ms);
      break;
    }
    timed_out = pthread_cond_timedwait(&kv->cv, &kv->mu, &until) == ETIMEDOUT;
  }
  pthread_mutex_unlock(&kv->mu);
  return s;
}

dpmd_kv_usage dpmd_kv_used(dpmd_kv *kv) {
  dpmd_kv_usage u = {0};
  if (!kv) return u;
  pthread_mutex_lock(&kv->mu);
  for (int i = 0; i < DPMD_KV_MAX_FORMATIONS; i++)
    if (kv->f[i]) u.formations++, u.keys += kv->f[i]->n;
  u.bytes = kv->total;
  pthread_mutex_unlock(&kv->mu);
  return u;
}

/* ---- in process -------------------------------------------------------------- */

static dpm_status local_set(void *ctx, const char *key, const void *value, size_t len,
                            dpm_err *err) {
  dpmd_kv_local *l = ctx;
  return dpmd_kv_set(l->kv, l->formation, key, value, len, err);
}

static dpm_status local_get(void *ctx, const char *key, int timeout_ms, void **value,
                            size_t *len, dpm_err *err) {
  dpmd_kv_local *l = ctx; /* waits at least 1 ms: a value, or DPM_TIMEOUT */
  return dpmd_kv_get(l->kv, l->formation, key, timeout_ms > 0 ? timeout_ms : 1, value,
                     len, err);
}

void dpmd_kv_local_init(dpmd_kv_local *l, dpmd_kv *kv, const char *formation) {
  memset(l, 0, sizeof *l);
  l->kv = kv;
  snprintf(l->formation, sizeof l->formation, "%s", formation);
  l->store = (dpm_comm_store){.ctx = l, .set = local_set, .get = local_get};
}
