/* The CPU kernels: one file per op family under daemon/backend/cpu/, as
 * daemon/ops/ has one per family for the ops' semantics. Each defines the
 * kernel of every op of its family in the op list (ops/list.h) as
 * `const dpm_kernel_def DPM_CPU_KERNEL(ID)`, declared here; the cpu backend
 * (cpu.c) tables them by op id. The CPU is the reference backend: every op
 * of DPM_KERNEL_OP_MAP has a CPU kernel, and one missing fails to link (the
 * collectives are the engine's: engine/collective.h). FC and Conv run their
 * matrix products through backend/cpu/gemm.h (in a bf16 model, on CPUs
 * with AVX512-BF16, through backend/cpu/gemm_bf16.h: lowp_run.h). */
#ifndef DPM_BACKEND_CPU_KERNELS_H
#define DPM_BACKEND_CPU_KERNELS_H

#include "backend/backend.h"

/* The CPU kernel of op ID. */
#define DPM_CPU_KERNEL(ID) dpm_cpu_kernel_##ID

#define XX(id, name) extern const dpm_kernel_def DPM_CPU_KERNEL(id);
DPM_KERNEL_OP_MAP(XX)
#undef XX

#endif
