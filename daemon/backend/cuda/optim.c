/* The cuda kernels of the optimizer ops (ops/optim.c): SGD, MomentumSGD,
 * Adam, LearningRate, Iter; the arithmetic is in optim_kernels.cu (optim_launch.h),
 * the same as the CPU's (backend/cpu/optim.c).
 *
 * SGD, MomentumSGD and Adam have run_many: the executor hands them every
 * run of consecutive update ops (one per parameter, engine/exec.c), and
 * one fused launch updates dozens of parameters at a time. Descriptors
 * (pointers, counts, arguments) are built on the stack, BATCH at a time,
 * and travel by value in the kernel's arguments: a step allocates nothing
 * and reads nothing back. The learning rate and Adam's iteration counter
 * stay on the device, read by the kernels. An update whose output is not
 * its input's tensor (a test) first copies the input there on the stream,
 * as the CPU does, and then updates in place. An op that writes its
 * param's bf16 working copy (DPM_FUSE_WORKING_COPY) has the kernel round
 * the updated param into it in the same pass.
 *
 * Threads: an op runs on its device's worker (cuda.h). Errors: launch
 * failures are the device's sticky error (CUDA_OK). */
#include "ops/optim.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/optim_launch.h"

/* Descriptors built per launcher call. */
#define BATCH 64

/* The float buffer of output k, holding input `from`'s values. */
static float *updated(cuda_dev *dev, const dpm_op *op, int k, int from) {
  float *o = op->out[k]->data;
  const float *i = op->in[from]->data;
  size_t bytes = cuda_bytes(op->in[from]);
  if (o != i && bytes)
    CUDA_OK(dev, cudaMemcpyAsync(o, i, bytes, cudaMemcpyDeviceToDevice, dev->compute));
  return o;
}

/* The param's bf16 working copy, the op's last output, where the op writes
 * one (DPM_FUSE_WORKING_COPY), else NULL: the kernels round into it. */
static uint16_t *working_copy(const dpm_op *op) {
  return (op->node->fuse & DPM_FUSE_WORKING_COPY) ? op->out[op->n_out - 1]->data : NULL;
}

/* ---- SGD ----------------------------------------------------------------- */

static optim_sgd_t sgd_desc(cuda_dev *dev, const dpm_op *op) {
  return (optim_sgd_t){
      .p = updated(dev, op, 0, 0),
      .g = op->in[1]->data,
      .lr = op->in[2]->data,
      .wc = working_copy(op),
      .n = cuda_numel(op->in[0]),
      .wd = (float)op->node->arg[SGD_WD].f,
  };
}

static optim_momentum_t momentum_desc(cuda_dev *dev, const dpm_op *op) {
  const dpm_arg *a = op->node->arg;
  return (optim_momentum_t){
      .p = updated(dev, op, 0, 0),
      .g = op->in[1]->data,
      .m = updated(dev, op, 1, 2),
      .lr = op->in[3]->data,
      .wc = working_copy(op),
      .n = cuda_numel(op->in[0]),
      .mu = (float)a[MOM_MU].f,
      .wd = (float)a[MOM_WD].f,
      .nesterov = a[MOM_NESTEROV].i != 0,
  };
}

static optim_adam_t adam_desc(cuda_dev *dev, const dpm_op *op) {
  const dpm_arg *a = op->node->arg;
  return (optim_adam_t){
      .p = updated(dev, op, 0, 0),
      .g = op->in[1]->data,
      .m1 = updated(dev, op, 1, 2),
      .m2 = updated(dev, op, 2, 3),
      .lr = op->in[4]->data,
      .iter = op->in[5]->data,
      .wc = working_copy(op),
      .n = cuda_numel(op->in[0]),
      .b1 = a[ADAM_B1].f,
      .b2 = a[ADAM_B2].f,
      .eps = (float)a[ADAM_EPS].f,
      .wd = (float)a[ADAM_WD].f,
  };
}

/* run_many for one descriptor type: ops[0..n) in batches of BATCH; a batch
 * ends early where the device changes (never within one net). */
#define DEFINE_MANY(name, type, desc_fn, launch_fn)                                      \
  static void name##_many(const dpm_op *ops, int n) {                                    \
    type t[BATCH];                                                                       \
    for (int i = 0; i < n;) {                                                            \
      cuda_dev *dev = cuda_dev_of(&ops[i]);                                              \
      int m = 0;                                                                         \
      while (i < n && m < BATCH && (m == 0 || ops[i].ctx->dev == ops[i - 1].ctx->dev))   \
        t[m++] = desc_fn(dev, &ops[i++]);                                                \
      CUDA_OK(dev, launch_fn(t, m, dev->compute));                                       \
    }                                                                                    \
  }                                                                                      \
  static void name##_run(const dpm_op *op) { name##_many(op, 1); }

DEFINE_MANY(sgd, optim_sgd_t, sgd_desc, optim_sgd_launch)
DEFINE_MANY(momentum, optim_momentum_t, momentum_desc, optim_momentum_launch)
DEFINE_MANY(adam, optim_adam_t, adam_desc, optim_adam_launch)

/* ---- LearningRate and Iter ------------------------------------------------ */

static void lr_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_arg *a = op->node->arg;
  optim_lr_args la = {
      .base = a[LR_BASE].f,
      .policy = (int)a[LR_POLICY].i,
      .stepsize = a[LR_STEPSIZE].f,
      .gamma = a[LR_GAMMA].f,
      .power = a[LR_POWER].f,
      .max_iter = a[LR_MAX_ITER].f,
      .n_steps = a[LR_STEPVALUES].n,
      .warmup_iters = a[LR_WARMUP_ITERS].i,
      .start_multiplier = a[LR_START_MULTIPLIER].f,
      .final_multiplier = a[LR_FINAL_MULTIPLIER].f,
  };
  _Static_assert(sizeof la.steps / sizeof *la.steps == DPM_ARG_MAX_LIST, "stepvalues");
  for (int k = 0; k < la.n_steps; k++) la.steps[k] = a[LR_STEPVALUES].fv[k];
  CUDA_OK(dev, optim_lr_launch(op->in[0]->data, op->out[0]->data, &la, dev->compute));
}

static void iter_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  CUDA_OK(dev, optim_iter_launch(op->in[0]->data, op->out[0]->data, dev->compute));
}

/* ---- table --------------------------------------------------------------- */

const dpm_kernel_def DPM_CUDA_KERNEL(SGD) = {.run = sgd_run, .run_many = sgd_many};
const dpm_kernel_def DPM_CUDA_KERNEL(MOMENTUM_SGD) = {.run = momentum_run,
                                                      .run_many = momentum_many};
const dpm_kernel_def DPM_CUDA_KERNEL(ADAM) = {.run = adam_run, .run_many = adam_many};
const dpm_kernel_def DPM_CUDA_KERNEL(LEARNING_RATE) = {.run = lr_run};
const dpm_kernel_def DPM_CUDA_KERNEL(ITER) = {.run = iter_run};
