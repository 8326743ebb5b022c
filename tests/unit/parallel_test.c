/* Data parallelism: replicas agree with one device, stay bitwise identical,
 * runs are deterministic, resuming from a checkpoint is exact, bad
 * checkpoints are refused without touching the model; on CPU devices and
 * again on fenced ones (backend/fenced: memory host code cannot touch), so
 * every byte these paths move crosses through a backend's copies. Blobs are
 * read back with dpm_trainer_read_blob, never in place. */
#include <stdlib.h>
#include <unistd.h>

#include "dpm/predictor.h"
#include "engine/workspace.h"
#include "io/checkpoint.h"
#include "common/spec.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

#define DROPOUT_FORWARD                                                                  \
  "  - {op: FC, in: [data], out: fc1, dim_out: 64}\n"                                    \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: Dropout, in: [fc1], out: drop1, ratio: 0.3}\n"                               \
  "  - {op: FC, in: [drop1], out: pred, dim_out: 10}\n"

/* A spec on synthetic 28x28 data with `per_device` examples per device. */
static Dpm__ModelSpec *spec_of(const char *forward, int per_device,
                               const char *net_type) {
  return tf_spec(forward, per_device, 7, 0.01, net_type, 65536);
}

/* A host copy of blob `name` (the caller finis it); an empty tensor if none. */
static dpm_tensor host_copy(dpm_trainer *t, const char *name) {
  dpm_tensor h = {0};
  dpm_err err;
  if (dpm_trainer_read_blob(t, name, &h, &err)) printf("    %s\n", err.msg);
  return h;
}

static double param_rel_diff(dpm_trainer *a, dpm_trainer *b) {
  const dpm_model *m = dpm_trainer_model(a);
  double diff = 0, mag = 0;
  for (int i = 0; i < m->shapes.n; i++) {
    if (m->shapes.v[i].kind != DPM_BLOB_PARAM) continue;
    dpm_tensor x = host_copy(a, m->shapes.v[i].name), y = host_copy(b, m->shapes.v[i].name);
    for (int64_t k = 0; x.data && y.data && k < dpm_tensor_numel(&x); k++) {
      diff = fmax(diff, fabs((double)dpm_f32(&x)[k] - dpm_f32(&y)[k]));
      mag = fmax(mag, fabs((double)dpm_f32(&x)[k]));
    }
    if (!x.data || !y.data) diff = mag = INFINITY;
    dpm_tensor_fini(&x);
    dpm_tensor_fini(&y);
  }
  return diff / mag;
}

/* "SCOPE/name" of replica d's blob (cpu_1/fc1_w, fenced_1/fc1_w). */
static void scoped_name(dpm_trainer *t, int d, const char *name, char *buf, size_t n) {
  char scope[32];
  snprintf(buf, n, "%s/%s", dpm_device_scope(*dpm_trainer_device(t, d), scope, sizeof scope),
           name);
}

/* Whether blob `name` of every replica equals the master's, bitwise. */
static int replicas_identical(dpm_trainer *t) {
  const dpm_plan *p = dpm_trainer_plan(t);
  int same = 1;
  for (int d = 1; d < dpm_trainer_devices(t) && same; d++)
    for (int i = 0; i < p->n_synced && same; i++) {
      char scoped[300];
      scoped_name(t, d, p->synced[i], scoped, sizeof scoped);
      dpm_tensor a = host_copy(t, p->synced[i]), b = host_copy(t, scoped);
      same = a.data && b.data && !memcmp(a.data, b.data, dpm_shape_bytes(&a.shape));
      if (!same) printf("    %s differs from the master's\n", scoped);
      dpm_tensor_fini(&a);
      dpm_tensor_fini(&b);
    }
  return same;
}

/* Runs a test's body with the trainers on fenced devices. */

/* 1, 2 and 4 replicas at global batch 64: same parameters after 20 steps. */
static void equivalence(const char *forward, const char *net_type) {
  Dpm__ModelSpec *s1 = spec_of(forward, 64, net_type);
  dpm_trainer *one = tf_trainer(s1, 1, NULL);
  if (!one || !tf_steps(one, 20)) {
    dpm_test_fail(__FILE__, __LINE__, "one device failed");
    goto done;
  }
  for (int n = 2; n <= 4; n *= 2) {
    Dpm__ModelSpec *sn = spec_of(forward, 64 / n, net_type);
    dpm_trainer *many = tf_trainer(sn, n, NULL);
    int ok = many && tf_steps(many, 20);
    double rel = ok ? param_rel_diff(one, many) : 1;
    printf("    %d replicas (%s): max |a-b| / max |a| = %.2g\n", n, net_type, rel);
    if (!ok || rel > 1e-5 || !replicas_identical(many))
      dpm_test_fail(__FILE__, __LINE__, "%d replicas (%s) differ: %.3g", n, net_type,
                    rel);
    dpm_trainer_destroy(many);
    dpm_spec_free(sn);
  }
done:
  dpm_trainer_destroy(one);
  dpm_spec_free(s1);
}

