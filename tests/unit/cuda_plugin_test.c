/* The CUDA plugin as this host can check it without a GPU: on a host
 * without a driver or GPU the loader asks the probe, leaves the plugin
 * unloaded and refuses cuda:0 with the driver's reason; the plugin itself
 * (build/libdpm_cuda.so, built whenever nvcc is found) loads, refuses a
 * host of another ABI and has a kernel for every op but the collectives
 * (the engine's: engine/collective.h). Skipped, saying so,
 * where the plugin was not built (make CUDA=0). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda_load.h"
#include "backend/device.h"
#include "test.h"

#define PLUGIN_PATH "build/libdpm_cuda.so"

static int plugin_built(void) {
  if (!access(PLUGIN_PATH, R_OK)) return 1;
  printf("  (skipped: %s not built)\n", PLUGIN_PATH);
  return 0;
}

/* build/libdpm_cuda_probe.so is in this process's mappings. */
static int probe_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char l[1024];
  int found = 0;
  while (!found && fgets(l, sizeof l, f))
    found = strstr(l, "/libdpm_cuda_probe.so") != NULL;
  fclose(f);
  return found;
}

TEST(cuda_plugin_loads_and_refuses_cuda_devices_without_a_driver) {
  if (!plugin_built()) return;
  char line[640];
  int n = dpm_cuda_load(line, sizeof line);
  if (n > 0) {
    CHECK(dpm_backend_of(DPM_DEVICE_CUDA) == dpm_cuda_plugin_get()->backend);
    printf("  (%s: this host has a GPU; tests/gpu/run.sh checks it)\n", line);
    return;
  }
  CHECK_HAS(line, "cuda: no usable CUDA driver or device");
  CHECK_INT(dpm_cuda_load_state(), DPM_CUDA_NO_GPU);
  CHECK(dpm_cuda_plugin_get() == NULL); /* its cuBLASLt would cost ~150 MB resident */
  CHECK(probe_mapped());                /* it initialised cudart: kept loaded */
  const dpm_backend *be = dpm_backend_of(DPM_DEVICE_CUDA);
  CHECK(be && be->kind == DPM_DEVICE_CUDA && !be->host_visible);
  dpm_dev *dev;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_CUDA, 0}, &dev, &err), DPM_NOT_FOUND);
  CHECK_HAS(err.msg, "device cuda:0: no usable CUDA driver or device");
  CHECK(dev == NULL);
}

/* The plugin's tables, loaded here whatever the probe says (and kept
 * loaded: CUDA's libraries allocate at load what they free at exit). */
static const dpm_cuda_host test_host = {
    .abi = DPM_CUDA_ABI, .cpu = &dpm_backend_cpu, .dev_state = dpm_dev_state};

TEST(cuda_plugin_has_a_kernel_for_every_op) {
  if (!plugin_built()) return;
  void *h = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  dpm_cuda_plugin_init_fn init = (dpm_cuda_plugin_init_fn)dlsym(h, DPM_CUDA_PLUGIN_INIT);
  dpm_err err = {0};
  const dpm_cuda_plugin *p = init ? init(&test_host, &err) : NULL;
  CHECK(p != NULL);
  const dpm_backend *be = p->backend;
  CHECK(be != NULL);
  int count;
  const dpm_op_def *const *all = dpm_op_all(&count);
  CHECK_INT(count, DPM_OP_COUNT);
  static const int backend_op[DPM_OP_COUNT] = {
#define XX(id, name) [DPM_OP_##id] = 1,
      DPM_KERNEL_OP_MAP(XX)
#undef XX
  };
  for (int id = 0; id < count; id++) {
    const dpm_kernel_def *k = be->kernel((dpm_op_id)id);
    /* bf16 tensors: FC, Conv, the pools, Relu, their gradients and the
       byte moves take them (Cast converts, an optimizer writes a working
       copy); every other op is refused at bind on a bf16 net, naming it */
    static const int bf16_ops[] = {
        DPM_OP_FC,           DPM_OP_FC_GRADIENT,      DPM_OP_CONV,
        DPM_OP_CONV_GRADIENT, DPM_OP_MAX_POOL,        DPM_OP_MAX_POOL_GRADIENT,
        DPM_OP_AVERAGE_POOL, DPM_OP_AVERAGE_POOL_GRADIENT, DPM_OP_RELU,
        DPM_OP_RELU_GRADIENT, DPM_OP_COPY,            DPM_OP_STOP_GRADIENT,
        DPM_OP_FLATTEN,      DPM_OP_FLATTEN_GRADIENT, DPM_OP_RESHAPE,
        DPM_OP_RESHAPE_GRADIENT, DPM_OP_CONCAT,       DPM_OP_CONCAT_GRADIENT};
    int bf16 = 0;
    for (size_t j = 0; j < sizeof bf16_ops / sizeof *bf16_ops; j++)
      bf16 |= id == bf16_ops[j];
    if (k && (k->lowp != (bf16 ? DPM_LOWP_BIT(DPM_BF16) : 0u)))
      dpm_test_fail(__FILE__, __LINE__, "op %s: cuda lowp 0x%x", all[id]->name, k->lowp);
    if (backend_op[id] && (!k || !k->run))
      dpm_test_fail(__FILE__, __LINE__, "op %s has no cuda kernel", all[id]->name);
    if (!backend_op[id] && k) /* a collective: the engine's (engine/collective.h) */
      dpm_test_fail(__FILE__, __LINE__, "op %s has a cuda kernel", all[id]->name);
  }
  /* the optimizers update every parameter in one launch */
  CHECK(be->kernel(DPM_OP_SGD)->run_many && be->kernel(DPM_OP_MOMENTUM_SGD)->run_many &&
        be->kernel(DPM_OP_ADAM)->run_many);
}

TEST(cuda_plugin_of_another_abi_is_refused) {
  if (!plugin_built()) return;
  void *h = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  dpm_cuda_plugin_init_fn init = (dpm_cuda_plugin_init_fn)dlsym(h, DPM_CUDA_PLUGIN_INIT);
  CHECK(init != NULL);
  dpm_cuda_host old = {.abi = DPM_CUDA_ABI + 1};
  dpm_err err = {0};
  CHECK(init(&old, &err) == NULL);
  CHECK_HAS(err.msg, "ABI");
}
