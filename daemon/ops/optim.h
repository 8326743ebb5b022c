/* The positions of the optimizer ops' arguments and the learning-rate
 * policies by choice index: their semantics (ops/optim.c) define the
 * tables, their CPU kernels (backend/cpu/optim.c) read them. */
#ifndef DPM_OPS_OPTIM_H
#define DPM_OPS_OPTIM_H

/* SGD: (param, grad, lr) -> param; p -= lr * g'. */
enum { SGD_WD };

/* MomentumSGD: (param, grad, momentum, lr) -> (param, momentum). Caffe2's
 * MomentumSGDUpdate: the buffer holds lr-scaled steps, m = mu*m + lr*g';
 * plain: p -= m; Nesterov: p -= (1 + mu) * m - mu * m_old. */
enum { MOM_MU, MOM_NESTEROV, MOM_WD };

/* Adam: (param, grad, m1, m2, lr, iter) -> (param, m1, m2). Caffe2's form:
 * with t = iter + 1,
 * p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m1 / (sqrt(m2) + epsilon). */
enum { ADAM_B1, ADAM_B2, ADAM_EPS, ADAM_WD };

/* LearningRate: iter -> lr. Caffe's policies, as a factor of base_lr at
 * iteration `it` (completed steps), then a linear warm-up (Goyal et al.):
 * for it < warmup_iters the rate is further scaled by
 * start_multiplier + (1 - start_multiplier) * it / warmup_iters (Caffe2's
 * linearWarmup). Step 1 runs at it = 0, so at base_lr * start_multiplier:
 * the op's default is Caffe2's, 0; the engine passes the spec's (0.1 unless
 * given, proto/dpm.proto). */
enum {
  LR_BASE,
  LR_POLICY,
  LR_STEPSIZE,
  LR_GAMMA,
  LR_POWER,
  LR_STEPVALUES,
  LR_MAX_ITER,
  LR_WARMUP_ITERS,
  LR_START_MULTIPLIER,
  LR_FINAL_MULTIPLIER,
};
/* The `policy` choices, in the order of POL_* (the choice index). */
#define LR_POLICIES "fixed|step|multistep|exp|inv|poly|cosine"
enum {
  POL_FIXED,
  POL_STEP,
  POL_MULTISTEP,
  POL_EXP,
  POL_INV,
  POL_POLY,
  POL_COSINE,
  POL_COUNT
};

#endif
