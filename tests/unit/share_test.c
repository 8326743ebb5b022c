/* Work sharing between replicas (parallel/share.h): every part of every
 * round runs exactly once, late owners get help, the owner returns only
 * when its op is complete; the CPU kernel of FCGradient's parts do what its
 * run does; plans name the op to share where the backend's kernel splits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/lowp_run.h"
#include "engine/exec.h"
#include "common/spec.h"
#include "engine/model.h"
#include "parallel/plan.h"
#include "parallel/share.h"
#include "optest.h"
#include "test.h"
#include "trainer_fixture.h"

/* ---- a fake op: parts record who ran them -------------------------------- */

#define FAKE_PARTS 13
#define RANKS 3
#define ROUNDS 60

typedef struct {
  atomic_int runs[FAKE_PARTS]; /* times each part ran this round */
  atomic_int by_other;         /* parts run by a thread other than the owner */
  pthread_t owner;
} fake_state;

static fake_state fake[RANKS];

static int fake_parts(const dpm_op *op) {
  (void)op;
  return FAKE_PARTS;
}

static void fake_run_part(const dpm_op *op, int part) {
  fake_state *f = &fake[op->ctx->device];
  struct timespec ns = {0, 20000}; /* 20 us of "work" */
  nanosleep(&ns, NULL);
  atomic_fetch_add(&f->runs[part], 1);
  if (!pthread_equal(pthread_self(), f->owner)) atomic_fetch_add(&f->by_other, 1);
}

static const dpm_op_def fake_def = {.name = "FakeParts"};
static const dpm_kernel_def fake_kernel = {.parts = fake_parts,
                                           .run_part = fake_run_part};

typedef struct {
  dpm_share *share;
  int rank;
  int bad;  /* a round returned before all its parts ran, or ran one twice */
  int help; /* rounds in which the late rank got help */
  pthread_barrier_t *round_start;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  dpm_node node = {.def = &fake_def};
  dpm_ctx ctx = {.device = a->rank};
  dpm_op op = {.node = &node, .ctx = &ctx, .kernel = &fake_kernel};
  fake_state *f = &fake[a->rank];
  f->owner = pthread_self();
  for (int round = 0; round < ROUNDS; round++) {
    pthread_barrier_wait(a->round_start); /* all counters reset */
    int late = round % RANKS;             /* this round's straggler */
    if (a->rank == late) usleep(2000);
    dpm_share_run(a->share, a->rank, &op);
    for (int k = 0; k < FAKE_PARTS; k++)
      if (atomic_load(&f->runs[k]) != 1) a->bad = 1;
    dpm_share_help(a->share, a->rank, 10000);
    pthread_barrier_wait(a->round_start); /* everyone helped */
    if (a->rank == late && atomic_load(&f->by_other) > 0) a->help++;
    for (int k = 0; k < FAKE_PARTS; k++)
      if (atomic_load(&f->runs[k]) != 1) a->bad = 1;
    pthread_barrier_wait(a->round_start); /* checks done: reset */
    for (int k = 0; k < FAKE_PARTS; k++) atomic_store(&f->runs[k], 0);
    atomic_store(&f->by_other, 0);
  }
  return NULL;
}

TEST(share_every_part_runs_once_and_late_ranks_get_help) {
  dpm_share *s = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_share_create(RANKS, &s, &err), DPM_OK);
  pthread_barrier_t b;
  pthread_barrier_init(&b, NULL, RANKS);
  pthread_t th[RANKS];
  worker_arg a[RANKS];
  for (int r = 0; r < RANKS; r++) {
    a[r] = (worker_arg){.share = s, .rank = r, .round_start = &b};
    CHECK_INT(pthread_create(&th[r], NULL, worker, &a[r]), 0);
  }
  int bad = 0, help = 0;
  for (int r = 0; r < RANKS; r++) {
    pthread_join(th[r], NULL);
    bad |= a[r].bad;
    help += a[r].help;
  }
  pthread_barrier_destroy(&b);
  dpm_share_destroy(s);
  CHECK_INT(bad, 0);
  /* a straggler 2 ms late finds most of its 13 parts of 20 us taken by
     peers that arrived first; allow a few rounds where the scheduler
     delayed the helpers as much */
  printf("    late rank helped in %d of %d rounds\n", help, ROUNDS);
  CHECK(help >= ROUNDS / 2);
}

