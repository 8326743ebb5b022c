/* Gradient memory sharing (Caffe2's memonger, parallel.optimize_gradient_memory):
 * a liveness pass over one replica's step net that gives blobs whose
 * lifetimes do not overlap the same storage.
 *
 * A blob's lifetime is [its first write, its last read or write] in op
 * order. Candidates are activations and gradients (dpm_blob_kind ACT and
 * GRAD) that the step writes before it reads them: a blob read before
 * its first write carries a value across steps and keeps its own storage,
 * as do parameters, computed parameters, optimizer state, counters, the
 * data and label, and every name in `keep` (the losses, the accuracy, what
 * a user reads by name, the gradient arena's gradients when the replicas
 * reduce them). An op that reads and writes one blob (in place) is one
 * name, so it stays one lifetime. Two blobs may overlap in memory only
 * when one's last use comes strictly before the other's first write: no op
 * ever reads bytes through one name while writing them through another.
 *
 * The blobs are laid out in one arena, largest first (ties: earlier first
 * write), each at the best-fitting offset: the smallest gap between the
 * blobs already placed whose lifetimes overlap its own that holds it, else
 * above them all (greedy by size, as TFLite's arena planner). Offsets and
 * sizes are 64-byte aligned (DPM_ALIGN).
 *
 * The result owns its strings and is immutable; the trainer allocates the
 * arena on each replica's device and makes each shared blob a view at its
 * offset (train/trainer.c). Errors: DPM_NOMEM only. */
#ifndef DPM_PARALLEL_MEMSHARE_H
#define DPM_PARALLEL_MEMSHARE_H

#include <stdint.h>

#include "engine/net.h"

typedef struct dpm_memshare {
  char **names;      /* [n] the blobs placed in the arena, in order of first write */
  uint64_t *offset;  /* [n] where each starts in the arena */
  int *first, *last; /* [n] its lifetime: net node indices, inclusive */
  int n;
  uint64_t before; /* bytes the shared blobs take apart (aligned) */
  uint64_t after;  /* bytes of the arena */
} dpm_memshare;

/* Plan sharing for net's blobs at the shapes in t, never sharing the names
 * in keep[0, n_keep). Fills *out (zeroed first). */
dpm_status dpm_memshare_plan(const dpm_net *net, const dpm_shapes *t,
                             const char *const *keep, int n_keep, dpm_memshare *out,
                             dpm_err *err);
/* The index in m->names of blob `name`, or -1 when it keeps its own storage. */
int dpm_memshare_find(const dpm_memshare *m, const char *name);
void dpm_memshare_fini(dpm_memshare *m);

#endif
