/* The command table (server/commands.h): a handler for every request of
 * the command list (common/commands.h; the list against the proto:
 * command_list_test.c); the rows' argument checks; dispatch's order of refusals,
 * read from the daemon's request counters (a dpmd core on a private loop,
 * this thread as its loop thread, no sockets and no model). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/commands.h"
#include "server/commands.h"
#include "server/paths.h"
#include "test.h"

TEST(commands_every_request_of_the_list_is_handled) {
  int ok = 1;
  for (int i = 0; i < DPM_CMD_COUNT; i++) {
    const dpm_command *k = &dpm_commands[i];
    if (!k->request) { /* a dpmctl verb that sends nothing: no row */
      continue;
    }
    if (!dpmd_command_handled(k->request) || k->request >= DPMD_MAX_COMMAND ||
        strcmp(dpmd_command_name(k->request), k->name)) {
      dpm_test_fail(__FILE__, __LINE__, "%s (%d): no handler", k->name, k->request);
      ok = 0;
    }
  }
  CHECK(ok);
  CHECK(!dpmd_command_handled(0) && !dpmd_command_handled(1000));
  CHECK(!strcmp(dpmd_command_name(0), "unknown"));
  CHECK(!strcmp(dpmd_command_name(DPM__REQUEST__COMMAND_GET_BLOB), "get-blob"));
}

/* A scratch state dir and its paths. */
typedef struct {
  char dir[64];
  dpmd_config cfg;
  dpmd_paths *paths;
} scratch;

