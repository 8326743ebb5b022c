/* Gradient memory sharing (parallel.optimize_gradient_memory, Caffe2's
 * memonger; parallel/memshare.h): parameters bitwise those without it
 * after 20 steps of the MLP, the CNN and the CNN with BN, on 1 and 2
 * replicas, on CPU (and the CNN on fenced devices), and of the example
 * files' MLP and CNN on 2; the CNN's tensor bytes at batch 256 at least
 * 30% lower;
 * shared blobs refuse get-blob unless kept; a test net in a child workspace
 * never takes a shared blob. */
#include <stdlib.h>

#include "common/device.h"
#include "common/spec.h"
#include "engine/workspace.h"
#include "io/datacache.h"
#include "parallel/memshare.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

/* The examples' CNN (examples/fmnist_cnn.yaml's forward ops). */
#define EXAMPLE_CNN_FORWARD                                                              \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 32, kernel: 5, pad: 2}\n"             \
  "  - {op: Relu, in: [conv1], out: conv1}\n"                                            \
  "  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}\n"                   \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 64, kernel: 5, pad: 2}\n"            \
  "  - {op: Relu, in: [conv2], out: conv2}\n"                                            \
  "  - {op: MaxPool, in: [conv2], out: pool2, kernel: 2, stride: 2}\n"                   \
  "  - {op: FC, in: [pool2], out: fc3, dim_out: 1024}\n"                                 \
  "  - {op: Relu, in: [fc3], out: fc3}\n"                                                \
  "  - {op: FC, in: [fc3], out: pred, dim_out: 10}\n"

/* The CNN with a SpatialBN after each conv (examples/fmnist_cnn_bn.yaml's
 * structure, the tests' channels): running statistics read before they are
 * written, saved statistics that backward reads. */
#define BN_CNN_FORWARD                                                                   \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}\n"              \
  "  - {op: SpatialBN, in: [conv1], out: bn1}\n"                                         \
  "  - {op: Relu, in: [bn1], out: bn1}\n"                                                \
  "  - {op: MaxPool, in: [bn1], out: pool1, kernel: 2, stride: 2}\n"                     \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 5, pad: 2}\n"            \
  "  - {op: SpatialBN, in: [conv2], out: bn2}\n"                                         \
  "  - {op: Relu, in: [bn2], out: bn2}\n"                                                \
  "  - {op: MaxPool, in: [bn2], out: pool2, kernel: 2, stride: 2}\n"                     \
  "  - {op: FC, in: [pool2], out: pred, dim_out: 10}\n"

static Dpm__ModelSpec *spec_with(const char *forward, int per_device, const char *net_type,
                                 int share) {
  Dpm__ModelSpec *s = tf_spec(forward, per_device, 7, 0.05, net_type, 65536);
  if (s) s->parallel->optimize_gradient_memory = share;
  return s;
}

/* Every replica's synced blobs (params, computed, optimizer state,
 * counters) and the last loss equal bitwise; 0 and a message if not. */
static int bitwise_equal(dpm_trainer *a, dpm_trainer *b) {
  const dpm_plan *p = dpm_trainer_plan(a);
  int same = 1;
  for (int d = 0; d < dpm_trainer_devices(a); d++) {
    char scope[32], name[256];
    dpm_device_scope(*dpm_trainer_device(a, d), scope, sizeof scope);
    for (int i = 0; i < p->n_synced; i++) {
      snprintf(name, sizeof name, "%s/%s", scope, p->synced[i]);
      dpm_tensor x = {0}, y = {0};
      dpm_err err;
      int ok = !dpm_trainer_read_blob(a, name, &x, &err) &&
               !dpm_trainer_read_blob(b, name, &y, &err) &&
               dpm_shape_equal(&x.shape, &y.shape) &&
               !memcmp(x.data, y.data, dpm_shape_bytes(&x.shape));
      if (!ok && same) printf("    %s differs\n", name);
      same &= ok;
      dpm_tensor_fini(&x);
      dpm_tensor_fini(&y);
    }
  }
  return same;
}

