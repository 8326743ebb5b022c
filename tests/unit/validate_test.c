/* The one spec validation (common/validate.h) on specs as a client could
 * send them over the wire, bypassing the YAML front end: enum values
 * outside their lists, devices that are not canonical, names, losses, eval
 * sections, limits; and the shared pieces it rests on (device names,
 * escaping, NUL bytes inside protobuf strings). */
#include <math.h>
#include <stdlib.h>

#include "common/device.h"
#include "common/escape.h"
#include "common/pbcheck.h"
#include "common/validate.h"
#include "common/spec.h"
#include "test.h"

static const char GOOD[] =
    "name: v\n"
    "input: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 4, 4]}\n"
    "forward:\n"
    "  - {op: FC, in: [data], out: pred, dim_out: 10}\n"
    "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
    "losses: [loss]\n"
    "update: {optimizer: sgd, lr: {base: 0.1}}\n"
    "eval: {images: /e/i.gz, labels: /e/l.gz, batch_size: 100}\n"
    "parallel: {devices: [cpu:0, cpu:1]}\n";

static Dpm__ModelSpec *good(void) {
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(GOOD, sizeof GOOD - 1, "v.yaml", &s, &err))
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  return s;
}

/* validate(s) fails with DPM_SPEC and a message containing want. */
static int refused(const Dpm__ModelSpec *s, const char *want) {
  dpm_err err = {0};
  dpm_status st = dpm_spec_validate(s, &err);
  if (st == DPM_SPEC && strstr(err.msg, want)) return 1;
  dpm_test_fail(__FILE__, __LINE__, "status %d, message \"%s\", wanted \"%s\"", st,
                err.msg, want);
  return 0;
}

static void set_str(char **field, const char *v) {
  free(*field);
  *field = strdup(v);
}

TEST(validate_accepts_the_parsed_spec) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  dpm_err err = {0};
  CHECK_INT(dpm_spec_validate(s, &err), DPM_OK);
  dpm_spec_free(s);
}

TEST(validate_refuses_unknown_enum_values) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  s->input->reader = 7;
  CHECK(refused(s, "v.yaml:2: input.reader: unknown reader 7"));
  s->input->reader = DPM__READER_KIND__READER_SYNTHETIC;
  s->parallel->net_type = 9;
  CHECK(refused(s, "parallel.net_type: unknown net type 9"));
  s->parallel->net_type = DPM__NET_TYPE__NET_DAG;
  s->update->optimizer = 3;
  CHECK(refused(s, "update.optimizer: unknown optimizer 3"));
  s->update->optimizer = DPM__OPTIMIZER__OPT_SGD;
  s->update->lr->policy = -1;
  CHECK(refused(s, "update.lr.policy: unknown policy -1"));
  dpm_spec_free(s);
}

TEST(validate_refuses_devices_not_canonical) {
  static const char *const bad[] = {"cpu:4294967296", "cpu:+1", "cpu:00", "cpu: 1",
                                    "cpu:-1",         "cpu:",   "gpu:1",  "cpu:4096",
                                    "cpu:1x",         "CPU:1",  ""};
  Dpm__ModelSpec *s = good();
  CHECK(s);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    set_str(&s->parallel->devices[1], bad[i]);
    if (!refused(s, "is not a device")) break;
  }
  set_str(&s->parallel->devices[1], "cpu:0");
  CHECK(refused(s, "parallel.devices: cpu:0 is listed twice"));
  set_str(&s->parallel->devices[1], "cuda:1");
  CHECK(refused(s, "one kind of device per model"));
  dpm_spec_free(s);
  dpm_device d;
  CHECK(dpm_device_parse("cpu:0", &d) == 0 && d.kind == DPM_DEVICE_CPU && d.index == 0);
  CHECK(dpm_device_parse("cuda:4095", &d) == 0 && d.kind == DPM_DEVICE_CUDA);
  char buf[16];
  CHECK(!strcmp(dpm_device_format(d, buf, sizeof buf), "cuda:4095"));
}

TEST(validate_refuses_bad_names_and_losses) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  set_str(&s->name, "../x");
  CHECK(refused(s, "name '../x': use 1-64"));
  set_str(&s->name, "a/b");
  CHECK(refused(s, "name 'a/b'"));
  set_str(&s->name, "ok\nforged: line");
  CHECK(refused(s, "name 'ok\\nforged: line'")); /* escaped in the message */
  set_str(&s->name, "v");
  set_str(&s->forward[0]->output[0], "pr\x1b[31med");
  CHECK(refused(s, "op #1: blob name 'pr\\x1b[31med' must be"));
  set_str(&s->forward[0]->output[0], "a/pred"); /* get-blob reads a/pred as a scope */
  CHECK(refused(s, "op #1: blob name 'a/pred' must be 1-255 bytes without control bytes "
                   "or '/'"));
  set_str(&s->forward[0]->output[0], "pred");
  set_str(&s->input->outputs[0], "cpu_0/data");
  CHECK(refused(s, "input.outputs: blob name 'cpu_0/data'"));
  set_str(&s->input->outputs[0], "data");
  set_str(&s->losses[0], "softmax");
  char **two = realloc(s->losses, 2 * sizeof *two);
  CHECK(two);
  s->losses = two;
  s->losses[1] = strdup("softmax");
  s->n_losses = 2;
  CHECK(refused(s, "losses: 'softmax' is listed twice"));
  dpm_spec_free(s);
}

