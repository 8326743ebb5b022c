/* A fleet job's link without the network (server/fleet/fleet.h): the
 * coordinator's link (a fresh formation each time, the spec given a
 * rendezvous section), the checks of a join (every inconsistency refused
 * by name), and the trainer's options on each shard (the store in
 * process at shard 0, the spec's URL for redis/file stores, the
 * formation, interface and timeout). */
#include <stdlib.h>

#include "common/validate.h"
#include "server/fleet/fleet.h"
#include "server/fleet/kv.h"
#include "test.h"

/* A spec of name over shards endpoints; free with dpm__model_spec__free_unpacked. */
static Dpm__ModelSpec *spec_of(const char *name, int shards) {
  Dpm__ModelSpec *s = calloc(1, sizeof *s);
  dpm__model_spec__init(s);
  s->name = strdup(name);
  s->parallel = calloc(1, sizeof *s->parallel);
  dpm__parallel_spec__init(s->parallel);
  s->parallel->n_shards = (size_t)shards;
  s->parallel->shards = calloc((size_t)shards, sizeof(char *));
  for (int i = 0; i < shards; i++) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://10.0.0.%d:7070", i + 1);
    s->parallel->shards[i] = strdup(ep);
  }
  return s;
}

TEST(fleet_link_coordinator_draws_fresh_formations) {
  Dpm__ModelSpec *s = spec_of("mlp", 2);
  dpmd_fleet_link *a, *b;
  dpm_err err = {0};
  CHECK_INT(dpmd_fleet_coordinate(s, &a, &err), DPM_OK);
  CHECK_INT(dpmd_fleet_coordinate(s, &b, &err), DPM_OK);
  int ok = dpmd_fleet_shard_id(a) == 0 && dpmd_fleet_num_shards(a) == 2 &&
           !strcmp(dpmd_fleet_coordinator(a), "tcp://10.0.0.1:7070") &&
           dpmd_fleet_checkpoints(a);
  const char *f = dpmd_fleet_formation(a);
  ok &= !strncmp(f, "mlp/", 4) && strlen(f) == 4 + 16;
  ok &= strcmp(f, dpmd_fleet_formation(b)) != 0; /* fresh each time */
  /* every shard builds the same spec: the rendezvous is made explicit */
  ok &= s->parallel->rendezvous && !strcmp(s->parallel->rendezvous->store, "daemon") &&
        s->parallel->rendezvous->timeout_ms == 60000;
  dpmd_fleet_link_free(a);
  dpmd_fleet_link_free(b);
  dpm__model_spec__free_unpacked(s, NULL);
  CHECK(ok);
}

static uint8_t some_secret[DPMD_JOB_SECRET_BYTES] = {1, 2, 3};

static dpm_status join_check(Dpm__ModelSpec *s, unsigned id, unsigned n,
                             const char *coord, const char *formation, dpm_err *err) {
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT;
  j.spec = s;
  j.shard_id = id;
  j.num_shards = n;
  j.coordinator = (char *)coord;
  j.formation = (char *)formation;
  j.has_job_secret = 1;
  j.job_secret.data = some_secret;
  j.job_secret.len = sizeof some_secret;
  return dpmd_fleet_check_join(&j, err);
}

