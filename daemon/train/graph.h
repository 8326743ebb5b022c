/* Step graphs: a replica's step net captured once as a graph of its
 * device (a CUDA graph; the fenced test backend's recording) and replayed
 * afterwards, so that a small model's step is one launch instead of one per
 * kernel (backend.h: capture_begin .. replay).
 *
 * The first step of a replica runs eagerly (it chooses algorithms and
 * caches them); the second is captured and replayed; later ones replay.
 * A step net is captured only where every step queues the same work with
 * the same arguments: on a backend with graphs, with no train-mode Dropout
 * (its seed changes per step and is a kernel argument). A capture that
 * cannot begin or fails turns graphs off for the replica (that step and
 * the later ones run eagerly, each exactly once) and says why once on
 * stderr.
 *
 * A graph names the buffers of its step as they were at capture. Tensors
 * of a bound step never move (the trainer binds it once); the context's
 * scratch may (dpm_ctx_reserve), so a graph is kept with the scratch it
 * named and dropped, to be captured again, when the context's differs at
 * the next step. The caller drops graphs that name anything else that
 * changed (a renewed communicator: dpm_step_graph_drop).
 *
 * Ownership: a dpm_step_graph belongs to its replica; fini frees the
 * graph. Threads: the replica's worker only (stats may be read between
 * steps by the thread driving the trainer). */
#ifndef DPM_TRAIN_GRAPH_H
#define DPM_TRAIN_GRAPH_H

#include <stdint.h>

#include "backend/device.h"
#include "engine/net.h"

/* How a replica's steps ran. */
typedef struct dpm_graph_stats {
  uint64_t eager;    /* steps run directly (warm-up, no graphs, a failed capture) */
  uint64_t captures; /* graphs captured */
  uint64_t replays;  /* steps run by replaying a graph */
  uint64_t dropped;  /* graphs dropped: their scratch moved, or the caller's drop */
} dpm_graph_stats;

typedef struct dpm_step_graph {
  int enabled;         /* graphs are possible and wanted for this replica */
  int steps;           /* steps run so far */
  void *graph;         /* the captured step, NULL before */
  const void *scratch; /* the context's scratch the graph names */
  size_t scratch_bytes;
  dpm_graph_stats stats;
} dpm_step_graph;

/* Whether step nets of `net` on dev can be captured, with `want` the spec's
 * choice (parallel.cuda_graphs). */
void dpm_step_graph_init(dpm_step_graph *g, dpm_dev *dev, const dpm_net *net, int want);
/* Runs one step on ctx (whose scratch the step's kernels use): run(arg)
 * directly, or captured and replayed, or the graph replayed. A replay's
 * failure is the device's (in err). */
dpm_status dpm_step_graph_run(dpm_step_graph *g, dpm_dev *dev, const dpm_ctx *ctx,
                              void (*run)(void *arg), void *arg, dpm_err *err);
/* Frees the graph (counted as dropped); the next step captures anew. */
void dpm_step_graph_drop(dpm_step_graph *g, dpm_dev *dev);
void dpm_step_graph_fini(dpm_step_graph *g, dpm_dev *dev);

#endif