TEST(parallel_mlp_equivalent_simple) { equivalence(MLP_FORWARD, "simple"); }
TEST(parallel_mlp_equivalent_dag) { equivalence(MLP_FORWARD, "dag"); }
TEST(parallel_cnn_equivalent_simple) { equivalence(CNN_FORWARD, "simple"); }
TEST(parallel_cnn_equivalent_dag) { equivalence(CNN_FORWARD, "dag"); }
static void mlp_equivalent(void) {
  equivalence(MLP_FORWARD, "dag");
  equivalence(MLP_FORWARD, "simple");
}
static void cnn_equivalent(void) { equivalence(CNN_FORWARD, "dag"); }
TEST(fenced_parallel_mlp_equivalent) { tf_on_fenced(mlp_equivalent); }

/* A device replica trains as the CPU does, bit for bit: the same kernels,
 * with each step's input uploaded by the step before it while it runs
 * (dpm_trainer_step's pipeline, on devices whose memory is not the
 * host's). Steps in one call and in several, 1 and 2 replicas. */
TEST(fenced_training_matches_cpu_bitwise) {
  for (int devices = 1; devices <= 2; devices++) {
    Dpm__ModelSpec *spec = spec_of(CNN_FORWARD, 16, "dag");
    dpm_trainer *cpu = tf_trainer(spec, devices, NULL);
    tf_device_kind = DPM_DEVICE_FENCED;
    dpm_trainer *dev = tf_trainer(spec, devices, NULL);
    tf_device_kind = DPM_DEVICE_CPU;
    int ok = cpu && dev && tf_steps(cpu, 9) && tf_steps(dev, 6);
    for (int i = 0; ok && i < 3; i++) ok = tf_steps(dev, 1);
    double rel = ok ? param_rel_diff(cpu, dev) : INFINITY;
    printf("    %d replica(s), 9 steps: max |cpu - fenced| / max |cpu| = %g\n", devices, rel);
    dpm_trainer_destroy(cpu);
    dpm_trainer_destroy(dev);
    dpm_spec_free(spec);
    CHECK(ok && rel == 0);
  }
}
TEST(fenced_parallel_cnn_equivalent) { tf_on_fenced(cnn_equivalent); }

static void replicas_identical_after_init_and_steps(void) {
  Dpm__ModelSpec *spec = spec_of(CNN_FORWARD, 8, "dag");
  dpm_trainer *t = tf_trainer(spec, 3, NULL);
  CHECK(t);
  CHECK(replicas_identical(t));
  CHECK(tf_steps(t, 3));
  CHECK(replicas_identical(t));
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}
TEST(parallel_replicas_identical_after_init_and_steps) { replicas_identical_after_init_and_steps(); }
TEST(fenced_parallel_replicas_identical_after_init_and_steps) { tf_on_fenced(replicas_identical_after_init_and_steps); }

/* Two runs with the same seed and device count: bitwise equal. */
static void runs_are_deterministic(void) {
  Dpm__ModelSpec *spec = spec_of(DROPOUT_FORWARD, 16, "dag");
  dpm_trainer *a = tf_trainer(spec, 2, NULL), *b = tf_trainer(spec, 2, NULL);
  CHECK(a && b && tf_steps(a, 10) && tf_steps(b, 10));
  CHECK(param_rel_diff(a, b) == 0);
  dpm_trainer_destroy(a);
  dpm_trainer_destroy(b);
  dpm_spec_free(spec);
}
TEST(parallel_runs_are_deterministic) { runs_are_deterministic(); }
TEST(fenced_parallel_runs_are_deterministic) { tf_on_fenced(runs_are_deterministic); }


/* k steps, checkpoint, load into a fresh trainer, m more steps == k + m
 * steps without interruption, bitwise (Dropout included). */
