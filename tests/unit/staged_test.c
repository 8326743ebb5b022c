/* Staged communicator (comm/staged.c): a gloo group of one process (two
 * ranks, no network) run on host copies of buffers on fenced devices,
 * whose memory faults when host code touches it outside the backend: the
 * sums and broadcasts land in device memory through the copies; started
 * allreduces complete, and their copies back happen, in the order they
 * were started; host buffers go to the inner group as they are and are
 * summed in place; create takes ownership of the inner group, also when
 * it fails. The trainer's use of it is fleet_test.c's (shards on fenced
 * devices); the contract every communicator keeps (disagreements refused
 * on every rank, nothing copied back; timeouts; failure) is
 * comm_contract_test.c's. */
#include <pthread.h>

#include "backend/device.h"
#include "comm/comm.h"
#include "test.h"

#define N_A 37   /* floats of the first started allreduce */
#define N_B 1000 /* ... and of the third */

typedef struct {
  dpm_comm *comm;
  dpm_dev *dev[2];
  float *a[2], *b[2]; /* device buffers */
  size_t got_a[2], got_b[2];
} staged_fixture;

/* A staged group, as the factory makes it (DPM_COMM_STAGED: a one-process
 * gloo group of two ranks wrapped) on fenced:0 and fenced:1, with two
 * device buffers per rank; 1 when made. */
static int fixture(staged_fixture *f, int timeout_ms) {
  memset(f, 0, sizeof *f);
  dpm_err err = {0};
  for (int r = 0; r < 2; r++)
    if (dpm_dev_get((dpm_device){DPM_DEVICE_FENCED, r}, &f->dev[r], &err)) {
      printf("    %s\n", err.msg);
      return 0;
    }
  dpm_comm_config cfg = {
      .kind = DPM_COMM_STAGED, .size = 2, .timeout_ms = timeout_ms, .devs = f->dev};
  if (dpm_comm_create(&cfg, &f->comm, &err)) {
    printf("    %s\n", err.msg);
    return 0;
  }
  for (int r = 0; r < 2; r++) {
    /* the comm interface takes device buffers as plain pointers */
    f->a[r] = dpm_dptr_raw(dpm_dev_alloc(f->dev[r], N_A * sizeof(float), &f->got_a[r]));
    f->b[r] = dpm_dptr_raw(dpm_dev_alloc(f->dev[r], N_B * sizeof(float), &f->got_b[r]));
    if (!f->a[r] || !f->b[r]) return 0;
  }
  return 1;
}

static void fixture_fini(staged_fixture *f) {
  dpm_comm_destroy(f->comm);
  for (int r = 0; r < 2; r++) {
    if (f->a[r]) dpm_dev_free(f->dev[r], dpm_dptr_wrap(f->a[r]), f->got_a[r]);
    if (f->b[r]) dpm_dev_free(f->dev[r], dpm_dptr_wrap(f->b[r]), f->got_b[r]);
  }
}

/* n floats of rank r's pattern k into device buffer p. */
static float pattern(int k, int r, int i) {
  return (float)((r + 1) * (k + 1)) * 0.25f * i + k;
}

static void fill(dpm_dev *dev, float *p, int k, int r, int n) {
  float h[N_B];
  for (int i = 0; i < n; i++) h[i] = pattern(k, r, i);
  dpm_dev_to_device(dev, dpm_dptr_wrap(p), h, (size_t)n * sizeof(float));
}

/* Whether device buffer p holds rank r's pattern k (sum: both ranks'). */
static int holds(dpm_dev *dev, const float *p, int k, int r, int n, int sum) {
  float h[N_B];
  dpm_dev_to_host(dev, h, dpm_dptr_wrap((void *)p), (size_t)n * sizeof(float));
  for (int i = 0; i < n; i++) {
    float want = sum ? pattern(k, 0, i) + pattern(k, 1, i) : pattern(k, r, i);
    if (h[i] != want) {
      printf("    rank %d buffer %d [%d] = %g, expected %g\n", r, k, i, h[i], want);
      return 0;
    }
  }
  return 1;
}

/* One thread plays both ranks (a start does not wait for the peer): device,
 * host, device buffers started in turn; each wait copies back its own sum,
 * oldest first, and leaves the later device buffers as they were. */