TEST(fleet_link_join_checks) {
  Dpm__ModelSpec *s = spec_of("mlp", 3);
  const char *c = "tcp://10.0.0.1:7070";
  dpm_err err = {0};
  int ok = join_check(s, 1, 3, c, "mlp/00", &err) == DPM_OK &&
           join_check(s, 2, 3, c, "mlp/00", &err) == DPM_OK;
  ok &= join_check(s, 0, 3, c, "mlp/00", &err) == DPM_INVALID; /* 0 coordinates */
  ok &= join_check(s, 3, 3, c, "mlp/00", &err) == DPM_INVALID;
  ok &= join_check(s, 1, 2, c, "mlp/00", &err) == DPM_INVALID; /* not the spec's */
  ok &= join_check(s, 1, 3, "tcp://10.0.0.9:7070", "mlp/00", &err) == DPM_INVALID;
  CHECK(ok);
  CHECK_HAS(err.msg, "parallel.shards[0]");
  CHECK_INT(join_check(s, 1, 3, c, "", &err), DPM_INVALID);
  char longname[DPMD_FORMATION_MAX + 1];
  memset(longname, 'f', sizeof longname - 1);
  longname[DPMD_FORMATION_MAX] = 0;
  CHECK_INT(join_check(s, 1, 3, c, longname, &err), DPM_INVALID);
  longname[DPMD_FORMATION_MAX - 1] = 0;
  CHECK_INT(join_check(s, 1, 3, c, longname, &err), DPM_OK);
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT; /* without the job's secret, or short */
  j.spec = s;
  j.shard_id = 1;
  j.num_shards = 3;
  j.coordinator = (char *)c;
  j.formation = "mlp/00";
  CHECK_INT(dpmd_fleet_check_join(&j, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "secret");
  j.has_job_secret = 1;
  j.job_secret.data = some_secret;
  j.job_secret.len = sizeof some_secret - 1;
  CHECK_INT(dpmd_fleet_check_join(&j, &err), DPM_INVALID);
  Dpm__ModelSpec *one = spec_of("mlp", 1); /* a job of one shard has nobody to join */
  CHECK_INT(join_check(one, 1, 1, c, "mlp/00", &err), DPM_INVALID);
  dpm__model_spec__free_unpacked(one, NULL);
  dpm__model_spec__free_unpacked(s, NULL);
}

/* A shard accepts the coordinator-only commands forwarded with the secret
 * its join carried, and nothing else: not the flag alone, not another
 * secret, not a prefix of it, not the secret without the flag. */
TEST(fleet_link_shard_takes_only_its_coordinators_secret) {
  Dpm__ModelSpec *s = spec_of("mlp", 2);
  dpm_err err = {0};
  dpmd_fleet_link *a, *shard;
  CHECK_INT(dpmd_fleet_coordinate(s, &a, &err), DPM_OK);
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT; /* a join, as fleet.c sends it */
  j.spec = s;
  j.shard_id = 1;
  j.num_shards = 2;
  j.coordinator = s->parallel->shards[0];
  j.formation = (char *)dpmd_fleet_formation(a);
  j.has_job_secret = 1;
  j.job_secret.data = some_secret;
  j.job_secret.len = sizeof some_secret;
  CHECK_INT(dpmd_fleet_check_join(&j, &err), DPM_OK);
  CHECK_INT(dpmd_fleet_join(&j, &shard, &err), DPM_OK);
  Dpm__Request fwd = DPM__REQUEST__INIT;
  fwd.forwarded = 1;
  int ok = dpmd_fleet_from_coordinator(shard, &fwd) == 0; /* the flag alone */
  uint8_t guess[DPMD_JOB_SECRET_BYTES] = {1, 2, 4};
  fwd.has_job_secret = 1;
  fwd.job_secret.data = guess;
  fwd.job_secret.len = sizeof guess;
  ok &= dpmd_fleet_from_coordinator(shard, &fwd) == 0;
  fwd.job_secret.data = some_secret;
  ok &= dpmd_fleet_from_coordinator(shard, &fwd) == 1;
  fwd.job_secret.len = sizeof some_secret - 1; /* a prefix */
  ok &= dpmd_fleet_from_coordinator(shard, &fwd) == 0;
  fwd.job_secret.len = sizeof some_secret;
  fwd.forwarded = 0;
  ok &= dpmd_fleet_from_coordinator(shard, &fwd) == 0;
  CHECK(ok);
  dpmd_fleet_link_free(shard);
  dpmd_fleet_link_free(a);
  dpm__model_spec__free_unpacked(s, NULL);
}

TEST(fleet_link_trainer_options_per_store) {
  char *stores[] = {"daemon", "redis://10.0.0.5:6379"}; /* rendezvous_stores */
  dpmd_config cfg = {.token = NULL,
                     .max_message_bytes = 1 << 20,
                     .rendezvous_stores = stores,
                     .n_rendezvous_stores = 2};
  dpmd d = {.cfg = &cfg};
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&d.kv, &err), DPM_OK);
  /* the coordinator, store daemon: the store in process, on its formation */
  Dpm__ModelSpec *s = spec_of("mlp", 2);
  dpmd_fleet_link *l;
  CHECK_INT(dpmd_fleet_coordinate(s, &l, &err), DPM_OK);
  s->parallel->rendezvous->interface = strdup("lo");
  s->parallel->rendezvous->timeout_ms = 1234;
  dpm_trainer_options opt = {0};
  CHECK_INT(dpmd_fleet_options(&d, l, s, &opt, &err), DPM_OK);
  int ok = opt.fleet.shard_id == 0 && opt.fleet.num_shards == 2 &&
           opt.fleet.rendezvous.store == NULL && opt.fleet.rendezvous.kv != NULL &&
           !strcmp(opt.fleet.rendezvous.prefix, dpmd_fleet_formation(l)) &&
           !strcmp(opt.fleet.rendezvous.iface, "lo") && opt.comm_timeout_ms == 1234;
  /* the store is the daemon's, on the formation (once opened by forming) */
  CHECK_INT(dpmd_kv_open(d.kv, dpmd_fleet_formation(l), &err), DPM_OK);
  const dpm_comm_store *st = opt.fleet.rendezvous.kv;
  ok &= st->set(st->ctx, "k", "v", 1, &err) == DPM_OK;
  void *v = NULL;
  size_t n = 0;
  ok &= dpmd_kv_get(d.kv, dpmd_fleet_formation(l), "k", 0, &v, &n, &err) == DPM_OK && v &&
        n == 1;
  free(v);
  dpmd_fleet_link_free(l);
  /* a shard of a job whose store is Redis: the spec's URL */
  /* (the store was protobuf-c's default string, which is not freed) */
  s->parallel->rendezvous->store = strdup("redis://10.0.0.5:6379");
  Dpm__JoinRequest j = DPM__JOIN_REQUEST__INIT;
  j.spec = s;
  j.shard_id = 1;
  j.num_shards = 2;
  j.coordinator = s->parallel->shards[0];
  j.formation = "mlp/0123456789abcdef";
  j.has_job_secret = 1;
  j.job_secret.data = some_secret;
  j.job_secret.len = sizeof some_secret;
  CHECK_INT(dpmd_fleet_join(&j, &l, &err), DPM_OK);
  opt = (dpm_trainer_options){0};
  CHECK_INT(dpmd_fleet_options(&d, l, s, &opt, &err), DPM_OK);
  ok &= opt.fleet.shard_id == 1 && opt.fleet.num_shards == 2 &&
        !strcmp(opt.fleet.rendezvous.store, "redis://10.0.0.5:6379") &&
        opt.fleet.rendezvous.kv == NULL &&
        !strcmp(opt.fleet.rendezvous.prefix, "mlp/0123456789abcdef") &&
        !dpmd_fleet_checkpoints(l);
  /* a store the config does not list: refused before any trainer meets it */
  cfg.n_rendezvous_stores = 1;
  ok &= dpmd_fleet_options(&d, l, s, &opt, &err) == DPM_DENIED &&
        strstr(err.msg, "(rendezvous_stores in its config: daemon)") != NULL;
  dpmd_fleet_link_free(l);
  dpm__model_spec__free_unpacked(s, NULL);
  dpmd_kv_destroy(d.kv);
  CHECK(ok);
}

