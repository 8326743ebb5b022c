/* One op case (cases.h) run as a one-node net on one device: inputs,
 * outputs and gradients bound in a workspace on the device, as the engine
 * binds them, every device tensor crossing through the backend's copies;
 * the gradient net made by the engine's autodiff; and the central
 * finite-difference check of that gradient. The device harness
 * (tests/gpu/gpu_test.c) and the CPU unit harness (tests/unit/optest.c)
 * both run cases through it.
 *
 * dev NULL is the host: the cpu backend's kernels on host memory. Math is
 * direct (dpm_ctx.math DPM_MATH_DIRECT: no TF32, convolutions as direct
 * sums). Single-threaded; a process out of memory exits 2. */
#ifndef DPM_TESTS_OPCASES_OPRUN_H
#define DPM_TESTS_OPCASES_OPRUN_H

#include "backend/device.h"
#include "engine/exec.h"
#include "engine/workspace.h"
#include "tests/opcases/cases.h"

/* A case's one-node net on one device. */
typedef struct oprun {
  dpm_net net, grad;
  dpm_shapes shapes;
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec fx, gx;
  dpm_node *node;
  char in_name[OPCASE_MAX_IN][16], out_name[DPM_OP_MAX_IO][48];
  char gout_name[DPM_OP_MAX_IO][32], gin_name[OPCASE_MAX_IN][32];
  const char *gout[DPM_OP_MAX_IO], *gin[DPM_OP_MAX_IO]; /* NULL: none */
  void *host[OPCASE_MAX_IN];                            /* the inputs' values */
  float *r[DPM_OP_MAX_IO]; /* the fixed output weights R of L = sum R.Y */
  int has_grad;            /* a gradient net was made and run */
} oprun;

/* What one device computed for a case: the visible outputs (and, for an
 * op that updates its inputs' running statistics, those inputs after),
 * then the checked inputs' gradients, as host copies. */
typedef struct oprun_result {
  int n;
  char what[2 * DPM_OP_MAX_IO][32];
  dpm_shape shape[2 * DPM_OP_MAX_IO];
  void *data[2 * DPM_OP_MAX_IO];
  int ops[2 * DPM_OP_COUNT]; /* op ids run (forward node, gradient nodes) */
  int n_ops;
} oprun_result;

/* Builds c's one-node net on dev, binds it and makes the inputs' host
 * values. Errors (unknown op, bad arguments, shapes the op rejects, no
 * kernel on dev) return the status with a message in err; call
 * oprun_fini either way. */
dpm_status oprun_setup(oprun *h, const opcase *c, dpm_dev *dev, dpm_err *err);
/* Writes every input from its host values (an in-place op changed them),
 * then runs the forward net with the case's rng seed. */
void oprun_forward(oprun *h, const opcase *c);
/* After a forward: the gradient net of the node (when the op has one and
 * no forward fusion) with the float outputs' gradients set to R, run. */
dpm_status oprun_backward(oprun *h, const opcase *c, dpm_err *err);
void oprun_fini(oprun *h);

/* Runs c forward and backward on dev into *r (result_fini it either way).
 * With keep_h the net stays there for oprun_gradcheck (oprun_fini it
 * after); without, or on failure, it is freed. Errors as oprun_setup's,
 * and a device's failure inside a kernel. */
dpm_status oprun_case(const opcase *c, dpm_dev *dev, oprun_result *r, oprun *keep_h,
                      dpm_err *err);
void oprun_result_fini(oprun_result *r);

/* Central differences with step eps on h's device against the gradients
 * it computed (r: oprun_case's result on h): up to max_elems elements of
 * each checked input (a random subset of larger ones). Returns the worst
 * |analytic - numeric| / max(|a|, |n|, 1e-2); elements beyond `tol` are
 * printed. */
double oprun_gradcheck(oprun *h, const opcase *c, const oprun_result *r, double eps,
                       int max_elems, double tol);

/* oprun_gradcheck with the case's own step, tolerance and elements (or the
 * table's defaults); its tolerance in *tol. */
double oprun_gradcheck_case(oprun *h, const opcase *c, const oprun_result *r,
                            double *tol);

/* A host copy of a bound tensor (free it). */
void *oprun_read(const dpm_tensor *t);

#endif
