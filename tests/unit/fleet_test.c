/* Jobs of several shards (trainer.h's fleet), in one process: each shard is
 * a trainer of its own, driven by a thread of its own, and the shards meet
 * through a FileStore in a temporary directory (the gloo communicator,
 * comm/comm.h), as dpm-train processes do on one host. A job of k shards
 * of n replicas trains as one process of k*n replicas: bitwise with two
 * ranks (one sum of two), to float tolerance otherwise; every replica of
 * every shard holds the same state; shard 0 alone reads a checkpoint; the
 * shards refuse to train a model they do not agree on; a shard that stops
 * fails its peers' step within the timeout, and the job then refuses to go
 * on. Shards on fenced devices (memory host code cannot touch) run gloo on
 * host copies (comm/staged.c) and train as one process of cpu replicas. */
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/spec.h"
#include "io/checkpoint.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

/* The FileStore's directory (and the tests' checkpoints), made once per
 * process and removed with everything in it when the process exits. */
static char store_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

__attribute__((destructor)) static void remove_store(void) {
  if (store_dir[0]) nftw(store_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *store_url(void) {
  static char url[80];
  if (!url[0]) {
    snprintf(store_dir, sizeof store_dir, "/tmp/dpm-fleet-XXXXXX");
    if (!mkdtemp(store_dir)) {
      store_dir[0] = 0;
      return NULL;
    }
    snprintf(url, sizeof url, "file://%s", store_dir);
  }
  return url;
}

static char *temp_path(const char *name) {
  const char *url = store_url();
  char *p = malloc(160);
  if (url && p) snprintf(p, 160, "%s/%s", url + strlen("file://"), name);
  return p;
}

/* What a shard's thread does in one phase. */
typedef enum {
  CREATE,
  STEP,
  LOAD,
  STEP_STOP,  /* steps; then shard 0 stops the job with reason stop_why */
  STEP_CHUNKS /* calls of `chunk` steps until the job is stopped */
} phase;

typedef struct {
  const Dpm__ModelSpec *spec;
  int shard, shards, devices, net_type, timeout_ms;
  dpm_device_kind kind; /* of the replicas (cpu by default) */
  char prefix[64];
  phase what;
  int steps;         /* STEP, STEP_STOP */
  int stop_why;      /* STEP_STOP */
  int chunk;         /* STEP_CHUNKS */
  dpm_step_stats st; /* STEP, STEP_STOP: the last step's */
  const char *path;  /* LOAD: this shard's path (NULL: none) */
  uint64_t inf_at;   /* CREATE: the update whose gradient the master makes inf
                        (dpm_trainer_options.test_inf_first; 0: none) */
  dpm_trainer *t;    /* made by CREATE */
  dpm_status status;
  dpm_err err;
  double ms; /* how long the phase took */
} shard_run;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *run_phase(void *arg) {
  shard_run *r = arg;
  double t0 = now_ms();
  memset(&r->err, 0, sizeof r->err);
  if (r->what == CREATE) {
    dpm_trainer_options opt = {.devices = r->devices,
                               .kind = r->kind,
                               .net_type = r->net_type,
                               .comm_timeout_ms = r->timeout_ms ? r->timeout_ms : 20000};
    opt.fleet.shard_id = r->shard;
    opt.fleet.num_shards = r->shards;
    opt.fleet.rendezvous.store = store_url();
    opt.fleet.rendezvous.prefix = r->prefix;
    opt.test_inf_first = r->inf_at;
    opt.test_inf_count = 1;
    r->status = dpm_trainer_create(r->spec, &opt, &r->t, &r->err);
  } else if (r->what == STEP_CHUNKS) {
    memset(&r->st, 0, sizeof r->st);
    r->status = DPM_OK;
    while (!r->status && !r->st.stopped)
      r->status = dpm_trainer_step(r->t, r->chunk, &r->st, &r->err);
  } else if (r->what == STEP || r->what == STEP_STOP) {
    memset(&r->st, 0, sizeof r->st);
    r->status = dpm_trainer_step(r->t, r->steps, &r->st, &r->err);
    if (!r->status && r->what == STEP_STOP && r->shard == 0)
      r->status = dpm_trainer_stop(r->t, r->stop_why, &r->err);
  } else {
    r->status = dpm_trainer_load(r->t, NULL, r->path, &r->err);
  }
  r->ms = now_ms() - t0;
  return NULL;
}

/* Runs phase `what` on every shard at once; 1 when every shard's thread ran
 * (their statuses are the caller's to check). */
static int run_all(shard_run *runs, int n, phase what) {
  pthread_t th[8];
  for (int i = 0; i < n; i++) {
    runs[i].what = what;
    if (pthread_create(&th[i], NULL, run_phase, &runs[i])) return 0;
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  return 1;
}

/* The runs of a job of `shards` shards of `devices` replicas each on
 * devices of `kind`, under a prefix of their own; 1 when every shard was
 * created. */
static int make_job_on(dpm_device_kind kind, shard_run *runs, const Dpm__ModelSpec *spec,
                       int shards, int devices, const char *name) {
  static int formation;
  formation++;
  for (int i = 0; i < shards; i++) {
    runs[i] = (shard_run){.spec = spec,
                          .shard = i,
                          .shards = shards,
                          .devices = devices,
                          .net_type = -1,
                          .kind = kind};
    snprintf(runs[i].prefix, sizeof runs[i].prefix, "unit-%d/%s/%d", (int)getpid(), name,
             formation);
  }
  if (!run_all(runs, shards, CREATE)) return 0;
  int ok = 1;
  for (int i = 0; i < shards; i++)
    if (runs[i].status) {
      printf("    shard %d: %s\n", i, runs[i].err.msg);
      ok = 0;
    }
  return ok;
}

/* make_job_on cpu replicas. */
static int make_job(shard_run *runs, const Dpm__ModelSpec *spec, int shards, int devices,
                    const char *name) {
  return make_job_on(DPM_DEVICE_CPU, runs, spec, shards, devices, name);
}

static int all_ok(const shard_run *runs, int n) {
  int ok = 1;
  for (int i = 0; i < n; i++)
    if (runs[i].status) {
      printf("    shard %d: %s\n", i, runs[i].err.msg);
      ok = 0;
    }
  return ok;
}

static void destroy_job(shard_run *runs, int n) {
  for (int i = 0; i < n; i++) {
    dpm_trainer_destroy(runs[i].t);
    runs[i].t = NULL;
  }
}

/* Replica d's blob `name` of t, in host memory ("cpu_1/fc1_w"; d 0: the
 * master's stripped name). */
static dpm_tensor blob_of(dpm_trainer *t, int d, const char *name) {
  char scoped[300], scope[32];
  if (d)
    snprintf(scoped, sizeof scoped, "%s/%s",
             dpm_device_scope(*dpm_trainer_device(t, d), scope, sizeof scope), name);
  dpm_tensor h = {0};
  dpm_err err;
  if (dpm_trainer_read_blob(t, d ? scoped : name, &h, &err)) printf("    %s\n", err.msg);
  return h;
}

/* max |a-b| / max |a| over every param of a's master and b's replica d;
 * 0 only when bitwise equal; with all_state, every synced blob compared
 * bitwise too (optimizer state, counters): INFINITY when one differs. */
static double state_diff(dpm_trainer *a, dpm_trainer *b, int d, int all_state) {
  const dpm_plan *p = dpm_trainer_plan(a);
  const dpm_model *m = dpm_trainer_model(a);
  double diff = 0, mag = 0;
  int bitwise = 1;
  for (int i = 0; i < p->n_synced; i++) {
    const dpm_blobinfo *info = dpm_shapes_get(&m->shapes, p->synced[i]);
    dpm_tensor x = blob_of(a, 0, p->synced[i]), y = blob_of(b, d, p->synced[i]);
    if (!x.data || !y.data || !dpm_shape_equal(&x.shape, &y.shape)) {
      diff = INFINITY;
    } else {
      if (memcmp(x.data, y.data, dpm_shape_bytes(&x.shape))) bitwise = 0;
      for (int64_t k = 0; info->kind == DPM_BLOB_PARAM && k < dpm_tensor_numel(&x); k++) {
        diff = fmax(diff, fabs((double)dpm_f32(&x)[k] - dpm_f32(&y)[k]));
        mag = fmax(mag, fabs((double)dpm_f32(&x)[k]));
      }
    }
    dpm_tensor_fini(&x);
    dpm_tensor_fini(&y);
  }
  if (all_state && !bitwise) return INFINITY;
  return diff == 0 ? 0 : diff / mag;
}

/* Every replica of every shard holds shard 0's master's state, bitwise. */
static int job_identical(shard_run *runs, int shards) {
  for (int s = 0; s < shards; s++)
    for (int d = 0; d < dpm_trainer_devices(runs[s].t); d++)
      if ((s || d) && state_diff(runs[0].t, runs[s].t, d, 1) != 0) {
        printf("    shard %d replica %d differs from the job's master\n", s, d);
        return 0;
      }
  return 1;
}

/* k shards of n replicas on devices of `kind` against one process of k*n
 * cpu replicas, at the same global batch, `steps` steps: every replica
 * starts and stays identical, and the parameters are the one process's
 * within tol (0: bitwise). */
static void like_one_process_on(dpm_device_kind kind, const char *forward,
                                const char *net_type, int shards, int devices, int steps,
                                double tol) {
  Dpm__ModelSpec *spec = tf_spec(forward, 8, 7, 0.01, net_type, 65536);
  shard_run runs[4];
  dpm_trainer *one = tf_trainer(spec, shards * devices, NULL);
  CHECK(spec && one && tf_steps(one, steps));
  CHECK(make_job_on(kind, runs, spec, shards, devices, net_type));
  for (int i = 0; i < shards;
       i++) /* host copies where host code cannot touch the device */
    CHECK(!strcmp(dpm_trainer_comm_backend(runs[i].t),
                  kind == DPM_DEVICE_CPU ? "gloo" : "staged"));
  CHECK(job_identical(runs, shards)); /* the initial broadcast */
  for (int i = 0; i < shards; i++) runs[i].steps = steps;
  CHECK(run_all(runs, shards, STEP) && all_ok(runs, shards));
  CHECK(job_identical(runs, shards));
  double rel = state_diff(one, runs[0].t, 0, tol == 0);
  printf("    %d shards x %d %s replicas vs 1 x %d (%s): max |a-b| / max |a| = %.2g\n",
         shards, devices, dpm_device_kind_name(kind), shards * devices, net_type, rel);
  CHECK_WITHIN(rel, tol);
  CHECK_INT(dpm_trainer_iter(runs[1].t), steps);
  destroy_job(runs, shards);
  dpm_trainer_destroy(one);
  dpm_spec_free(spec);
}

static void like_one_process(const char *forward, const char *net_type, int shards,
                             int devices, int steps, double tol) {
  like_one_process_on(DPM_DEVICE_CPU, forward, net_type, shards, devices, steps, tol);
}

/* Accumulation, clipping and a dynamic loss scale over 2 shards (Gloo):
 * an inf in shard 1's gradients before the reduction skips the same
 * update on both shards; every replica stays identical, and the job ends
 * bitwise where one process of 2 replicas with the inf on replica 1
 * does. */
TEST(fleet_two_shards_accumulate_clip_loss_scale) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: t\n"
           "input: {reader: synthetic, batch_size: 4, num_examples: 512,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 5}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05},"
           " accumulate_steps: 2, clip_grad_norm: 0.5}\n"
           "precision: {loss_scale: dynamic, growth_interval: 2}\n",
           MLP_FORWARD);
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "t.yaml", &spec, &err), DPM_OK);
  dpm_trainer_options o = {.devices = 2,
                           .net_type = -1,
                           .comm_timeout_ms = 20000,
                           .test_inf_first = 2,
                           .test_inf_count = 1,
                           .test_inf_rank = 1};
  dpm_trainer *one = NULL;
  dpm_step_stats st;
  CHECK(!dpm_trainer_create(spec, &o, &one, &err) &&
        !dpm_trainer_step(one, 5, &st, &err));
  shard_run runs[2]; /* as make_job's, with shard 1's inf */
  for (int i = 0; i < 2; i++) {
    runs[i] = (shard_run){.spec = spec,
                          .shard = i,
                          .shards = 2,
                          .devices = 1,
                          .net_type = -1,
                          .kind = DPM_DEVICE_CPU,
                          .inf_at = i == 1 ? 2 : 0};
    snprintf(runs[i].prefix, sizeof runs[i].prefix, "unit-%d/gathered", (int)getpid());
  }
  CHECK(run_all(runs, 2, CREATE) && all_ok(runs, 2));
  for (int i = 0; i < 2; i++) runs[i].steps = 5;
  CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2));
  CHECK(job_identical(runs, 2));
  for (int i = 0; i < 2; i++) {
    CHECK_INT(runs[i].st.skipped_total, 1);
    /* 2^16, halved at 2, doubled after 3-4 */
    CHECK(runs[i].st.loss_scale == 65536 && runs[i].st.grad_norm > 0);
  }
  CHECK_INT(st.skipped_total, 1);
  double rel = state_diff(one, runs[0].t, 0, 1);
  printf(
      "    2 shards x 1 replica vs 1 x 2, accumulation + clipping + loss scale: %.2g\n",
      rel);
  CHECK(rel == 0);
  destroy_job(runs, 2);
  dpm_trainer_destroy(one);
  dpm_spec_free(spec);
}

