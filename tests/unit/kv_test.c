/* The coordinator's rendezvous store (server/fleet/kv.h): formations as
 * namespaces (a key of one is not another's; a formation not open refuses
 * both set and get; dropping one removes its keys and wakes its waiters),
 * set-once semantics, "not yet" answers, every bound (key length, value
 * size, keys and bytes per formation, formations, bytes in all) refused
 * with nothing changed, a formation marked failed (every get and set,
 * waiting or not, fails with the first shard's message), and the
 * in-process store the coordinator's own shard uses (waits for a key
 * another thread sets; times out). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "server/fleet/kv.h"
#include "test.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* get at once: 1 with the value as a string in buf, 0 when not yet, -1 on
 * an error (its code in *code). */
static int get_now(dpmd_kv *kv, const char *f, const char *key, char *buf, size_t cap,
                   dpm_status *code) {
  void *v;
  size_t n;
  dpm_err err = {0};
  *code = dpmd_kv_get(kv, f, key, 0, &v, &n, &err);
  if (*code) return -1;
  if (!v) return 0;
  snprintf(buf, cap, "%.*s", (int)n, (const char *)v);
  free(v);
  return 1;
}

TEST(kv_formations_are_namespaces) {
  dpmd_kv *kv;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "a/1", &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "b/1", &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "a/1", &err), DPM_EXISTS);
  CHECK_INT(dpmd_kv_set(kv, "a/1", "rank_0", "x", 1, &err), DPM_OK);
  char buf[64];
  dpm_status code;
  int ok = get_now(kv, "a/1", "rank_0", buf, sizeof buf, &code) == 1 && !strcmp(buf, "x");
  ok &= get_now(kv, "b/1", "rank_0", buf, sizeof buf, &code) == 0; /* not yet, there */
  ok &= get_now(kv, "a/1", "rank_1", buf, sizeof buf, &code) == 0;
  CHECK(ok);
  /* a formation that is not open: refused both ways */
  CHECK_INT(dpmd_kv_set(kv, "c/1", "rank_0", "x", 1, &err), DPM_NOT_FOUND);
  CHECK_HAS(err.msg, "no formation 'c/1'");
  CHECK_INT(get_now(kv, "c/1", "rank_0", buf, sizeof buf, &code), -1);
  CHECK_INT(code, DPM_NOT_FOUND);
  /* set once: the same bytes again are fine, other bytes are refused */
  CHECK_INT(dpmd_kv_set(kv, "a/1", "rank_0", "x", 1, &err), DPM_OK);
  CHECK_INT(dpmd_kv_set(kv, "a/1", "rank_0", "y", 1, &err), DPM_EXISTS);
  CHECK_INT(dpmd_kv_set(kv, "a/1", "rank_0", "xx", 2, &err), DPM_EXISTS);
  CHECK_INT(get_now(kv, "a/1", "rank_0", buf, sizeof buf, &code), 1);
  CHECK(!strcmp(buf, "x"));
  /* an empty value is a value, not "not yet" */
  CHECK_INT(dpmd_kv_set(kv, "b/1", "empty", NULL, 0, &err), DPM_OK);
  CHECK_INT(get_now(kv, "b/1", "empty", buf, sizeof buf, &code), 1);
  CHECK(!strcmp(buf, ""));
  /* dropping a formation removes its keys, and the name may not be used */
  dpmd_kv_usage u = dpmd_kv_used(kv);
  CHECK_INT(u.formations, 2);
  CHECK_INT(u.keys, 2);
  dpmd_kv_drop(kv, "a/1");
  dpmd_kv_drop(kv, "a/1"); /* twice: nothing */
  dpmd_kv_drop(kv, "never");
  CHECK_INT(get_now(kv, "a/1", "rank_0", buf, sizeof buf, &code), -1);
  CHECK_INT(code, DPM_NOT_FOUND);
  CHECK_INT(dpmd_kv_open(kv, "a/1", &err), DPM_OK); /* open again: empty */
  CHECK_INT(get_now(kv, "a/1", "rank_0", buf, sizeof buf, &code), 0);
  dpmd_kv_drop(kv, "a/1");
  dpmd_kv_drop(kv, "b/1");
  u = dpmd_kv_used(kv);
  CHECK_INT(u.formations, 0);
  CHECK_INT(u.keys, 0);
  CHECK_INT(u.bytes, 0);
  dpmd_kv_destroy(kv);
}

