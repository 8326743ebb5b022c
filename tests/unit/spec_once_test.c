/* A spec on dpmd's submit path (and on dpm-train's) is validated once, hashed once, and
 * its device names are parsed once (common/workcount.h counts each): from the decoded
 * request to the model built on its devices, through the command table, the device check,
 * the crew and the trainer. A dpmd core on a private loop (this thread its loop thread,
 * no sockets), two CPU devices, a real model built on its own thread, then deleted. */
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/checked_spec.h"
#include "common/clock.h"
#include "common/spec.h"
#include "common/workcount.h"
#include "server/commands.h"
#include "server/devices.h"
#include "server/models/model.h"
#include "server/models/registry.h"
#include "server/paths.h"
#include "server/sched.h"
#include "test.h"
#include "train/trainer.h"

static const char tiny_yaml[] =
    "name: once\n"
    "input: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 4, 4],"
    " num_classes: 3}\n"
    "forward:\n"
    "  - {op: FC, in: [data], out: pred, dim_out: 3}\n"
    "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
    "losses: [loss]\n";

/* The model leaves the registry once its thread ended (as server.c does). */
static void exited(void *arg, struct dpmd_model *m) {
  dpmd_registry_remove(arg, m);
  dpmd_model_free(m);
}

/* Runs the loop until done(arg) or 60 s pass; returns done(arg). */
static int run_until(uv_loop_t *loop, int (*done)(void *), void *arg) {
  double end = dpm_mono_ns() / 1e9 + 60;
  while (!done(arg) && dpm_mono_ns() / 1e9 < end) {
    uv_run(loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return done(arg);
}

static int built(void *m) { return dpmd_model_state(m) != DPMD_BUILDING; }
static int emptied(void *r) { return dpmd_registry_count(r) == 0; }

TEST(spec_checked_once_on_the_submit_path) {
  char dir[64] = "/tmp/dpm-spec-once-XXXXXX", models[96], text[256];
  CHECK(mkdtemp(dir));
  snprintf(models, sizeof models, "%s/models", dir);
  CHECK(!mkdir(models, 0700));
  snprintf(text, sizeof text, "state_dir: %s\ndevices: {cpu: 2}\n", dir);
  dpm_err err = {0};
  dpmd_config cfg;
  dpmd_paths *paths = NULL;
  dpmd_registry *r = NULL;
  dpmd_devices *dv = NULL;
  uv_loop_t loop;
  int ok = !dpmd_config_parse(text, strlen(text), "t", &cfg, &err) &&
           !dpmd_paths_create(&cfg, &paths, &err) && !dpmd_registry_create(&r, &err) &&
           !dpmd_devices_create(2, 0, 0, &dv, &err) && !uv_loop_init(&loop);
  if (!ok) printf("    setup: %s\n", err.msg);
  free(cfg.events); /* publishes none */
  cfg.events = NULL;
  dpmd d = {.cfg = &cfg, .paths = paths, .devices = dv};
  ok = ok && !dpmd_sched_new(0, 0, &d.sched, &err);
  ok = ok && !dpmd_core_start(&d, &loop, -1, -1,
                              &(dpmd_core_hooks){.exited = exited, .arg = r}, &err);

  /* the client's side: the YAML parsed (and checked) there, then the bytes */
  Dpm__ModelSpec *spec = NULL;
  ok = ok && !dpm_spec_parse(tiny_yaml, strlen(tiny_yaml), "once.yaml", &spec, &err);
  char *devices[] = {"cpu:0", "cpu:1"};
  Dpm__SubmitRequest sr = DPM__SUBMIT_REQUEST__INIT;
  sr.spec = spec;
  sr.devices = devices;
  sr.n_devices = 2;
  Dpm__Request stack = DPM__REQUEST__INIT;
  stack.version = DPM_PROTOCOL_VERSION;
  stack.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  stack.submit = &sr;
  size_t n = dpm__request__get_packed_size(&stack);
  uint8_t *buf = ok ? malloc(n) : NULL;
  Dpm__Request *rq = NULL;
  if (buf) {
    dpm__request__pack(&stack, buf);
    rq = dpm__request__unpack(NULL, n, buf);
  }
  free(buf);
  dpm_spec_free(spec);

  unsigned long before[DPM_WORK_COUNT], after[DPM_WORK_COUNT];
  for (int k = 0; k < DPM_WORK_COUNT; k++) before[k] = atomic_load(&dpm_work_done[k]);
  struct dpmd_model *m = NULL;
  int ready = 0, gone = 0;
  if (rq) {
    dpmd_reply_to to = {.command = rq->command_case}; /* no header: nobody answered */
    dpmd_handle(&d, r, rq, &to);
    m = dpmd_registry_find(r, "once");
  }
  if (m) ready = run_until(&loop, built, m) && dpmd_model_state(m) == DPMD_READY;
  for (int k = 0; k < DPM_WORK_COUNT; k++) after[k] = atomic_load(&dpm_work_done[k]);
  if (m) {
    dpmd_model_end(m, 1, NULL);
    gone = run_until(&loop, emptied, r);
  }
  if (ok) {
    dpmd_core_close(&d);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  }
  dpmd_core_free(&d);
  dpmd_sched_free(d.sched);
  dpmd_devices_destroy(dv);
  dpmd_registry_destroy(r);
  dpmd_paths_destroy(paths);
  dpmd_config_fini(&cfg);
  rmdir(models);
  rmdir(dir);
  CHECK(ok && rq);
  CHECK(m && ready);
  CHECK(gone);
  unsigned long validated =
                    after[DPM_WORK_SPEC_VALIDATE] - before[DPM_WORK_SPEC_VALIDATE],
                hashed = after[DPM_WORK_SPEC_HASH] - before[DPM_WORK_SPEC_HASH],
                parsed = after[DPM_WORK_DEVICE_PARSE] - before[DPM_WORK_DEVICE_PARSE];
  if (validated != 1 || hashed != 1 || parsed != 2)
    dpm_test_fail(__FILE__, __LINE__,
                  "validated %lu times (want 1), hashed %lu (want 1), %lu device names "
                  "parsed (want 2)",
                  validated, hashed, parsed);
}

/* dpm-train's path: the file read and checked once, then the trainer on
 * the check's devices, with the check's hash; nothing of it again. */
TEST(spec_checked_once_by_dpm_train) {
  char path[] = "/tmp/dpm-spec-once-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char *par = "parallel: {devices: [cpu:1, cpu:0]}\n";
  int wrote = write(fd, tiny_yaml, strlen(tiny_yaml)) == (ssize_t)strlen(tiny_yaml) &&
              write(fd, par, strlen(par)) == (ssize_t)strlen(par);
  close(fd);
  unsigned long before[DPM_WORK_COUNT], after[DPM_WORK_COUNT];
  for (int k = 0; k < DPM_WORK_COUNT; k++) before[k] = atomic_load(&dpm_work_done[k]);
  dpm_checked_spec *cs = NULL;
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  int ok = wrote && !dpm_spec_load_checked(path, &cs, &err) &&
           !dpm_trainer_create_checked(cs, NULL, &t, &err);
  if (!ok) printf("    %s\n", err.msg);
  for (int k = 0; k < DPM_WORK_COUNT; k++) after[k] = atomic_load(&dpm_work_done[k]);
  int devices = ok ? dpm_trainer_devices(t) : 0;
  dpm_device second = ok ? *dpm_trainer_device(t, 1) : (dpm_device){0};
  uint64_t hash = ok ? dpm_checked_spec_hash(cs) : 0;
  int same_hash = ok && hash == dpm_spec_hash(dpm_checked_spec_pb(cs));
  dpm_trainer_destroy(t);
  dpm_checked_spec_free(cs);
  unlink(path);
  CHECK(ok);
  CHECK_INT(devices, 2);
  CHECK(second.kind == DPM_DEVICE_CPU && second.index == 0);
  CHECK(same_hash);
  CHECK_INT(after[DPM_WORK_SPEC_VALIDATE] - before[DPM_WORK_SPEC_VALIDATE], 1);
  CHECK_INT(after[DPM_WORK_SPEC_HASH] - before[DPM_WORK_SPEC_HASH], 1);
  CHECK_INT(after[DPM_WORK_DEVICE_PARSE] - before[DPM_WORK_DEVICE_PARSE], 2);
}

/* Devices a caller parsed already are not parsed again, and the list's
 * rules still hold with the validation's own messages. */
TEST(spec_check_takes_parsed_devices) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  const char *par = "parallel: {devices: [cpu:0, cpu:1]}\n";
  char yaml[1024];
  snprintf(yaml, sizeof yaml, "%s%s", tiny_yaml, par);
  CHECK(!dpm_spec_parse(yaml, strlen(yaml), "p.yaml", &spec, &err));
  dpm_device parsed[2] = {{DPM_DEVICE_CPU, 0}, {DPM_DEVICE_CPU, 1}};
  unsigned long before = atomic_load(&dpm_work_done[DPM_WORK_DEVICE_PARSE]);
  dpm_checked_spec *cs = NULL;
  dpm_status ok = dpm_spec_check(spec, parsed, &cs, &err);
  unsigned long parses = atomic_load(&dpm_work_done[DPM_WORK_DEVICE_PARSE]) - before;
  size_t n = 0;
  const dpm_device *got = cs ? dpm_checked_spec_devices(cs, &n) : NULL;
  int same = got && n == 2 && got[1].index == 1;
  dpm_checked_spec_free(cs); /* and spec with it */
  CHECK_INT(ok, DPM_OK);
  CHECK_INT(parses, 0);
  CHECK(same);

  /* the list's rules on parsed devices: each once, one kind */
  CHECK(!dpm_spec_parse(yaml, strlen(yaml), "p.yaml", &spec, &err));
  dpm_device twice[2] = {{DPM_DEVICE_CPU, 0}, {DPM_DEVICE_CPU, 0}};
  dpm_status st = dpm_spec_check(spec, twice, &cs, &err);
  char twice_msg[sizeof err.msg];
  snprintf(twice_msg, sizeof twice_msg, "%s", err.msg);
  dpm_device kinds[2] = {{DPM_DEVICE_CPU, 0}, {DPM_DEVICE_FENCED, 1}};
  dpm_status sk = dpm_spec_check(spec, kinds, &cs, &err);
  dpm_spec_free(spec); /* a failed check leaves it the caller's */
  CHECK_INT(st, DPM_SPEC);
  CHECK_HAS(twice_msg, "parallel.devices: cpu:1 is listed twice");
  CHECK_INT(sk, DPM_SPEC);
  CHECK_HAS(err.msg, "one kind of device per model");
  CHECK(cs == NULL);
}
