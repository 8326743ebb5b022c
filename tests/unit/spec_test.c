/* Spec front end: a full spec parses into the expected protobuf values;
 * every kind of mistake is reported at its exact line:column; truncated and
 * mutated input never crashes; the example specs parse. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/spec.h"
#include "test.h"

/* clang-format off */
static const char FULL[] =
    "# a spec using every section\n"                                         /* 1 */
    "name: full-test\n"                                                      /* 2 */
    "input:\n"                                                               /* 3 */
    "  reader: synthetic\n"                                                  /* 4 */
    "  batch_size: 32\n"                                                     /* 5 */
    "  scale: 0.5\n"                                                         /* 6 */
    "  shuffle: false\n"                                                     /* 7 */
    "  seed: 7\n"                                                            /* 8 */
    "  outputs: [x, y]\n"                                                    /* 9 */
    "  shard_id: 1\n"                                                        /* 10 */
    "  num_shards: 2\n"                                                      /* 11 */
    "  prefetch: 3\n"                                                        /* 12 */
    "  num_examples: 100\n"                                                  /* 13 */
    "  shape: [1, 28, 28]\n"                                                 /* 14 */
    "  num_classes: 10\n"                                                    /* 15 */
    "forward:\n"                                                             /* 16 */
    "  - {op: FC, in: [x], out: h, dim_out: 16, rate: 1e-3, init: xavier,"
    " flag: true, q: '5', dq: \"7\"}\n"                                      /* 17 */
    "  - op: Conv\n"                                                         /* 18 */
    "    in: h\n"                                                            /* 19 */
    "    out: [c1, c2]\n"                                                    /* 20 */
    "    kernel: [3, 3]\n"                                                   /* 21 */
    "    scales: [0.5, 2, -1e2]\n"                                           /* 22 */
    "    neg: -12\n"                                                         /* 23 */
    "    half: .5\n"                                                         /* 24 */
    "    off: false\n"                                                       /* 25 */
    "  - {op: NoIn, out: z}\n"                                               /* 26 */
    "losses: loss\n"                                                         /* 27 */
    "update:\n"                                                              /* 28 */
    "  optimizer: adam\n"                                                    /* 29 */
    "  nesterov: true\n"                                                     /* 30 */
    "  beta1: 0.8\n"                                                         /* 31 */
    "  beta2: 0.99\n"                                                        /* 32 */
    "  epsilon: 1e-6\n"                                                      /* 33 */
    "  weight_decay: 0\n"                                                    /* 34 */
    "  lr: {base: 0.05, policy: multistep, stepvalues: [100, 200],"
    " warmup_iters: 10, warmup_start: 0.1, gamma: 0.1}\n"                    /* 35 */
    "eval: {images: a.idx, labels: b.idx, batch_size: 100}\n"                /* 36 */
    "parallel:\n"                                                            /* 37 */
    "  devices: [cuda:0, cuda:2-4]\n"                                       /* 38 */
    "  net_type: simple\n"                                                   /* 39 */
    "  broadcast_computed_params: false\n"                                   /* 40 */
    "  optimize_gradient_memory: true\n"                                     /* 41 */
    "  bucket_bytes: 1048576\n"                                              /* 42 */
    "  shards: [\"tcp://host0:7070\", \"tcp://host1:7070\"]\n"                 /* 43 */
    "  rendezvous: {store: \"redis://10.0.0.1:6379\", interface: eth0, timeout_ms: 5000}\n";
/* clang-format on */

static const Dpm__Argument *find_arg(const Dpm__Operator *op, const char *name) {
  for (size_t i = 0; i < op->n_arg; i++)
    if (strcmp(op->arg[i]->name, name) == 0) return op->arg[i];
  return NULL;
}