TEST(kv_key_and_name_bounds) {
  dpmd_kv *kv;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  char name[DPMD_FORMATION_MAX + 1];
  memset(name, 'f', sizeof name);
  name[DPMD_FORMATION_MAX] = 0;
  CHECK_INT(dpmd_kv_open(kv, name, &err), DPM_INVALID); /* 96 bytes */
  name[DPMD_FORMATION_MAX - 1] = 0;
  CHECK_INT(dpmd_kv_open(kv, name, &err), DPM_OK); /* 95 */
  CHECK_INT(dpmd_kv_open(kv, "", &err), DPM_INVALID);
  char key[DPMD_KV_MAX_KEY + 2];
  memset(key, 'k', sizeof key);
  key[DPMD_KV_MAX_KEY + 1] = 0;
  CHECK_INT(dpmd_kv_set(kv, name, key, "v", 1, &err), DPM_INVALID);
  void *v;
  size_t n;
  CHECK_INT(dpmd_kv_get(kv, name, key, 0, &v, &n, &err), DPM_INVALID);
  CHECK_INT(dpmd_kv_set(kv, name, "", "v", 1, &err), DPM_INVALID);
  key[DPMD_KV_MAX_KEY] = 0;
  CHECK_INT(dpmd_kv_set(kv, name, key, "v", 1, &err), DPM_OK);
  /* values: at most DPMD_KV_MAX_VALUE bytes */
  char *big = calloc(1, DPMD_KV_MAX_VALUE + 1);
  CHECK(big != NULL);
  dpm_status s1 = dpmd_kv_set(kv, name, "big", big, DPMD_KV_MAX_VALUE + 1, &err);
  dpm_status s2 = dpmd_kv_set(kv, name, "max", big, DPMD_KV_MAX_VALUE, &err);
  free(big);
  CHECK_INT(s1, DPM_DENIED);
  CHECK_INT(s2, DPM_OK);
  CHECK_INT(dpmd_kv_get(kv, name, "big", 0, &v, &n, &err), DPM_OK);
  CHECK(v == NULL); /* the refused set left nothing */
  dpmd_kv_destroy(kv);
}

TEST(kv_keys_bytes_and_formations_bounds) {
  dpmd_kv *kv;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  /* keys per formation */
  CHECK_INT(dpmd_kv_open(kv, "keys", &err), DPM_OK);
  char key[32];
  int ok = 1;
  for (int i = 0; i < DPMD_KV_MAX_KEYS; i++) {
    snprintf(key, sizeof key, "k%d", i);
    ok &= dpmd_kv_set(kv, "keys", key, "v", 1, &err) == DPM_OK;
  }
  CHECK(ok);
  CHECK_INT(dpmd_kv_set(kv, "keys", "one-more", "v", 1, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "keys");
  CHECK_INT(dpmd_kv_set(kv, "keys", "k7", "v", 1, &err), DPM_OK); /* same bytes again */
  dpmd_kv_drop(kv, "keys");
  /* bytes per formation: 1 MiB values until 16 MiB */
  char *mib = calloc(1, DPMD_KV_MAX_VALUE);
  CHECK(mib != NULL);
  CHECK_INT(dpmd_kv_open(kv, "bytes", &err), DPM_OK);
  int fitted = 0;
  dpm_status s;
  for (;;) {
    snprintf(key, sizeof key, "v%d", fitted);
    if ((s = dpmd_kv_set(kv, "bytes", key, mib, DPMD_KV_MAX_VALUE, &err))) break;
    fitted++;
  }
  CHECK_INT(s, DPM_DENIED);
  CHECK_INT(fitted, DPMD_KV_MAX_BYTES / DPMD_KV_MAX_VALUE - 1); /* entries cost more */
  CHECK_INT(dpmd_kv_set(kv, "bytes", "small", "v", 1, &err), DPM_OK);
  /* bytes in all: formations of 15 MiB until 64 MiB */
  int formations = 1;
  s = DPM_OK;
  for (int f = 0; f < 8 && !s; f++) {
    char name[16];
    snprintf(name, sizeof name, "more%d", f);
    CHECK_INT(dpmd_kv_open(kv, name, &err), DPM_OK);
    formations++;
    for (int i = 0; i < fitted && !s; i++) {
      snprintf(key, sizeof key, "v%d", i);
      s = dpmd_kv_set(kv, name, key, mib, DPMD_KV_MAX_VALUE, &err);
    }
  }
  free(mib);
  CHECK_INT(s, DPM_DENIED);
  CHECK_HAS(err.msg, "in all");
  dpmd_kv_usage u = dpmd_kv_used(kv);
  CHECK(u.bytes <= DPMD_KV_MAX_TOTAL);
  CHECK(u.bytes > DPMD_KV_MAX_TOTAL - DPMD_KV_MAX_VALUE - 2 * DPMD_KV_ENTRY_COST);
  /* formations */
  for (int f = formations; f < DPMD_KV_MAX_FORMATIONS; f++) {
    char name[16];
    snprintf(name, sizeof name, "f%d", f);
    ok &= dpmd_kv_open(kv, name, &err) == DPM_OK;
  }
  CHECK(ok);
  CHECK_INT(dpmd_kv_used(kv).formations, DPMD_KV_MAX_FORMATIONS);
  CHECK_INT(dpmd_kv_open(kv, "too-many", &err), DPM_DENIED);
  dpmd_kv_drop(kv, "bytes"); /* a slot and its bytes come back */
  CHECK_INT(dpmd_kv_open(kv, "too-many", &err), DPM_OK);
  CHECK(dpmd_kv_used(kv).bytes < u.bytes);
  dpmd_kv_destroy(kv);
}

typedef struct {
  dpmd_kv *kv;
  const char *formation;
  int delay_ms, drop; /* set "late" after delay_ms, or drop the formation (1), or mark
                         it failed (2) */
} setter;

static void *set_later(void *arg) {
  setter *s = arg;
  nanosleep(&(struct timespec){0, s->delay_ms * 1000000L}, NULL);
  dpm_err err = {0};
  if (s->drop == 1)
    dpmd_kv_drop(s->kv, s->formation);
  else if (s->drop == 2)
    dpmd_kv_fail(s->kv, s->formation, 3, "no data\nhere", &err);
  else
    dpmd_kv_set(s->kv, s->formation, "late", "value", 5, &err);
  return NULL;
}

TEST(kv_failed_formation_fails_every_wait) {
  dpmd_kv *kv;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "job/1", &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "job/2", &err), DPM_OK);
  CHECK_INT(dpmd_kv_set(kv, "job/1", "set", "v", 1, &err), DPM_OK);
  CHECK_INT(dpmd_kv_fail(kv, "nope", 1, "x", &err), DPM_NOT_FOUND);
  /* a waiter learns of the failure at once, with the shard's message */
  setter s = {kv, "job/1", 50, 2};
  pthread_t th;
  pthread_create(&th, NULL, set_later, &s);
  double t0 = now_ms();
  void *v = NULL;
  size_t n = 0;
  dpm_status got = dpmd_kv_get(kv, "job/1", "never", 5000, &v, &n, &err);
  pthread_join(th, NULL);
  CHECK_INT(got, DPM_IO);
  CHECK(now_ms() - t0 < 4000);
  CHECK_HAS(err.msg, "shard 3 could not build: no data\\nhere"); /* escaped */
  /* then every get (a key set before too) and set fails alike; the first
   * failure stays */
  CHECK_INT(dpmd_kv_fail(kv, "job/1", 4, "later", &err), DPM_OK);
  CHECK_INT(dpmd_kv_get(kv, "job/1", "set", 0, &v, &n, &err), DPM_IO);
  CHECK_HAS(err.msg, "shard 3");
  CHECK_INT(dpmd_kv_set(kv, "job/1", "other", "v", 1, &err), DPM_IO);
  /* other formations are untouched */
  CHECK_INT(dpmd_kv_set(kv, "job/2", "k", "v", 1, &err), DPM_OK);
  CHECK_INT(dpmd_kv_get(kv, "job/2", "k", 0, &v, &n, &err), DPM_OK);
  free(v);
  dpmd_kv_destroy(kv);
}

