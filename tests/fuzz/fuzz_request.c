/* Fuzz target: what dpmd does with a client's bytes before a request reaches
 * a handler (daemon/server/request.h): the bounded decoder (size, NUL bytes
 * in strings, the unpacked form's memory), then the argument checks that
 * need no model (paths' form against a real dpmd_paths, overrides moved
 * into a submitted spec, the model name, a join's shard), then, for a
 * submit or a join, the spec's validation (common/validate.h); a kv-set,
 * kv-get or kv-fail goes to a rendezvous store (server/fleet/kv.h) with one open
 * formation, "f", which is made afresh every 4096 requests. No file is
 * opened. */
#include <stdlib.h>
#include <sys/stat.h>

#include "common/validate.h"
#include "fuzz.h"
#include "server/commands.h"
#include "server/fleet/kv.h"
#include "server/paths.h"
#include "server/request.h"

/* A state dir and its paths, made once (read-only afterwards). */
static const dpmd_paths *paths(void) {
  static dpmd_config cfg;
  static dpmd_paths *p;
  if (p) return p;
  char dir[] = "/tmp/dpm-fuzz-XXXXXX", models[64], text[256];
  FUZZ_CHECK(mkdtemp(dir));
  snprintf(models, sizeof models, "%s/models", dir);
  FUZZ_CHECK(mkdir(models, 0700) == 0);
  snprintf(text, sizeof text, "state_dir: %s\nallowed_paths: [/tmp/allowed]\n", dir);
  dpm_err err = {0};
  FUZZ_CHECK(!dpmd_config_parse(text, strlen(text), "fuzz", &cfg, &err));
  FUZZ_CHECK(!dpmd_paths_create(&cfg, &p, &err));
  return p;
}

/* The rendezvous store, with formation "f" open. */
static dpmd_kv *store(void) {
  static dpmd_kv *kv;
  static int sets;
  dpm_err err = {0};
  if (!kv) FUZZ_CHECK(!dpmd_kv_create(&kv, &err));
  if (sets++ % 4096 == 0) {
    dpmd_kv_drop(kv, "f");
    FUZZ_CHECK(!dpmd_kv_open(kv, "f", &err));
  }
  return kv;
}

static void kv_request(const Dpm__Request *rq) {
  dpm_err err = {0};
  dpm_status st = DPM_OK;
  if (rq->command_case == DPM__REQUEST__COMMAND_KV_SET) {
    const Dpm__KvSetRequest *r = rq->kv_set;
    st = dpmd_kv_set(store(), r->formation, r->key, r->value.data, r->value.len, &err);
  } else if (rq->command_case == DPM__REQUEST__COMMAND_KV_GET) {
    void *v = NULL;
    size_t n = 0;
    st = dpmd_kv_get(store(), rq->kv_get->formation, rq->kv_get->key, 0, &v, &n, &err);
    FUZZ_CHECK(st || !v || n <= DPMD_KV_MAX_VALUE);
    free(v);
  } else if (rq->command_case == DPM__REQUEST__COMMAND_KV_FAIL) {
    const Dpm__KvFailRequest *r = rq->kv_fail;
    st = dpmd_kv_fail(store(), r->formation, r->shard_id, r->message, &err);
  }
  if (st) FUZZ_CHECK(err.code == st && err.msg[0]);
  FUZZ_CHECK(dpmd_kv_used(store()).bytes <= DPMD_KV_MAX_TOTAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Dpm__Request *rq = NULL;
  dpm_err err = {0};
  dpm_status st = dpmd_request_decode(data, size, 1u << 20, &rq, &err);
  if (st) {
    FUZZ_CHECK(rq == NULL && err.code == st && err.msg[0]);
    return 0;
  }
  st = dpmd_command_check(paths(), rq, &err);
  if (!st && rq->command_case == DPM__REQUEST__COMMAND_SUBMIT) {
    const Dpm__ModelSpec *s = rq->submit->spec;
    FUZZ_CHECK(s->parallel && s->parallel->n_devices >= 1 &&
               dpm_model_name_valid(s->name));
    st = dpm_spec_validate(s, &err);
  }
  if (!st && rq->command_case == DPM__REQUEST__COMMAND_JOIN) {
    const Dpm__JoinRequest *j = rq->join;
    FUZZ_CHECK(j->shard_id >= 1 && j->shard_id < j->num_shards &&
               j->spec->parallel->n_shards == j->num_shards &&
               dpm_model_name_valid(j->spec->name));
    st = dpm_spec_validate(j->spec, &err);
  }
  if (!st) kv_request(rq);
  if (st) FUZZ_CHECK(err.code == st && err.msg[0]);
  dpm__request__free_unpacked(rq, NULL);
  return 0;
}