TEST(spec_full_example) {
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  dpm_status st = dpm_spec_parse(FULL, strlen(FULL), "full.yaml", &s, &err);
  if (st != DPM_OK) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  CHECK_INT(st, DPM_OK);
  CHECK(s != NULL);
  CHECK(strcmp(s->name, "full-test") == 0);
  CHECK(strcmp(s->source, "full.yaml") == 0);

  const Dpm__InputSpec *in = s->input;
  CHECK(in != NULL);
  CHECK(in->has_reader && in->reader == DPM__READER_KIND__READER_SYNTHETIC);
  CHECK(in->has_batch_size && in->batch_size == 32);
  CHECK_NEAR(in->scale, 0.5, 0);
  CHECK(in->has_shuffle && !in->shuffle);
  CHECK_INT(in->seed, 7);
  CHECK_INT(in->n_outputs, 2);
  CHECK(strcmp(in->outputs[0], "x") == 0 && strcmp(in->outputs[1], "y") == 0);
  CHECK_INT(in->shard_id, 1);
  CHECK_INT(in->num_shards, 2);
  CHECK_INT(in->prefetch, 3);
  CHECK_INT(in->num_examples, 100);
  CHECK_INT(in->n_shape, 3);
  CHECK(in->shape[0] == 1 && in->shape[1] == 28 && in->shape[2] == 28);
  CHECK_INT(in->num_classes, 10);
  CHECK(in->has_line && in->line == 4);

  CHECK_INT(s->n_forward, 3);
  const Dpm__Operator *fc = s->forward[0], *conv = s->forward[1], *noin = s->forward[2];
  CHECK(strcmp(fc->type, "FC") == 0);
  CHECK(fc->has_line && fc->line == 17 && fc->column == 5);
  CHECK_INT(fc->n_input, 1);
  CHECK(strcmp(fc->input[0], "x") == 0);
  CHECK_INT(fc->n_output, 1);
  CHECK(strcmp(fc->output[0], "h") == 0);
  CHECK_INT(fc->n_arg, 6);
  CHECK(strcmp(fc->arg[0]->name, "dim_out") == 0); /* document order */
  const Dpm__Argument *a = find_arg(fc, "dim_out");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_I && a->i == 16);
  a = find_arg(fc, "rate");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_F);
  CHECK_NEAR(a->f, 1e-3, 1e-15);
  a = find_arg(fc, "init");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_S && strcmp(a->s, "xavier") == 0);
  a = find_arg(fc, "flag");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_I && a->i == 1);
  a = find_arg(fc, "q");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_S && strcmp(a->s, "5") == 0);
  a = find_arg(fc, "dq");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_S && strcmp(a->s, "7") == 0);

  CHECK(strcmp(conv->type, "Conv") == 0);
  CHECK(conv->line == 18 && conv->column == 5);
  CHECK(conv->n_input == 1 && strcmp(conv->input[0], "h") == 0);
  CHECK(conv->n_output == 2 && strcmp(conv->output[1], "c2") == 0);
  a = find_arg(conv, "kernel");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_INTS);
  CHECK(a->ints->n_v == 2 && a->ints->v[0] == 3 && a->ints->v[1] == 3);
  a = find_arg(conv, "scales");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_FLOATS && a->floats->n_v == 3);
  CHECK_NEAR(a->floats->v[0], 0.5, 0);
  CHECK_NEAR(a->floats->v[1], 2, 0);
  CHECK_NEAR(a->floats->v[2], -100, 0);
  a = find_arg(conv, "neg");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_I && a->i == -12);
  a = find_arg(conv, "half");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_F);
  CHECK_NEAR(a->f, 0.5, 0);
  a = find_arg(conv, "off");
  CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_I && a->i == 0);
  CHECK(noin->n_input == 0 && noin->n_output == 1 && noin->n_arg == 0);
  CHECK(noin->line == 26 && noin->column == 5);

  CHECK(s->n_losses == 1 && strcmp(s->losses[0], "loss") == 0);

  const Dpm__UpdateSpec *u = s->update;
  CHECK(u && u->optimizer == DPM__OPTIMIZER__OPT_ADAM && u->nesterov);
  CHECK_NEAR(u->beta1, 0.8, 0);
  CHECK_NEAR(u->beta2, 0.99, 0);
  CHECK_NEAR(u->epsilon, 1e-6, 1e-18);
  CHECK(u->has_weight_decay && u->weight_decay == 0);
  CHECK(!u->has_momentum && u->momentum == 0.9); /* protobuf default */
  CHECK(u->line == 29);
  CHECK(u->lr && u->lr->policy == DPM__LR_POLICY__LR_MULTISTEP);
  CHECK_NEAR(u->lr->base_lr, 0.05, 0);
  CHECK(u->lr->n_stepvalues == 2 && u->lr->stepvalues[1] == 200);
  CHECK_INT(u->lr->warmup_iters, 10);
  CHECK_NEAR(u->lr->start_multiplier, 0.1, 0); /* by its alias */
  CHECK_NEAR(u->lr->gamma, 0.1, 0);

  CHECK(s->eval && strcmp(s->eval->images, "a.idx") == 0);
  CHECK(strcmp(s->eval->labels, "b.idx") == 0 && s->eval->batch_size == 100);
  CHECK_INT(s->eval->line, 36);

  const Dpm__ParallelSpec *p = s->parallel;
  CHECK(p && p->n_devices == 4);
  CHECK(strcmp(p->devices[0], "cuda:0") == 0 && strcmp(p->devices[1], "cuda:2") == 0);
  CHECK(strcmp(p->devices[3], "cuda:4") == 0);
  CHECK(p->net_type == DPM__NET_TYPE__NET_SIMPLE);
  CHECK(p->has_broadcast_computed_params && !p->broadcast_computed_params);
  CHECK(p->optimize_gradient_memory);
  CHECK_INT(p->bucket_bytes, 1048576);
  CHECK(p->n_shards == 2 && strcmp(p->shards[1], "tcp://host1:7070") == 0);
  CHECK(p->rendezvous && strcmp(p->rendezvous->store, "redis://10.0.0.1:6379") == 0);
  CHECK(strcmp(p->rendezvous->interface, "eth0") == 0);
  CHECK_INT(p->rendezvous->timeout_ms, 5000);
  dpm_spec_free(s);
}

