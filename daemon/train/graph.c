/* Step graphs (graph.h). */
#include "train/graph.h"

#include <stdio.h>

void dpm_step_graph_init(dpm_step_graph *g, dpm_dev *dev, const dpm_net *net, int want) {
  *g = (dpm_step_graph){0};
  if (!want || !dpm_dev_backend(dev)->capture_begin) return;
  for (int i = 0; i < net->n; i++)
    if (net->nodes[i].def->id == DPM_OP_DROPOUT && !net->nodes[i].is_test) return;
  g->enabled = 1;
}

/* Graphs off for this replica, with the reason once; the step runs eagerly. */
static dpm_status eager_from_now(dpm_step_graph *g, const dpm_err *why,
                                 void (*run)(void *arg), void *arg) {
  g->enabled = 0;
  fprintf(stderr, "dpm: %s; steps run without a graph\n", why->msg);
  run(arg);
  g->stats.eager++;
  return DPM_OK;
}

dpm_status dpm_step_graph_run(dpm_step_graph *g, dpm_dev *dev, const dpm_ctx *ctx,
                              void (*run)(void *arg), void *arg, dpm_err *err) {
  const dpm_backend *be = dpm_dev_backend(dev);
  void *state = dpm_dev_state(dev);
  g->steps++;
  if (g->graph && (g->scratch != ctx->scratch || g->scratch_bytes != ctx->scratch_bytes))
    dpm_step_graph_drop(g, dev); /* it names a scratch the context no longer has */
  if (g->graph) {
    g->stats.replays++;
    return be->replay(state, g->graph, err);
  }
  if (!g->enabled || g->steps < 2) { /* the first step warms up, eagerly */
    run(arg);
    g->stats.eager++;
    return DPM_OK;
  }
  dpm_err why = {0};
  if (be->capture_begin(state, &why)) return eager_from_now(g, &why, run, arg);
  run(arg); /* queues the step into the capture; nothing runs yet */
  if (!(g->graph = be->capture_end(state, &why)))
    return eager_from_now(g, &why, run, arg);
  g->scratch = ctx->scratch;
  g->scratch_bytes = ctx->scratch_bytes;
  g->stats.captures++;
  g->stats.replays++;
  return be->replay(state, g->graph, err);
}

void dpm_step_graph_drop(dpm_step_graph *g, dpm_dev *dev) {
  if (!g->graph) return;
  dpm_dev_backend(dev)->graph_free(dpm_dev_state(dev), g->graph);
  g->graph = NULL;
  g->stats.dropped++;
}

void dpm_step_graph_fini(dpm_step_graph *g, dpm_dev *dev) {
  if (g->graph) dpm_dev_backend(dev)->graph_free(dpm_dev_state(dev), g->graph);
  g->graph = NULL;
}
