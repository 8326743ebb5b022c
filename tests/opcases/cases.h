/* The op cases: one table (cases.c) of ops with the inputs, arguments,
 * modes and tolerances each is checked with, which every op harness runs:
 * the CPU unit tests (tests/unit/opcases_test.c: forward and
 * finite-difference gradients through the CPU kernels) and the device
 * checks (tests/gpu/gpu_test.c: every case on cuda:0, fenced:0 or cpu:1
 * against the CPU kernels, and finite differences on the device). A case
 * added to the table is run by all of them.
 *
 * The same struct describes the hand-written cases of the unit tests
 * (tests/unit/optest.h), which give their inputs' values (f, i) instead of
 * a kind of values.
 *
 * opcase_table fills in the cases' seeds; single-threaded (the harnesses
 * are). */
#ifndef DPM_TESTS_OPCASES_CASES_H
#define DPM_TESTS_OPCASES_CASES_H

#include "engine/op.h"

/* Tolerances of the table's checks; a case may set its own FD step,
 * tolerance and elements (fd_eps, fd_tol, fd_elems). */
#define OPCASE_OP_TOL 1e-5 /* device against CPU: max |d - c| / max |c| */
#define OPCASE_FD_EPS 1e-2 /* central differences' step */
#define OPCASE_FD_TOL 5e-3 /* |analytic - numeric| / max(|a|, |n|, 1e-2) */
#define OPCASE_FD_ELEMS 48 /* elements checked per input */
/* The step for an op that is linear in each single input element (FC,
 * Conv): the central difference then has no truncation error, and a large
 * step divides the float rounding of Y (~ 2^-24 |Y| per element) down:
 * FC's checks use 3% of their 1e-3 with it, 58% with a step of 1e-2. */
#define OPCASE_LINEAR_EPS 0.25

/* How an input's values are made when the case does not give them (the
 * same on every device, from the case's seed). */
enum {
  OPCASE_RAND,   /* f32 uniform in [-1, 1) */
  OPCASE_AWAY,   /* f32 in +-[0.1, 1.1): no value near a kink at 0 (Relu) */
  OPCASE_SPACED, /* f32 distinct, 0.05 apart, shuffled: no ties within 2 eps (MaxPool) */
  OPCASE_POS,    /* f32 in [0.5, 1.5) (running variances) */
  OPCASE_LABEL,  /* i32 in [0, arg) (0 when arg is 0) */
  OPCASE_VALUE,  /* i64: arg */
};

#define OPCASE_MAX_IN 8

typedef struct opcase_in {
  dpm_shape shape;
  int vals;         /* OPCASE_*: how its values are made (f32: RAND by default) */
  int arg;          /* OPCASE_LABEL's classes, OPCASE_VALUE's value */
  const float *f;   /* given values of an f32 input (numel of shape); overrides vals */
  const int32_t *i; /* given values of an i32 input; overrides vals */
  int no_grad;      /* no gradient checked for it */
} opcase_in;

typedef struct opcase {
  const char *name; /* row label ("Conv 3x3 stride 2"), unique in the table;
                       NULL (hand-written cases): op */
  const char *op;   /* "Conv" */
  const char *args; /* "kernel=3 stride=2 pad=1", or NULL */
  int n_in;
  opcase_in in[OPCASE_MAX_IN];
  int n_out;      /* spec-visible outputs (the op's hidden ones are added) */
  int is_test;    /* test mode */
  unsigned fuse;  /* DPM_FUSE_* on the forward node (it then has no gradient) */
  unsigned gfuse; /* DPM_FUSE_* on the gradient nodes whose def takes them
                     (no finite differences: the one-node net lacks that Relu) */
  int alias[4];   /* alias[k] > 0: output k is input alias[k]-1 (in place) */
  int f64_out;    /* the outputs' bytes are doubles (combined BN sums, ops/norm.c) */
  int no_fd;      /* no finite differences: too many outputs for float32 (their
                     noise in L exceeds the tolerance) */
  double fd_eps;  /* the finite differences' step; 0: OPCASE_FD_EPS */
  double fd_tol;  /* their tolerance; 0: OPCASE_FD_TOL */
  int fd_elems;   /* elements checked per input; 0: OPCASE_FD_ELEMS */
  unsigned seed;  /* the inputs' values, the output weights, the op's rng */
} opcase;

/* The table: *n cases, each with a seed of its own (from its label: a
 * case added leaves the others' values alone). */
const opcase *opcase_table(int *n);

/* Why op `id` has no case in the table but a check of its own in the
 * device harness (fills, Dropout, collectives), or NULL. */
const char *opcase_own_check(dpm_op_id id);

/* Whether the finite-difference check applies to c (it has a gradient, no
 * fusion that the one-node net cannot reproduce, not no_fd). */
int opcase_fd_applies(const opcase *c);

/* Input k's host values into buf (dpm_shape_bytes of its shape): the given
 * ones, else made by its kind from the case's seed. */
void opcase_input(const opcase *c, int k, void *buf);

#endif