TEST(share_help_gives_up_on_a_peer_that_never_comes) {
  dpm_share *s = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_share_create(2, &s, &err), DPM_OK);
  dpm_node node = {.def = &fake_def};
  dpm_ctx ctx = {.device = 0};
  dpm_op op = {.node = &node, .ctx = &ctx, .kernel = &fake_kernel};
  fake[0].owner = pthread_self();
  dpm_share_run(s, 0, &op); /* rank 1 never runs its op */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  dpm_share_help(s, 0, 50);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  dpm_share_destroy(s);
  for (int k = 0; k < FAKE_PARTS; k++) atomic_store(&fake[0].runs[k], 0);
  CHECK(ms >= 50 && ms < 2000);
  CHECK_INT(dpm_share_create(1, &s, &err), DPM_INVALID);
}

/* ---- FCGradient's parts -------------------------------------------------- */

static float *filled(size_t n, unsigned seed) {
  float *v = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  for (size_t i = 0; v && i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return v;
}

/* FCGradient with X [n, k], W [m, k] and dY [n, m], without dX: split into
 * parts (24 rows each), run in reverse order, they give run's dW and db
 * bit for bit; with dX wanted there are no parts. */
static void fc_gradient_parts_equal_run(int n, int m, int k) {
  const dpm_op_def *def = dpm_op_find("FCGradient");
  const dpm_kernel_def *kd = dpm_backend_cpu.kernel(DPM_OP_FC_GRADIENT);
  CHECK(def && kd && kd->parts && kd->run_part);
  dpm_node node = {.def = def};
  dpm_err err = {0};
  CHECK_INT(dpm_node_set_defaults(&node, &err), DPM_OK);
  float *x = filled((size_t)n * k, 1), *w = filled((size_t)m * k, 2),
        *dy = filled((size_t)n * m, 3), *dw[2], *db[2], *dx = filled((size_t)n * k, 4);
  for (int i = 0; i < 2; i++) dw[i] = filled((size_t)m * k, 5), db[i] = filled(m, 6);
  dpm_tensor tx = {0}, tw = {0}, tdy = {0}, tdw[2] = {0}, tdb[2] = {0}, tdx = {0};
  dpm_shape sx = dpm_shape_make(DPM_F32, 2, (int64_t[]){n, k}),
            sw = dpm_shape_make(DPM_F32, 2, (int64_t[]){m, k}),
            sy = dpm_shape_make(DPM_F32, 2, (int64_t[]){n, m}),
            sb = dpm_shape_make(DPM_F32, 1, (int64_t[]){m});
  dpm_tensor_view(&tx, &sx, x);
  dpm_tensor_view(&tw, &sw, w);
  dpm_tensor_view(&tdy, &sy, dy);
  dpm_tensor_view(&tdx, &sx, dx);
  for (int i = 0; i < 2; i++) {
    dpm_tensor_view(&tdw[i], &sw, dw[i]);
    dpm_tensor_view(&tdb[i], &sb, db[i]);
  }
  dpm_op whole = {.node = &node, .in = {&tx, &tw, &tdy}, .out = {&tdw[0], &tdb[0], NULL}};
  dpm_op split = {.node = &node, .in = {&tx, &tw, &tdy}, .out = {&tdw[1], &tdb[1], NULL}};
  kd->run(&whole);
  int parts = kd->parts(&split);
  for (int p = parts - 1; p >= 0; p--) kd->run_part(&split, p);
  int same_w = !memcmp(dw[0], dw[1], (size_t)m * k * sizeof(float)),
      same_b = !memcmp(db[0], db[1], (size_t)m * sizeof(float));
  /* and run's dW is dY^T X */
  double worst = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) {
      double s = 0;
      for (int r = 0; r < n; r++) s += (double)dy[r * m + i] * x[r * k + j];
      worst = fmax(worst, fabs(s - dw[0][i * k + j]));
    }
  dpm_op with_dx = {
      .node = &node, .in = {&tx, &tw, &tdy}, .out = {&tdw[0], &tdb[0], &tdx}};
  int parts_dx = kd->parts(&with_dx);
  free(x), free(w), free(dy), free(dx);
  for (int i = 0; i < 2; i++) free(dw[i]), free(db[i]);
  CHECK_INT(parts, (m + 23) / 24);
  CHECK(same_w);
  CHECK(same_b);
  CHECK_WITHIN(worst, 1e-4);
  CHECK_INT(parts_dx, 0);
}

