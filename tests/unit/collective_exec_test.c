/* The collective ops run by the engine through the communicator
 * (engine/collective.h), not as backend kernels: no backend has a kernel
 * for them, and a backend without any binds and runs them all the same.
 * A tap communicator of one rank records each call (what, where, how
 * much), so the tests see the calls the ops make: one over blobs laid out
 * back to back as in the arena, one per blob otherwise, doubles for dtype
 * f64, started and waited sums counted, a failure recorded in the context
 * and the step's later collectives skipped; on a fenced device the call
 * is host work in the device's order, recorded by a graph capture and made
 * by its replay. */
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "comm/comm.h"
#include "engine/collective.h"
#include "engine/exec.h"
#include "engine/net.h"
#include "test.h"

/* ---- the tap: a group of one that records its calls ------------------------- */

typedef enum { TAP_F32, TAP_F64, TAP_START, TAP_WAIT, TAP_BROADCAST } tap_kind;

typedef struct {
  tap_kind kind;
  const void *buf;
  size_t n; /* elements (allreduce, start) or bytes (broadcast) */
} tap_call;

typedef struct {
  dpm_comm base;
  tap_call calls[16];
  int n_calls;
  int fail_next; /* the next call fails with DPM_TIMEOUT */
} tap;

static dpm_status tap_record(tap *t, tap_kind kind, const void *buf, size_t n,
                             dpm_err *err) {
  if (t->fail_next) {
    t->fail_next = 0;
    return dpm_errf(err, DPM_TIMEOUT, "tap: timed out");
  }
  if (t->n_calls < 16) t->calls[t->n_calls] = (tap_call){kind, buf, n};
  t->n_calls++;
  return DPM_OK;
}

static dpm_status tap_allreduce(dpm_comm *c, int rank, dpm_comm_dtype ty, void *buf,
                                size_t count, dpm_err *err) {
  (void)rank;
  return tap_record((tap *)c, ty == DPM_COMM_F64 ? TAP_F64 : TAP_F32, buf, count, err);
}
static dpm_status tap_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                                dpm_err *err) {
  (void)rank, (void)root;
  return tap_record((tap *)c, TAP_BROADCAST, buf, bytes, err);
}
static dpm_status tap_barrier(dpm_comm *c, int rank, dpm_err *err) {
  (void)c, (void)rank, (void)err;
  return DPM_OK;
}
static dpm_status tap_start(dpm_comm *c, int rank, float *buf, size_t count,
                            dpm_err *err) {
  (void)rank;
  return tap_record((tap *)c, TAP_START, buf, count, err);
}
static dpm_status tap_wait(dpm_comm *c, int rank, dpm_err *err) {
  (void)rank;
  return tap_record((tap *)c, TAP_WAIT, NULL, 0, err);
}
static int tap_broken(dpm_comm *c) {
  (void)c;
  return 0;
}
static void tap_destroy(dpm_comm *c) { (void)c; }

static const dpm_comm_ops tap_ops = {
    .name = "tap",
    .allreduce = tap_allreduce,
    .broadcast = tap_broadcast,
    .barrier = tap_barrier,
    .allreduce_start = tap_start,
    .allreduce_wait = tap_wait,
    .broken = tap_broken,
    .destroy = tap_destroy,
};

/* ---- ops over two blobs ------------------------------------------------------ */

/* A backend with no kernel at all. */
static const dpm_kernel_def *no_kernel(dpm_op_id id) {
  (void)id;
  return NULL;
}
static const dpm_backend bare = {.name = "bare", .kernel = no_kernel};

/* a: 10 floats (40 bytes, 64 with the arena's alignment), b: 16 floats. */
static const dpm_shape shape_a = {DPM_F32, 1, {10}}, shape_b = {DPM_F32, 1, {16}};

typedef struct {
  dpm_net net;
  dpm_tensor a, b;
  dpm_op op;
} two_blobs;

/* op `id` (args: "" or "dtype=f64") over a and b, bound on ctx with the
 * kernel dpm_exec_kernel gives on backend be. */
static dpm_status two_blob_op(two_blobs *x, dpm_op_id id, const char *args,
                              const dpm_backend *be, dpm_ctx *ctx, dpm_err *err) {
  const char *names[] = {"a", "b"};
  dpm_node *n = dpm_net_add(&x->net, dpm_op_get(id), 2, names, 2, names, err);
  if (!n || (*args && dpm_node_set_args(n, args, err))) return err->code;
  x->op = (dpm_op){.node = n,
                   .in = {&x->a, &x->b},
                   .out = {&x->a, &x->b},
                   .n_in = 2,
                   .n_out = 2,
                   .ctx = ctx};
  return dpm_exec_kernel(be, n->def, be->name, &x->op.kernel, err);
}

