/* Operators: the op table interface, graph nodes and executable ops.
 *
 * Every operator has one line in the op list (daemon/ops/list.h), which gives
 * it an id (dpm_op_id, DPM_OP_FC ...) and its name, and one const dpm_op_def in
 * one of daemon/ops/ (one file per family); daemon/ops/registry.c is the table
 * of defs indexed by id. A def carries the op's semantics, the same on every
 * device: arity, argument schema, parameters it creates, hidden outputs,
 * shape inference, gradient maker and the fusions its kernels implement. Its
 * code is a kernel per backend, looked up by id (dpm_kernel_def,
 * backend/backend.h; the CPU's in daemon/backend/cpu/), or the engine's
 * for the collectives (engine/collective.h). The engine names the
 * ops it emits by id; specs and predictor files name them by text
 * (dpm_op_find).
 *
 * Nodes (dpm_node) are ops over blob *names* in a net; they are validated and
 * shape-inferred before any allocation. Executable ops (dpm_op) bind a node
 * to tensors of one workspace and to the kernel of its device
 * (engine/exec.h); a kernel only ever sees shapes that its infer function
 * accepted, so kernels cannot fail.
 *
 * Threads: defs are immutable and shared. A dpm_op and its dpm_ctx belong to
 * the one device worker that runs them. */
#ifndef DPM_OP_H
#define DPM_OP_H

#include <stdint.h>

#include "engine/tensor.h"
#include "ops/list.h"

#define DPM_OP_MAX_IO 16   /* inputs or outputs of one node */
#define DPM_OP_MAX_ARGS 12 /* arguments in one op's schema */
#define DPM_ARG_MAX_LIST 8 /* elements of an ints/floats argument */

typedef struct dpm_op_def dpm_op_def;

/* Every op, in the order of the list; DPM_OP_COUNT is their number. */
typedef enum {
#define XX(id, name) DPM_OP_##id,
  DPM_OP_MAP(XX)
#undef XX
      DPM_OP_COUNT
} dpm_op_id;

/* ---- arguments ---------------------------------------------------------- */

typedef enum {
  DPM_ARG_INT,    /* int64; YAML integer literal */
  DPM_ARG_FLOAT,  /* double; integer literals accepted */
  DPM_ARG_BOOL,   /* true/false or 0/1 */
  DPM_ARG_STRING, /* with `choices`, stored as the choice index in .i too */
  DPM_ARG_INTS,   /* list of ints, at most DPM_ARG_MAX_LIST */
  DPM_ARG_FLOATS, /* list of floats */
} dpm_arg_type;

/* One entry of an op's argument schema. Tables end with {NULL}. */
typedef struct dpm_arg_def {
  const char *name;
  dpm_arg_type type;
  const char *def;     /* default, as text ("1", "0.5", "xavier"); NULL: required */
  const char *choices; /* strings only: "xavier|msra|gaussian"; NULL: any */
  double min, max;     /* numeric bounds, inclusive; both 0: unbounded */
} dpm_arg_def;

/* A parsed argument value; which fields are meaningful follows the type. */
typedef struct dpm_arg {
  int set;    /* 1 once given or defaulted */
  int64_t i;  /* INT, BOOL, STRING choice index */
  double f;   /* FLOAT (also set for INT) */
  char s[32]; /* STRING */
  int n;      /* INTS/FLOATS length */
  int64_t v[DPM_ARG_MAX_LIST];
  double fv[DPM_ARG_MAX_LIST];
} dpm_arg;

/* ---- blobs -------------------------------------------------------------- */

typedef enum {
  DPM_BLOB_ACT,      /* activations and other net-internal values */
  DPM_BLOB_DATA,     /* produced by the reader (data, label) */
  DPM_BLOB_PARAM,    /* trainable parameter (fc1_w): optimizer, checkpoint */
  DPM_BLOB_COMPUTED, /* computed parameter (bn1_rm): checkpoint, broadcast */
  DPM_BLOB_GRAD,     /* gradient of a param or activation */
  DPM_BLOB_OPTIM,    /* optimizer state (fc1_w_momentum): checkpoint */
  DPM_BLOB_COUNTER,  /* iteration counter, learning rate: checkpoint */
  DPM_BLOB_KIND_COUNT
} dpm_blob_kind;

