/* Nets: ordered lists of nodes over blob names, and shape tables.
 *
 * A net is built (dpm_net_add), then shape-inferred as a whole
 * (dpm_net_infer) before anything is allocated; inference is where every
 * arity, argument, dtype and shape error surfaces, named by op index, type
 * and spec line. Nets and shape tables own their strings. Not thread-safe;
 * once built, a net is read-only and may be shared by device workers. */
#ifndef DPM_NET_H
#define DPM_NET_H

#include "engine/op.h"
#include "engine/strmap.h"

typedef struct dpm_net {
  dpm_node *nodes;
  int n, cap;
} dpm_net;

/* Append a node running def over the given names (copied; NULL outputs
 * allowed), with every argument at its default and index/line -1/0.
 * Returns the new node (valid until the next append) or NULL on NOMEM. */
dpm_node *dpm_net_add(dpm_net *net, const dpm_op_def *def, int n_in,
                      const char *const *in, int n_out, const char *const *out,
                      dpm_err *err);
/* Append a copy of src (names, arguments, position, mode). */
dpm_node *dpm_net_add_copy(dpm_net *net, const dpm_node *src, dpm_err *err);
void dpm_net_fini(dpm_net *net);
/* Remove node i (freeing its names); later nodes move down by one. */
void dpm_net_remove(dpm_net *net, int i);

/* "spec.yaml:12: op #3 (FC)"; gradient and generated nodes name the spec op
 * they derive from ("... op #3 (FC), gradient FCGradient"). */
char *dpm_node_where(const dpm_node *n, const char *source, char *buf, size_t len);

/* What inference knows about one blob. */
typedef struct dpm_blobinfo {
  char *name;
  dpm_shape shape;
  dpm_blob_kind kind;
  int version; /* number of writes seen so far (0 = declared, not written) */
} dpm_blobinfo;

/* Shape table: blob name -> dpm_blobinfo, in insertion order. */
typedef struct dpm_shapes {
  dpm_strmap index;
  dpm_blobinfo *v;
  int n, cap;
} dpm_shapes;

/* The blob's info, or NULL. The pointer is valid until the next set. */
dpm_blobinfo *dpm_shapes_get(const dpm_shapes *t, const char *name);
/* Declare or update a blob; DPM_NOMEM on allocation failure. */
dpm_status dpm_shapes_set(dpm_shapes *t, const char *name, const dpm_shape *s,
                          dpm_blob_kind kind);
/* Forget a blob (absent: nothing); later blobs move down by one.
 * DPM_NOMEM (the table then unchanged). */
dpm_status dpm_shapes_remove(dpm_shapes *t, const char *name);
void dpm_shapes_fini(dpm_shapes *t);

/* Shape-infer every node in order. Each input must be in t (declared, or
 * written by an earlier node); each output is added (kind ACT unless `kind`
 * >= 0 overrides, or the blob already has a kind) or must keep its shape.
 * Errors name the node: "spec.yaml:12: op #3 (FC): input 'fc0' is not
 * defined". Device-independent: what the kernels need (scratch) is the
 * backend's, sized when a net is bound (engine/exec.h). */
dpm_status dpm_net_infer(const dpm_net *net, dpm_shapes *t, int kind, const char *source,
                         dpm_err *err);

/* dpm_net_infer for one node. */
dpm_status dpm_node_infer(const dpm_node *n, dpm_shapes *t, int kind, const char *source,
                          dpm_err *err);

/* Shapes of node n's inputs from t (NULL name: zero shape). Returns the
 * index of the first undefined input, or -1. */
int dpm_node_input_shapes(const dpm_node *n, const dpm_shapes *t, dpm_shape *in);

#endif