TEST(fleet_two_shards_train_like_two_replicas_simple) {
  like_one_process(MLP_FORWARD, "simple", 2, 1, 6, 0);
}
TEST(fleet_two_shards_train_like_two_replicas_dag) {
  like_one_process(MLP_FORWARD, "dag", 2, 1, 6, 0);
}
TEST(fleet_cnn_two_shards_train_like_two_replicas) {
  like_one_process(CNN_FORWARD, "dag", 2, 1, 4, 0);
}
/* local sums, then across the shards: another order than one process's */
TEST(fleet_two_shards_of_two_train_like_four_replicas) {
  like_one_process(MLP_FORWARD, "dag", 2, 2, 4, 1e-5);
}

/* Fenced devices: gloo on host copies of their buffers (comm/staged.c).
 * The copies back are what makes the replicas one model: skipped, the
 * replicas would keep their own gradients and differ. */
TEST(fleet_fenced_two_shards_train_like_two_cpu_replicas_simple) {
  like_one_process_on(DPM_DEVICE_FENCED, MLP_FORWARD, "simple", 2, 1, 6, 0);
}
TEST(fleet_fenced_two_shards_train_like_two_cpu_replicas_dag) {
  like_one_process_on(DPM_DEVICE_FENCED, MLP_FORWARD, "dag", 2, 1, 6, 0);
}
TEST(fleet_fenced_two_shards_of_two_train_like_four_cpu_replicas_simple) {
  like_one_process_on(DPM_DEVICE_FENCED, MLP_FORWARD, "simple", 2, 2, 4, 1e-5);
}
TEST(fleet_fenced_two_shards_of_two_train_like_four_cpu_replicas_dag) {
  like_one_process_on(DPM_DEVICE_FENCED, MLP_FORWARD, "dag", 2, 2, 4, 1e-5);
}