/* nets [from, to) of the list below */
static void bitwise_with_and_without(dpm_device_kind kind, int from, int to) {
  static const struct {
    const char *name, *forward;
  } nets[] = {{"MLP", MLP_FORWARD}, {"CNN", CNN_FORWARD}, {"CNN+BN", BN_CNN_FORWARD}};
  for (int n = from; n < to; n++)
    for (int devices = 1; devices <= 2; devices++) {
      Dpm__ModelSpec *plain = spec_with(nets[n].forward, 16, "dag", 0);
      Dpm__ModelSpec *shared = spec_with(nets[n].forward, 16, "dag", 1);
      tf_device_kind = kind;
      dpm_trainer *a = tf_trainer(plain, devices, NULL), *b = tf_trainer(shared, devices, NULL);
      tf_device_kind = DPM_DEVICE_CPU;
      int ok = a && b && tf_steps(a, 20) && tf_steps(b, 20);
      int same = ok && bitwise_equal(a, b);
      const dpm_trainer_memory *mb = b ? dpm_trainer_memory_of(b) : NULL;
      if (mb)
        printf("    %s, %d replica(s): shared blobs %llu -> %llu bytes, %s\n", nets[n].name,
               devices, (unsigned long long)mb->shared_apart,
               (unsigned long long)mb->shared_arena, same ? "bitwise equal" : "DIFFERENT");
      int shares = mb && mb->shared_arena < mb->shared_apart;
      dpm_trainer_destroy(a);
      dpm_trainer_destroy(b);
      dpm_spec_free(plain);
      dpm_spec_free(shared);
      CHECK(ok && same && shares);
    }
}
TEST(memshare_params_bitwise_equal_after_20_steps) {
  bitwise_with_and_without(DPM_DEVICE_CPU, 0, 3);
}
/* fenced devices (memory host code cannot touch): the CNN, as the slowest */
TEST(fenced_memshare_params_bitwise_equal_after_20_steps) {
  bitwise_with_and_without(DPM_DEVICE_FENCED, 1, 2);
}

/* The example files themselves (their nets, data and optimizer, at 16 per
 * device so the sanitizers keep it short), on 2 replicas: bitwise equal
 * after 20 steps with and without sharing. Both trainers of an example
 * read Fashion-MNIST from one data cache. */
TEST(memshare_example_files_bitwise_equal_after_20_steps) {
  static const char *const paths[] = {"examples/fmnist_mlp.yaml", "examples/fmnist_cnn.yaml"};
  dpm_data_cache *cache;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1ull << 30, &cache, &err), DPM_OK);
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
    Dpm__ModelSpec *spec[2] = {NULL, NULL};
    dpm_trainer *t[2] = {NULL, NULL};
    int ok = 1;
    for (int share = 0; share < 2 && ok; share++) {
      ok = !dpm_spec_load(paths[i], &spec[share], &err) && spec[share]->parallel;
      if (ok) {
        spec[share]->input->batch_size = 16;
        spec[share]->parallel->optimize_gradient_memory = share;
        dpm_trainer_options opt = {.devices = 2, .net_type = -1, .data_cache = cache};
        ok = !dpm_trainer_create(spec[share], &opt, &t[share], &err) && tf_steps(t[share], 20);
      }
      if (!ok) printf("    %s: %s\n", paths[i], err.msg);
    }
    int same = ok && bitwise_equal(t[0], t[1]);
    const dpm_trainer_memory *mb = t[1] ? dpm_trainer_memory_of(t[1]) : NULL;
    if (mb)
      printf("    %s, 2 replicas: shared blobs %llu -> %llu bytes, %s\n", paths[i],
             (unsigned long long)mb->shared_apart, (unsigned long long)mb->shared_arena,
             same ? "bitwise equal" : "DIFFERENT");
    int shares = mb && mb->shared_arena < mb->shared_apart;
    for (int k = 0; k < 2; k++) {
      dpm_trainer_destroy(t[k]);
      dpm_spec_free(spec[k]);
    }
    if (!(ok && same && shares)) dpm_data_cache_destroy(cache);
    CHECK(ok && same && shares);
  }
  dpm_data_cache_stats st;
  dpm_data_cache_stats_of(cache, &st);
  dpm_data_cache_destroy(cache);
  CHECK_INT(st.misses, 2); /* one read of the images and labels for all four trainers */
}

/* Peak tensor bytes (every blob of the replica as allocated at create) of
 * the CNN at batch 256 with and without sharing: at least 30% lower. */
