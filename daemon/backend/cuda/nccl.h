/* The nccl communicator (comm/comm.h), inside the cuda plugin: see nccl.c
 * for its semantics, summation order and timeouts. */
#ifndef DPM_BACKEND_CUDA_NCCL_H
#define DPM_BACKEND_CUDA_NCCL_H

#include "comm/comm.h"

/* A DPM_COMM_NCCL group for cfg (cfg->streams: one cudaStream_t per local
 * rank). */
dpm_status cuda_nccl_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err);
/* Groups whose NCCL communicators were created so far (a warm group taken
 * again is not counted). */
unsigned long cuda_nccl_inits(void);
/* NCCL's environment for dpm, set once before NCCL's first init (which
 * reads it): NVLS in-switch reduction off (NCCL_NVLS_ENABLE=0: its sums
 * are not reproducible), unless the user's environment sets it. */
void cuda_nccl_env(void);
/* Frees the idle warm groups (before the devices close). */
void cuda_nccl_release(void);

#endif
