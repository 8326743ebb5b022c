/* The coordinator's store over RPC (kvpeer.h): kv-set, and kv-get polled
 * with a doubling backoff until the get's deadline. */
#include "server/fleet/kvpeer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/escape.h"
#include "server/fleet/kv.h"
#include "server/fleet/peer.h"

struct dpmd_kvpeer {
  dpm_comm_store store; /* ctx: this struct */
  dpmd_peer *peer;      /* the coordinator */
  char formation[DPMD_FORMATION_MAX];
  int call_ms; /* a set, or one call of a get, waits at most this long */
};

static void sleep_ms(int ms) {
  nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

static dpm_status key_err(dpm_err *err, const char *key) {
  char b[DPMD_KV_MAX_KEY * 4];
  return dpm_err_prefix(err, "rendezvous key '%s': ", dpm_escape(key, b, sizeof b));
}

static dpm_status kvpeer_set(void *ctx, const char *key, const void *value, size_t len,
                             dpm_err *err) {
  dpmd_kvpeer *k = ctx;
  Dpm__KvSetRequest set = DPM__KV_SET_REQUEST__INIT;
  set.formation = k->formation;
  set.key = (char *)key;
  set.value.data = (uint8_t *)value;
  set.value.len = len;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_KV_SET;
  rq.kv_set = &set;
  Dpm__Response *r;
  if (dpmd_peer_call(k->peer, &rq, k->call_ms, &r, err)) return key_err(err, key);
  dpm__response__free_unpacked(r, NULL);
  return DPM_OK;
}

/* One kv-get within ms: 1 with the value, 0 not yet, -1 on an error. */
static int get_once(dpmd_kvpeer *k, const char *key, int ms, void **value, size_t *len,
                    dpm_err *err) {
  Dpm__KvGetRequest get = DPM__KV_GET_REQUEST__INIT;
  get.formation = k->formation;
  get.key = (char *)key;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_KV_GET;
  rq.kv_get = &get;
  Dpm__Response *r;
  if (dpmd_peer_call(k->peer, &rq, ms, &r, err)) return -1;
  int got = 0;
  if (r->result_case != DPM__RESPONSE__RESULT_KV) {
    dpm_errf(err, DPM_CORRUPT, "%s answered kv-get without a value",
             dpmd_peer_endpoint(k->peer));
    got = -1;
  } else if (r->kv->has_value) {
    size_t n = r->kv->value.len;
    void *copy = n > DPMD_KV_MAX_VALUE ? NULL : malloc(n ? n : 1);
    if (n > DPMD_KV_MAX_VALUE)
      dpm_errf(err, DPM_CORRUPT, "%s sent a value of %zu bytes (at most %u)",
               dpmd_peer_endpoint(k->peer), n, DPMD_KV_MAX_VALUE);
    else if (!copy)
      dpm_errf(err, DPM_NOMEM, "out of memory");
    if (copy) {
      if (n) memcpy(copy, r->kv->value.data, n);
      *value = copy;
      *len = n;
      got = 1;
    } else {
      got = -1;
    }
  }
  dpm__response__free_unpacked(r, NULL);
  return got;
}

static dpm_status kvpeer_get(void *ctx, const char *key, int timeout_ms, void **value,
                             size_t *len, dpm_err *err) {
  dpmd_kvpeer *k = ctx;
  *value = NULL;
  *len = 0;
  int64_t deadline = dpm_mono_ms() + (timeout_ms > 0 ? timeout_ms : 1);
  int backoff = DPMD_KVPEER_FIRST_MS;
  for (;;) {
    int64_t left = deadline - dpm_mono_ms();
    if (left <= 0) break;
    /* a call may overrun the deadline by a second rather than fail on a
     * sliver of time */
    int call_ms = left < 1000 ? 1000 : left > k->call_ms ? k->call_ms : (int)left;
    int got = get_once(k, key, call_ms, value, len, err);
    if (got > 0) return DPM_OK;
    if (got < 0) return key_err(err, key);
    left = deadline - dpm_mono_ms();
    if (left <= 0) break;
    sleep_ms(backoff < left ? backoff : (int)left);
    if (backoff < DPMD_KVPEER_MAX_MS) backoff *= 2;
    if (backoff > DPMD_KVPEER_MAX_MS) backoff = DPMD_KVPEER_MAX_MS;
  }
  char b[DPMD_KV_MAX_KEY * 4];
  return dpm_errf(err, DPM_TIMEOUT,
                  "rendezvous key '%s' of %s not set at the coordinator %s within %d ms",
                  dpm_escape(key, b, sizeof b), k->formation, dpmd_peer_endpoint(k->peer),
                  timeout_ms);
}

dpm_status dpmd_kvpeer_open(const dpmd *d, const char *coordinator, const char *formation,
                            int call_ms, dpmd_kvpeer **out, dpm_err *err) {
  *out = NULL;
  if (!formation || strlen(formation) >= DPMD_FORMATION_MAX)
    return dpm_errf(err, DPM_INVALID, "a formation is named by 1 to %d bytes",
                    DPMD_FORMATION_MAX - 1);
  dpmd_kvpeer *k = calloc(1, sizeof *k);
  if (!k) return dpm_errf(err, DPM_NOMEM, "out of memory");
  if (dpmd_peer_open(d, coordinator, &k->peer, err)) {
    free(k);
    return err->code;
  }
  memcpy(k->formation, formation, strlen(formation) + 1);
  k->call_ms = call_ms > 0 ? call_ms : 1;
  k->store = (dpm_comm_store){.ctx = k, .set = kvpeer_set, .get = kvpeer_get};
  *out = k;
  return DPM_OK;
}

const dpm_comm_store *dpmd_kvpeer_store(dpmd_kvpeer *k) { return &k->store; }

void dpmd_kvpeer_close(dpmd_kvpeer *k) {
  if (!k) return;
  dpmd_peer_close(k->peer);
  free(k);
}
