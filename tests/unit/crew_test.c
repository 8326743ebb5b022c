/* Crews: warm workers and communicator shared by trainers. A run reaches
 * every rank once; runs from several threads take turns; a trainer on a
 * borrowed crew computes exactly what one with its own crew does, alone or
 * interleaved with another trainer, and starts no thread of its own but its
 * reader's; a communicator broken by a timeout is renewed for the next run. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"
#include "common/spec.h"
#include "parallel/crew.h"
#include "test.h"
#include "train/trainer.h"
#include "trainer_fixture.h"

/* ---- runs ---------------------------------------------------------------- */

typedef struct {
  pthread_t caller;
  int calls[4];        /* per rank; each rank writes its own */
  pthread_t thread[4]; /* the thread that ran each rank, last run */
} rank_log;

static void log_rank(void *arg, int rank) {
  rank_log *l = arg;
  l->calls[rank]++;
  l->thread[rank] = pthread_self();
}

TEST(crew_runs_fn_on_every_rank_once) {
  dpm_err err = {0};
  dpm_crew *c;
  for (int n = 1; n <= 4; n += 3) {
    CHECK_INT(dpm_crew_create(n, &c, &err), DPM_OK);
    CHECK_INT(dpm_crew_size(c), n);
    cpu_set_t none;
    CHECK_INT(dpm_crew_cpus(c, &none), 0); /* not pinned */
    rank_log l = {.caller = pthread_self()};
    for (int i = 0; i < 200; i++) {
      dpm_crew_run(c, log_rank, &l);
      for (int r = 0; r < n; r++) CHECK_INT(l.calls[r], i + 1);
    }
    for (int r = n; r < 4; r++) CHECK_INT(l.calls[r], 0);
    CHECK(pthread_equal(l.thread[0], pthread_self()));
    for (int r = 1; r < n; r++) {
      CHECK(!pthread_equal(l.thread[r], pthread_self()));
      for (int q = 1; q < r; q++) CHECK(!pthread_equal(l.thread[r], l.thread[q]));
    }
    dpm_crew_destroy(c);
  }
  CHECK_INT(dpm_crew_create(0, &c, &err), DPM_INVALID);
  CHECK(!c);
  CHECK_INT(dpm_crew_create(DPM_CREW_MAX_RANKS + 1, &c, &err), DPM_INVALID);
  dpm_crew_destroy(NULL);
}

/* Two threads run on one crew: never two runs at once. `inside` holds the
 * id of the run whose ranks are inside fn (bits 8..) and how many are. */
typedef struct {
  dpm_crew *c;
  unsigned long id;
  int calls[3];
  int runs;
} runner;

static int cpu_of[2];
static void where(void *arg, int rank) {
  (void)arg;
  cpu_of[rank] = sched_getcpu();
}

TEST(crew_pins_ranks_to_their_cores) {
  int cores[2];
  const dpm_device devs[] = {{DPM_DEVICE_CPU, 1}, {DPM_DEVICE_CPU, 0}};
  dpm_device_cores(devs, 2, cores);
  cpu_set_t set;
  CHECK(!sched_getaffinity(0, sizeof set, &set));
  if (CPU_COUNT(&set) < 2) return; /* one CPU: nothing to tell apart */
  CHECK(cores[0] != cores[1]);
  dpm_crew *c = NULL;
  dpm_err err = {0};
  pthread_t self = pthread_self();
  cpu_set_t before;
  pthread_getaffinity_np(self, sizeof before, &before);
  CHECK_INT(dpm_crew_create_pinned(2, cores, &c, &err), DPM_OK);
  cpu_set_t pinned;
  CHECK_INT(dpm_crew_cpus(c, &pinned), 2);
  CHECK(CPU_ISSET(cores[0], &pinned) && CPU_ISSET(cores[1], &pinned));
  for (int i = 0; i < 5; i++) {
    dpm_crew_run(c, where, NULL);
    CHECK_INT(cpu_of[0], cores[0]);
    CHECK_INT(cpu_of[1], cores[1]);
  }
  dpm_crew_destroy(c);
  /* this thread is pinned now; a second crew still gets the process's CPUs */
  int again[2];
  dpm_device_cores(devs, 2, again);
  pthread_setaffinity_np(self, sizeof before, &before); /* unpin the test thread */
  CHECK_INT(again[0], cores[0]);
  CHECK_INT(again[1], cores[1]);
}

static atomic_ulong inside;
static atomic_int overlaps;