/* precision.allreduce: bf16 on spec (a section of its own, freed with it). */
static int wire_bf16(Dpm__ModelSpec *spec) {
  Dpm__PrecisionSpec *p = malloc(sizeof *p);
  if (!p) return 0;
  dpm__precision_spec__init(p);
  p->has_allreduce = 1;
  p->allreduce = DPM__ALLREDUCE_TYPE__ALLREDUCE_BF16;
  spec->precision = p;
  return 1;
}

/* precision.allreduce bf16 (comm.h: dpm_comm_wire): k shards of n replicas
 * on `kind` devices send their gradient sums as bf16; every replica of
 * every shard starts and stays bitwise identical, and the parameters are
 * near, but not equal to, one process's of k*n cpu replicas (which rounds
 * nothing: within one process nothing crosses, so the same spec there
 * trains as fp32 bitwise). */
static void bf16_wire_on(dpm_device_kind kind, const char *forward, const char *net_type,
                         int shards, int devices, int steps) {
  Dpm__ModelSpec *spec = tf_spec(forward, 8, 7, 0.01, net_type, 65536);
  Dpm__ModelSpec *bf = tf_spec(forward, 8, 7, 0.01, net_type, 65536);
  CHECK(spec && bf && wire_bf16(bf));
  shard_run runs[4];
  dpm_trainer *one = tf_trainer(spec, shards * devices, NULL);
  dpm_trainer *one_bf = tf_trainer(bf, shards * devices, NULL);
  CHECK(one && tf_steps(one, steps) && one_bf && tf_steps(one_bf, steps));
  CHECK(state_diff(one, one_bf, 0, 1) == 0);
  CHECK(make_job_on(kind, runs, bf, shards, devices, net_type));
  CHECK(job_identical(runs, shards));
  for (int i = 0; i < shards; i++) runs[i].steps = steps;
  CHECK(run_all(runs, shards, STEP) && all_ok(runs, shards));
  CHECK(job_identical(runs, shards));
  double rel = state_diff(one, runs[0].t, 0, 0);
  printf("    %d shards x %d %s replicas, bf16 wire, vs 1 x %d (%s): max |a-b| / max |a| "
         "= %.2g\n",
         shards, devices, dpm_device_kind_name(kind), shards * devices, net_type, rel);
  CHECK(rel > 0); /* the gradients were rounded */
  CHECK_WITHIN(rel,
               1e-3); /* bf16 keeps 8 bits: ~4e-3 of each sum, a fraction of a step */
  destroy_job(runs, shards);
  dpm_trainer_destroy(one);
  dpm_trainer_destroy(one_bf);
  dpm_spec_free(spec);
  dpm_spec_free(bf);
}

