/* Step graphs, one job per device and a forced group of one, on fenced
 * devices: they record and replay step graphs, and fail as one CUDA stream
 * would when a replay names a buffer its op no longer uses or when two
 * jobs meet on a device (backend/fenced/fenced.c). What a GPU would get
 * wrong here without a test is checked on the CPU. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/device.h"
#include "backend/fenced/fenced.h"
#include "common/spec.h"
#include "engine/exec.h"
#include "test.h"
#include "train/graph.h"
#include "trainer_fixture.h"

/* Every synced blob of a and b (the master's), bitwise. */
static int same_state(dpm_trainer *a, dpm_trainer *b) {
  const dpm_plan *p = dpm_trainer_plan(a);
  int same = 1;
  for (int i = 0; i < p->n_synced && same; i++) {
    dpm_tensor x = {0}, y = {0};
    dpm_err err = {0};
    same = !dpm_trainer_read_blob(a, p->synced[i], &x, &err) &&
           !dpm_trainer_read_blob(b, p->synced[i], &y, &err) &&
           dpm_shape_equal(&x.shape, &y.shape) &&
           !memcmp(x.data, y.data, dpm_shape_bytes(&x.shape));
    if (!same) printf("    %s differs %s\n", p->synced[i], err.msg);
    dpm_tensor_fini(&x), dpm_tensor_fini(&y);
  }
  return same;
}

static dpm_trainer *trainer_on(dpm_device_kind kind, const Dpm__ModelSpec *spec,
                               int devices) {
  tf_device_kind = kind;
  dpm_trainer *t = tf_trainer(spec, devices, NULL);
  tf_device_kind = DPM_DEVICE_CPU;
  return t;
}

static void print_stats(const char *what, dpm_graph_stats g) {
  printf("    %s: %llu eager, %llu captured, %llu replayed, %llu dropped\n", what,
         (unsigned long long)g.eager, (unsigned long long)g.captures,
         (unsigned long long)g.replays, (unsigned long long)g.dropped);
}

/* The first step runs eagerly, the second is captured and replayed, the
 * rest replay; each step once: the iteration counts steps, and the result
 * is the CPU's, bit for bit. */
TEST(graph_captured_once_then_replayed_like_cpu) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 3, 0.05, "dag", 65536);
  dpm_trainer *f = trainer_on(DPM_DEVICE_FENCED, spec, 2), *c = tf_trainer(spec, 2, NULL);
  CHECK(f && c && tf_steps(f, 6) && tf_steps(c, 6));
  for (int d = 0; d < 2; d++) {
    dpm_graph_stats g = dpm_trainer_graph_stats(f, d);
    print_stats(d ? "fenced:1" : "fenced:0", g);
    CHECK(g.eager == 1 && g.captures == 1 && g.replays == 5 && g.dropped == 0);
  }
  CHECK_INT(dpm_trainer_iter(f), 6);
  CHECK(same_state(f, c));
  dpm_trainer_destroy(f);
  dpm_trainer_destroy(c);
  dpm_spec_free(spec);
}

/* A capture that cannot begin leaves the step to run eagerly, once: the
 * iteration counts steps, not runs, and the result is the CPU's. */
TEST(graph_capture_that_cannot_begin_runs_the_step_once) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 3, 0.05, "dag", 65536);
  dpm_trainer *f = trainer_on(DPM_DEVICE_FENCED, spec, 1), *c = tf_trainer(spec, 1, NULL);
  dpm_fenced_fail_next_capture(0);
  CHECK(f && c && tf_steps(f, 4) && tf_steps(c, 4));
  dpm_graph_stats g = dpm_trainer_graph_stats(f, 0);
  print_stats("fenced:0", g);
  CHECK(g.eager == 4 && g.captures == 0 && g.replays == 0);
  CHECK_INT(dpm_trainer_iter(f), 4);
  CHECK(same_state(f, c));
  dpm_trainer_destroy(f);
  dpm_trainer_destroy(c);
  dpm_spec_free(spec);
}