TEST(share_fc_gradient_parts_equal_run) {
  static const dpm_gemm_mode modes[] = {DPM_GEMM_TILES, DPM_GEMM_BLAS, DPM_GEMM_AUTO};
  for (int i = 0; i < 3 && !dpm_test_has_failed(); i++) {
    dpm_gemm_use(modes[i]);
    fc_gradient_parts_equal_run(37, 61, 83);
    fc_gradient_parts_equal_run(64, 256, 784); /* the MLP's first layer */
  }
  dpm_gemm_use(DPM_GEMM_AUTO);
}

/* FCGradient over bf16 X, W, dY without dX, as a bf16 model's first layer
 * runs it (through the low-precision wrapper, dW and db in f32 when fused,
 * else bf16): the wrapper's prepare and then its parts, in reverse order,
 * give its run's bits. Natively the parts are rows of dW (24 each); with
 * the native kernels off the op is one part, the whole op. */
static void bf16_fc_gradient_parts_equal_run(int n, int m, int k, unsigned fuse) {
  const dpm_kernel_def *inner = dpm_backend_cpu.kernel(DPM_OP_FC_GRADIENT),
                       *kd = &dpm_cpu_lowp_kernel;
  dpm_node node = {.def = dpm_op_find("FCGradient"),
                   .n_in = 3,
                   .n_out = 3,
                   .fuse = fuse,
                   .in = {"x", "w", "dy"},
                   .out = {"dw", "db", NULL}};
  dpm_err err = {0};
  CHECK_INT(dpm_node_set_defaults(&node, &err), DPM_OK);
  dpm_dtype gt = fuse ? DPM_F32 : DPM_BF16;
  dpm_shape in[DPM_OP_MAX_IO] = {dpm_shape_make(DPM_BF16, 2, (int64_t[]){n, k}),
                                 dpm_shape_make(DPM_BF16, 2, (int64_t[]){m, k}),
                                 dpm_shape_make(DPM_BF16, 2, (int64_t[]){n, m})},
            out[DPM_OP_MAX_IO] = {dpm_shape_make(gt, 2, (int64_t[]){m, k}),
                                  dpm_shape_make(gt, 1, (int64_t[]){m})};
  float *v[3] = {filled((size_t)n * k, 1), filled((size_t)m * k, 2),
                 filled((size_t)n * m, 3)};
  dpm_tensor t[3], g[2][2];
  memset(g, 0, sizeof g);
  for (int i = 0; i < 3; i++) t[i] = ot_tensor(in[i], v[i]);
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 2; i++) g[w][i] = ot_tensor(out[i], NULL);
  dpm_ctx ctx = {0};
  CHECK_INT(dpm_ctx_reserve(&ctx, dpm_cpu_lowp_scratch(inner, &node, in, out)), DPM_OK);
  dpm_op op[2];
  for (int w = 0; w < 2; w++)
    op[w] = (dpm_op){.node = &node, .n_in = 3, .n_out = 3, .ctx = &ctx, .kernel = kd,
                     .inner = inner, .in = {&t[0], &t[1], &t[2]},
                     .out = {&g[w][0], &g[w][1], NULL}};
  for (int native = 0; native < 1 + dpm_bf16_native_allowed(); native++) {
    dpm_bf16_native_use(native);
    kd->run(&op[0]);
    int parts = kd->parts(&op[1]);
    kd->prepare(&op[1]);
    for (int p = parts - 1; p >= 0; p--) kd->run_part(&op[1], p);
    CHECK_INT(parts, native ? (m + 23) / 24 : 1);
    for (int i = 0; i < 2; i++)
      CHECK(!memcmp(g[0][i].data, g[1][i].data, dpm_shape_bytes(&out[i])));
  }
  dpm_bf16_native_use(1);
  dpm_ctx_fini(&ctx);
  for (int i = 0; i < 3; i++) dpm_tensor_fini(&t[i]), free(v[i]);
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 2; i++) dpm_tensor_fini(&g[w][i]);
}