TEST(collectives_have_no_backend_kernel_and_bind_on_any_backend) {
  static const dpm_op_id collectives[] = {
#define XX(id, name) DPM_OP_##id,
      DPM_COLLECTIVE_OP_MAP(XX)
#undef XX
  };
  const dpm_backend *fenced = dpm_backend_of(DPM_DEVICE_FENCED);
  CHECK(fenced);
  for (size_t i = 0; i < sizeof collectives / sizeof *collectives; i++) {
    const dpm_op_def *def = dpm_op_get(collectives[i]);
    const dpm_kernel_def *on_cpu = NULL, *on_fenced = NULL, *on_bare = NULL;
    dpm_err err = {0};
    if (dpm_backend_cpu.kernel(def->id) || fenced->kernel(def->id) ||
        dpm_exec_kernel(&dpm_backend_cpu, def, "cpu:0", &on_cpu, &err) ||
        dpm_exec_kernel(fenced, def, "fenced:0", &on_fenced, &err) ||
        dpm_exec_kernel(&bare, def, "bare:0", &on_bare, &err) || !on_bare ||
        on_cpu != on_bare || on_fenced != on_bare ||
        on_bare != dpm_collective_kernel(def->id)) {
      dpm_test_fail(__FILE__, __LINE__,
                    "op %s: a backend kernel, or not the engine's: %s", def->name,
                    err.msg);
      return;
    }
  }
  for (int id = 0; id < DPM_OP_COUNT; id++)
    if (dpm_collective_kernel((dpm_op_id)id) &&
        !(dpm_op_get((dpm_op_id)id)->flags & DPM_OP_HIDDEN)) {
      dpm_test_fail(__FILE__, __LINE__, "op %s: the engine's, but in specs",
                    dpm_op_get((dpm_op_id)id)->name);
      return;
    }
}

TEST(collectives_call_the_comm_once_over_the_arena_else_once_per_blob) {
  tap t = {.base = {.ops = &tap_ops, .size = 1}};
  dpm_ctx ctx = {.comm = &t.base};
  float *arena = aligned_alloc(DPM_ALIGN, 4 * DPM_ALIGN);
  CHECK(arena);
  memset(arena, 0, 4 * DPM_ALIGN);
  two_blobs x[5] = {0};
  dpm_err err = {0};
  CHECK_INT(two_blob_op(&x[0], DPM_OP_ALLREDUCE, "", &bare, &ctx, &err), DPM_OK);
  CHECK_INT(two_blob_op(&x[1], DPM_OP_ALLREDUCE, "dtype=f64", &bare, &ctx, &err), DPM_OK);
  CHECK_INT(two_blob_op(&x[2], DPM_OP_ALLREDUCE_START, "", &bare, &ctx, &err), DPM_OK);
  CHECK_INT(two_blob_op(&x[3], DPM_OP_ALLREDUCE_WAIT, "", &bare, &ctx, &err), DPM_OK);
  CHECK_INT(two_blob_op(&x[4], DPM_OP_BROADCAST, "", &bare, &ctx, &err), DPM_OK);
  char *base = (char *)arena;
  for (int k = 0; k < 5; k++) { /* back to back, as the arena lays them */
    dpm_tensor_view(&x[k].a, &shape_a, base);
    dpm_tensor_view(&x[k].b, &shape_b, base + DPM_ALIGN);
  }
  for (int k = 0; k < 5; k++) x[k].op.kernel->run(&x[k].op);
  CHECK_INT(ctx.status, DPM_OK);
  CHECK_INT(t.n_calls, 5);
  /* 64 bytes of a (40 and its padding), then b's 64: 128 bytes */
  CHECK(t.calls[0].kind == TAP_F32 && t.calls[0].buf == base && t.calls[0].n == 32);
  CHECK(t.calls[1].kind == TAP_F64 && t.calls[1].buf == base && t.calls[1].n == 16);
  CHECK(t.calls[2].kind == TAP_START && t.calls[2].buf == base && t.calls[2].n == 32);
  CHECK(t.calls[3].kind == TAP_WAIT);
  CHECK(t.calls[4].kind == TAP_BROADCAST && t.calls[4].buf == base &&
        t.calls[4].n == 128);
  CHECK_INT(ctx.started, 0);

  t.n_calls = 0; /* a gap between a and b: one call per blob */
  for (int k = 0; k < 5; k++) dpm_tensor_view(&x[k].b, &shape_b, base + 2 * DPM_ALIGN);
  x[2].op.kernel->run(&x[2].op);
  CHECK_INT(ctx.started, 2);
  for (int k = 0; k < 5; k++)
    if (k != 2) x[k].op.kernel->run(&x[k].op);
  CHECK_INT(ctx.status, DPM_OK);
  CHECK_INT(ctx.started, 0);
  CHECK_INT(t.n_calls, 10);
  CHECK(t.calls[0].kind == TAP_START && t.calls[0].buf == base && t.calls[0].n == 10);
  CHECK(t.calls[1].kind == TAP_START && t.calls[1].buf == base + 2 * DPM_ALIGN &&
        t.calls[1].n == 16);
  CHECK(t.calls[2].kind == TAP_F32 && t.calls[2].n == 10 && t.calls[3].n == 16);
  CHECK(t.calls[4].kind == TAP_F64 && t.calls[4].n == 5 && t.calls[5].n == 8);
  CHECK(t.calls[6].kind == TAP_WAIT && t.calls[7].kind == TAP_WAIT);
  CHECK(t.calls[8].kind == TAP_BROADCAST && t.calls[8].n == 40 && t.calls[9].n == 64);
  for (int k = 0; k < 5; k++) dpm_net_fini(&x[k].net);
  free(arena);
}

