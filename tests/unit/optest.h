/* Op test harness: run one operator forward on given inputs, and check its
 * gradient against central finite differences. Ops run on the host, through
 * the cpu backend's kernels (backend/backend.h). The op table's cases
 * (tests/opcases/cases.c) run through it in tests/unit/opcases_test.c.
 *
 * An op under test takes ALL its node inputs explicitly (data and params:
 * FC gets X, W, b) and is given the number of outputs the spec would list;
 * hidden outputs (def->aux) are added by the harness. */
#ifndef DPM_OPTEST_H
#define DPM_OPTEST_H

#include "engine/op.h"
#include "tests/opcases/cases.h"

/* A hand-written case is an op case (tests/opcases/cases.h: op, args, n_in,
 * in[] with shape and given values f / i or random f32 from seed, n_out,
 * is_test, fuse, seed); it runs through the same one-node net as the op
 * table's cases (tests/opcases/oprun.h), on the host. */
#define OT_MAX_IN OPCASE_MAX_IN
typedef opcase_in ot_input;
typedef opcase ot_case;

/* Run the op forward. On success out[0..n_out) hold the spec-visible outputs
 * (caller calls dpm_tensor_fini on each). On failure (unknown op, bad args,
 * shape inference error) returns the status with a message in err. */
dpm_status ot_forward(const ot_case *c, dpm_tensor *out, dpm_err *err);

/* ot_forward must fail with a message containing msg: returns 1 if it does,
 * else 0 with what happened instead printed (the outputs of an unexpected
 * success are freed). */
int ot_rejects(const ot_case *c, const char *msg);
/* The same, and the status must be s. */
int ot_rejects_status(const ot_case *c, dpm_status s, const char *msg);

/* Runs c forward: its first output must have shape `shape` and hold values
 * within tol of want[0..numel(shape)) (tol 0: exactly; NaN never matches).
 * Returns 1 if so, else 0 with the failure or the differing values printed.
 * Every output is freed. */
int ot_forward_is(const ot_case *c, dpm_shape shape, const float *want, double tol);

/* Runs op `name` once, outside any net, on the given tensors: arguments from
 * `args` over the defaults (required ones must be there), in test mode if
 * is_test, outputs resized to the shapes the op's infer gives (the data of
 * an output that already had that shape is kept, so out[k] may be one of
 * in[]: the op then runs in place, as the engine binds it). The op runs
 * its CPU kernel, with a dpm_ctx of its own holding the scratch that kernel
 * asks for and a fixed rng seed, freed before returning. Errors (unknown
 * op, bad or missing arguments, shapes infer rejects, no CPU kernel,
 * DPM_NOMEM) return the status with a message in err; the op did not run. */
dpm_status ot_run_op(const char *name, const char *args, int is_test, int n_in,
                     dpm_tensor **in, int n_out, dpm_tensor **out, dpm_err *err);
/* ot_run_op on a node carrying fusion flags (DPM_FUSE_*), as the engine's
 * fusion pass sets them. */
dpm_status ot_run_fused(const char *name, const char *args, int is_test, unsigned fuse,
                        int n_in, dpm_tensor **in, int n_out, dpm_tensor **out,
                        dpm_err *err);

/* A tensor of shape s holding v[0..numel(s)) converted to s's dtype, or
 * zeros where v is NULL; the caller calls dpm_tensor_fini. Aborts when out
 * of memory. */
dpm_tensor ot_tensor(dpm_shape s, const float *v);

/* Finite-difference gradient check of every float input without no_grad.
 * The scalar checked is L = sum_k sum_j R_kj * Y_kj over the float outputs
 * (R fixed random); L is accumulated in double; each checked element x gets
 * (L(x+eps) - L(x-eps)) / 2eps, compared with the gradient the op's gradient
 * nodes produce. Inputs with more than `max_elems` elements are checked on a
 * random subset of that size. Returns the largest relative error
 * |a - n| / max(|a|, |n|, 1e-2) over all checked elements, or a negative
 * value if the op could not run or has no gradient (message printed). */
double ot_gradcheck(const ot_case *c, double eps, int max_elems);

/* The step for an op that is linear in each single input element
 * (tests/opcases/cases.h). */
#define OT_LINEAR_EPS OPCASE_LINEAR_EPS

/* dpm_shape shorthands for tests. */
dpm_shape ot_f32(int ndim, ...);
dpm_shape ot_i32(int ndim, ...);

/* Max |a - b| over n floats. */
double ot_maxdiff(const float *a, const float *b, int64_t n);

#endif