const char *dpm_blob_kind_name(dpm_blob_kind k);

/* A parameter created by an op (Caffe2 naming: output "fc1" + "_w"). The
 * graph builder appends its blob to the node's inputs, after the data
 * inputs, and emits a fill for it into the init net. Tables end with {NULL}. */
typedef struct dpm_param_def {
  const char *suffix;    /* "_w": the blob is <first output><suffix> */
  dpm_blob_kind kind;    /* DPM_BLOB_PARAM or DPM_BLOB_COMPUTED */
  const char *init;      /* default fill: xavier|msra|gaussian|uniform|constant */
  const char *init_arg;  /* string argument overriding init ("weight_init"), or NULL */
  double value;          /* constant value, gaussian std, or uniform half-range */
  const char *value_arg; /* float argument overriding value ("weight_std"), or NULL */
  int is_weight;         /* 1: a weight (FC's, Conv's _w), which the update's
                            weight_decay applies to; 0: a bias or a norm's
                            scale/shift, decayed only with weight_decay_bias */
  const char *omit_arg;  /* bool argument that, when true, leaves this param out
                            altogether (Conv's "no_bias"), or NULL: always there.
                            Only the table's last params may have one */
} dpm_param_def;

/* ---- nodes -------------------------------------------------------------- */

typedef struct dpm_node {
  const dpm_op_def *def;
  int index;                    /* position in the spec's forward list; -1 if generated */
  unsigned line;                /* spec line (1-based), 0 if unknown */
  int n_in, n_out;              /* all inputs (data + params) / outputs (user + hidden) */
  char *in[DPM_OP_MAX_IO];      /* blob names, owned by the node; an output may */
  char *out[DPM_OP_MAX_IO];     /* be NULL (gradient not wanted) */
  dpm_arg arg[DPM_OP_MAX_ARGS]; /* by position in def->args */
  int is_test;   /* test mode: SpatialBN uses running stats, Dropout is off */
  unsigned fuse; /* DPM_FUSE_* set by the fusion pass (engine/fuse.c) */
} dpm_node;

/* Fusions the engine applies after autodiff (see engine/fuse.c). A def
 * announces what its kernels absorb in dpm_op_def.fusable. */
enum {
  /* Forward: Relu applied to out[0] by the kernel itself (Conv, FC, ...),
   * replacing a following in-place Relu on that blob. */
  DPM_FUSE_RELU = 1u << 0,
  /* Gradient: the kernel masks dX (out[0]) by in[0] > 0, replacing a
   * following in-place ReluGradient whose Relu output is in[0]
   * (MaxPoolGradient: the pool input is the Relu output). */
  DPM_FUSE_RELU_GRAD = 1u << 1,
  /* Gradient of a bf16 product: the parameters' gradients (FCGradient's
   * dW and db, out[0] and out[1]) written in f32 from the f32 sums,
   * replacing the Casts of their bf16 values to f32 that follow (the
   * gradients of the working copies' Casts, engine/precision.h). */
  DPM_FUSE_GRAD_F32 = 1u << 2,
  /* Update: the optimizer also writes its param's bf16 working copy, its
   * last output, from the updated master, replacing the forward's Cast of
   * the param (engine/fuse.h: dpm_net_fuse_working_copies). */
  DPM_FUSE_WORKING_COPY = 1u << 3,
};

/* ---- executable ops ----------------------------------------------------- */

struct dpm_comm;
struct dpm_kernel_def;

/* Per-device execution context, owned by the device worker. */
typedef struct dpm_ctx {
  void *scratch; /* 64-byte aligned, on dev; at least the net's kernels' largest */
  size_t scratch_bytes;
  uint64_t rng[2];       /* Dropout's stream; seeded per device and step */
  int device;            /* device index = rank in comm, 0 = master */
  struct dpm_dev *dev;   /* the device the ops run on (backend/device.h); NULL: host */
  struct dpm_comm *comm; /* the replicas' group; NULL on one device */
  int started;           /* allreduces started on comm and not yet waited for */
  unsigned math;         /* DPM_MATH_*: choices of kernels that have them (cuda) */
  uint64_t comm_ns;      /* time spent in collective ops, accumulated */
  uint64_t job;          /* whose work this is: the claim's owner (backend/device.h:
                            dpm_dev_claim); 0: the context's own */
  dpm_status status;     /* first failure of a kernel that can fail (collectives); */
  dpm_err err;           /* the runner checks and clears it after each net run */
} dpm_ctx;

