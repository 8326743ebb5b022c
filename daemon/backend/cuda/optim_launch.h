/* Launchers of the optimizer kernels (optim_kernels.cu), called by optim.c: fused
 * multi-tensor updates (one launch updates up to a few dozen parameters,
 * their descriptors passed by value in the kernel's arguments, so a step
 * allocates nothing), and the one-thread LearningRate and Iter kernels.
 *
 * Every update is in place: p, m, m1, m2 are read and written; the
 * learning rate (lr) and Adam's iteration counter (iter) are read on the
 * device. Where wc is not NULL the updated p is also rounded into it, the
 * param's bf16 working copy (DPM_FUSE_WORKING_COPY), in the same pass. Formulas and rounding are the CPU kernels' (backend/cpu/optim.c),
 * each float operation rounded on its own (no fused multiply-add), so the
 * results match the CPU's bit for bit wherever the CPU does not contract.
 *
 * Each launcher queues its kernels on `stream` and returns the first launch
 * error (cudaSuccess if none; nothing is launched for no elements). Threads:
 * any; a stream is used by one thread at a time. */
#ifndef DPM_BACKEND_CUDA_OPTIM_LAUNCH_H
#define DPM_BACKEND_CUDA_OPTIM_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SGD on one parameter: p -= lr * (g + wd * p). */
typedef struct {
  float *p;
  const float *g;
  const float *lr; /* f32 scalar on the device */
  uint16_t *wc;    /* bf16 working copy of p, or NULL */
  int64_t n;
  float wd;
} optim_sgd_t;

/* MomentumSGD (Caffe2's MomentumSGDUpdate): m = mu*m + lr*(g + wd*p);
 * plain: p -= m; Nesterov: p -= (1 + mu)*m - mu*m_old. */
typedef struct {
  float *p;
  const float *g;
  float *m;
  const float *lr;
  uint16_t *wc;
  int64_t n;
  float mu, wd;
  int nesterov;
} optim_momentum_t;

/* Adam (Caffe2's form): with t = iter + 1, step = lr * sqrt(1 - b2^t) /
 * (1 - b1^t) computed in double and rounded to float; g' = g + wd*p;
 * m1 = b1*m1 + (1-b1)*g'; m2 = b2*m2 + (1-b2)*g'*g';
 * p -= step*m1 / (sqrt(m2) + eps). */
typedef struct {
  float *p;
  const float *g;
  float *m1, *m2;
  const float *lr;
  const int64_t *iter; /* i64 scalar on the device: completed steps */
  uint16_t *wc;
  int64_t n;
  double b1, b2; /* as the op's arguments; the element updates use them as float */
  float eps, wd;
} optim_adam_t;

cudaError_t optim_sgd_launch(const optim_sgd_t *t, int n, cudaStream_t stream);
cudaError_t optim_momentum_launch(const optim_momentum_t *t, int n, cudaStream_t stream);
cudaError_t optim_adam_launch(const optim_adam_t *t, int n, cudaStream_t stream);

/* The LearningRate policies (ops/optim.h POL_*), computed in double as the
 * CPU does: rate = base * policy(it) (then the warm-up), it the i64 at
 * iter; *lr = (float)rate. */
typedef struct {
  double base;
  int policy; /* POL_FIXED .. POL_COSINE */
  double stepsize, gamma, power, max_iter;
  int n_steps;     /* multistep: stepvalues[0..n_steps) */
  double steps[8]; /* DPM_ARG_MAX_LIST */
  int64_t warmup_iters;
  double start_multiplier;
  double final_multiplier; /* cosine */
} optim_lr_args;

cudaError_t optim_lr_launch(const int64_t *iter, float *lr, const optim_lr_args *a,
                            cudaStream_t stream);
/* *out = *in + 1 (in and out may be one). */
cudaError_t optim_iter_launch(const int64_t *in, int64_t *out, cudaStream_t stream);

/* y[0..n) = bits, elements of `size` bytes (4 or 8): ConstantFill on the
 * device (fill.c), where the step's loss-gradient seed is made, so that a
 * captured step holds a kernel rather than a host copy. */
cudaError_t optim_const_launch(void *y, uint64_t bits, int size, int64_t n,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