/* input.scale: finite, > 0, at most DPM_SPEC_MAX_SCALE. */
TEST(validate_bounds_input_scale) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  static const double bad[] = {-1, 0, 4294967296.0, 256.5, INFINITY, NAN, -0.0};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    s->input->scale = bad[i];
    if (!refused(s, "input.scale must be a number > 0 and at most 256")) break;
  }
  static const double fine[] = {1.0 / 255, 1, 256, 1e-12};
  for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
    dpm_err err = {0};
    s->input->scale = fine[i];
    CHECK_INT(dpm_spec_validate(s, &err), DPM_OK);
  }
  dpm_spec_free(s);
}

TEST(validate_refuses_eval_sections_the_trainer_would) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  s->eval->batch_size = 0;
  CHECK(refused(s, "v.yaml:8: eval.batch_size must be 1.."));
  s->eval->batch_size = 100;
  free(s->eval->labels);
  s->eval->labels = NULL;
  CHECK(refused(s, "eval.labels: no file named"));
  dpm_spec_free(s);
}

TEST(validate_refuses_sizes_over_the_limits) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  s->input->batch_size = DPM_SPEC_MAX_BATCH + 1;
  CHECK(refused(s, "input.batch_size must be 1..1048576"));
  s->input->batch_size = DPM_SPEC_MAX_BATCH; /* x 2 devices: fine */
  dpm_err err = {0};
  CHECK_INT(dpm_spec_validate(s, &err), DPM_OK);
  s->input->num_shards = 1024;
  CHECK(refused(s, "batch_size x devices x num_shards must be at most"));
  s->input->num_shards = 1;
  s->input->num_examples = 2147483647u;
  CHECK(refused(s, "input.num_examples must be 1..100000000"));
  s->input->num_examples = 64;
  s->input->shape[1] = 65537;
  CHECK(refused(s, "input.shape entries must be 1..65536"));
  s->input->shape[1] = 65536;
  s->input->shape[2] = 65536;
  CHECK(refused(s, "C x H x W must be at most"));
  s->input->shape[2] = 4;
  s->input->prefetch = 0;
  CHECK(refused(s, "input.prefetch must be 1..64"));
  dpm_spec_free(s);
}

/* A fleet's daemons and its rendezvous: endpoints, stores and interface
 * names have one form each; anything else is refused before it is used. */
TEST(validate_checks_shards_and_rendezvous) {
  CHECK(dpm_shard_endpoint_valid("tcp://host-a.example:7070"));
  CHECK(dpm_shard_endpoint_valid("tcp://[::1]:7070"));
  CHECK(dpm_shard_endpoint_valid("ipc:///run/dpmd.sock"));
  const char *bad_ep[] = {"tcp://host", "tcp://:7070", "tcp://h:0", "tcp://h:65536",
                          "tcp://h:70x", "tcp://a b:1", "ipc://rel.sock", "http://h:1",
                          "tcp://[zz]:1", ""};
  for (size_t i = 0; i < sizeof bad_ep / sizeof *bad_ep; i++)
    CHECK(!dpm_shard_endpoint_valid(bad_ep[i]));
  CHECK(dpm_store_url_valid("daemon") && dpm_store_url_valid("redis://127.0.0.1:6379"));
  CHECK(dpm_store_url_valid("file:///shared/rdv"));
  CHECK(!dpm_store_url_valid("redis://h") && !dpm_store_url_valid("file://rel/dir"));
  CHECK(!dpm_store_url_valid("Daemon") && !dpm_store_url_valid("file:///a\nb"));
  CHECK(dpm_interface_name_valid("eth0") && dpm_interface_name_valid("veth-a.1"));
  CHECK(!dpm_interface_name_valid("..") && !dpm_interface_name_valid("averylonginterface"));
  CHECK(!dpm_interface_name_valid("eth0/x") && !dpm_interface_name_valid(""));

  Dpm__ModelSpec *s = good();
  CHECK(s);
  char *eps[] = {"tcp://a:7070", "tcp://b:7070", "tcp://a:7070"};
  s->parallel->shards = eps;
  s->parallel->n_shards = 2;
  dpm_err err = {0};
  CHECK_INT(dpm_spec_validate(s, &err), DPM_OK);
  s->parallel->n_shards = 3;
  CHECK(refused(s, "parallel.shards: entries 0 and 2 name the same daemon"));
  eps[2] = "tcp://c";
  CHECK(refused(s, "parallel.shards[2] is not tcp://HOST:PORT"));
  s->parallel->n_shards = DPM_SPEC_MAX_SHARDS + 1;
  CHECK(refused(s, "parallel.shards: 257 daemons, at most 256"));
  s->parallel->shards = NULL;
  s->parallel->n_shards = 0;
  Dpm__Rendezvous r = DPM__RENDEZVOUS__INIT;
  s->parallel->rendezvous = &r;
  CHECK_INT(dpm_spec_validate(s, &err), DPM_OK); /* the defaults: daemon, 60 s */
  r.store = "redis://h";
  CHECK(refused(s, "parallel.rendezvous.store is not daemon"));
  r.store = "file:///tmp/rdv";
  r.interface = "../eth0";
  CHECK(refused(s, "parallel.rendezvous.interface is not"));
  r.interface = NULL;
  r.timeout_ms = 0;
  CHECK(refused(s, "parallel.rendezvous.timeout_ms 0 is outside [1, 3600000]"));
  s->parallel->rendezvous = NULL;
  dpm_spec_free(s);
}