#define MINI                                                                             \
  "name: m\n"                                                                            \
  "forward:\n"                                                                           \
  "  - {op: FC, in: data, out: pred, dim_out: 10}\n"                                     \
  "losses: [loss]\n"

TEST(spec_defaults_and_hash) {
  Dpm__ModelSpec *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  const char *t1 = MINI "input: {images: i, labels: l}\n";
  const char *t2 =
      "# moved down, renamed file\n\n" MINI "input: {images: i, labels: l}\n";
  const char *t3 = MINI "input: {images: i, labels: l, batch_size: 8}\n";
  CHECK_INT(dpm_spec_parse(t1, strlen(t1), "a.yaml", &a, NULL), DPM_OK);
  CHECK_INT(dpm_spec_parse(t2, strlen(t2), "b.yaml", &b, NULL), DPM_OK);
  CHECK_INT(dpm_spec_parse(t3, strlen(t3), NULL, &c, NULL), DPM_OK);
  CHECK(a->input->n_outputs == 2 && strcmp(a->input->outputs[0], "data") == 0 &&
        strcmp(a->input->outputs[1], "label") == 0);
  CHECK(!a->input->has_batch_size && a->input->batch_size == 64);
  CHECK(a->forward[0]->line == 3 && b->forward[0]->line == 5);
  CHECK(c->source == NULL);
  CHECK(dpm_spec_hash(a) == dpm_spec_hash(b));
  CHECK(dpm_spec_hash(a) != dpm_spec_hash(c));
  CHECK(dpm_spec_hash(NULL) == 0);
  { /* renamed, on other devices or hosts: the same model for a checkpoint */
    uint64_t h = dpm_spec_hash(a);
    char *name = a->name;
    a->name = "renamed";
    CHECK(dpm_spec_hash(a) == h);
    a->name = name;
    const char *t4 = MINI "input: {images: i, labels: l, shard_id: 1, num_shards: 2}\n"
                          "parallel: {devices: [cpu:0, cpu:1], net_type: simple,"
                          " shards: [\"tcp://a:1\", \"tcp://b:1\"]}\n";
    Dpm__ModelSpec *e = NULL;
    CHECK_INT(dpm_spec_parse(t4, strlen(t4), NULL, &e, NULL), DPM_OK);
    CHECK(dpm_spec_hash(e) == h);
    dpm_spec_free(e);
  }
  /* Packs, unpacks, hashes the same and frees with the same function. */
  size_t n = dpm__model_spec__get_packed_size(a);
  uint8_t *buf = malloc(n);
  CHECK(buf != NULL);
  dpm__model_spec__pack(a, buf);
  d = dpm__model_spec__unpack(NULL, n, buf);
  free(buf);
  CHECK(d != NULL);
  CHECK(dpm_spec_hash(d) == dpm_spec_hash(a));
  CHECK(strcmp(d->forward[0]->type, "FC") == 0);
  dpm_spec_free(a);
  dpm_spec_free(b);
  dpm_spec_free(c);
  dpm_spec_free(d);
  dpm_spec_free(NULL);
}

