/* Step graphs: a replica's step net captured once as a CUDA graph and
 * replayed afterwards, so that a small model's step is one launch instead
 * of one per kernel (backend/cuda/plugin.h: capture_begin .. replay).
 *
 * The first step of a replica runs eagerly (it chooses algorithms and
 * caches them); the second is captured and replayed; later ones replay.
 * A step net is captured only where every step queues the same work with
 * the same arguments: on a cuda device, with no train-mode Dropout (its
 * seed changes per step and is a kernel argument). A capture that fails
 * turns graphs off for the replica (the step then runs eagerly, as it
 * would without them) and says why once on stderr. Shapes of a bound step
 * never change (the trainer binds it once), so a graph stays valid for the
 * replica's life.
 *
 * Ownership: a dpm_step_graph belongs to its replica; fini frees the
 * graph. Threads: the replica's worker only. */
#ifndef DPM_TRAIN_GRAPH_H
#define DPM_TRAIN_GRAPH_H

#include "backend/device.h"
#include "engine/net.h"

typedef struct dpm_step_graph {
  int enabled; /* graphs are possible and wanted for this replica */
  int steps;   /* steps run so far */
  void *graph; /* the captured step, NULL before */
} dpm_step_graph;

/* Whether step nets of `net` on dev can be captured, with `want` the spec's
 * choice (parallel.cuda_graphs). */
void dpm_step_graph_init(dpm_step_graph *g, dpm_dev *dev, const dpm_net *net, int want);
/* Runs one step: run(arg) directly, or captured and replayed, or the graph
 * replayed. A replay's failure is the device's (in err). */
dpm_status dpm_step_graph_run(dpm_step_graph *g, dpm_dev *dev, void (*run)(void *arg),
                              void *arg, dpm_err *err);
void dpm_step_graph_fini(dpm_step_graph *g);

#endif