/* An evaluation between steps runs on a context of its own: the step's
 * graph, captured before it, still names the step's scratch and is
 * replayed after it, and training goes on as without the evaluation. */
TEST(graph_survives_an_eval_between_steps) {
  static const char *yaml =
      "name: t\n"
      "input: {reader: synthetic, batch_size: 8, num_examples: 2048,"
      " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}\n"
      "forward:\n" CNN_FORWARD
      "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
      "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
      "losses: [loss]\n"
      "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05}}\n"
      "eval: {images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz,"
      " labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz,"
      " batch_size: 1000}\n"
      "parallel: {net_type: dag}\n";
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  CHECK(!dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err));
  dpm_trainer *a = trainer_on(DPM_DEVICE_FENCED, spec, 1),
              *b = trainer_on(DPM_DEVICE_FENCED, spec, 1);
  double loss = 0, acc = 0;
  int ok = a && b && tf_steps(a, 3) && !dpm_trainer_eval(a, &loss, &acc, &err) &&
           tf_steps(a, 3) && tf_steps(b, 6);
  if (!ok) printf("    %s\n", err.msg);
  dpm_graph_stats g = dpm_trainer_graph_stats(a, 0);
  print_stats("with an eval after step 3", g);
  printf("    eval: loss %.4f accuracy %.4f\n", loss, acc);
  CHECK(ok && isfinite(loss));
  CHECK(g.captures == 1 && g.replays == 5 && g.dropped == 0);
  CHECK(same_state(a, b));
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(spec);
}

/* A graph is dropped, and captured again, when the context's scratch it
 * names has moved (what an evaluation reserving more on the step's own
 * context would do): a replay with the old scratch fails the device. */
TEST(graph_dropped_when_its_scratch_moves) {
  dpm_dev *dev;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_FENCED, 0}, &dev, &err), DPM_OK);
  dpm_net net = {0};
  dpm_shapes shapes = {0};
  dpm_workspace ws = {.dev = dev};
  dpm_ctx ctx = {.dev = dev};
  dpm_exec x = {0};
  const char *in[] = {"x", "w", "b"}, *out[] = {"y"};
  dpm_node *n = dpm_net_add(&net, dpm_op_find("Conv"), 3, in, 1, out, &err);
  CHECK(n && !dpm_node_set_args(n, "dim_out=4 kernel=3 pad=1", &err));
  dpm_shape sx = dpm_shape_make(DPM_F32, 4, (int64_t[]){2, 3, 9, 9}),
            sw = dpm_shape_make(DPM_F32, 4, (int64_t[]){4, 3, 3, 3}),
            sb = dpm_shape_make(DPM_F32, 1, (int64_t[]){4});
  CHECK(!dpm_shapes_set(&shapes, "x", &sx, DPM_BLOB_DATA) &&
        !dpm_shapes_set(&shapes, "w", &sw, DPM_BLOB_PARAM) &&
        !dpm_shapes_set(&shapes, "b", &sb, DPM_BLOB_PARAM));
  CHECK(!dpm_net_infer(&net, &shapes, -1, "graph_test", &err) &&
        !dpm_exec_bind(&x, &net, &shapes, &ws, &ctx, &err));
  dpm_step_graph g;
  dpm_step_graph_init(&g, dev, &net, 1);
  CHECK(g.enabled);
  int ok = 1;
  for (int step = 0; step < 5 && ok; step++) {
    if (step == 3) ok = !dpm_ctx_reserve(&ctx, ctx.scratch_bytes * 4); /* it moves */
    ok = ok &&
         !dpm_step_graph_run(&g, dev, &ctx, (void (*)(void *))dpm_exec_run, &x, &err);
    dpm_dev_synchronize(dev);
    ok = ok && !dpm_dev_failure(dev, &err);
  }
  if (!ok) printf("    %s\n", err.msg);
  print_stats("scratch moved before step 4", g.stats);
  dpm_fenced_clear_failure(0);
  dpm_step_graph_fini(&g, dev);
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
  dpm_ctx_fini(&ctx);
  dpm_shapes_fini(&shapes);
  dpm_net_fini(&net);
  CHECK(ok);
  CHECK(g.stats.captures == 2 && g.stats.dropped == 1 && g.stats.replays == 4);
}