static void resume_is_exact(void) {
  Dpm__ModelSpec *spec = spec_of(DROPOUT_FORWARD, 16, "simple");
  char *path = tf_temp_path("resume.ckpt");
  dpm_err err = {0};
  dpm_trainer *straight = tf_trainer(spec, 2, NULL), *first = tf_trainer(spec, 2, NULL);
  CHECK(straight && first && tf_steps(straight, 12) && tf_steps(first, 7));
  CHECK_INT(dpm_trainer_checkpoint(first, NULL, path, &err), DPM_OK);
  dpm_trainer *resumed = tf_trainer(spec, 2, NULL);
  CHECK_INT(dpm_trainer_load(resumed, NULL, path, &err), DPM_OK);
  CHECK_INT(dpm_trainer_iter(resumed), 7);
  CHECK(replicas_identical(resumed));
  CHECK(tf_steps(resumed, 5));
  CHECK(param_rel_diff(straight, resumed) == 0);
  dpm_trainer_destroy(straight);
  dpm_trainer_destroy(first);
  dpm_trainer_destroy(resumed);
  dpm_spec_free(spec);
  unlink(path);
  free(path);
}
TEST(parallel_resume_is_exact) { resume_is_exact(); }
TEST(fenced_parallel_resume_is_exact) { tf_on_fenced(resume_is_exact); }

/* Snapshot of every synced blob of every replica, to prove a refused load
 * changed nothing. */
static char *snapshot(dpm_trainer *t, size_t *len) {
  const dpm_plan *p = dpm_trainer_plan(t);
  size_t total = 0;
  for (int d = 0; d < dpm_trainer_devices(t); d++)
    for (int i = 0; i < p->n_synced; i++)
      total += dpm_shape_bytes(&dpm_trainer_blob(t, p->synced[i])->shape);
  char *buf = malloc(total), *at = buf;
  for (int d = 0; d < dpm_trainer_devices(t); d++)
    for (int i = 0; i < p->n_synced; i++) {
      char scoped[300];
      scoped_name(t, d, p->synced[i], scoped, sizeof scoped);
      dpm_tensor x = host_copy(t, scoped);
      memcpy(at, x.data, dpm_shape_bytes(&x.shape));
      at += dpm_shape_bytes(&x.shape);
      dpm_tensor_fini(&x);
    }
  *len = total;
  return buf;
}

static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  fseek(f, at, at < 0 ? SEEK_END : SEEK_SET);
  int c = fgetc(f);
  fseek(f, -1, SEEK_CUR);
  fputc(c ^ 0x10, f);
  fclose(f);
}