/* A collective's error names processes; each that is a shard of the spec
 * gets its endpoint, once; out of range or repeated ones nothing more; the
 * result is bounded by cap; naming none, a job of two shards names the
 * other one. */
TEST(fleet_link_failure_names_the_shard) {
  Dpm__ModelSpec *s = spec_of("mlp", 3);
  char out[512];
  dpmd_fleet_name_shards(s, 0,
                         "broadcast: timed out after 1000 ms; not arrived: process 2 "
                         "(job rank 2, 127.0.0.1:4000), process 2, process 9, process x",
                         out, sizeof out);
  CHECK_HAS(out, "not arrived: process 2 (job rank 2");
  CHECK_HAS(out, "; process 2 is shard 2 at tcp://10.0.0.3:7070");
  CHECK(!strstr(strstr(out, "is shard 2") + 1, "is shard 2")); /* once */
  CHECK(!strstr(out, "process 9 is"));
  char small[24];
  dpmd_fleet_name_shards(s, 0, "allreduce: lost process 1 of the job", small,
                         sizeof small);
  CHECK_INT((int)strlen(small), (int)sizeof small - 1);
  dpmd_fleet_name_shards(s, 0, "no process named", out, sizeof out);
  CHECK(!strcmp(out, "no process named")); /* three shards: which one is not known */
  Dpm__ModelSpec *two = spec_of("mlp", 2);
  dpmd_fleet_name_shards(two, 1, "broadcast: timed out after 2000 ms", out, sizeof out);
  CHECK(!strcmp(out,
                "broadcast: timed out after 2000 ms; the other process is shard 0 at "
                "tcp://10.0.0.1:7070"));
  dpm__model_spec__free_unpacked(two, NULL);
  dpm__model_spec__free_unpacked(s, NULL);
}

/* Elastic resume's batch: kept when the new devices divide the global
 * batch (each its share), else refused naming --allow-batch-change, which
 * keeps the per-device batch and changes the global one. */
TEST(fleet_link_elastic_batch_rule) {
  uint32_t b = 0;
  int changed = -1;
  dpm_err err = {0};
  CHECK_INT(dpmd_fleet_elastic_batch(64, 1, 2, 1, 0, &b, &changed, &err), DPM_OK);
  CHECK(b == 128 && changed == 0); /* 2 shards -> 1: 128 on one device */
  CHECK_INT(dpmd_fleet_elastic_batch(128, 1, 1, 2, 0, &b, &changed, &err), DPM_OK);
  CHECK(b == 64 && changed == 0); /* and back */
  CHECK_INT(dpmd_fleet_elastic_batch(64, 2, 3, 2, 0, &b, &changed, &err), DPM_OK);
  CHECK(b == 96 && changed == 0); /* 384 over 4 devices */
  CHECK_INT(dpmd_fleet_elastic_batch(128, 1, 1, 3, 0, &b, &changed, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "global batch of 128 does not divide among 3 devices");
  CHECK_HAS(err.msg, "--allow-batch-change keeps the per-device batch of 128");
  CHECK_INT(dpmd_fleet_elastic_batch(128, 1, 1, 3, 1, &b, &changed, &err), DPM_OK);
  CHECK(b == 128 && changed == 1);
  /* a share above the spec's largest batch is not kept either */
  CHECK_INT(dpmd_fleet_elastic_batch(DPM_SPEC_MAX_BATCH, 1, 2, 1, 0, &b, &changed, &err),
            DPM_INVALID);
  CHECK_INT(dpmd_fleet_elastic_batch(0, 1, 2, 1, 1, &b, &changed, &err), DPM_INVALID);
}