/* Parses text as "t.yaml"; checks the status and that the message starts
 * with prefix ("t.yaml:L:C: ") and contains sub. */
static void expect(int line, const char *text, dpm_status code, const char *prefix,
                   const char *sub) {
  Dpm__ModelSpec *s = (Dpm__ModelSpec *)&s; /* must be reset to NULL */
  dpm_err err = {0};
  dpm_status st = dpm_spec_parse(text, strlen(text), "t.yaml", &s, &err);
  if (st != code)
    dpm_test_fail(__FILE__, line, "status %s (%s), want %s", dpm_status_name(st), err.msg,
                  dpm_status_name(code));
  else if (s != NULL)
    dpm_test_fail(__FILE__, line, "spec not NULL on error");
  else if (strncmp(err.msg, prefix, strlen(prefix)) != 0)
    dpm_test_fail(__FILE__, line, "message \"%s\" does not start with \"%s\"", err.msg,
                  prefix);
  else if (!strstr(err.msg, sub))
    dpm_test_fail(__FILE__, line, "message \"%s\" lacks \"%s\"", err.msg, sub);
  if (st == DPM_OK) dpm_spec_free(s);
}
#define EXPECT(text, prefix, sub) expect(__LINE__, text, DPM_SPEC, prefix, sub)

TEST(spec_error_yaml_syntax) {
  EXPECT("name: a\n  bad: b\n", "t.yaml:2:6: ", "mapping values are not allowed");
  EXPECT("name: a\nforward: [x, y\n", "t.yaml:3:1: ", "did not find expected");
  EXPECT("name: a\n\tforward: x\n", "t.yaml:2:1: ", "tab");
  EXPECT("name: \"abc\n", "t.yaml:2:1: ", "found unexpected end of stream");
  EXPECT("name: ok\nlosses: [\xff]\n", "t.yaml:2:10: ", "invalid leading UTF-8 octet");
}

TEST(spec_error_duplicate_key) {
  EXPECT("name: a\nname: b\n", "t.yaml:2:1: ", "duplicate key 'name'");
  EXPECT(MINI "input: {images: i, labels: l, batch_size: 3, batch_size: 4}\n",
         "t.yaml:5:46: ", "duplicate key 'batch_size'");
  EXPECT("name: m\nforward:\n  - {op: FC, out: y, k: 1, k: 2}\nlosses: [y]\n",
         "t.yaml:3:28: ", "duplicate key 'k'");
}

TEST(spec_error_unknown_key) {
  EXPECT(MINI "input:\n  images: i\n  labels: l\n  batchsize: 3\n", "t.yaml:8:3: ",
         "unknown key 'batchsize' in input; did you mean 'batch_size'? (expected one of: "
         "reader, images");
  EXPECT(MINI "optimiser: sgd\n", "t.yaml:5:1: ", "unknown key 'optimiser' at top level");
  EXPECT(MINI "update: {lr: {bse: 1}}\n",
         "t.yaml:5:15: ", "unknown key 'bse' in update.lr");
}

TEST(spec_error_wrong_type) {
  EXPECT(MINI "input: {images: i, labels: l, batch_size: abc}\n",
         "t.yaml:5:43: ", "'batch_size' must be an integer, got 'abc'");
  EXPECT(MINI "input: {images: i, labels: l, batch_size: 1.5}\n",
         "t.yaml:5:43: ", "'batch_size' must be an integer, got '1.5'");
  EXPECT(MINI "input: {images: i, labels: l, batch_size: '64'}\n",
         "t.yaml:5:43: ", "got '64' (a quoted string)");
  EXPECT(MINI "input: {images: i, labels: l, batch_size: 99999999999}\n",
         "t.yaml:5:43: ", "'batch_size' must be <= 4294967295");
  EXPECT(MINI "input: {images: i, labels: l, seed: 99999999999999999999999}\n",
         "t.yaml:5:37: ", "'seed' must be <= 18446744073709551615");
  EXPECT(MINI "input: {images: i, labels: l, seed: -1}\n",
         "t.yaml:5:37: ", "'seed' must be >= 0, got '-1'");
  EXPECT(MINI "input: {images: i, labels: l, shuffle: yes}\n",
         "t.yaml:5:40: ", "'shuffle' must be true or false, got 'yes'");
  EXPECT(MINI "input: {images: i, labels: l, scale: 1/255}\n",
         "t.yaml:5:38: ", "'scale' must be a number, got '1/255'");
  EXPECT(MINI "input: {images: [a, b], labels: l}\n",
         "t.yaml:5:17: ", "'images' must be a string, got a list");
  EXPECT(MINI "input: {images: , labels: l}\n", "t.yaml:5:17: ", "'images' has no value");
  EXPECT(MINI "update: {lr: {stepvalues: [10, x]}}\n",
         "t.yaml:5:32: ", "'stepvalues' must be an integer, got 'x'");
}