TEST(memshare_cnn_batch256_tensor_bytes_30pct_lower) {
  static const struct {
    const char *name, *forward;
  } nets[] = {{"CNN (tests' channels 8/16/64)", CNN_FORWARD},
              {"CNN (examples/fmnist_cnn.yaml, 32/64/1024)", EXAMPLE_CNN_FORWARD}};
  for (int n = 0; n < 2; n++) {
    Dpm__ModelSpec *plain = spec_with(nets[n].forward, 256, "dag", 0);
    Dpm__ModelSpec *shared = spec_with(nets[n].forward, 256, "dag", 1);
    dpm_trainer *a = tf_trainer(plain, 1, NULL), *b = tf_trainer(shared, 1, NULL);
    CHECK(a && b);
    uint64_t before = dpm_trainer_memory_of(a)->tensors,
             after = dpm_trainer_memory_of(b)->tensors;
    CHECK_INT(dpm_trainer_memory_of(b)->tensors_unshared, before);
    double saved = 1.0 - (double)after / (double)before;
    printf("    %s at batch 256: tensor bytes %llu without sharing, %llu with (%.1f%% lower)\n",
           nets[n].name, (unsigned long long)before, (unsigned long long)after,
           100 * saved);
    /* as allocated: the workspace's own tensors (the allocator's size
       classes) and the arena */
    uint64_t had = dpm_ws_bytes(dpm_trainer_workspace(a, 0)),
             has = dpm_ws_bytes(dpm_trainer_workspace(b, 0)) +
                   dpm_trainer_memory_of(b)->shared_arena;
    printf("    allocated: %llu without, %llu with (%.1f%% lower)\n", (unsigned long long)had,
           (unsigned long long)has, 100 * (1.0 - (double)has / (double)had));
    dpm_trainer_destroy(a);
    dpm_trainer_destroy(b);
    dpm_spec_free(plain);
    dpm_spec_free(shared);
    CHECK(saved >= 0.30);
  }
}

/* A shared blob's value after a step is no one's: get-blob refuses it and
 * says how to keep it; parallel.keep_blobs keeps it; an unknown name there
 * is a spec error. */
TEST(memshare_get_blob_of_shared_refused_unless_kept) {
  Dpm__ModelSpec *spec = spec_with(MLP_FORWARD, 16, "dag", 1);
  dpm_trainer *t = tf_trainer(spec, 1, NULL);
  CHECK(t && tf_steps(t, 2));
  dpm_tensor h = {0};
  dpm_err err = {0};
  CHECK_INT(dpm_trainer_read_blob(t, "fc2", &h, &err), DPM_NOT_FOUND);
  CHECK_HAS(err.msg, "parallel.keep_blobs");
  CHECK_INT(dpm_trainer_read_blob(t, "loss", &h, &err), DPM_OK);
  CHECK_INT(dpm_trainer_read_blob(t, "fc1_w", &h, &err), DPM_OK);
  dpm_trainer_destroy(t);

  char *keep[] = {"fc2"};
  spec->parallel->keep_blobs = keep;
  spec->parallel->n_keep_blobs = 1;
  t = tf_trainer(spec, 1, NULL);
  int ok = t && tf_steps(t, 2) && !dpm_trainer_read_blob(t, "fc2", &h, &err);
  dpm_trainer_destroy(t);
  CHECK(ok);

  /* the spec's form */
  static const char *yaml =
      "name: t\n"
      "input: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 28, 28]}\n"
      "forward:\n" MLP_FORWARD
      "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
      "losses: [loss]\n"
      "parallel: {optimize_gradient_memory: true, keep_blobs: [fc2, fc1]}\n";
  Dpm__ModelSpec *parsed = NULL;
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "k.yaml", &parsed, &err), DPM_OK);
  CHECK(parsed->parallel->optimize_gradient_memory && parsed->parallel->n_keep_blobs == 2);
  CHECK(!strcmp(parsed->parallel->keep_blobs[1], "fc1"));
  dpm_spec_free(parsed);

  keep[0] = "nope";
  dpm_trainer_options opt = {.devices = 1, .net_type = -1};
  CHECK_INT(dpm_trainer_create(spec, &opt, &t, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "parallel.keep_blobs: the model has no blob 'nope'");
  spec->parallel->keep_blobs = NULL;
  spec->parallel->n_keep_blobs = 0;
  dpm_tensor_fini(&h);
  dpm_spec_free(spec);
}

/* The plan: blobs whose lifetimes overlap (computed here from the step
 * net) never overlap in the arena; blobs read before their first write,
 * parameters and kept names get no place. */
