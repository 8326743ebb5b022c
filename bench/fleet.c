/* Fleet benchmark: one job over several processes (shards) against one
 * process, CPU replicas on this machine's cores.
 *   - MLP and CNN images/s for 2 shards x 1 device (two processes on
 *     127.0.0.1, meeting through a file store in a fresh directory, Gloo
 *     across them) against 1 shard x 1 device and 1 shard x 2 devices (the
 *     same per-device batch: 1x2 and 2x1 run the same global batch),
 *     the configurations alternating round by round, medians;
 *   - for the CNN, 2 shards x 1 device in `simple` and in `dag`: the time
 *     the master replica spends in collectives a step (waiting for the
 *     other shard and the cross-host allreduce not hidden behind backward:
 *     dpm_step_stats.comm_ms, every step's, averaged over the round); what
 *     `dag` takes off `simple`'s is the part it hides;
 *   - for the MLP at 2 shards x 1 device, each round also times the same
 *     allreduce alone (the step's gradient bytes, on a Gloo group of its
 *     own between the shards, each call after a barrier; median), and
 *     prints the step's collectives over it.
 * Each shard is this program run again (--shard: /proc/self/exe, so no
 * process forks with threads) holding its trainer for the whole run and
 * stepping when the parent says so (a line "step N" on its stdin; it
 * answers "WALL_MS COMM_MS" on stdout; "alone N": N allreduces alone, it
 * answers their median); the one-process trainers run in the parent
 * while the shards wait on their pipes. BLAS runs one thread per replica.
 *
 *   build/bench/fleet [--rounds N] */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "common/spec.h"
#include "train/trainer.h"

typedef struct {
  double comm; /* summed over the call's steps */
  int n;
} comm_sum;

static void on_step(void *arg, const dpm_step_stats *st) {
  comm_sum *c = arg;
  c->comm += st->comm_ms;
  c->n++;
}

static int load_spec(const char *path, Dpm__ModelSpec **spec) {
  dpm_err err = {0};
  if (dpm_spec_load(path, spec, &err)) {
    fprintf(stderr, "fleet: %s\n", err.msg);
    return 1;
  }
  return 0;
}

/* Bytes of t's gradients: what a step all-reduces. */
static size_t grad_bytes(const dpm_trainer *t) {
  const dpm_plan *p = dpm_trainer_plan(t);
  size_t b = 0;
  for (int i = 0; i < p->n_grads; i++)
    b += dpm_shape_bytes(&dpm_trainer_blob(t, p->grads[i])->shape);
  return b;
}

/* The median of `calls` allreduces of t's gradient bytes on a group of
 * their own between the shards (made at the first call, from this thread:
 * pinned to the replica's core by the trainer's runs, as the trainer's
 * group's threads are), each after a barrier; -1 on failure. */
static double alone_ms(const dpm_trainer *t, int id, int n, char **argv, dpm_comm **c,
                       int calls, dpm_err *err) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s/alone", argv[4]);
  dpm_comm_config cfg = {
      .kind = DPM_COMM_GLOO, .size = 1, .rank_base = id, .world = n, .timeout_ms = 60000};
  cfg.rendezvous.store = argv[3];
  cfg.rendezvous.prefix = prefix;
  cfg.rendezvous.iface = "lo";
  if (!*c && dpm_comm_create(&cfg, c, err)) return -1;
  size_t count = grad_bytes(t) / sizeof(float);
  float *buf = calloc(count ? count : 1, sizeof *buf);
  double *ms = calloc((size_t)calls, sizeof *ms);
  int ok = buf && ms;
  for (int k = 0; ok && k < calls; k++) {
    ok = !dpm_comm_barrier(*c, 0, err);
    double t0 = bench_now_ms();
    ok = ok && !dpm_comm_allreduce(*c, 0, buf, count, err);
    ms[k] = bench_now_ms() - t0;
  }
  double med = ok ? bench_median(ms, calls) : -1;
  if (!buf || !ms) dpm_errf(err, DPM_NOMEM, "out of memory");
  free(buf), free(ms);
  return med;
}

/* ---- a shard: fleet --shard I/N SPEC NET_TYPE STORE PREFIX ----------------------------
 */