TEST(fleet_bf16_wire_two_shards_identical_simple) {
  bf16_wire_on(DPM_DEVICE_CPU, MLP_FORWARD, "simple", 2, 1, 6);
}
TEST(fleet_bf16_wire_two_shards_of_two_identical_dag) {
  bf16_wire_on(DPM_DEVICE_CPU, MLP_FORWARD, "dag", 2, 2, 4);
}
TEST(fleet_bf16_wire_cnn_fenced_two_shards_identical) {
  bf16_wire_on(DPM_DEVICE_FENCED, CNN_FORWARD, "dag", 2, 1, 3);
}

/* A shard whose wire differs from the others' is refused when the shards
 * first meet (their agreement's first float sum), on every shard. */
TEST(fleet_bf16_wire_must_be_every_shards) {
  Dpm__ModelSpec *a = tf_spec(MLP_FORWARD, 8, 7, 0.01, "dag", 65536);
  Dpm__ModelSpec *b = tf_spec(MLP_FORWARD, 8, 7, 0.01, "dag", 65536);
  CHECK(a && b && wire_bf16(b));
  shard_run runs[2];
  for (int i = 0; i < 2; i++)
    runs[i] = (shard_run){
        .spec = i ? b : a, .shard = i, .shards = 2, .devices = 1, .net_type = -1};
  snprintf(runs[0].prefix, sizeof runs[0].prefix, "unit-%d/differ/wire", (int)getpid());
  memcpy(runs[1].prefix, runs[0].prefix, sizeof runs[0].prefix);
  CHECK(run_all(runs, 2, CREATE));
  CHECK_INT(runs[0].status, DPM_INVALID);
  CHECK_INT(runs[1].status, DPM_INVALID);
  CHECK_HAS(runs[0].err.msg, "disagree on the wire (precision.allreduce)");
  CHECK_HAS(runs[1].err.msg, "disagree on the wire (precision.allreduce)");
  CHECK(!runs[0].t && !runs[1].t);
  dpm_spec_free(a);
  dpm_spec_free(b);
}