TEST(spec_error_range_and_enum) {
  EXPECT(MINI "input: {images: i, labels: l, batch_size: 0}\n",
         "t.yaml:5:43: ", "'batch_size' must be >= 1, got '0'");
  EXPECT(MINI "update: {momentum: 1.5}\n",
         "t.yaml:5:20: ", "'momentum' must be in [0, 1), got '1.5'");
  EXPECT(MINI "update: {epsilon: 0}\n", "t.yaml:5:19: ", "'epsilon' must be > 0");
  EXPECT(MINI "update: {weight_decay: 1e999}\n", "t.yaml:5:24: ", "out of range");
  EXPECT(MINI "update: {optimizer: adagrad}\n", "t.yaml:5:21: ",
         "'optimizer' must be one of: sgd, momentum_sgd, adam; got 'adagrad'");
  EXPECT(MINI "update: {lr: {policy: linear}}\n",
         "t.yaml:5:23: ", "one of: fixed, step, multistep, exp, inv, poly, cosine");
  EXPECT(MINI "update: {lr: {policy: cosine}}\n",
         "t.yaml:5:14: ", "lr policy cosine needs 'max_iter' >= 1");
  EXPECT(MINI "update: {lr: {policy: cosine, max_iter: 9, final_multiplier: 2}}\n",
         "t.yaml:5:", "'final_multiplier' must be in [0, 1]");
  EXPECT(MINI "input: {reader: leveldb}\n", "t.yaml:5:17: ",
         "one of: idx, synthetic, tar, lmdb, folder");
  EXPECT(MINI "input: {images: i, labels: l, shard_id: 2, num_shards: 2}\n",
         "t.yaml:5:41: ", "'shard_id' must be less than num_shards (2), got 2");
  EXPECT(MINI "update: {lr: {stepvalues: [10, 5]}}\n",
         "t.yaml:5:32: ", "'stepvalues' must be increasing");
  EXPECT(MINI "update: {lr: {policy: poly}}\n",
         "t.yaml:5:14: ", "lr policy poly needs 'max_iter' >= 1");
  EXPECT(MINI "input: {images: i, labels: l, outputs: [a, b, c]}\n",
         "t.yaml:5:40: ", "'outputs' must name exactly 2 blobs");
  EXPECT(MINI "parallel: {net_type: tree}\n", "t.yaml:5:22: ", "one of: dag, simple");
}

TEST(spec_error_missing_key) {
  EXPECT("name: m\nlosses: [l]\n", "t.yaml:1:1: ", "missing key 'forward'");
  EXPECT("# header\n\nforward: [{op: FC, out: y}]\nlosses: [y]\n",
         "t.yaml:3:1: ", "missing key 'name'");
  EXPECT("name: m\nforward: [{op: FC, out: y}]\n",
         "t.yaml:1:1: ", "missing key 'losses'");
  EXPECT(MINI "input: {reader: idx, images: i}\n",
         "t.yaml:5:8: ", "missing key 'labels' in input");
  EXPECT(MINI "eval:\n  images: a\n", "t.yaml:6:3: ", "missing key 'labels' in eval");
  EXPECT(MINI "parallel: {rendezvous: {address: x}}\n",
         "t.yaml:5:25: ", "unknown key 'address' in parallel.rendezvous");
}