TEST(staged_started_allreduces_complete_in_fifo_order) {
  staged_fixture f;
  dpm_err err = {0};
  CHECK(fixture(&f, 5000));
  CHECK(!strcmp(dpm_comm_backend(f.comm), "staged"));
  CHECK_INT(dpm_comm_size(f.comm), 2);
  float h[2][5];
  for (int r = 0; r < 2; r++) {
    fill(f.dev[r], f.a[r], 0, r, N_A);
    fill(f.dev[r], f.b[r], 1, r, N_B);
    for (int i = 0; i < 5; i++) h[r][i] = (float)(10 * r + i);
    CHECK(dpm_dev_owns(f.dev[r], f.a[r]) && !dpm_dev_owns(f.dev[r], h[r]));
  }
  CHECK_INT(dpm_comm_allreduce_wait(f.comm, 0, &err), DPM_INVALID);
  for (int r = 0; r < 2; r++)
    CHECK_INT(dpm_comm_allreduce_start(f.comm, r, f.a[r], N_A, &err), DPM_OK);
  for (int r = 0; r < 2; r++)
    CHECK_INT(dpm_comm_allreduce_start(f.comm, r, h[r], 5, &err), DPM_OK);
  for (int r = 0; r < 2; r++)
    CHECK_INT(dpm_comm_allreduce_start(f.comm, r, f.b[r], N_B, &err), DPM_OK);
  for (int r = 0; r < 2; r++) {
    CHECK_INT(dpm_comm_allreduce_wait(f.comm, r, &err), DPM_OK); /* a */
    CHECK(holds(f.dev[r], f.a[r], 0, r, N_A, 1));
    CHECK(holds(f.dev[r], f.b[r], 1, r, N_B, 0)); /* b's sum is not back yet */
  }
  for (int r = 0; r < 2; r++) CHECK_INT(dpm_comm_allreduce_wait(f.comm, r, &err), DPM_OK);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 5; i++) CHECK(h[r][i] == (float)(10 + 2 * i)); /* in place */
  for (int r = 0; r < 2; r++) {
    CHECK(holds(f.dev[r], f.b[r], 1, r, N_B, 0));
    CHECK_INT(dpm_comm_allreduce_wait(f.comm, r, &err), DPM_OK); /* b */
    CHECK(holds(f.dev[r], f.b[r], 1, r, N_B, 1));
  }
  CHECK_INT(dpm_comm_allreduce_wait(f.comm, 1, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "allreduce wait");
  /* a later start, in the next slot of the ring, sums right too */
  for (int r = 0; r < 2; r++) {
    fill(f.dev[r], f.b[r], 2, r, N_B);
    CHECK_INT(dpm_comm_allreduce_start(f.comm, r, f.b[r], N_B, &err), DPM_OK);
  }
  for (int r = 0; r < 2; r++) {
    CHECK_INT(dpm_comm_allreduce_wait(f.comm, r, &err), DPM_OK);
    CHECK(holds(f.dev[r], f.b[r], 2, r, N_B, 1));
  }
  CHECK(!dpm_comm_broken(f.comm));
  fixture_fini(&f);
}

typedef struct {
  staged_fixture *f;
  int rank;
  dpm_status s;
  dpm_err err;
  float flag;                 /* host memory: summed in place */
  unsigned long long word[3]; /* host memory: broadcast from job rank 0 */
} rank_arg;

static void *blocking_rank(void *arg) {
  rank_arg *a = arg;
  staged_fixture *f = a->f;
  int r = a->rank;
  a->s = dpm_comm_allreduce(f->comm, r, f->b[r], N_B, &a->err);
  if (!a->s)
    a->s = dpm_comm_broadcast(f->comm, r, 1, f->a[r], N_A * sizeof(float), &a->err);
  if (!a->s) a->s = dpm_comm_allreduce(f->comm, r, &a->flag, 1, &a->err);
  if (!a->s) a->s = dpm_comm_broadcast(f->comm, r, 0, a->word, sizeof a->word, &a->err);
  if (!a->s) a->s = dpm_comm_barrier(f->comm, r, &a->err);
  return NULL;
}

/* Blocking calls, a rank per thread: device buffers summed and broadcast
 * (from job rank 1: the root's bytes everywhere, the root's own kept),
 * host words summed and broadcast in place. */
TEST(staged_blocking_collectives_on_device_and_host_buffers) {
  staged_fixture f;
  CHECK(fixture(&f, 5000));
  rank_arg args[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    fill(f.dev[r], f.b[r], 3, r, N_B);
    fill(f.dev[r], f.a[r], 4, r, N_A);
    args[r] = (rank_arg){.f = &f,
                         .rank = r,
                         .flag = (float)(r + 1),
                         .word = {7ull * (r + 1), 8ull * (r + 1), 9ull * (r + 1)}};
    CHECK(!pthread_create(&th[r], NULL, blocking_rank, &args[r]));
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (args[r].s) printf("    rank %d: %s\n", r, args[r].err.msg);
    CHECK_INT(args[r].s, DPM_OK);
    CHECK(holds(f.dev[r], f.b[r], 3, r, N_B, 1));
    CHECK(holds(f.dev[r], f.a[r], 4, 1, N_A, 0)); /* rank 1's bytes */
    CHECK(args[r].flag == 3.0f);
    CHECK(args[r].word[0] == 7 && args[r].word[1] == 8 && args[r].word[2] == 9);
  }
  fixture_fini(&f);
}

/* Create owns the inner group: refused, it destroys it (LeakSanitizer). */
TEST(staged_create_refuses_missing_devices) {
  dpm_comm_config cfg = {.kind = DPM_COMM_GLOO, .size = 2, .timeout_ms = 200};
  dpm_comm *inner = NULL, *c = (dpm_comm *)&cfg;
  dpm_err err = {0};
  CHECK_INT(dpm_comm_create(&cfg, &inner, &err), DPM_OK);
  CHECK_INT(dpm_comm_staged_create(inner, NULL, 0, &c, &err), DPM_INVALID);
  CHECK(!c);
  CHECK_HAS(err.msg, "no device for rank 0");
  CHECK_INT(dpm_comm_staged_create(NULL, NULL, 0, &c, &err), DPM_INVALID);
}