static void exclusive(void *arg, int rank) {
  runner *me = arg;
  unsigned long was = atomic_load(&inside), now;
  do {
    if ((was & 0xff) && was >> 8 != me->id) {
      atomic_fetch_add(&overlaps, 1);
      now = was + 1;
    } else {
      now = (me->id << 8) | ((was & 0xff) + 1);
    }
  } while (!atomic_compare_exchange_weak(&inside, &was, now));
  me->calls[rank]++;
  for (volatile int k = 0; k < 2000; k++) {
  }
  atomic_fetch_sub(&inside, 1);
}

static void *run_many(void *arg) {
  runner *r = arg;
  for (int i = 0; i < r->runs; i++) dpm_crew_run(r->c, exclusive, r);
  return NULL;
}

TEST(crew_concurrent_runs_take_turns) {
  dpm_err err = {0};
  dpm_crew *c;
  CHECK_INT(dpm_crew_create(3, &c, &err), DPM_OK);
  atomic_store(&overlaps, 0);
  runner a = {.c = c, .id = 1, .runs = 300}, b = {.c = c, .id = 2, .runs = 300};
  pthread_t ta, tb;
  CHECK(!pthread_create(&ta, NULL, run_many, &a));
  CHECK(!pthread_create(&tb, NULL, run_many, &b));
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CHECK_INT(atomic_load(&overlaps), 0);
  for (int r = 0; r < 3; r++) {
    CHECK_INT(a.calls[r], 300);
    CHECK_INT(b.calls[r], 300);
  }
  dpm_crew_destroy(c);
}

/* ---- a broken communicator, renewed between runs ---------------------------- */

typedef struct {
  dpm_comm *comm;
  int skip; /* rank that skips the barrier; -1: none */
  dpm_status got[3];
  float v[3][40];
} comm_job;

static void barrier_job(void *arg, int rank) {
  comm_job *j = arg;
  dpm_err err;
  j->got[rank] = rank == j->skip ? DPM_OK : dpm_comm_barrier(j->comm, rank, &err);
}

static void started_allreduce(void *arg, int rank) {
  comm_job *j = arg;
  dpm_err err;
  for (int i = 0; i < 40; i++) j->v[rank][i] = (float)(rank + 1) * (float)i;
  j->got[rank] = dpm_comm_allreduce_start(j->comm, rank, j->v[rank], 40, &err);
  if (!j->got[rank]) j->got[rank] = dpm_comm_allreduce_wait(j->comm, rank, &err);
}

/* What a trainer does with its group: a timeout breaks it during one run;
 * dpm_comm_renew between runs (no rank inside) makes a healthy one. */
TEST(comm_broken_by_a_timeout_is_renewed_between_runs) {
  dpm_err err = {0};
  dpm_crew *c;
  /* 400 ms: each break waits it out (3 of them), and the healthy runs in
   * between must meet within it on a loaded machine (50 ms was missed). */
  dpm_comm_config cfg = {.kind = DPM_COMM_LOCAL, .size = 3, .timeout_ms = 400};
  comm_job j = {.skip = 1};
  CHECK_INT(dpm_crew_create(3, &c, &err), DPM_OK);
  CHECK_INT(dpm_comm_create(&cfg, &j.comm, &err), DPM_OK);
  dpm_crew_run(c, barrier_job, &j);
  CHECK_INT(j.got[0], DPM_TIMEOUT);
  CHECK_INT(j.got[2], DPM_TIMEOUT);
  CHECK(dpm_comm_broken(j.comm));
  for (int round = 0; round < 2; round++) {
    CHECK_INT(dpm_comm_renew(&j.comm, &cfg, &err), DPM_OK);
    j.skip = -1;
    dpm_crew_run(c, barrier_job, &j);
    for (int r = 0; r < 3; r++) CHECK_INT(j.got[r], DPM_OK);
    CHECK(!dpm_comm_broken(j.comm));
    /* started allreduces run on the renewed comm */
    dpm_crew_run(c, started_allreduce, &j);
    for (int r = 0; r < 3; r++) {
      CHECK_INT(j.got[r], DPM_OK);
      for (int i = 0; i < 40; i++) CHECK(j.v[r][i] == 6.0f * (float)i);
    }
    /* a healthy group is kept as it is */
    dpm_comm *same = j.comm;
    CHECK_INT(dpm_comm_renew(&j.comm, &cfg, &err), DPM_OK);
    CHECK(j.comm == same);
    /* break it again: the second round starts on a renewed group again */
    j.skip = 0;
    dpm_crew_run(c, barrier_job, &j);
    CHECK_INT(j.got[1], DPM_TIMEOUT);
  }
  dpm_comm_destroy(j.comm);
  dpm_crew_destroy(c);
}

/* A local group over several hosts is refused, not run with a local
 * reduction alone (a wrong result with no error); gloo makes such a job
 * (its own tests: gloo_test.c), nccl is not in this build. */