TEST(spec_error_structure) {
  EXPECT("- name: m\n", "t.yaml:1:1: ", "a spec must be a mapping");
  EXPECT("name: m\nforward: {op: FC}\nlosses: [l]\n",
         "t.yaml:2:10: ", "'forward' must be a list of operators, got a mapping");
  EXPECT("name: m\nforward: []\nlosses: [l]\n",
         "t.yaml:2:10: ", "'forward' must not be empty");
  EXPECT(MINI "input: [a, b]\n", "t.yaml:5:8: ", "'input' must be a mapping, got a list");
  EXPECT("name: m\nforward: [{op: FC, out: y}]\nlosses: []\n",
         "t.yaml:3:9: ", "'losses' must name at least one blob");
  EXPECT("name: m\nforward: [{op: FC, out: y}]\nlosses: {a: 1}\n",
         "t.yaml:3:9: ", "'losses' must be a list of strings, got a mapping");
  EXPECT("name: m\nforward: [{op: FC, out: y}]\nlosses: [[a]]\n",
         "t.yaml:3:10: ", "'losses' items must be strings, got a list");
  EXPECT("name: m\n[a]: 1\n", "t.yaml:2:1: ", "mapping keys must be scalars");
  EXPECT("name: my model\nforward: [{op: FC, out: y}]\nlosses: [y]\n",
         "t.yaml:1:7: ", "'name' must be 1-64 characters");
}

TEST(spec_error_operators) {
  EXPECT("name: m\nforward:\n  - {op: FC, out: y}\n  - {in: x, out: y}\nlosses: [y]\n",
         "t.yaml:4:5: ", "op #2: missing key 'op'");
  EXPECT("name: m\nforward:\n  - op: FC\n    in: x\nlosses: [y]\n",
         "t.yaml:3:5: ", "op #1 (FC): missing key 'out'");
  EXPECT("name: m\nforward:\n  - FC\nlosses: [y]\n",
         "t.yaml:3:5: ", "op #1: an operator must be a mapping");
  EXPECT(
      "name: m\nforward:\n  - {op: FC, out: y, w: {a: 1}}\nlosses: [y]\n",
      "t.yaml:3:25: ", "op #1 (FC): argument 'w' must be a scalar or a list of numbers");
  EXPECT(
      "name: m\nforward:\n  - {op: FC, out: y, w: [1, a]}\nlosses: [y]\n",
      "t.yaml:3:29: ", "op #1 (FC): argument 'w': list items must be numbers, got 'a'");
  EXPECT(
      "name: m\nforward:\n  - {op: FC, out: y, w: 99999999999999999999}\nlosses: [y]\n",
      "t.yaml:3:25: ", "argument 'w': integer out of range");
  EXPECT("name: m\nforward:\n  - {op: FC, out: y, w: }\nlosses: [y]\n",
         "t.yaml:3:25: ", "argument 'w' has no value");
  EXPECT("name: m\nforward:\n  - {op: FC, out: []}\nlosses: [y]\n",
         "t.yaml:3:19: ", "'out' must name at least one blob");
  EXPECT("name: m\nforward:\n  - {op: [FC], out: y}\nlosses: [y]\n",
         "t.yaml:3:10: ", "op #1: 'op' must be a string, got a list");
}

TEST(spec_error_devices) {
  EXPECT(MINI "parallel: {devices: [cpu:0, gpu:1]}\n",
         "t.yaml:5:29: ", "unknown device kind in 'gpu:1' (choices: cpu, cuda, fenced)");
  EXPECT(MINI "parallel: {devices: [cuda:7-0]}\n", "t.yaml:5:22: ", "bad device index");
  EXPECT(MINI "parallel: {devices: [cpu:x]}\n",
         "t.yaml:5:22: ", "a device must look like cpu:0, cuda:3 or cuda:0-7");
  EXPECT(MINI "parallel: {devices: [cuda:0-3, cuda:2]}\n",
         "t.yaml:5:32: ", "device 'cuda:2' is listed twice");
  EXPECT(MINI "parallel: {devices: []}\n",
         "t.yaml:5:21: ", "'devices' must not be empty");
}

TEST(spec_error_yaml_features) {
  EXPECT("", "t.yaml:1:1: ", "empty spec");
  EXPECT("# only a comment\n", "t.yaml:1:1: ", "empty spec");
  EXPECT("---\n", "t.yaml:", "empty spec");
  EXPECT("name: &n m\nforward: [{op: FC, out: y}]\nlosses: [*n]\n",
         "t.yaml:1:7: ", "aliases are not supported");
  EXPECT(MINI "---\nname: other\n",
         "t.yaml:5:1: ", "multiple YAML documents are not supported");
  EXPECT("name: !!str m\n", "t.yaml:1:7: ", "tags are not supported");
  EXPECT("name: \"a\\0b\"\nforward: [{op: FC, out: y}]\nlosses: [y]\n",
         "t.yaml:1:7: ", "'name' contains a NUL character");
  char deep[400];
  size_t o = (size_t)snprintf(deep, sizeof deep, "name: ");
  for (int i = 0; i < 100; i++) deep[o++] = '[';
  deep[o] = '\0';
  EXPECT(deep, "t.yaml:1:", "nesting deeper than 64 levels");
}

