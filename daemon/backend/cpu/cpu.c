/* The CPU backend: device memory is host memory (64-byte aligned), copies
 * are memcpy, work is ordered by the calling thread, and the kernels are
 * those of daemon/backend/cpu/ (kernels.h), tabled here by op id. A cpu:N
 * device is a replica pinned to the N-th CPU (train/trainer.h); they share
 * the host's memory but each has a pool of its own. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"

static int cpu_probe(dpm_err *err) {
  (void)err;
  return DPM_MAX_DEVICE_INDEX + 1; /* replicas, not cores: any number may share one */
}

static dpm_status cpu_open(int index, void **state, dpm_err *err) {
  (void)index, (void)err;
  *state = NULL;
  return DPM_OK;
}

static void cpu_close(void *state) { (void)state; }

static void *cpu_alloc(void *state, size_t bytes) {
  (void)state;
  return aligned_alloc(DPM_ALIGN, (bytes + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN);
}

static void cpu_free(void *state, void *p, size_t bytes) {
  (void)state, (void)bytes;
  free(p);
}

static void cpu_copy(void *state, void *dst, const void *src, size_t bytes,
                     dpm_copy_kind kind) {
  (void)state, (void)kind;
  memmove(dst, src, bytes);
}

static void cpu_memset(void *state, void *dst, int value, size_t bytes) {
  (void)state;
  memset(dst, value, bytes);
}

static void cpu_synchronize(void *state) { (void)state; }

/* Every op's kernel, indexed by its id; NULL for the collectives (the
 * engine's: engine/collective.h). */
static const dpm_kernel_def *const kernels[DPM_OP_COUNT] = {
#define XX(id, name) [DPM_OP_##id] = &DPM_CPU_KERNEL(id),
    DPM_KERNEL_OP_MAP(XX)
#undef XX
};

static const dpm_kernel_def *cpu_kernel(dpm_op_id id) {
  assert((unsigned)id < DPM_OP_COUNT);
  return kernels[id];
}

static void cpu_nothing(void *state) { (void)state; }

const dpm_backend dpm_backend_cpu = {
    .name = "cpu",
    .kind = DPM_DEVICE_CPU,
    .host_visible = 1,
    .probe = cpu_probe,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .synchronize = cpu_synchronize,
    .kernel = cpu_kernel,
    .enter = cpu_nothing,
    .leave = cpu_nothing,
};