/* The threads of this process, into tids (at most cap); returns how many. */
static int threads_now(pid_t *tids, int cap) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) && n < cap;)
    if (e->d_name[0] != '.') tids[n++] = (pid_t)atoi(e->d_name);
  if (d) closedir(d);
  return n;
}

/* Two shards of one replica each on one host: each shard's replica is
 * pinned to a core of its own (its job rank picks it), and the threads its
 * Gloo group starts (Gloo's I/O loop, the job thread) run on that core
 * only, so one shard's network work never takes the other's core; the I/O
 * loops run under SCHED_IDLE, never preempting a replica
 * (comm/gloo_shim.cc). */
TEST(fleet_gloo_threads_run_on_their_replicas_core) {
  const dpm_device devs[] = {{DPM_DEVICE_CPU, 0}, {DPM_DEVICE_CPU, 1}};
  int cores[2];
  dpm_device_cores(devs, 2, cores); /* the shards' replicas' cores */
  if (cores[0] == cores[1]) return; /* one CPU: nothing to tell apart */
  /* the shards' threads start from this one's CPU set, which an earlier
     crew run may have narrowed to one core: give them both */
  cpu_set_t was, both;
  pthread_getaffinity_np(pthread_self(), sizeof was, &was);
  CPU_ZERO(&both);
  CPU_SET(cores[0], &both);
  CPU_SET(cores[1], &both);
  pthread_setaffinity_np(pthread_self(), sizeof both, &both);
  pid_t before[256], after[256];
  int nb = threads_now(before, 256);
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 7, 0.01, "simple", 65536);
  shard_run runs[2];
  CHECK(make_job(runs, spec, 2, 1, "cores"));
  int na = threads_now(after, 256), started = 0, wider = 0, idle = 0;
  cpu_set_t seen;
  CPU_ZERO(&seen);
  for (int i = 0; i < na; i++) {
    int old = 0;
    for (int k = 0; k < nb && !old; k++) old = before[k] == after[i];
    char path[64], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)after[i]);
    FILE *f = fopen(path, "r");
    if (f && !fgets(name, sizeof name, f)) name[0] = 0;
    if (f) fclose(f);
    if (old || !strncmp(name, "dpm-reader", 10)) continue; /* the readers float */
    cpu_set_t set;
    if (sched_getaffinity(after[i], sizeof set, &set)) continue; /* gone */
    started++;
    wider += CPU_COUNT(&set) != 1;
    idle += sched_getscheduler(after[i]) == SCHED_IDLE;
    CPU_OR(&seen, &seen, &set);
  }
  destroy_job(runs, 2);
  dpm_spec_free(spec);
  pthread_setaffinity_np(pthread_self(), sizeof was, &was);
  CHECK(started >= 2);            /* each shard's Gloo I/O loop at least */
  CHECK(idle >= 2);               /* each I/O loop under SCHED_IDLE */
  CHECK_INT(wider, 0);            /* none may run on more than one core */
  CHECK(CPU_EQUAL(&seen, &both)); /* one core per shard */
}