TEST(comm_factory_refuses_what_this_build_cannot_do) {
  dpm_err err = {0};
  dpm_comm *comm = NULL;
  dpm_comm_config cfg = {.kind = DPM_COMM_LOCAL, .size = 2, .world = 4, .timeout_ms = 50};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_UNSUPPORTED);
  CHECK_HAS(err.msg, "several hosts");
  cfg = (dpm_comm_config){.kind = DPM_COMM_GLOO, .size = 2, .timeout_ms = 50};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_OK); /* one process: no rendezvous */
  CHECK(!strcmp(dpm_comm_backend(comm), "gloo"));
  dpm_comm_destroy(comm);
  cfg.kind = DPM_COMM_NCCL;
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_UNSUPPORTED);
  cfg = (dpm_comm_config){.kind = DPM_COMM_LOCAL, .size = 2, .timeout_ms = 0};
  CHECK_INT(dpm_comm_create(&cfg, &comm, &err), DPM_INVALID);
  CHECK(comm == NULL);
}

/* ---- trainers on a crew -------------------------------------------------- */

#define SMALL_MLP                                                                        \
  "  - {op: FC, in: [data], out: fc1, dim_out: 48}\n"                                    \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: Dropout, in: [fc1], out: drop1, ratio: 0.2}\n"                               \
  "  - {op: FC, in: [drop1], out: fc2, dim_out: 32}\n"                                   \
  "  - {op: Relu, in: [fc2], out: fc2}\n"                                                \
  "  - {op: FC, in: [fc2], out: pred, dim_out: 10}\n"

static Dpm__ModelSpec *spec_of(const char *net_type, int seed) {
  return tf_spec(SMALL_MLP, 16, seed, 0.05, net_type, 8192);
}

/* Every synced blob of every replica of a and b: bitwise equal. */
static int same_state(dpm_trainer *a, dpm_trainer *b) {
  const dpm_plan *p = dpm_trainer_plan(a);
  if (dpm_trainer_iter(a) != dpm_trainer_iter(b)) return 0;
  for (int d = 0; d < dpm_trainer_devices(a); d++)
    for (int i = 0; i < p->n_synced; i++) {
      char scoped[300];
      snprintf(scoped, sizeof scoped, "cpu_%d/%s", d, p->synced[i]);
      const dpm_tensor *x = dpm_trainer_blob(a, scoped), *y = dpm_trainer_blob(b, scoped);
      if (!x || !y || memcmp(x->data, y->data, dpm_shape_bytes(&x->shape))) {
        printf("    %s differs\n", scoped);
        return 0;
      }
    }
  return 1;
}

static void borrowed_equals_own(const char *net_type) {
  Dpm__ModelSpec *spec = spec_of(net_type, 7);
  dpm_crew *crew = NULL;
  dpm_err err = {0};
  dpm_trainer *own = tf_trainer(spec, 2, NULL), *borrowed = NULL;
  if (dpm_crew_create(2, &crew, &err) || !own || !tf_steps(own, 12) ||
      !(borrowed = tf_trainer(spec, 2, crew)) || !tf_steps(borrowed, 5) ||
      !tf_steps(borrowed, 7) || !same_state(own, borrowed))
    dpm_test_fail(__FILE__, __LINE__, "%s: a trainer on a borrowed crew differs",
                  net_type);
  dpm_trainer_destroy(borrowed);
  dpm_trainer_destroy(own);
  dpm_crew_destroy(crew); /* the trainer left it intact */
  dpm_spec_free(spec);
}

TEST(crew_borrowed_equals_own_simple) { borrowed_equals_own("simple"); }
TEST(crew_borrowed_equals_own_dag) { borrowed_equals_own("dag"); }

