/* The backends' kernel tables (backend/backend.h): the CPU has a kernel
 * with a run for every op of the kernel list (none for the collectives,
 * the engine's: engine/collective.h), whose parts and run_part come in
 * pairs; the fenced backend has a kernel exactly where the CPU has one,
 * split where it splits and asking the same scratch; an op a backend has
 * no kernel for is refused naming op and device, and needs no scratch. */
#include "backend/backend.h"
#include "engine/exec.h"
#include "test.h"

/* The list as the test reads it, independently of the tables. */
static const char *const list_names[] = {
#define XX(id, name) name,
    DPM_OP_MAP(XX)
#undef XX
};
/* Whether an op is in the kernel list (a backend's) or not (a collective). */
static const int backend_op[DPM_OP_COUNT] = {
#define XX(id, name) [DPM_OP_##id] = 1,
    DPM_KERNEL_OP_MAP(XX)
#undef XX
};

TEST(cpu_kernels_run_every_listed_op_and_split_in_pairs) {
  int split = 0;
  for (int i = 0; i < DPM_OP_COUNT; i++) {
    const dpm_kernel_def *k = dpm_backend_cpu.kernel((dpm_op_id)i);
    if (!backend_op[i]) {
      if (k) dpm_test_fail(__FILE__, __LINE__, "op %s: a CPU kernel", list_names[i]);
      continue;
    }
    if (!k || !k->run || !k->parts != !k->run_part) {
      dpm_test_fail(__FILE__, __LINE__,
                    "op %s: CPU kernel %s, run %s, parts %s, run_part %s", list_names[i],
                    k ? "present" : "NULL", k && k->run ? "set" : "NULL",
                    k && k->parts ? "set" : "NULL", k && k->run_part ? "set" : "NULL");
      return;
    }
    split += k->parts != NULL;
  }
  CHECK(split >= 1); /* FCGradient: work sharing */
  CHECK(dpm_backend_cpu.kernel(DPM_OP_FC_GRADIENT)->parts);
  CHECK(dpm_backend_cpu.kernel(DPM_OP_CONV)->scratch);
}

TEST(fenced_kernels_mirror_the_cpu_table) {
  const dpm_backend *fenced = dpm_backend_of(DPM_DEVICE_FENCED);
  CHECK(fenced);
  for (int i = 0; i < DPM_OP_COUNT; i++) {
    const dpm_kernel_def *c = dpm_backend_cpu.kernel((dpm_op_id)i),
                         *f = fenced->kernel((dpm_op_id)i);
    if (!c != !f ||
        (f && (!f->run || !f->parts != !c->parts || !f->run_part != !c->run_part))) {
      dpm_test_fail(__FILE__, __LINE__, "op %s: fenced kernel differs from the CPU's",
                    list_names[i]);
      return;
    }
  }
}

/* A one-node net: Conv of X [2, 3, 10, 10] by 8 filters of 3x3. */
static dpm_status conv_net(dpm_net *net, dpm_shapes *t, dpm_err *err) {
  const char *in[] = {"x", "w", "b"}, *out[] = {"y"};
  dpm_node *n = dpm_net_add(net, dpm_op_get(DPM_OP_CONV), 3, in, 1, out, err);
  if (!n || dpm_node_set_args(n, "dim_out=8 kernel=3", err)) return err->code;
  dpm_shape x = dpm_shape_make(DPM_F32, 4, (int64_t[]){2, 3, 10, 10}),
            w = dpm_shape_make(DPM_F32, 4, (int64_t[]){8, 3, 3, 3}),
            b = dpm_shape_make(DPM_F32, 1, (int64_t[]){8});
  if (dpm_shapes_set(t, "x", &x, DPM_BLOB_DATA) ||
      dpm_shapes_set(t, "w", &w, DPM_BLOB_PARAM) ||
      dpm_shapes_set(t, "b", &b, DPM_BLOB_PARAM))
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  return dpm_net_infer(net, t, -1, "test", err);
}

/* A backend with the CPU's kernels but Conv's. */
static const dpm_kernel_def *all_but_conv(dpm_op_id id) {
  return id == DPM_OP_CONV ? NULL : dpm_backend_cpu.kernel(id);
}
static const dpm_backend partial = {.name = "partial", .kernel = all_but_conv};

TEST(an_op_without_a_kernel_is_refused_naming_op_and_device) {
  const dpm_kernel_def *k = dpm_backend_cpu.kernel(DPM_OP_FC);
  dpm_err err = {0};
  CHECK_INT(dpm_exec_kernel(&partial, dpm_op_get(DPM_OP_CONV), "partial:3", &k, &err),
            DPM_UNSUPPORTED);
  CHECK(k == NULL);
  CHECK_HAS(err.msg, "op Conv is not supported on device partial:3");
  CHECK_INT(dpm_exec_kernel(&partial, dpm_op_get(DPM_OP_FC), "partial:3", &k, &err),
            DPM_OK);
  CHECK(k == dpm_backend_cpu.kernel(DPM_OP_FC));
}

TEST(scratch_is_sized_by_the_backend_that_runs_the_net) {
  dpm_net net = {0};
  dpm_shapes t = {0};
  dpm_err err = {0};
  dpm_status s = conv_net(&net, &t, &err);
  size_t cpu = s ? 0 : dpm_net_scratch(&net, &t, &dpm_backend_cpu);
  size_t fenced = s ? 0 : dpm_net_scratch(&net, &t, dpm_backend_of(DPM_DEVICE_FENCED));
  size_t none = s ? 1 : dpm_net_scratch(&net, &t, &partial);
  dpm_net_fini(&net);
  dpm_shapes_fini(&t);
  if (s) printf("    %s\n", err.msg);
  CHECK_INT(s, DPM_OK);
  CHECK(cpu > 0);
  CHECK(fenced == cpu);
  CHECK(none == 0); /* no kernel for Conv: nothing to size */
}