/* Two models whose device sets overlap, stepping at once from two threads
 * ([fenced:0] and [fenced:0, fenced:1]: two crews on fenced:0): each job
 * holds its devices while it queues work, so neither's kernels meet the
 * other's on fenced:0 nor land in the other's capture, and each trains as
 * it does alone. */
typedef struct {
  dpm_trainer *t;
  int ok;
} stepper;

static void *step_many(void *arg) {
  stepper *s = arg;
  s->ok = 1;
  for (int i = 0; i < 30 && s->ok; i++) s->ok = tf_steps(s->t, 1);
  return NULL;
}

TEST(graph_two_crews_on_one_device_take_turns) {
  Dpm__ModelSpec *one = tf_spec(MLP_FORWARD, 16, 5, 0.05, "dag", 65536),
                 *two = tf_spec(MLP_FORWARD, 8, 5, 0.05, "dag", 65536);
  stepper a = {trainer_on(DPM_DEVICE_FENCED, one, 1), 0},
          b = {trainer_on(DPM_DEVICE_FENCED, two, 2), 0};
  dpm_trainer *alone_a = tf_trainer(one, 1, NULL), *alone_b = tf_trainer(two, 2, NULL);
  CHECK(a.t && b.t && alone_a && alone_b);
  pthread_t ta, tb;
  CHECK(!pthread_create(&ta, NULL, step_many, &a));
  CHECK(!pthread_create(&tb, NULL, step_many, &b));
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  dpm_dev *dev;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_FENCED, 0}, &dev, &err), DPM_OK);
  dpm_status failed = dpm_dev_failure(dev, &err);
  if (failed) printf("    %s\n", err.msg);
  dpm_fenced_clear_failure(0);
  CHECK(a.ok && b.ok && !failed);
  CHECK(tf_steps(alone_a, 30) && tf_steps(alone_b, 30));
  CHECK(same_state(a.t, alone_a) && same_state(b.t, alone_b));
  dpm_trainer_destroy(a.t);
  dpm_trainer_destroy(b.t);
  dpm_trainer_destroy(alone_a);
  dpm_trainer_destroy(alone_b);
  dpm_spec_free(one);
  dpm_spec_free(two);
}

/* A group forced on one device (dpm_trainer_options.force_comm, what the
 * GPU checks use to run NCCL on one GPU): the step holds its collectives
 * (inside the captured graph), the group is the local one, and the result
 * is one replica's without it, bit for bit. */
TEST(graph_forced_group_of_one_trains_like_one_replica) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 9, 0.05, "dag", 4096);
  dpm_trainer_options opt = {
      .devices = 1, .kind = DPM_DEVICE_FENCED, .net_type = -1, .force_comm = 1};
  dpm_trainer *forced = NULL, *plain = trainer_on(DPM_DEVICE_FENCED, spec, 1);
  dpm_err err = {0};
  CHECK_INT(dpm_trainer_create(spec, &opt, &forced, &err), DPM_OK);
  CHECK(plain && !strcmp(dpm_trainer_comm_backend(forced), "local"));
  int collectives = 0;
  const dpm_net *step = &dpm_trainer_plan(forced)->step;
  for (int i = 0; i < step->n; i++)
    collectives += step->nodes[i].def->id == DPM_OP_ALLREDUCE ||
                   step->nodes[i].def->id == DPM_OP_ALLREDUCE_START;
  printf("    %d collectives in the forced step (buckets of 4096 bytes)\n", collectives);
  CHECK(collectives > 1);
  CHECK(tf_steps(forced, 6) && tf_steps(plain, 6));
  dpm_graph_stats g = dpm_trainer_graph_stats(forced, 0);
  print_stats("forced group", g);
  CHECK(g.captures == 1 && g.replays == 5);
  CHECK(same_state(forced, plain));
  dpm_trainer_destroy(forced);
  dpm_trainer_destroy(plain);
  dpm_spec_free(spec);
}