TEST(spec_error_files) {
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_spec_load("/nonexistent/spec.yaml", &s, &err), DPM_IO);
  CHECK_HAS(err.msg, "/nonexistent/spec.yaml: cannot open");
  CHECK_INT(dpm_spec_load("/", &s, &err), DPM_IO);
  CHECK(s == NULL);

  char path[] = "/tmp/dpm_spec_testXXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK(ftruncate(fd, (off_t)DPM_SPEC_MAX_BYTES + 1) == 0); /* sparse */
  close(fd);
  dpm_status st = dpm_spec_load(path, &s, &err);
  unlink(path);
  CHECK_INT(st, DPM_SPEC);
  CHECK_HAS(err.msg, "larger than 16 MiB");

  char *big = calloc(1, DPM_SPEC_MAX_BYTES + 1);
  CHECK(big != NULL);
  st = dpm_spec_parse(big, DPM_SPEC_MAX_BYTES + 1, "big.yaml", &s, &err);
  free(big);
  CHECK_INT(st, DPM_SPEC);
  CHECK_HAS(err.msg, "big.yaml: spec is larger than 16 MiB");

  /* Errors in a loaded file name the path. */
  char path2[] = "/tmp/dpm_spec_testXXXXXX";
  fd = mkstemp(path2);
  CHECK(fd >= 0);
  const char bad[] = "name: m\nforward: 3\n";
  CHECK(write(fd, bad, sizeof bad - 1) == (ssize_t)(sizeof bad - 1));
  close(fd);
  st = dpm_spec_load(path2, &s, &err);
  unlink(path2);
  CHECK_INT(st, DPM_SPEC);
  char want[64];
  snprintf(want, sizeof want, "%s:2:10: ", path2);
  CHECK_HAS(err.msg, want);
}

TEST(spec_examples_parse) {
  static const char *const files[] = {"examples/fmnist_mlp.yaml",
                                      "examples/fmnist_cnn.yaml"};
  for (size_t i = 0; i < 2; i++) {
    Dpm__ModelSpec *s = NULL;
    dpm_err err = {0};
    dpm_status st = dpm_spec_load(files[i], &s, &err);
    if (st != DPM_OK) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    CHECK_INT(st, DPM_OK);
    CHECK(s->input && s->input->reader == DPM__READER_KIND__READER_IDX);
    CHECK(s->n_forward >= 7);
    CHECK(strcmp(s->forward[s->n_forward - 1]->type, "Accuracy") == 0);
    CHECK(strcmp(s->forward[s->n_forward - 2]->type, "SoftmaxWithLoss") == 0);
    CHECK(s->update && s->update->optimizer == DPM__OPTIMIZER__OPT_MOMENTUM_SGD);
    CHECK(s->update->lr && s->update->lr->policy == DPM__LR_POLICY__LR_STEP);
    CHECK(s->eval && strstr(s->eval->images, "t10k"));
    CHECK(s->parallel && s->parallel->n_devices == 1);
    CHECK(strcmp(s->parallel->devices[0], "cpu:0") == 0);
    CHECK(s->parallel->net_type ==
          (i == 0 ? DPM__NET_TYPE__NET_SIMPLE : DPM__NET_TYPE__NET_DAG));
    if (i == 1) {
      const Dpm__Operator *conv = s->forward[0];
      CHECK(strcmp(conv->type, "Conv") == 0);
      const Dpm__Argument *a = find_arg(conv, "kernel");
      CHECK(a && a->value_case == DPM__ARGUMENT__VALUE_I && a->i == 5);
    }
    dpm_spec_free(s);
  }
}

/* Parses text; the only acceptable outcomes are OK (a spec) or DPM_SPEC
 * (no spec, a positioned message). Returns 1 if that held. */
static int parse_sane(const char *text, size_t len) {
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  dpm_status st = dpm_spec_parse(text, len, "f.yaml", &s, &err);
  if (st == DPM_OK) {
    int ok = s != NULL && s->name != NULL;
    (void)dpm_spec_hash(s);
    dpm_spec_free(s);
    return ok;
  }
  return st == DPM_SPEC && s == NULL && strncmp(err.msg, "f.yaml:", 7) == 0;
}