static int shard_main(char **argv) {
  int id = 0, n = 0;
  if (sscanf(argv[0], "%d/%d", &id, &n) != 2) return 2;
  Dpm__ModelSpec *spec = NULL;
  if (load_spec(argv[1], &spec)) return 1;
  comm_sum cs = {0};
  dpm_trainer_options opt = {.devices = 1,
                             .net_type = atoi(argv[2]),
                             .progress = on_step,
                             .progress_arg = &cs,
                             .progress_every = 1};
  opt.fleet.shard_id = id;
  opt.fleet.num_shards = n;
  opt.fleet.rendezvous.store = argv[3];
  opt.fleet.rendezvous.prefix = argv[4];
  opt.fleet.rendezvous.iface = "lo";
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (dpm_trainer_create(spec, &opt, &t, &err)) {
    fprintf(stderr, "fleet: shard %d: %s\n", id, err.msg);
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  dpm_comm *alone = NULL; /* the allreduce alone: a group of its own, same store */
  char cmd[16];
  int steps;
  while (scanf("%15s %d", cmd, &steps) == 2 && steps > 0) {
    if (!strcmp(cmd, "alone")) {
      double ms = alone_ms(t, id, n, argv, &alone, steps, &err);
      if (ms < 0) {
        fprintf(stderr, "fleet: shard %d: %s\n", id, err.msg);
        return 1;
      }
      printf("%.6f\n", ms);
      fflush(stdout);
      continue;
    }
    dpm_step_stats st;
    cs = (comm_sum){0};
    double t0 = bench_now_ms();
    if (dpm_trainer_step(t, steps, &st, &err)) {
      fprintf(stderr, "fleet: shard %d: %s\n", id, err.msg);
      return 1;
    }
    printf("%.6f %.6f\n", bench_now_ms() - t0, cs.n ? cs.comm / cs.n : 0.0);
    fflush(stdout);
  }
  dpm_comm_destroy(alone);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return 0;
}

/* ---- the parent
 * ------------------------------------------------------------------------ */
typedef struct {
  const char *label;
  int devices, shards, net_type;
  dpm_trainer *t; /* one process */
  comm_sum sum;   /* one process: this call's steps */
  pid_t pid[2];   /* shards */
  FILE *to[2], *from[2];
  double *ms, *comm; /* per round: step wall time; the master's collectives a step */
  int alone;         /* shards: also time the allreduce alone each round */
  double *alone_ms;  /* per round: its median (shard 0's) */
  int n;
} config;

/* The CPUs this process may use, as main found them: the parent's own
 * trainers' crew runs pin the thread that forks the shards, and a shard
 * must not inherit that one CPU (it would share it with the other shard). */
static cpu_set_t all_cpus;

static int start_shard(config *c, int k, const char *spec_path, const char *store,
                       const char *prefix) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
    return 1; /* no shard holds another's */
  char id[16], net[16];
  snprintf(id, sizeof id, "%d/%d", k, c->shards);
  snprintf(net, sizeof net, "%d", c->net_type);
  pid_t p = fork();
  if (p < 0) return 1;
  if (p == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    sched_setaffinity(0, sizeof all_cpus, &all_cpus);
    char *args[] = {"fleet",       "--shard",      id,  (char *)spec_path, net,
                    (char *)store, (char *)prefix, NULL};
    execv("/proc/self/exe", args);
    _exit(127);
  }
  close(in[0]), close(out[1]);
  c->pid[k] = p;
  c->to[k] = fdopen(in[1], "w");
  c->from[k] = fdopen(out[0], "r");
  return !c->to[k] || !c->from[k];
}

