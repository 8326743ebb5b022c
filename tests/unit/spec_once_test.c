/* A spec on dpmd's submit path is validated once, hashed once, and its
 * device names are parsed once (common/workcount.h counts each): from the
 * decoded request to the model built on its devices, through the command
 * table, the device check, the crew and the trainer. A dpmd core on a
 * private loop (this thread its loop thread, no sockets), two CPU devices,
 * a real model built on its own thread, then deleted. */
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "common/spec.h"
#include "common/workcount.h"
#include "server/commands.h"
#include "server/devices.h"
#include "server/models/model.h"
#include "server/models/registry.h"
#include "server/paths.h"
#include "test.h"

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
  ok = ok && !dpmd_core_start(&d, &loop, -1, -1, exited, r, &err);

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