TEST(spec_robust_truncation) {
  size_t n = strlen(FULL);
  for (size_t len = 0; len <= n; len++) {
    /* A private copy of exactly len bytes, so ASan sees any over-read. */
    char *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    memcpy(copy, FULL, len);
    int ok = parse_sane(copy, len);
    free(copy);
    if (!ok) {
      dpm_test_fail(__FILE__, __LINE__, "prefix of %zu bytes", len);
      return;
    }
  }
}

TEST(spec_robust_mutation) {
  static const char pool[] = "{}[],:-#&*!|>'\"%@` \t\n\r\\0123456789.e-+~xyzQ";
  size_t n = strlen(FULL);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
#define NEXT()                                                                           \
  (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (size_t)(rng >> 33))
  char *buf = malloc(n + 16);
  CHECK(buf != NULL);
  int parsed_ok = 0;
  for (int iter = 0; iter < 600; iter++) {
    size_t len = n;
    memcpy(buf, FULL, n);
    int edits = 1 + (int)(NEXT() % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = NEXT() % (len ? len : 1), kind = NEXT() % 4;
      char ch = (NEXT() & 1) ? pool[NEXT() % (sizeof pool - 1)] : (char)(NEXT() & 0xFF);
      if (kind == 0 && len < n + 16) { /* insert */
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = ch;
        len++;
      } else if (kind == 1 && len > 0) { /* delete */
        memmove(buf + at, buf + at + 1, len - at - 1);
        len--;
      } else if (len > 0) { /* replace */
        buf[at] = ch;
      }
    }
    char *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    memcpy(copy, buf, len);
    Dpm__ModelSpec *s = NULL;
    parsed_ok += dpm_spec_parse(copy, len, "f.yaml", &s, NULL) == DPM_OK;
    dpm_spec_free(s);
    int ok = parse_sane(copy, len);
    free(copy);
    if (!ok) {
      dpm_test_fail(__FILE__, __LINE__, "mutation %d", iter);
      break;
    }
  }
#undef NEXT
  free(buf);
  CHECK(parsed_ok > 0); /* some mutations (in comments, values) still parse */
}

/* precision.allreduce: fp32 by default, bf16 when asked, anything else an
 * error at its line and column; outside the spec hash (how gradients
 * travel, not what the model is). */
TEST(spec_precision_allreduce) {
  Dpm__ModelSpec *a = NULL, *b = NULL, *c = NULL;
  const char *t0 = MINI "input: {images: i, labels: l}\n";
  const char *t1 = MINI "input: {images: i, labels: l}\nprecision:\n  allreduce: bf16\n";
  const char *t2 = MINI "input: {images: i, labels: l}\nprecision: {allreduce: fp32}\n";
  CHECK_INT(dpm_spec_parse(t1, strlen(t1), "a.yaml", &a, NULL), DPM_OK);
  CHECK_INT(dpm_spec_parse(t2, strlen(t2), "b.yaml", &b, NULL), DPM_OK);
  CHECK_INT(dpm_spec_parse(t0, strlen(t0), "c.yaml", &c, NULL), DPM_OK);
  CHECK(a->precision && a->precision->has_allreduce);
  CHECK_INT(a->precision->allreduce, DPM__ALLREDUCE_TYPE__ALLREDUCE_BF16);
  CHECK_INT(a->precision->line, 7); /* its mapping's first key */
  CHECK_INT(b->precision->allreduce, DPM__ALLREDUCE_TYPE__ALLREDUCE_FP32);
  CHECK(c->precision == NULL);
  CHECK(dpm_spec_hash(a) == dpm_spec_hash(c));
  CHECK(dpm_spec_hash(b) == dpm_spec_hash(c));
  dpm_spec_free(a);
  dpm_spec_free(b);
  dpm_spec_free(c);
  EXPECT(MINI "precision: {allreduce: fp16}\n",
         "t.yaml:5:24: ", "'allreduce' must be one of: fp32, bf16; got 'fp16'");
  EXPECT(MINI "precision: {alreduce: bf16}\n", "t.yaml:5:13: ", "alreduce");
  EXPECT(MINI "parallel: {mode: bmuf}\nprecision: {allreduce: bf16}\n",
         "t.yaml:6:24: ", "parallel.mode bmuf sums parameters");
}