static int setup(config *c, const char *spec_path, const Dpm__ModelSpec *spec,
                 const char *store, int slots) {
  c->ms = calloc((size_t)slots, sizeof *c->ms);
  c->comm = calloc((size_t)slots, sizeof *c->comm);
  c->alone_ms = calloc((size_t)slots, sizeof *c->alone_ms);
  if (!c->ms || !c->comm || !c->alone_ms) return 1;
  if (c->shards == 1) {
    dpm_trainer_options opt = {.devices = c->devices,
                               .net_type = c->net_type,
                               .progress = on_step,
                               .progress_arg = &c->sum,
                               .progress_every = 1};
    dpm_err err = {0};
    if (dpm_trainer_create(spec, &opt, &c->t, &err)) {
      fprintf(stderr, "fleet: %s: %s\n", c->label, err.msg);
      return 1;
    }
    return 0;
  }
  static int formation;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "bench/%d/%d", (int)getpid(), formation++);
  for (int k = 0; k < c->shards; k++)
    if (start_shard(c, k, spec_path, store, prefix)) return 1;
  char line[64];
  for (int k = 0; k < c->shards; k++)
    if (!fgets(line, sizeof line, c->from[k]) || strcmp(line, "ready\n")) {
      fprintf(stderr, "fleet: %s: shard %d did not start\n", c->label, k);
      return 1;
    }
  return 0;
}

/* steps of c; *wall the call's wall time, *comm the master's collectives a step */
static int step_config(config *c, int steps, double *wall, double *comm) {
  double t0 = bench_now_ms();
  if (c->t) {
    dpm_step_stats st;
    dpm_err err = {0};
    c->sum = (comm_sum){0};
    if (dpm_trainer_step(c->t, steps, &st, &err)) {
      fprintf(stderr, "fleet: %s: %s\n", c->label, err.msg);
      return 1;
    }
    *wall = bench_now_ms() - t0;
    *comm = c->sum.n ? c->sum.comm / c->sum.n : 0;
    return 0;
  }
  for (int k = 0; k < c->shards; k++) {
    fprintf(c->to[k], "step %d\n", steps);
    fflush(c->to[k]);
  }
  double w[2] = {0}, cm[2] = {0};
  for (int k = 0; k < c->shards; k++)
    if (fscanf(c->from[k], "%lf %lf", &w[k], &cm[k]) != 2) {
      fprintf(stderr, "fleet: %s: shard %d failed\n", c->label, k);
      return 1;
    }
  *wall = bench_now_ms() - t0;
  *comm = cm[0];
  return 0;
}

/* The shards' allreduce alone, `calls` times: shard 0's median into *ms. */
static int alone_config(config *c, int calls, double *ms) {
  for (int k = 0; k < c->shards; k++) {
    fprintf(c->to[k], "alone %d\n", calls);
    fflush(c->to[k]);
  }
  double m[2] = {0};
  for (int k = 0; k < c->shards; k++)
    if (fscanf(c->from[k], "%lf", &m[k]) != 1) {
      fprintf(stderr, "fleet: %s: shard %d failed\n", c->label, k);
      return 1;
    }
  *ms = m[0];
  return 0;
}

static void done(config *cs, int n) {
  for (int c = 0; c < n; c++) {
    dpm_trainer_destroy(cs[c].t);
    for (int k = 0; k < cs[c].shards && cs[c].shards > 1; k++) {
      if (cs[c].to[k]) fclose(cs[c].to[k]); /* EOF: the shard exits */
      if (cs[c].from[k]) fclose(cs[c].from[k]);
      if (cs[c].pid[k] > 0) waitpid(cs[c].pid[k], NULL, 0);
    }
    free(cs[c].ms);
    free(cs[c].comm);
    free(cs[c].alone_ms);
  }
}