/* dpm_ctx.math: how kernels that can trade exactness for speed may do so.
 * 0 (the default): full float32 products, any algorithm. */
enum {
  DPM_MATH_TF32 = 1u << 0,          /* matrix products may use TF32 (allow_tf32) */
  DPM_MATH_DETERMINISTIC = 1u << 1, /* only algorithms whose results repeat bitwise */
  DPM_MATH_DIRECT = 1u << 2,        /* convolutions as direct sums (GEMM forms), no FFT or
                                       Winograd transforms: the GPU checks against the CPU */
};

typedef struct dpm_op {
  const dpm_node *node;          /* args: node->arg[k] */
  dpm_tensor *in[DPM_OP_MAX_IO]; /* NULL where the node's name is NULL */
  dpm_tensor *out[DPM_OP_MAX_IO];
  int n_in, n_out;
  dpm_ctx *ctx;
  /* node->def's kernel on ctx->dev (backend/backend.h; the CPU's when dev
   * is NULL): kernel->run(op) runs the op. */
  const struct dpm_kernel_def *kernel;
  /* With kernel the CPU's low-precision wrapper (backend/cpu/lowp_run.h):
   * the op's own kernel, which it runs on f32 copies; NULL else. */
  const struct dpm_kernel_def *inner;
} dpm_op;

/* ---- gradients ---------------------------------------------------------- */

/* What a gradient maker sees: the forward node, the gradient flowing into
 * each of its outputs (NULL: none), and where each input's gradient must be
 * written (NULL: not wanted: integer input, or no parameter upstream). */
typedef struct dpm_grad {
  const dpm_node *fwd;
  const char *gout[DPM_OP_MAX_IO];
  const char *gin[DPM_OP_MAX_IO];
  void *impl; /* the autodiff pass's state */
} dpm_grad;

/* Append a gradient node running op `op` (DPM_OP_FC_GRADIENT; where its def
 * shares the forward def's argument table, arguments are copied from the
 * forward node). Input names may be forward blobs, gout or gin names; NULL
 * outputs are skipped by the kernel. Errors: DPM_NOMEM, and DPM_SPEC when a
 * name it reads was overwritten in place since the forward op ran. */
dpm_status dpm_grad_emit(dpm_grad *g, dpm_op_id op, int n_in, const char *const *in,
                         int n_out, const char *const *out, dpm_err *err);

/* The node the last dpm_grad_emit of g appended (valid until the next
 * one), for a maker that adjusts its arguments. */
dpm_node *dpm_grad_last(dpm_grad *g);

/* ---- the op definition -------------------------------------------------- */

enum {
  DPM_OP_INPLACE = 1u << 0,          /* an output may share a blob with an input of the
                                        same shape: each element is read before written */
  DPM_OP_UPDATES_COMPUTED = 1u << 1, /* train mode writes its COMPUTED param inputs */
  DPM_OP_NO_GRAD = 1u << 2,          /* cuts the graph (StopGradient, Accuracy) */
  DPM_OP_HIDDEN = 1u << 3,           /* not allowed in a spec (gradient/update ops) */
};

struct dpm_op_def {
  dpm_op_id id;                /* DPM_OP_FC: its index in the table */
  const char *name;            /* "FC", as the op list spells it */
  int min_in, max_in;          /* data inputs as written in a spec */
  int min_out, max_out;        /* outputs as written in a spec */
  const dpm_arg_def *args;     /* schema; NULL: no arguments */
  const dpm_param_def *params; /* created parameters; NULL: none */
  const char *const *aux;      /* hidden output suffixes ("_mask"), NULL-terminated */
  /* Shapes of created params from the data-input shapes; NULL if no params. */
  dpm_status (*param_shapes)(const dpm_node *n, const dpm_shape *data_in,
                             dpm_shape *param, dpm_err *err);
  /* Output shapes (all n_out, hidden ones too) from all input shapes. The
   * message in err names the problem only; the caller adds the op. */
  dpm_status (*infer)(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                      dpm_err *err);
  /* Emit gradient nodes; NULL: not differentiable. */
  dpm_status (*grad)(dpm_grad *g, dpm_err *err);
  unsigned flags;
  /* DPM_FUSE_* that every backend's kernel of this op implements. Here,
   * not in the kernels' tables: the fusion pass (engine/fuse.c) rewrites
   * the graph when the model is built, before any net is bound to a
   * device, and every replica runs that one graph; a backend that cannot
   * implement a fusion of an op leaves the op out (its kernel NULL). */
  unsigned fusable;
};

