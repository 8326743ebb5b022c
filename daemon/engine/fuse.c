/* Fusion of in-place Relu and ReluGradient into their neighbours. */
#include "engine/fuse.h"

#include <string.h>

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Relu(y) -> y right after an op that writes y and can apply Relu itself. */
static int relu_after(const dpm_node *a, const dpm_node *b) {
  return (a->def->fusable & DPM_FUSE_RELU) && !(a->fuse & DPM_FUSE_RELU) &&
         b->def->id == DPM_OP_RELU && same(b->in[0], a->out[0]) &&
         same(b->out[0], a->out[0]);
}

/* ReluGradient(y, dy) -> dy right after a gradient op writing dy whose
 * input 0 is y (the Relu output) and that can mask by it. */
static int relu_grad_after(const dpm_node *a, const dpm_node *b) {
  return (a->def->fusable & DPM_FUSE_RELU_GRAD) && !(a->fuse & DPM_FUSE_RELU_GRAD) &&
         b->def->id == DPM_OP_RELU_GRADIENT && same(b->in[0], a->in[0]) &&
         same(b->in[1], a->out[0]) && same(b->out[0], a->out[0]);
}

void dpm_net_fuse(dpm_net *net, int *n_forward) {
  for (int i = 0; i + 1 < net->n; i++) {
    dpm_node *a = &net->nodes[i], *b = &net->nodes[i + 1];
    unsigned f = relu_after(a, b)        ? DPM_FUSE_RELU
                 : relu_grad_after(a, b) ? DPM_FUSE_RELU_GRAD
                                         : 0;
    if (!f || a->is_test != b->is_test) continue;
    a->fuse |= f;
    dpm_net_remove(net, i + 1);
    if (i + 1 < *n_forward) (*n_forward)--;
  }
}
