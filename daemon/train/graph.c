/* Step graphs (graph.h). */
#include "train/graph.h"

#include <stdio.h>

#include "backend/cuda_load.h"

void dpm_step_graph_init(dpm_step_graph *g, dpm_dev *dev, const dpm_net *net, int want) {
  *g = (dpm_step_graph){0};
  const dpm_cuda_plugin *p = dpm_cuda_plugin_get();
  if (!want || !p || dpm_dev_backend(dev) != p->backend) return;
  for (int i = 0; i < net->n; i++)
    if (net->nodes[i].def->id == DPM_OP_DROPOUT && !net->nodes[i].is_test) return;
  g->enabled = 1;
}

dpm_status dpm_step_graph_run(dpm_step_graph *g, dpm_dev *dev, void (*run)(void *arg),
                              void *arg, dpm_err *err) {
  g->steps++;
  if (!g->graph && (!g->enabled || g->steps < 2)) { /* the first step warms up, eagerly */
    run(arg);
    return DPM_OK;
  }
  const dpm_cuda_plugin *p = dpm_cuda_plugin_get();
  void *state = dpm_dev_state(dev);
  if (g->graph) return p->replay(state, g->graph, err);
  p->capture_begin(state);
  run(arg); /* queues the step into the capture; nothing runs yet */
  dpm_err why = {0};
  if (!(g->graph = p->capture_end(state, &why))) {
    g->enabled = 0;
    fprintf(stderr, "dpm: %s; steps run without a graph\n", why.msg);
    run(arg);
    return DPM_OK;
  }
  return p->replay(state, g->graph, err);
}

void dpm_step_graph_fini(dpm_step_graph *g) {
  const dpm_cuda_plugin *p = dpm_cuda_plugin_get();
  if (g->graph && p) p->graph_free(g->graph);
  g->graph = NULL;
}