TEST(share_bf16_fc_gradient_parts_equal_run) {
  bf16_fc_gradient_parts_equal_run(37, 61, 83, DPM_FUSE_GRAD_F32);
  bf16_fc_gradient_parts_equal_run(64, 256, 784, DPM_FUSE_GRAD_F32); /* the MLP's fc1 */
  bf16_fc_gradient_parts_equal_run(37, 61, 83, 0);
}

/* ---- plans --------------------------------------------------------------- */

#define SHARE_MLP                                                                        \
  "  - {op: FC, in: [data], out: fc1, dim_out: 32}\n"                                    \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: FC, in: [fc1], out: pred, dim_out: 10}\n"
#define SHARE_CNN                                                                        \
  "  - {op: Conv, in: [data], out: c1, dim_out: 4, kernel: 5}\n"                         \
  "  - {op: FC, in: [c1], out: pred, dim_out: 10}\n"

static int plan_shares_on(const dpm_backend *be, const char *forward, int devices,
                          const char *net_type, int *at, int *help) {
  Dpm__ModelSpec *spec = tf_spec(forward, 8, 1, 0.1, net_type, 1 << 20);
  dpm_model m;
  dpm_plan p;
  dpm_err err = {0};
  int64_t chw[3] = {1, 28, 28};
  int ok = spec && !dpm_model_build(spec, chw, 8, 1.0f, &m, &err);
  if (ok && !(ok = !dpm_plan_build(&m, devices, devices > 1, !strcmp(net_type, "dag"),
                                   1 << 20, 1, 0, be, &p, &err)))
    dpm_model_fini(&m);
  if (!ok) {
    printf("    %s\n", err.msg);
    dpm_spec_free(spec);
    return -1;
  }
  *at = p.shared_op;
  *help = p.help_at;
  int shared = p.shared_op >= 0 &&
               !strcmp(p.step.nodes[p.shared_op].def->name, "FCGradient") &&
               !strcmp(p.step.nodes[p.help_at].def->name, "Allreduce");
  dpm_plan_fini(&p);
  dpm_model_fini(&m);
  dpm_spec_free(spec);
  return shared;
}

static int plan_shares(const char *forward, int devices, const char *net_type, int *at,
                       int *help) {
  return plan_shares_on(&dpm_backend_cpu, forward, devices, net_type, at, help);
}

TEST(share_plan_names_the_last_backward_op) {
  int at, help;
  CHECK_INT(plan_shares(SHARE_MLP, 2, "simple", &at, &help), 1);
  CHECK(help > at);
  CHECK_INT(plan_shares(SHARE_MLP, 4, "dag", &at, &help), 1);
  CHECK_INT(plan_shares(SHARE_MLP, 1, "simple", &at, &help), 0); /* nobody to help */
  CHECK_INT(at, -1);
  CHECK_INT(plan_shares(SHARE_CNN, 2, "simple", &at, &help), 0); /* Conv: no parts */
  CHECK_INT(at, -1);
  /* replicas without one common backend: nothing is shared */
  CHECK_INT(plan_shares_on(NULL, SHARE_MLP, 2, "simple", &at, &help), 0);
  CHECK_INT(at, -1);
}