TEST(checkpoint_every_parses_iterations_or_seconds) {
  Dpm__CheckpointPolicy p = DPM__CHECKPOINT_POLICY__INIT;
  CHECK(dpm_checkpoint_every_parse("1000", &p) == 0 && p.has_every_iters &&
        p.every_iters == 1000 && !p.has_every_seconds);
  CHECK(dpm_checkpoint_every_parse("600s", &p) == 0 && p.has_every_seconds &&
        p.every_seconds == 600 && !p.has_every_iters);
  CHECK(dpm_checkpoint_every_parse("0", &p) == 0 && p.every_iters == 0);
  static const char *const bad[] = {"", "s", "-1", "10m", "1.5s", "1e3", " 5", "9999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(dpm_checkpoint_every_parse(bad[i], &p) == -1);
  /* YAML: the spec's checkpoint_every, not part of the spec hash */
  char yaml[sizeof GOOD + 40];
  snprintf(yaml, sizeof yaml, "%scheckpoint_every: 250\n", GOOD);
  Dpm__ModelSpec *a = good(), *b = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "v.yaml", &b, &err), DPM_OK);
  CHECK(b->checkpoint && b->checkpoint->every_iters == 250);
  CHECK(dpm_spec_hash(a) == dpm_spec_hash(b));
  dpm_spec_free(a);
  dpm_spec_free(b);
}

TEST(escape_writes_control_bytes_out) {
  char buf[64];
  CHECK(!strcmp(dpm_escape("a\nb\tc\x01\x7f", buf, sizeof buf), "a\\nb\\tc\\x01\\x7f"));
  CHECK(!strcmp(dpm_escape("plain /path", buf, sizeof buf), "plain /path"));
  CHECK(!strcmp(dpm_escape("abc\n", buf, 5), "abc")); /* cut on a whole escape */
  CHECK(dpm_has_control("x\ry") && !dpm_has_control("x y"));
}

/* "a\0/../../evil" unpacks as "a": the bytes are checked before unpacking. */
TEST(pbcheck_finds_nul_in_nested_strings) {
  Dpm__ModelSpec *s = good();
  CHECK(s);
  Dpm__SubmitRequest sub = DPM__SUBMIT_REQUEST__INIT;
  sub.spec = s;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.version = 1;
  rq.command_case = DPM__REQUEST__COMMAND_SUBMIT;
  rq.submit = &sub;
  size_t n = dpm__request__get_packed_size(&rq);
  uint8_t *buf = malloc(n);
  CHECK(buf);
  dpm__request__pack(&rq, buf);
  char why[128];
  CHECK(dpm_pb_check_strings(&dpm__request__descriptor, buf, n, why, sizeof why) == 0);
  /* the model name "v": put a NUL where the 'v' is (the only 'v' string of
   * length 1 in the encoding is the name field: tag 0x0a, length 1) */
  uint8_t *at = NULL;
  for (size_t i = 0; i + 2 < n; i++)
    if (buf[i] == 0x0a && buf[i + 1] == 1 && buf[i + 2] == 'v') at = &buf[i + 2];
  CHECK(at);
  *at = 0;
  CHECK(dpm_pb_check_strings(&dpm__request__descriptor, buf, n, why, sizeof why) == -1);
  CHECK(!strcmp(why, "submit.spec.name"));
  /* garbage is left to the unpacker */
  CHECK(dpm_pb_check_strings(&dpm__request__descriptor, (const uint8_t *)"\xff\xff", 2,
                             why, sizeof why) == 0);
  free(buf);
  dpm_spec_free(s);
}