static int scratch_init(scratch *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/dpm-commands-XXXXXX");
  char models[96], text[256];
  if (!mkdtemp(s->dir)) return 0;
  snprintf(models, sizeof models, "%s/models", s->dir);
  if (mkdir(models, 0700)) return 0;
  snprintf(text, sizeof text, "state_dir: %s\n", s->dir);
  dpm_err err = {0};
  if (dpmd_config_parse(text, strlen(text), "t", &s->cfg, &err) ||
      dpmd_paths_create(&s->cfg, &s->paths, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return 0;
  }
  return 1;
}

static void scratch_fini(scratch *s) {
  char models[96];
  snprintf(models, sizeof models, "%s/models", s->dir);
  dpmd_paths_destroy(s->paths);
  dpmd_config_fini(&s->cfg);
  rmdir(models);
  rmdir(s->dir);
}

/* A heap Request like a decoded one (dpmd_handle frees it). */
static Dpm__Request *decoded(Dpm__Request *rq) {
  rq->version = DPM_PROTOCOL_VERSION;
  size_t n = dpm__request__get_packed_size(rq);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  dpm__request__pack(rq, buf);
  Dpm__Request *out = dpm__request__unpack(NULL, n, buf);
  free(buf);
  return out;
}

static Dpm__ModelSpec spec_named(const char *name) {
  Dpm__ModelSpec s = DPM__MODEL_SPEC__INIT;
  s.name = (char *)name;
  return s;
}

static Dpm__Request submit(Dpm__SubmitRequest *sr, Dpm__ModelSpec *spec, const char *name,
                           char **devices, size_t n_devices) {
  dpm__submit_request__init(sr);
  sr->spec = spec;
  sr->name = (char *)name;
  sr->devices = devices;
  sr->n_devices = n_devices;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  rq.submit = sr;
  return rq;
}

static dpm_status check(const scratch *s, Dpm__Request *stack, dpm_err *err,
                        Dpm__Request **keep) {
  Dpm__Request *rq = decoded(stack);
  if (!rq) return DPM_NOMEM;
  dpm_status st = dpmd_command_check(s->paths, rq, err);
  if (keep)
    *keep = rq;
  else
    dpm__request__free_unpacked(rq, NULL);
  return st;
}

TEST(commands_check_arguments) {
  scratch s;
  if (!scratch_init(&s)) return;
  dpm_err err = {0};
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = "m";
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_TRAIN;
  rq.train = &tr;
  dpm_status zero = check(&s, &rq, &err, NULL);
  char zero_msg[512];
  snprintf(zero_msg, sizeof zero_msg, "%s", err.msg);
  tr.iters = DPMD_MAX_ITERS;
  dpm_status most = check(&s, &rq, &err, NULL);
  tr.iters = DPMD_MAX_ITERS + 1;
  dpm_status over = check(&s, &rq, &err, NULL);

  Dpm__ExtractRequest er = DPM__EXTRACT_REQUEST__INIT;
  char *in[] = {"data"}, *outs[] = {"softmax"}, out_dir[128];
  snprintf(out_dir, sizeof out_dir, "%s/p", s.dir);
  er.name = "m";
  er.out = out_dir;
  er.format = "onnx";
  er.inputs = in, er.n_inputs = 1;
  er.outputs = outs, er.n_outputs = 1;
  Dpm__Request ex = DPM__REQUEST__INIT;
  ex.command_case = DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR;
  ex.extract_predictor = &er;
  dpm_status onnx = check(&s, &ex, &err, NULL);
  er.format = "tflite";
  dpm_status tflite = check(&s, &ex, &err, NULL);
  er.format = "dpm";
  dpm_status good = check(&s, &ex, &err, NULL);
  er.n_outputs = 0;
  dpm_status no_outputs = check(&s, &ex, &err, NULL);
  er.n_outputs = 1;
  er.out = "relative/p";
  dpm_status relative = check(&s, &ex, &err, NULL);

  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = "m";
  lr.path = "/etc/passwd";
  Dpm__Request ld = DPM__REQUEST__INIT;
  ld.command_case = DPM__REQUEST__COMMAND_LOAD;
  ld.load = &lr;
  dpm_status outside = check(&s, &ld, &err, NULL);

  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  Dpm__Request st = DPM__REQUEST__INIT;
  st.command_case = DPM__REQUEST__COMMAND_STATUS;
  st.status = &nr;
  dpm_status no_check = check(&s, &st, &err, NULL);
  scratch_fini(&s);

  CHECK_INT(zero, DPM_INVALID);
  CHECK_HAS(zero_msg, "iters must be 1..2^40");
  CHECK_INT(most, DPM_OK);
  CHECK_INT(over, DPM_INVALID);
  CHECK_INT(onnx, DPM_OK);
  CHECK_INT(tflite, DPM_UNSUPPORTED);
  CHECK_INT(good, DPM_OK);
  CHECK_INT(no_outputs, DPM_INVALID);
  CHECK(relative != DPM_OK);
  CHECK(outside != DPM_OK);
  CHECK_INT(no_check, DPM_OK);
}

TEST(commands_submit_overrides_move_into_the_spec) {
  scratch s;
  if (!scratch_init(&s)) return;
  dpm_err err = {0};
  Dpm__SubmitRequest sr;
  Dpm__ModelSpec spec = spec_named("from-spec");
  char *devices[] = {"cpu:1"};
  Dpm__Request rq = submit(&sr, &spec, "given", devices, 1);
  Dpm__Request *a = NULL, *b = NULL, *c = NULL;
  dpm_status sa = check(&s, &rq, &err, &a);
  rq = submit(&sr, &spec, NULL, NULL, 0);
  dpm_status sb = check(&s, &rq, &err, &b);
  rq = submit(&sr, &spec, "../x", NULL, 0);
  dpm_status sc = check(&s, &rq, &err, &c);
  scratch_fini(&s);
  int ok = a && b && c;
  if (ok) {
    const Dpm__ModelSpec *x = a->submit->spec, *y = b->submit->spec;
    ok = !strcmp(x->name, "given") && x->parallel->n_devices == 1 &&
         !strcmp(x->parallel->devices[0], "cpu:1") && !strcmp(y->name, "from-spec") &&
         y->parallel->n_devices == 1 && !strcmp(y->parallel->devices[0], "cpu:0");
  }
  if (a) dpm__request__free_unpacked(a, NULL);
  if (b) dpm__request__free_unpacked(b, NULL);
  if (c) dpm__request__free_unpacked(c, NULL);
  CHECK_INT(sa, DPM_OK);
  CHECK_INT(sb, DPM_OK);
  CHECK_INT(sc, DPM_INVALID);
  CHECK(ok);
}

static void no_exit(void *arg, struct dpmd_model *m) { (void)arg, (void)m; }

/* Dispatches stack's copy; returns how many answers of status st its
 * command has now. */
static uint64_t handle(dpmd *d, dpmd_registry *r, Dpm__Request *stack, dpm_status st) {
  Dpm__Request *rq = decoded(stack);
  if (!rq) return 0;
  dpmd_reply_to to = {.command = rq->command_case}; /* no header: counted only */
  dpmd_handle(d, r, rq, &to);
  return dpmd_requests(d, stack->command_case, st);
}

TEST(commands_dispatch_refuses_in_order) {
  scratch s;
  if (!scratch_init(&s)) return;
  char *events = s.cfg.events; /* publishes none */
  s.cfg.events = NULL;
  uv_loop_t loop;
  dpmd d = {.cfg = &s.cfg, .paths = s.paths};
  dpmd_registry *r = NULL;
  dpm_err err = {0};
  int ok =
      !uv_loop_init(&loop) && !dpmd_registry_create(&r, &err) &&
      !dpmd_core_start(&d, &loop, -1, -1, &(dpmd_core_hooks){.exited = no_exit}, &err);
  uint64_t got[16] = {0};
  if (ok) {
    Dpm__Request unknown = DPM__REQUEST__INIT;
    got[0] = handle(&d, r, &unknown, DPM_UNSUPPORTED);
    Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT; /* iters 0: no model comes first */
    tr.name = "m";
    Dpm__Request train = DPM__REQUEST__INIT;
    train.command_case = DPM__REQUEST__COMMAND_TRAIN;
    train.train = &tr;
    got[1] = handle(&d, r, &train, DPM_NOT_FOUND);
    Dpm__NameRequest all = DPM__NAME_REQUEST__INIT, one = DPM__NAME_REQUEST__INIT;
    one.name = "m";
    Dpm__Request status = DPM__REQUEST__INIT;
    status.command_case = DPM__REQUEST__COMMAND_STATUS;
    status.status = &all;
    got[2] = handle(&d, r, &status, DPM_OK);
    status.status = &one;
    got[3] = handle(&d, r, &status, DPM_NOT_FOUND);
    Dpm__Request watch = DPM__REQUEST__INIT;
    watch.command_case = DPM__REQUEST__COMMAND_WATCH;
    watch.watch = &all;
    got[4] = handle(&d, r, &watch, DPM_OK);
    Dpm__SubmitRequest sr;
    Dpm__ModelSpec spec = spec_named(".hidden");
    Dpm__Request sub = submit(&sr, &spec, NULL, NULL, 0);
    got[5] = handle(&d, r, &sub, DPM_INVALID);
    /* stopping: mutating commands are refused before anything else */
    CHECK_INT(dpmd_begin_stopping(&d), 0);
    CHECK_INT(dpmd_begin_stopping(&d), -1);
    got[6] = handle(&d, r, &sub, DPM_STATE);
    got[7] = handle(&d, r, &train, DPM_STATE);
    status.status = &all;
    got[8] = handle(&d, r, &status, DPM_OK);
    Dpm__Request eval = DPM__REQUEST__INIT;
    eval.command_case = DPM__REQUEST__COMMAND_EVAL;
    eval.eval = &one;
    got[9] = handle(&d, r, &eval, DPM_NOT_FOUND);
    got[10] = dpmd_requests(&d, DPM__REQUEST__COMMAND_SUBMIT, DPM_INVALID);
    Dpm__EventsRequest er = DPM__EVENTS_REQUEST__INIT;
    er.name = "m";
    Dpm__Request events = DPM__REQUEST__INIT;
    events.command_case = DPM__REQUEST__COMMAND_EVENTS;
    events.events = &er;
    got[11] = handle(&d, r, &events, DPM_NOT_FOUND);
    er.name = NULL;
    got[12] = handle(&d, r, &events, DPM_UNSUPPORTED);
    dpmd_core_close(&d);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  }
  dpmd_core_free(&d);
  dpmd_registry_destroy(r);
  s.cfg.events = events;
  scratch_fini(&s);
  CHECK(ok);
  CHECK_INT(got[0], 1);  /* unknown command */
  CHECK_INT(got[1], 1);  /* train: no model, before its iters */
  CHECK_INT(got[2], 1);  /* status of every model: an empty list */
  CHECK_INT(got[3], 1);  /* status of a model that is not there */
  CHECK_INT(got[4], 1);  /* watch: no events socket, the stream still */
  CHECK_INT(got[5], 1);  /* submit: the name's check */
  CHECK_INT(got[6], 1);  /* submit while stopping */
  CHECK_INT(got[7], 1);  /* train while stopping, before its model */
  CHECK_INT(got[8], 2);  /* status still answers */
  CHECK_INT(got[9], 1);  /* eval is not mutating: its model is looked for */
  CHECK_INT(got[10], 1); /* the stopped submit was not checked */
  CHECK_INT(got[11], 1); /* events of a model that is not there */
  CHECK_INT(got[12], 1); /* events without a stream (no loop handles here) */
}