/* Shard 0 alone reads a checkpoint (the others pass no file); the job then
 * trains on exactly as the process that wrote it; a checkpoint shard 0 of
 * the job writes resumes exactly in one process. A file shard 0 refuses
 * fails every shard alike, naming shard 0's reason, and leaves the job
 * usable; shard 0 without a file loads nothing anywhere. */
TEST(fleet_load_reads_on_shard_0_only) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 7, 0.01, "simple", 65536);
  char *path = temp_path("one.ckpt"), *back = temp_path("job.ckpt");
  dpm_err err = {0};
  dpm_trainer *one = tf_trainer(spec, 2, NULL);
  CHECK(spec && path && back && one && tf_steps(one, 3));
  CHECK_INT(dpm_trainer_checkpoint(one, NULL, path, &err), DPM_OK);
  shard_run runs[2];
  CHECK(make_job(runs, spec, 2, 1, "load"));
  runs[0].path = path, runs[1].path = NULL;
  CHECK(run_all(runs, 2, LOAD) && all_ok(runs, 2));
  CHECK_INT(dpm_trainer_iter(runs[1].t), 3);
  CHECK(job_identical(runs, 2));
  runs[0].steps = runs[1].steps = 4;
  CHECK(tf_steps(one, 4) && run_all(runs, 2, STEP) && all_ok(runs, 2));
  CHECK(state_diff(one, runs[0].t, 0, 1) == 0 && job_identical(runs, 2));
  /* the job's checkpoint, resumed in one process of two replicas */
  CHECK_INT(dpm_trainer_checkpoint(runs[0].t, NULL, back, &err), DPM_OK);
  dpm_trainer *again = tf_trainer(spec, 2, NULL);
  CHECK(again);
  CHECK_INT(dpm_trainer_load(again, NULL, back, &err), DPM_OK);
  CHECK(tf_steps(again, 2) && tf_steps(one, 2));
  CHECK(state_diff(one, again, 0, 1) == 0);
  dpm_trainer_destroy(again);
  /* refused on shard 0: every shard fails, nothing moves */
  char *missing = temp_path("missing.ckpt");
  runs[0].path = missing;
  CHECK(run_all(runs, 2, LOAD));
  CHECK_INT(runs[0].status, DPM_IO);
  CHECK_INT(runs[1].status, DPM_IO);
  CHECK_HAS(runs[1].err.msg, "shard 1 of 2: shard 0 could not load the checkpoint");
  CHECK_HAS(runs[1].err.msg, "missing.ckpt");
  CHECK_INT(dpm_trainer_iter(runs[1].t), 7);
  /* no file on shard 0: nothing loaded anywhere */
  runs[0].path = NULL, runs[1].path = path;
  CHECK(run_all(runs, 2, LOAD) && all_ok(runs, 2));
  CHECK_INT(dpm_trainer_iter(runs[0].t), 7);
  CHECK_INT(dpm_trainer_iter(runs[1].t), 7);
  /* and the job goes on */
  runs[0].steps = runs[1].steps = 1;
  CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2) && job_identical(runs, 2));
  destroy_job(runs, 2);
  dpm_trainer_destroy(one);
  dpm_spec_free(spec);
  free(path), free(back), free(missing);
}