/* ---- the table (daemon/ops/registry.c) ----------------------------------
 * A static const array; the index by name is built once, under pthread_once.
 * Every call is safe from any thread, the first one included. */

/* The def of op `id` (< DPM_OP_COUNT); never NULL. */
const dpm_op_def *dpm_op_get(dpm_op_id id);
/* The def named `name` ("FC", as a spec or predictor file writes it), or
 * NULL. A binary search of an index sorted by name, built once (pthread_once)
 * by the first call of any thread. */
const dpm_op_def *dpm_op_find(const char *name);
/* All DPM_OP_COUNT defs, indexed by id, for tests that cover every op. */
const dpm_op_def *const *dpm_op_all(int *count);

/* ---- arguments (engine/op.c) --------------------------------------------
 * Setters check the schema: errors are DPM_SPEC for an unknown name, a value
 * the argument's type cannot take, one out of bounds or not among the
 * choices (DPM_NOMEM if a list's text cannot be copied). A value is converted as its text
 * would be parsed: an integer or a one-element list for a float argument, 2.0 or [2] for
 * an integer one, a number for a string one (which then fails its choices); a subnormal
 * number is refused, like its text. Doubles are stored as given, never
 * printed and parsed. On failure the argument is left unset. */

/* Number of entries in def->args (up to the {NULL} terminator). */
int dpm_op_nargs(const dpm_op_def *def);
/* Number of params node n has, its arguments set: the entries of
 * n->def->params up to the first whose omit_arg is true. They are the
 * node's last inputs. */
int dpm_node_nparams(const dpm_node *n);
/* Index of argument `name` in def->args, or -1. */
int dpm_op_arg_index(const dpm_op_def *def, const char *name);
/* Fill node->arg with every default of def->args. Fails (DPM_INTERNAL)
 * only if a default in the table itself does not parse. */
dpm_status dpm_node_set_defaults(dpm_node *node, dpm_err *err);

dpm_status dpm_node_set_int(dpm_node *node, const char *name, int64_t v, dpm_err *err);
dpm_status dpm_node_set_float(dpm_node *node, const char *name, double v, dpm_err *err);
dpm_status dpm_node_set_ints(dpm_node *node, const char *name, const int64_t *v, size_t n,
                             dpm_err *err);
dpm_status dpm_node_set_floats(dpm_node *node, const char *name, const double *v,
                               size_t n, dpm_err *err);
/* A string: the value of a string argument, the text of any other ("5",
 * "0.1", "true", "2,3"), as a spec's quoted value, a schema default or a
 * test's "name=value" gives it. */
dpm_status dpm_node_set_string(dpm_node *node, const char *name, const char *s,
                               dpm_err *err);
/* Parse "kernel=5 stride=2 pad=1" (space separated) with dpm_node_set_string:
 * for tests. */
dpm_status dpm_node_set_args(dpm_node *node, const char *kv, dpm_err *err);
/* DPM_SPEC naming the first required argument that was not given. */
dpm_status dpm_node_check_required(const dpm_node *node, dpm_err *err);

/* Small shape-inference helpers for op files. */
dpm_status dpm_expect_dtype(const dpm_shape *s, dpm_dtype t, const char *what,
                            dpm_err *err);
/* A floating type: f32, bf16 or f16 (what runs in the compute precision). */
dpm_status dpm_expect_float(const dpm_shape *s, const char *what, dpm_err *err);
dpm_status dpm_expect_ndim(const dpm_shape *s, int lo, int hi, const char *what,
                           dpm_err *err);

#endif