TEST(kv_local_store_waits_times_out_and_sees_drops) {
  dpmd_kv *kv;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "job/1", &err), DPM_OK);
  dpmd_kv_local l;
  dpmd_kv_local_init(&l, kv, "job/1");
  const dpm_comm_store *st = &l.store;
  CHECK_INT(st->set(st->ctx, "mine", "abc", 3, &err), DPM_OK);
  void *v = NULL;
  size_t n = 0;
  CHECK_INT(st->get(st->ctx, "mine", 1000, &v, &n, &err), DPM_OK);
  CHECK_INT(n, 3);
  CHECK(!memcmp(v, "abc", 3));
  free(v);
  /* a key set by another thread while waiting */
  setter s = {kv, "job/1", 50, 0};
  pthread_t th;
  pthread_create(&th, NULL, set_later, &s);
  double t0 = now_ms();
  dpm_status got = st->get(st->ctx, "late", 5000, &v, &n, &err);
  pthread_join(th, NULL);
  CHECK_INT(got, DPM_OK);
  CHECK(n == 5 && !memcmp(v, "value", 5));
  free(v);
  CHECK(now_ms() - t0 < 4000);
  /* never set: DPM_TIMEOUT after the timeout */
  t0 = now_ms();
  CHECK_INT(st->get(st->ctx, "never", 100, &v, &n, &err), DPM_TIMEOUT);
  double took = now_ms() - t0;
  CHECK(took >= 95 && took < 2000);
  CHECK_HAS(err.msg, "'never'");
  /* dropped while waiting: DPM_NOT_FOUND at once */
  s = (setter){kv, "job/1", 50, 1};
  pthread_create(&th, NULL, set_later, &s);
  t0 = now_ms();
  got = st->get(st->ctx, "never", 5000, &v, &n, &err);
  pthread_join(th, NULL);
  CHECK_INT(got, DPM_NOT_FOUND);
  CHECK(now_ms() - t0 < 4000);
  dpmd_kv_destroy(kv);
}
