/* Workspaces: a device's named blobs (their tensors on the workspace's
 * device).
 *
 * A workspace owns its blobs and their tensors (views excepted: of a
 * gradient arena, a memory-sharing arena, a batch buffer). A child
 * workspace (parent set) resolves names it lacks in its parent, so a test
 * net can read the training workspace's parameters while keeping its own
 * activations.
 * Not thread-safe: one device worker uses a workspace at a time. */
#ifndef DPM_WORKSPACE_H
#define DPM_WORKSPACE_H

#include "engine/op.h"
#include "engine/strmap.h"

typedef struct dpm_blob {
  char *name;
  dpm_blob_kind kind;
  /* A view into memory other blobs of this workspace use at other times of
   * a step (parallel/memshare.h): its value between steps is no one's, and a
   * child workspace makes its own blob of this name instead of taking it. */
  int shared;
  dpm_tensor t;
} dpm_blob;

typedef struct dpm_workspace {
  dpm_strmap index; /* name -> position in blobs */
  dpm_blob **blobs; /* stable pointers, in creation order */
  int n, cap;
  const struct dpm_workspace *parent; /* borrowed, may be NULL */
  struct dpm_dev *dev; /* where its tensors live (engine/tensor.h); NULL: host */
} dpm_workspace;

/* The blob named `name` here or in a parent, or NULL. */
dpm_blob *dpm_ws_find(const dpm_workspace *ws, const char *name);
/* The blob named `name` with shape s: a parent's blob of that exact shape
 * (not a shared one), or one of this workspace, created or resized (data
 * kept only if it fits). DPM_NOMEM on allocation failure. */
dpm_status dpm_ws_ensure(dpm_workspace *ws, const char *name, dpm_blob_kind kind,
                         const dpm_shape *s, dpm_blob **out);
/* The blob named `name` of this workspace (created if absent) becomes a
 * view of `data`, memory of the workspace's device (engine/tensor.h:
 * dpm_tensor_view_mem), with shape s, marked shared; binding a net at
 * shape s keeps the view. DPM_NOMEM. */
dpm_status dpm_ws_view_shared(dpm_workspace *ws, const char *name, dpm_blob_kind kind,
                              const dpm_shape *s, dpm_dptr data, dpm_blob **out);
void dpm_ws_fini(dpm_workspace *ws);
/* Bytes of tensor storage this workspace holds (not its parent's). */
size_t dpm_ws_bytes(const dpm_workspace *ws);

#endif
