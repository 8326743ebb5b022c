/* The cuda backend's kernels, tabled by op id. Each family file defines
 * the kernels of its ops (cuda.h: DPM_CUDA_KERNEL); the table refers to
 * them weakly, so an op without one has no cuda kernel (bound nets that
 * use it are refused naming op and device) rather than a plugin that fails
 * to link; tests/unit/cuda_plugin_test.c requires one for every op of
 * DPM_KERNEL_OP_MAP. The collectives have none (NULL): the engine runs
 * them through the communicator (engine/collective.h). */
#include <assert.h>

#include "backend/cuda/cuda.h"

#define XX(id, name)                                                                     \
  extern const dpm_kernel_def DPM_CUDA_KERNEL(id) __attribute__((weak));
DPM_KERNEL_OP_MAP(XX)
#undef XX

static const dpm_kernel_def *const kernels[DPM_OP_COUNT] = {
#define XX(id, name) [DPM_OP_##id] = &DPM_CUDA_KERNEL(id),
    DPM_KERNEL_OP_MAP(XX)
#undef XX
};

const dpm_kernel_def *cuda_kernel(dpm_op_id id) {
  assert((unsigned)id < DPM_OP_COUNT);
  return kernels[id];
}