TEST(collective_failure_is_recorded_and_skips_the_steps_later_ones) {
  tap t = {.base = {.ops = &tap_ops, .size = 1}, .fail_next = 1};
  dpm_ctx ctx = {.comm = &t.base};
  float *arena = aligned_alloc(DPM_ALIGN, 2 * DPM_ALIGN);
  CHECK(arena);
  two_blobs x[2] = {0};
  dpm_err err = {0};
  CHECK_INT(two_blob_op(&x[0], DPM_OP_ALLREDUCE, "", &dpm_backend_cpu, &ctx, &err),
            DPM_OK);
  CHECK_INT(two_blob_op(&x[1], DPM_OP_BROADCAST, "", &dpm_backend_cpu, &ctx, &err),
            DPM_OK);
  for (int k = 0; k < 2; k++) {
    dpm_tensor_view(&x[k].a, &shape_a, arena);
    dpm_tensor_view(&x[k].b, &shape_b, (char *)arena + DPM_ALIGN);
  }
  x[0].op.kernel->run(&x[0].op);
  x[1].op.kernel->run(&x[1].op);
  CHECK_INT(ctx.status, DPM_TIMEOUT);
  CHECK_HAS(ctx.err.msg, "tap: timed out");
  CHECK_INT(t.n_calls, 0); /* the broadcast after it was skipped */
  ctx.status = DPM_OK;     /* the runner clears it after the step */
  x[1].op.kernel->run(&x[1].op);
  CHECK_INT(t.n_calls, 1);
  for (int k = 0; k < 2; k++) dpm_net_fini(&x[k].net);
  free(arena);
}

/* On a fenced device the call is the device's work: made at once, or
 * recorded by a capture and made by each replay with the device's memory. */
TEST(collectives_on_a_fenced_device_are_taken_into_a_captured_graph) {
  dpm_dev *dev;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_FENCED, 0}, &dev, &err), DPM_OK);
  const dpm_backend *be = dpm_dev_backend(dev);
  size_t got = 0;
  dpm_dptr mem = dpm_dev_alloc(dev, 2 * DPM_ALIGN, &got);
  CHECK(!dpm_dptr_null(mem));
  tap t = {.base = {.ops = &tap_ops, .size = 1}};
  dpm_ctx ctx = {.comm = &t.base, .dev = dev};
  two_blobs x = {0};
  CHECK_INT(two_blob_op(&x, DPM_OP_ALLREDUCE, "", be, &ctx, &err), DPM_OK);
  dpm_tensor_view_mem(&x.a, &shape_a, mem);
  dpm_tensor_view_mem(&x.b, &shape_b, dpm_dptr_at(mem, DPM_ALIGN));
  x.a.dev = x.b.dev = dev;
  x.op.kernel->run(&x.op);
  CHECK_INT(t.n_calls, 1);
  CHECK(t.calls[0].buf == x.a.data); /* pointer only */
  CHECK_INT(be->capture_begin(dpm_dev_state(dev), &err), DPM_OK);
  x.op.kernel->run(&x.op);
  int during = t.n_calls;
  void *graph = be->capture_end(dpm_dev_state(dev), &err);
  if (!graph) printf("    %s\n", err.msg);
  CHECK(graph);
  CHECK_INT(during, 1); /* recorded, not made */
  for (int k = 0; k < 2; k++)
    CHECK_INT(be->replay(dpm_dev_state(dev), graph, &err), DPM_OK);
  be->graph_free(dpm_dev_state(dev), graph);
  CHECK_INT(t.n_calls, 3);
  CHECK(t.calls[2].kind == TAP_F32 && t.calls[2].n == 32);
  CHECK_INT(ctx.status, DPM_OK);
  dpm_net_fini(&x.net);
  dpm_dev_free(dev, mem, got);
}