TEST(crew_size_must_match_the_devices) {
  Dpm__ModelSpec *spec = spec_of("simple", 7);
  dpm_crew *crew;
  dpm_err err = {0};
  CHECK(spec);
  CHECK_INT(dpm_crew_create(3, &crew, &err), DPM_OK);
  dpm_trainer_options opt = {.devices = 2, .net_type = -1, .crew = crew};
  dpm_trainer *t;
  CHECK_INT(dpm_trainer_create(spec, &opt, &t, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "crew has 3 ranks");
  CHECK(!t);
  dpm_crew_destroy(crew);
  dpm_spec_free(spec);
}

/* Two trainers on one crew, stepped from two threads at once. */
typedef struct {
  dpm_trainer *t;
  int n, ok;
  char who;
} driver;

static pthread_barrier_t start_line;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static char order[256];
static int n_order;

static void on_step(void *arg, const dpm_step_stats *st) {
  (void)st;
  pthread_mutex_lock(&order_mu);
  if (n_order < (int)sizeof order - 1) order[n_order++] = *(const char *)arg;
  pthread_mutex_unlock(&order_mu);
}

static void *drive(void *arg) {
  driver *d = arg;
  pthread_barrier_wait(&start_line);
  d->ok = tf_steps(d->t, d->n);
  return NULL;
}

TEST(crew_two_trainers_interleave_and_match_alone) {
  const int k = 30;
  Dpm__ModelSpec *sa = spec_of("dag", 7), *sb = spec_of("simple", 11);
  dpm_crew *crew = NULL;
  dpm_err err = {0};
  CHECK(sa && sb);
  dpm_trainer *alone_a = tf_trainer(sa, 2, NULL), *alone_b = tf_trainer(sb, 2, NULL);
  CHECK(alone_a && alone_b && tf_steps(alone_a, k) && tf_steps(alone_b, k));
  CHECK_INT(dpm_crew_create(2, &crew, &err), DPM_OK);
  static char tag_a = 'a', tag_b = 'b';
  dpm_trainer_options opt = {.devices = 2,
                             .net_type = -1,
                             .crew = crew,
                             .progress = on_step,
                             .progress_every = 1};
  driver a = {.n = k, .who = 'a'}, b = {.n = k, .who = 'b'};
  opt.progress_arg = &tag_a;
  CHECK_INT(dpm_trainer_create(sa, &opt, &a.t, &err), DPM_OK);
  opt.progress_arg = &tag_b;
  CHECK_INT(dpm_trainer_create(sb, &opt, &b.t, &err), DPM_OK);
  n_order = 0;
  pthread_barrier_init(&start_line, NULL, 2);
  pthread_t ta, tb;
  CHECK(!pthread_create(&ta, NULL, drive, &a));
  CHECK(!pthread_create(&tb, NULL, drive, &b));
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_barrier_destroy(&start_line);
  CHECK(a.ok && b.ok);
  CHECK(same_state(alone_a, a.t));
  CHECK(same_state(alone_b, b.t));
  /* step(n) gives the crew up after every step: the two alternate */
  int switches = 0;
  for (int i = 1; i < n_order; i++) switches += order[i] != order[i - 1];
  order[n_order] = 0;
  printf("    run order %s (%d switches)\n", order, switches);
  CHECK_INT(n_order, 2 * k);
  CHECK(switches >= k / 2);
  dpm_trainer_destroy(a.t);
  dpm_trainer_destroy(b.t);
  dpm_trainer_destroy(alone_a);
  dpm_trainer_destroy(alone_b);
  dpm_crew_destroy(crew);
  dpm_spec_free(sa);
  dpm_spec_free(sb);
}

/* ---- threads ------------------------------------------------------------- */

static int threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Threads exit just after their join returns: wait until the count is
 * `want` (or a second passed); the count. */
static int threads_settle(int want) {
  int n = threads_now();
  for (int i = 0; i < 100 && n != want; i++) {
    nanosleep(&(struct timespec){0, 10000000}, NULL);
    n = threads_now();
  }
  return n;
}

/* A trainer on a borrowed crew starts one thread: its reader's. One with a
 * crew of its own starts the workers too. A dag plan starts no thread: its
 * reductions are summed by the device workers as they wait for them. */
TEST(crew_borrowing_trainer_starts_no_workers) {
  Dpm__ModelSpec *dag = spec_of("dag", 7), *simple = spec_of("simple", 7);
  dpm_crew *crew;
  dpm_err err = {0};
  CHECK(dag && simple);
  int base = threads_now();
  CHECK(base >= 1);
  CHECK_INT(dpm_crew_create(2, &crew, &err), DPM_OK);
  CHECK_INT(threads_now(), base + 1); /* the worker of rank 1 */
  dpm_trainer *first = tf_trainer(dag, 2, crew);
  CHECK(first);
  CHECK_INT(threads_now(), base + 1 + 1); /* + its reader */
  int warm = threads_now();
  dpm_trainer *second = tf_trainer(dag, 2, crew), *third = tf_trainer(simple, 2, crew);
  CHECK(second && third && tf_steps(second, 3) && tf_steps(third, 3) &&
        tf_steps(first, 3));
  CHECK_INT(threads_now(), warm + 2); /* their readers only */
  dpm_trainer_destroy(second);
  dpm_trainer_destroy(third);
  CHECK_INT(threads_settle(warm), warm);
  dpm_trainer *own = tf_trainer(dag, 2, NULL); /* 1 worker, reader */
  CHECK(own);
  CHECK_INT(threads_now(), warm + 2);
  dpm_trainer_destroy(own);
  dpm_trainer_destroy(first);
  CHECK_INT(threads_settle(base + 1), base + 1); /* the crew's */
  dpm_crew_destroy(crew);
  CHECK_INT(threads_settle(base), base);
  dpm_spec_free(dag);
  dpm_spec_free(simple);
}