/* Shards whose model, devices or net type differ are refused at create,
 * on every shard, before anything trains; the differing one says what. */
TEST(fleet_shards_that_differ_are_refused) {
  Dpm__ModelSpec *a = tf_spec(MLP_FORWARD, 8, 7, 0.01, "dag", 65536);
  Dpm__ModelSpec *b = tf_spec(MLP_FORWARD, 8, 7, 0.02, "dag", 65536);
  CHECK(a && b);
  shard_run runs[2];
  for (int i = 0; i < 2; i++)
    runs[i] = (shard_run){
        .spec = i ? b : a, .shard = i, .shards = 2, .devices = 1, .net_type = -1};
  snprintf(runs[0].prefix, sizeof runs[0].prefix, "unit-%d/differ/lr", (int)getpid());
  memcpy(runs[1].prefix, runs[0].prefix, sizeof runs[0].prefix);
  CHECK(run_all(runs, 2, CREATE));
  CHECK_INT(runs[0].status, DPM_SPEC);
  CHECK_INT(runs[1].status, DPM_SPEC);
  CHECK_HAS(runs[0].err.msg, "shard 0 of 2: t.yaml: another shard's model differs");
  CHECK_HAS(runs[1].err.msg,
            "shard 1 of 2: t.yaml: this shard's model differs from shard 0's");
  CHECK_HAS(runs[1].err.msg, "spec hash");
  CHECK(!runs[0].t && !runs[1].t);
  /* the same spec, another net type: other collectives */
  runs[1].spec = a;
  runs[1].net_type = DPM_NET_SIMPLE;
  snprintf(runs[0].prefix, sizeof runs[0].prefix, "unit-%d/differ/net", (int)getpid());
  memcpy(runs[1].prefix, runs[0].prefix, sizeof runs[0].prefix);
  CHECK(run_all(runs, 2, CREATE));
  CHECK_INT(runs[0].status, DPM_SPEC);
  CHECK_INT(runs[1].status, DPM_SPEC);
  CHECK_HAS(runs[1].err.msg, "step collectives");
  dpm_spec_free(a);
  dpm_spec_free(b);
}

/* A shard that stops stepping fails its peer's step within the timeout,
 * naming the collective; the peer's job then refuses to go on (DPM_STATE)
 * instead of forming anew under the same prefix. */
TEST(fleet_step_fails_when_a_shard_stops) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 7, 0.01, "dag", 65536);
  CHECK(spec);
  shard_run runs[2];
  for (int i = 0; i < 2; i++) {
    runs[i] = (shard_run){.spec = spec,
                          .shard = i,
                          .shards = 2,
                          .devices = 1,
                          .net_type = -1,
                          .timeout_ms = 1000};
    snprintf(runs[i].prefix, sizeof runs[i].prefix, "unit-%d/stops", (int)getpid());
  }
  CHECK(run_all(runs, 2, CREATE) && all_ok(runs, 2));
  runs[0].steps = 1;
  CHECK(run_all(runs, 1, STEP)); /* shard 1 does not step */
  printf("    shard 0 failed after %.0f ms: %s\n", runs[0].ms, runs[0].err.msg);
  CHECK(runs[0].status == DPM_TIMEOUT || runs[0].status == DPM_IO);
  CHECK_HAS(runs[0].err.msg, "shard 0 of 2: cpu:0: ");
  CHECK(strstr(runs[0].err.msg, "allreduce") || strstr(runs[0].err.msg, "broadcast"));
  CHECK(runs[0].ms < 1000 + 1500);
  CHECK(run_all(runs, 1, STEP));
  CHECK_INT(runs[0].status, DPM_STATE);
  CHECK_HAS(runs[0].err.msg, "formed again");
  destroy_job(runs, 2);
  dpm_spec_free(spec);
}

/* A yield asked by any shard stops the job at its next decision: every
 * shard returns DPM_OK with DPM_STOP_YIELD at the same iteration, having
 * read no batch; while asked, calls stop at once; once withdrawn the job
 * steps on and stays identical to one replica's pair. */