TEST(memshare_plan_lifetimes_disjoint) {
  Dpm__ModelSpec *spec = spec_with(CNN_FORWARD, 16, "dag", 1);
  dpm_trainer *t = tf_trainer(spec, 1, NULL);
  CHECK(t);
  const dpm_plan *p = dpm_trainer_plan(t);
  const dpm_model *m = dpm_trainer_model(t);
  const char *keep[] = {"loss", "accuracy", "data", "label"};
  dpm_memshare ms;
  dpm_err err;
  CHECK_INT(dpm_memshare_plan(&p->step, &m->shapes, keep, 4, &ms, &err), DPM_OK);
  int first[256], last[256], bad = 0;
  CHECK(ms.n > 1 && ms.n <= 256 && ms.after < ms.before);
  for (int b = 0; b < ms.n; b++) { /* the lifetime, from the net alone */
    first[b] = last[b] = -1;
    for (int i = 0; i < p->step.n; i++) {
      const dpm_node *n = &p->step.nodes[i];
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] && !strcmp(n->in[k], ms.names[b])) {
          CHECK(first[b] >= 0); /* written before it is read */
          last[b] = i;
        }
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] && !strcmp(n->out[k], ms.names[b])) {
          if (first[b] < 0) first[b] = i;
          last[b] = i;
        }
    }
    CHECK(first[b] >= 0);
  }
  for (int a = 0; a < ms.n; a++)
    for (int b = a + 1; b < ms.n; b++) {
      uint64_t sa = dpm_shape_bytes(&dpm_shapes_get(&m->shapes, ms.names[a])->shape),
               sb = dpm_shape_bytes(&dpm_shapes_get(&m->shapes, ms.names[b])->shape);
      int live = first[a] <= last[b] && first[b] <= last[a];
      int mem = ms.offset[a] < ms.offset[b] + sb && ms.offset[b] < ms.offset[a] + sa;
      if (live && mem) {
        printf("    %s and %s overlap\n", ms.names[a], ms.names[b]);
        bad = 1;
      }
      CHECK(ms.offset[a] + sa <= ms.after && ms.offset[a] % DPM_ALIGN == 0);
    }
  CHECK(!bad);
  for (int i = 0; i < 4; i++) CHECK_INT(dpm_memshare_find(&ms, keep[i]), -1);
  CHECK_INT(dpm_memshare_find(&ms, "conv1_w"), -1);
  CHECK_INT(dpm_memshare_find(&ms, "conv1_w_momentum"), -1);
  CHECK(dpm_memshare_find(&ms, "conv1_grad") >= 0);
  dpm_memshare_fini(&ms);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}

/* Eval (the test net, in a child workspace of the master's, at the
 * training batch so that every activation has the shape of the train
 * net's) gives what it gives without sharing, and training after it stays
 * bitwise equal: the test net never writes into the shared arena. */
TEST(memshare_eval_matches_and_leaves_training_alone) {
  static const char *yaml =
      "name: t\n"
      "input: {reader: synthetic, batch_size: 16, num_examples: 2048,"
      " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}\n"
      "forward:\n" MLP_FORWARD
      "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
      "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
      "losses: [loss]\n"
      "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05}}\n"
      "eval: {images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz,"
      " labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz,"
      " batch_size: 16}\n"
      "parallel: {net_type: dag}\n";
  Dpm__ModelSpec *plain = NULL, *shared = NULL;
  dpm_err err = {0};
  CHECK(!dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &plain, &err));
  CHECK(!dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &shared, &err));
  shared->parallel->optimize_gradient_memory = 1;
  dpm_trainer *a = tf_trainer(plain, 1, NULL), *b = tf_trainer(shared, 1, NULL);
  double la = 0, aa = 0, lb = 1, ab = 1;
  int ok = a && b && tf_steps(a, 5) && tf_steps(b, 5) &&
           !dpm_trainer_eval(a, &la, &aa, &err) && !dpm_trainer_eval(b, &lb, &ab, &err) &&
           tf_steps(a, 5) && tf_steps(b, 5);
  printf("    eval without sharing: loss %.9g accuracy %.4f; with: loss %.9g accuracy %.4f\n",
         la, aa, lb, ab);
  int same = ok && bitwise_equal(a, b);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(plain);
  dpm_spec_free(shared);
  CHECK(ok && la == lb && aa == ab && same);
}

/* A child workspace (eval's test net) makes its own blob where the parent's
 * of that name is shared, and still takes an unshared one. */
TEST(memshare_child_workspace_never_takes_shared_blob) {
  dpm_workspace parent = {0};
  dpm_shape s = dpm_shape_make(DPM_F32, 1, (int64_t[]){16});
  void *slot = dpm_alloc(64);
  dpm_blob *a, *b, *c, *d;
  CHECK(!dpm_ws_view_shared(&parent, "act", DPM_BLOB_ACT, &s, dpm_dptr_wrap(slot), &a));
  CHECK(!dpm_ws_ensure(&parent, "w", DPM_BLOB_PARAM, &s, &b));
  CHECK(a->shared && a->t.data == slot && a->t.capacity == 0);
  /* binding at the same shape keeps the view */
  CHECK(!dpm_ws_ensure(&parent, "act", DPM_BLOB_ACT, &s, &c) && c == a && c->t.data == slot);
  dpm_workspace child = {.parent = &parent};
  CHECK(!dpm_ws_ensure(&child, "act", DPM_BLOB_ACT, &s, &c));
  CHECK(!dpm_ws_ensure(&child, "w", DPM_BLOB_PARAM, &s, &d));
  CHECK(c != a && c->t.data != slot && d == b);
  dpm_ws_fini(&child);
  dpm_ws_fini(&parent);
  dpm_free(slot);
}