static int workload(const char *path, config *cs, int n_cfg, const char *store,
                    int rounds, int per, int warmup) {
  Dpm__ModelSpec *spec = NULL;
  if (load_spec(path, &spec)) return 1;
  int rc = 0;
  for (int c = 0; c < n_cfg && !rc; c++) rc = setup(&cs[c], path, spec, store, rounds);
  double wall, comm;
  for (int c = 0; c < n_cfg && !rc; c++) rc = step_config(&cs[c], warmup, &wall, &comm);
  for (int r = 0; r < rounds && !rc; r++)
    for (int k = 0, c = r % n_cfg; k < n_cfg && !rc; k++, c = (c + 1) % n_cfg) {
      rc = step_config(&cs[c], per, &wall, &comm);
      if (!rc && cs[c].alone) rc = alone_config(&cs[c], per, &cs[c].alone_ms[cs[c].n]);
      cs[c].ms[cs[c].n] = wall / per;
      cs[c].comm[cs[c].n++] = comm;
    }
  if (!rc) {
    int batch = (int)spec->input->batch_size;
    double one =
        bench_median_of(cs[0].ms, cs[0].n) / (batch * cs[0].devices * cs[0].shards);
    for (int c = 0; c < n_cfg; c++) {
      double med = bench_median_of(cs[c].ms, cs[c].n);
      int images = batch * cs[c].devices * cs[c].shards;
      printf("  %-34s %8.2f ms/step %7.0f images/s %5.2fx", cs[c].label, med,
             images / (med / 1e3), one * images / med);
      if (cs[c].devices * cs[c].shards > 1) {
        double cm = bench_median_of(cs[c].comm, cs[c].n);
        printf("  collectives %6.2f ms (%4.1f%%)", cm, 100 * cm / med);
      }
      printf("\n");
      if (cs[c].alone) {
        double am = bench_median_of(cs[c].alone_ms, cs[c].n),
               cm = bench_median_of(cs[c].comm, cs[c].n);
        printf("  %-34s %8.2f ms: the step's collectives are %.2fx it\n",
               "  the same allreduce alone", am, cm / am);
      }
    }
  }
  dpm_spec_free(spec);
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--shard"))
    return argc == 7 ? shard_main(argv + 2) : 2;
  signal(SIGPIPE, SIG_IGN);
  if (sched_getaffinity(0, sizeof all_cpus, &all_cpus)) {
    fprintf(stderr, "fleet: sched_getaffinity: %s\n", strerror(errno));
    return 1;
  }
  int rounds = argc > 2 && !strcmp(argv[1], "--rounds") ? atoi(argv[2]) : 8;
  if (rounds < 1) rounds = 1;
  openblas_set_num_threads(1);
  char dir[] = "/tmp/dpm-bench-fleet.XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "fleet: mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  char store[64];
  snprintf(store, sizeof store, "file://%s", dir);
  printf("Fleet: 2 shards x 1 device are 2 processes on 127.0.0.1 (Gloo, file store);\n"
         "x: images/s over 1 shard x 1 device; collectives: the master's a step\n");
  config mlp[] = {
      {.label = "MLP, 1 shard x 1 device", .devices = 1, .shards = 1, .net_type = -1},
      {.label = "MLP, 1 shard x 2 devices", .devices = 2, .shards = 1, .net_type = -1},
      {.label = "MLP, 2 shards x 1 device",
       .devices = 1,
       .shards = 2,
       .net_type = -1,
       .alone = 1}};
  printf("MLP (examples/fmnist_mlp.yaml, simple), batch 64 per device, %d rounds of 50 "
         "steps\n",
         rounds * 2);
  int rc = workload("examples/fmnist_mlp.yaml", mlp, 3, store, rounds * 2, 50, 50);
  done(mlp, 3);
  if (!rc) {
    config cnn[] = {
        {.label = "CNN, 1 shard x 1 device", .devices = 1, .shards = 1, .net_type = -1},
        {.label = "CNN, 1 shard x 2 devices, dag",
         .devices = 2,
         .shards = 1,
         .net_type = -1},
        {.label = "CNN, 2 shards x 1 device, simple",
         .devices = 1,
         .shards = 2,
         .net_type = DPM_NET_SIMPLE},
        {.label = "CNN, 2 shards x 1 device, dag",
         .devices = 1,
         .shards = 2,
         .net_type = DPM_NET_DAG}};
    printf("CNN (examples/fmnist_cnn.yaml), batch 64 per device, %d rounds of 4 steps\n",
           rounds);
    rc = workload("examples/fmnist_cnn.yaml", cnn, 4, store, rounds, 4, 2);
    if (!rc) {
      double s = bench_median_of(cnn[2].comm, cnn[2].n),
             d = bench_median_of(cnn[3].comm, cnn[3].n);
      printf("  CNN 2 shards: collectives a step simple %.2f ms, dag %.2f ms: dag hides "
             "%.2f ms (%.0f%% of simple's)\n",
             s, d, s - d, s > 0 ? 100 * (s - d) / s : 0);
    }
    done(cnn, 4);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "fleet: could not remove %s\n", dir);
  return rc;
}