TEST(fleet_yield_stops_every_shard_at_one_iteration) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 7, 0.01, "simple", 65536);
  CHECK(spec);
  shard_run runs[2];
  CHECK(make_job(runs, spec, 2, 1, "yield"));
  runs[0].steps = runs[1].steps = 5;
  CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2));
  for (int asker = 0; asker < 2; asker++) {
    dpm_trainer_yield(runs[asker].t, 1);
    for (int k = 0; k < 2; k++) { /* twice: a call while asked stops at once */
      runs[0].steps = 40, runs[1].steps = 100;
      CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2));
      for (int i = 0; i < 2; i++) {
        CHECK_INT(runs[i].st.stopped, DPM_STOP_YIELD);
        CHECK_INT(runs[i].st.steps_done, 0);
        CHECK_INT((int)runs[i].st.iter, 5 + 3 * asker);
        CHECK_INT((int)dpm_trainer_iter(runs[i].t), 5 + 3 * asker);
      }
    }
    dpm_trainer_yield(runs[asker].t, 0);
    runs[0].steps = runs[1].steps = 3;
    CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2));
    CHECK_INT(runs[1].st.stopped, 0);
    CHECK_INT((int)dpm_trainer_iter(runs[1].t), 8 + 3 * asker);
  }
  CHECK(job_identical(runs, 2));
  destroy_job(runs, 2);
  dpm_spec_free(spec);
}

/* A stop agreed in band: shard 0 steps 5 times and stops the job; shard 1,
 * asked for 100 steps, returns DPM_OK after the same 5 with the reason
 * shard 0 gave, having read no batch more (the job then steps on alike and
 * stays identical to one replica's pair). Shards but 0 cannot stop it.
 * Grants of steps span the other shards' calls: shard 0 in one call of 40,
 * shard 1 in calls of 3, stopped at the same iteration. */
TEST(fleet_stop_is_agreed_at_one_iteration) {
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 7, 0.01, "simple", 65536);
  CHECK(spec);
  shard_run runs[2];
  CHECK(make_job(runs, spec, 2, 1, "stop"));
  runs[0].steps = 5, runs[1].steps = 100;
  runs[0].stop_why = runs[1].stop_why = 7;
  double t0 = now_ms();
  CHECK(run_all(runs, 2, STEP_STOP) && all_ok(runs, 2));
  printf("    5 steps and the stop: %.1f ms\n", now_ms() - t0);
  CHECK_INT(runs[0].st.stopped, 0);
  CHECK_INT(runs[1].st.stopped, 7);
  CHECK_INT((int)runs[1].st.iter, 5);
  CHECK_INT((int)dpm_trainer_iter(runs[0].t), 5);
  CHECK_INT((int)dpm_trainer_iter(runs[1].t), 5);
  dpm_err err = {0};
  CHECK_INT(dpm_trainer_stop(runs[1].t, 7, &err), DPM_INVALID);
  CHECK_INT(dpm_trainer_stop(runs[0].t, 0, &err), DPM_INVALID);
  runs[0].steps = runs[1].steps = 3; /* the job goes on after a stop */
  CHECK(run_all(runs, 2, STEP) && all_ok(runs, 2));
  CHECK_INT(runs[1].st.stopped, 0);
  CHECK_INT((int)dpm_trainer_iter(runs[1].t), 8);
  CHECK(job_identical(runs, 2));
  /* shard 0 grants steps in one call of 40, shard 1 runs them in calls of 3
   * (a grant spans its calls); the stop then reaches it at 48 */
  runs[0].steps = 40;
  runs[1].chunk = 3;
  pthread_t th[2];
  runs[0].what = STEP_STOP, runs[1].what = STEP_CHUNKS;
  for (int i = 0; i < 2; i++) CHECK(!pthread_create(&th[i], NULL, run_phase, &runs[i]));
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK(all_ok(runs, 2));
  CHECK_INT(runs[1].st.stopped, 7);
  CHECK_INT((int)dpm_trainer_iter(runs[1].t), 48);
  CHECK(job_identical(runs, 2));
  dpm_trainer_options one = {.net_type = -1};
  dpm_trainer *t = NULL;
  Dpm__ModelSpec *alone = tf_spec(MLP_FORWARD, 8, 7, 0.01, "simple", 65536);
  CHECK(alone && !dpm_trainer_create(alone, &one, &t, &err));
  CHECK_INT(dpm_trainer_stop(t, 7, &err), DPM_OK); /* one process: nothing to agree */
  dpm_trainer_destroy(t);
  dpm_spec_free(alone);
  destroy_job(runs, 2);
  dpm_spec_free(spec);
}