static void rejects_bad_checkpoints(void) {
  Dpm__ModelSpec *spec = spec_of(MLP_FORWARD, 8, "dag");
  Dpm__ModelSpec *other = spec_of(DROPOUT_FORWARD, 8, "dag");
  char *good = tf_temp_path("good.ckpt"), *bad = tf_temp_path("bad.ckpt");
  char *foreign = tf_temp_path("foreign.ckpt"), *shaped = tf_temp_path("shaped.ckpt");
  dpm_err err = {0};
  dpm_trainer *t = tf_trainer(spec, 2, NULL), *o = tf_trainer(other, 1, NULL);
  CHECK(t && o && tf_steps(t, 3) && tf_steps(o, 1));
  CHECK_INT(dpm_trainer_checkpoint(t, NULL, good, &err), DPM_OK);
  CHECK_INT(dpm_trainer_checkpoint(o, NULL, foreign, &err), DPM_OK);
  CHECK(tf_steps(t, 2));
  size_t n0, n1;
  char *before = snapshot(t, &n0);
  char cmd[512];
  /* truncated */
  snprintf(cmd, sizeof cmd, "head -c 5000 %s > %s", good, bad);
  CHECK(system(cmd) == 0);
  CHECK_INT(dpm_trainer_load(t, NULL, bad, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "bad.ckpt");
  /* corrupt: one flipped bit in the tensor data */
  snprintf(cmd, sizeof cmd, "cp %s %s", good, bad);
  CHECK(system(cmd) == 0);
  flip_byte(bad, -100);
  CHECK_INT(dpm_trainer_load(t, NULL, bad, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "checksum");
  /* another spec */
  CHECK_INT(dpm_trainer_load(t, NULL, foreign, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "another spec");
  /* this spec's hash, a wrongly shaped tensor */
  dpm_ckpt c;
  CHECK_INT(dpm_ckpt_read(NULL, good, &c, &err), DPM_OK);
  dpm_ckpt_entry e[64];
  for (int i = 0; i < c.n; i++)
    e[i] = (dpm_ckpt_entry){c.names[i], c.kinds[i], &c.tensors[i]};
  dpm_tensor wrong = {0};
  dpm_shape ws = dpm_shape_make(DPM_F32, 2, (int64_t[]){3, 3});
  dpm_tensor_resize(&wrong, &ws);
  e[0].t = &wrong;
  CHECK_INT(dpm_ckpt_write(NULL, shaped, &c.meta, e, c.n, &err), DPM_OK);
  CHECK_INT(dpm_trainer_load(t, NULL, shaped, &err), DPM_SHAPE);
  CHECK_HAS(err.msg, "the model's is");
  dpm_tensor_fini(&wrong);
  dpm_ckpt_fini(&c);
  /* a missing file */
  CHECK_INT(dpm_trainer_load(t, NULL, "/nonexistent/x.ckpt", &err), DPM_IO);
  /* nothing changed: blobs, iteration */
  char *after = snapshot(t, &n1);
  CHECK(n0 == n1 && !memcmp(before, after, n0));
  CHECK_INT(dpm_trainer_iter(t), 5);
  /* and the good one still loads */
  CHECK_INT(dpm_trainer_load(t, NULL, good, &err), DPM_OK);
  CHECK_INT(dpm_trainer_iter(t), 3);
  free(before);
  free(after);
  dpm_trainer_destroy(t);
  dpm_trainer_destroy(o);
  dpm_spec_free(spec);
  dpm_spec_free(other);
  for (char **p = (char *[]){good, bad, foreign, shaped, NULL}; *p; p++) {
    unlink(*p);
    free(*p);
  }
}
TEST(parallel_rejects_bad_checkpoints) { rejects_bad_checkpoints(); }
TEST(fenced_parallel_rejects_bad_checkpoints) { tf_on_fenced(rejects_bad_checkpoints); }

/* Scoped names address replicas; a bad scope finds nothing. */
TEST(parallel_scoped_blob_names) {
  Dpm__ModelSpec *spec = spec_of(MLP_FORWARD, 8, "dag");
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  CHECK(t);
  CHECK(dpm_trainer_blob(t, "fc1_w") == dpm_trainer_blob(t, "cpu_0/fc1_w"));
  CHECK(dpm_trainer_blob(t, "cpu_1/fc1_w") != NULL);
  CHECK(dpm_trainer_blob(t, "cpu_1/fc1_w") != dpm_trainer_blob(t, "cpu_0/fc1_w"));
  CHECK(dpm_trainer_blob(t, "cpu_2/fc1_w") == NULL);
  CHECK(dpm_trainer_blob(t, "gpu_0/fc1_w") == NULL);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}

typedef struct {
  int calls;
  uint64_t last_iter;
  dpm_trainer *t;
} progress_log;

static void on_progress(void *arg, const dpm_step_stats *st) {
  progress_log *p = arg;
  p->calls++;
  p->last_iter = st->iter;
  if (p->calls == 3) dpm_trainer_interrupt(p->t); /* stop after this step */
}

/* The progress callback runs every k steps; an interrupt ends step(n)
 * after the step in flight. */
TEST(parallel_progress_and_interrupt) {
  Dpm__ModelSpec *spec = spec_of(MLP_FORWARD, 8, "dag");
  progress_log log = {0};
  dpm_trainer_options opt = {.devices = 2,
                             .net_type = -1,
                             .progress = on_progress,
                             .progress_arg = &log,
                             .progress_every = 4};
  dpm_err err = {0};
  CHECK_INT(dpm_trainer_create(spec, &opt, &log.t, &err), DPM_OK);
  dpm_step_stats st;
  CHECK_INT(dpm_trainer_step(log.t, 100, &st, &err), DPM_OK);
  CHECK_INT(log.calls, 3);
  CHECK_INT(log.last_iter, 12);
  CHECK_INT(st.steps_done, 12);
  CHECK_INT(dpm_trainer_iter(log.t), 12);
  CHECK(st.lr > 0 && st.loss > 0 && st.accuracy >= 0 && st.accuracy <= 1);
  dpm_trainer_destroy(log.t);
  dpm_spec_free(spec);
}

/* AddBlobSync: a blob changed on the master reaches every replica. */
static void sync_blobs(void) {
  Dpm__ModelSpec *spec = spec_of(MLP_FORWARD, 8, "dag");
  dpm_trainer *t = tf_trainer(spec, 3, NULL);
  dpm_err err = {0};
  CHECK(t);
  dpm_tensor *w = (dpm_tensor *)dpm_trainer_blob(t, "fc1_b"), h = {0};
  CHECK(w && !dpm_tensor_resize(&h, &w->shape));
  for (int64_t i = 0; i < dpm_tensor_numel(&h); i++) dpm_f32(&h)[i] = (float)i;
  dpm_tensor_write(w, h.data, dpm_shape_bytes(&h.shape)); /* the master's only */
  dpm_tensor_fini(&h);
  CHECK(!replicas_identical(t));
  const char *names[] = {"fc1_b"};
  CHECK_INT(dpm_trainer_sync_blobs(t, names, 1, &err), DPM_OK);
  CHECK(replicas_identical(t));
  const char *bad[] = {"nope"};
  CHECK_INT(dpm_trainer_sync_blobs(t, bad, 1, &err), DPM_NOT_FOUND);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
}
TEST(parallel_sync_blobs) { sync_blobs(); }
TEST(fenced_parallel_sync_blobs) { tf_on_fenced(sync_blobs); }

/* create fails with `code` and a message holding `a` and `b`. */
static int refused_with(const Dpm__ModelSpec *spec, const dpm_trainer_options *opt,
                        dpm_status code, const char *a, const char *b) {
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_trainer_create(spec, opt, &t, &err);
  dpm_trainer_destroy(t);
  if (s == code && !t && strstr(err.msg, a) && strstr(err.msg, b)) return 1;
  printf("    got %s: %s (want %s, '%s', '%s')\n", dpm_status_name(s), err.msg,
         dpm_status_name(code), a, b);
  return 0;
}

static Dpm__ModelSpec *tiny_spec(void) {
  return tf_spec("  - {op: FC, in: [data], out: pred, dim_out: 10}\n", 8, 1, 0.1, "dag",
                 1 << 20);
}

/* input.num_shards 2 once trained with gradients scaled by 1/(2N) and no
 * reduction across hosts: a wrong result with no error. A spec that
 * describes a job over several processes needs the process's shard of it
 * (options.fleet, from dpmd or dpm-train --shard), and says so. */
TEST(trainer_refuses_a_job_of_several_processes_without_its_shard) {
  Dpm__ModelSpec *spec = tiny_spec();
  CHECK(spec);
  dpm_trainer_options opt = {.devices = 2, .net_type = -1};
  spec->input->num_shards = 2;
  CHECK(refused_with(spec, &opt, DPM_SPEC, "input.num_shards", "dpmd forms such jobs"));
  opt.devices = 1; /* one replica too, which has no communicator of its own */
  CHECK(refused_with(spec, &opt, DPM_SPEC, "input.num_shards", "--shard I/N"));
  spec->input->num_shards = 1;
  spec->parallel->rendezvous = malloc(sizeof *spec->parallel->rendezvous);
  CHECK(spec->parallel->rendezvous);
  dpm__rendezvous__init(spec->parallel->rendezvous);
  CHECK(refused_with(spec, &opt, DPM_SPEC, "parallel.rendezvous", "dpmd forms such jobs"));
  spec->parallel->shards = calloc(2, sizeof *spec->parallel->shards);
  CHECK(spec->parallel->shards);
  spec->parallel->n_shards = 2;
  spec->parallel->shards[0] = strdup("tcp://a:7070");
  spec->parallel->shards[1] = strdup("tcp://b:7070");
  CHECK(refused_with(spec, &opt, DPM_SPEC, "parallel.shards", "dpmd forms such jobs"));
  /* a fleet of one shard (a job re-formed smaller) trains alone */
  opt.fleet.num_shards = 1;
  CHECK(refused_with(spec, &opt, DPM_SPEC, "parallel.shards names 2 daemons",
                     "the job has 1 shards"));
  spec->parallel->n_shards = 0;
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_trainer_create(spec, &opt, &t, &err), DPM_OK);
  CHECK(tf_steps(t, 2));
  dpm_trainer_destroy(t);
  spec->parallel->n_shards = 2;
  dpm_spec_free(spec);
}

/* A fleet's shard: in range, with a store and a prefix; the spec's own
 * input shard fields and daemon list, when given, must be the fleet's. All
 * refused before any rendezvous is tried. */
TEST(trainer_checks_its_shard_of_a_job) {
  Dpm__ModelSpec *spec = tiny_spec();
  CHECK(spec);
  dpm_trainer_options opt = {.devices = 1, .net_type = -1};
  opt.fleet.shard_id = 2, opt.fleet.num_shards = 2;
  CHECK(refused_with(spec, &opt, DPM_INVALID, "shard 2 of 2", "not a shard"));
  opt.fleet.shard_id = -1;
  CHECK(refused_with(spec, &opt, DPM_INVALID, "shard -1 of 2", "not a shard"));
  opt.fleet.shard_id = 1;
  CHECK(refused_with(spec, &opt, DPM_INVALID, "rendezvous", "no store"));
  opt.fleet.rendezvous.store = "file:///tmp";
  CHECK(refused_with(spec, &opt, DPM_INVALID, "rendezvous", "no prefix"));
  opt.fleet.rendezvous.prefix = "unit/never-formed";
  spec->input->num_shards = 2; /* shard 0 of 2 in the spec, 1 of 2 in the fleet */
  CHECK(refused_with(spec, &opt, DPM_SPEC, "input.shard_id 0 of num_shards 2",
                     "shard 1 of 2"));
  spec->input->num_shards = 3;
  spec->input->shard_id = 1;
  CHECK(refused_with(spec, &opt, DPM_SPEC, "input.shard_id 1 of num_shards 3",
                     "shard 1 of 2"));
  spec->input->num_shards = 1;
  spec->input->shard_id = 0;
  spec->parallel->shards = calloc(3, sizeof *spec->parallel->shards);
  CHECK(spec->parallel->shards);
  spec->parallel->n_shards = 3;
  for (int i = 0; i < 3; i++) {
    char ep[32];
    snprintf(ep, sizeof ep, "tcp://h%d:7070", i);
    spec->parallel->shards[i] = strdup(ep);
  }
  CHECK(refused_with(spec, &opt, DPM_SPEC, "parallel.shards names 3 daemons",
                     "the job has 2 shards"));
  opt.fleet.num_shards = 1024; /* 2 replicas x 1024 shards: more ranks than a group has */
  opt.devices = 2;
  spec->parallel->n_shards = 0;
  CHECK(refused_with(spec, &opt, DPM_INVALID, "1024 shards of 2 replicas", "ranks"));
  spec->parallel->n_shards = 3;
  dpm_spec_free(spec);
}

/* ExtractPredictorNet from replicas on fenced devices: the parameters cross
 * through the backend's copies, and the predictor computes what the one
 * extracted from the same training on CPU devices does, bit for bit. */
static dpm_predictor *trained_predictor(dpm_device_kind kind, const char *dir) {
  Dpm__ModelSpec *spec = spec_of(MLP_FORWARD, 8, "dag");
  tf_device_kind = kind;
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  tf_device_kind = DPM_DEVICE_CPU;
  dpm_predictor *p = NULL;
  dpm_err err = {0};
  const char *in[] = {"data"}, *out[] = {"softmax"};
  if (!t || !tf_steps(t, 5) ||
      dpm_trainer_export_predictor(t, in, 1, out, 1, NULL, dir, &err) ||
      dpm_predictor_load(dir, &p, &err))
    printf("    %s\n", err.msg);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return p;
}

TEST(fenced_predictor_extraction_matches_cpu) {
  char *da = tf_temp_path("pred-cpu"), *db = tf_temp_path("pred-fenced");
  dpm_predictor *a = trained_predictor(DPM_DEVICE_CPU, da);
  dpm_predictor *b = trained_predictor(DPM_DEVICE_FENCED, db);
  CHECK(a && b);
  float x[4 * 784];
  for (int i = 0; i < 4 * 784; i++) x[i] = (float)((i * 7919) % 256) / 255.0f;
  const float *inputs[] = {x};
  dpm_err err = {0};
  CHECK_INT(dpm_predictor_run(a, inputs, 4, &err), DPM_OK);
  CHECK_INT(dpm_predictor_run(b, inputs, 4, &err), DPM_OK);
  int64_t dims[4];
  const float *ya = dpm_predictor_output(a, 0, dims, NULL);
  const float *yb = dpm_predictor_output(b, 0, NULL, NULL);
  CHECK(ya && yb && dims[0] == 4 && dims[1] == 10);
  CHECK(!memcmp(ya, yb, 4 * 10 * sizeof(float)));
  dpm_predictor_free(a);
  dpm_predictor_free(b);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s %s", da, db);
  CHECK(system(cmd) == 0);
  free(da);
  free(db);
}
