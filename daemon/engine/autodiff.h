/* Reverse-mode autodiff over a forward net.
 *
 * From the losses, gradient nodes are appended in reverse op order. Each
 * loss is seeded with `loss_scale` (ConstantFill into "<loss>_grad"): this is
 * where the framework applies 1/(devices x shards), so a spec never changes
 * with the device count. Gradients of a blob read by several ops are summed
 * (Sum into "<blob>_grad"). Only blobs that depend on a parameter get
 * gradients: integer blobs, the data, StopGradient/NO_GRAD ops cut the graph.
 * An op written in place over a value that another op's gradient still needs
 * is rejected, naming both ops. */
#ifndef DPM_AUTODIFF_H
#define DPM_AUTODIFF_H

#include "engine/net.h"

/* fwd: the forward net, already inferred into t (params declared there with
 * kind DPM_BLOB_PARAM). Appends gradient nodes to out and infers them into t
 * (kind DPM_BLOB_GRAD). For each parameter blob of t, in order, the name of
 * its gradient is stored in param_grad[i] (indexed like t->v; NULL if the
 * parameter does not affect any loss); the caller frees each and the array.
 * Errors: DPM_SPEC (unknown loss, loss not depending on a parameter,
 * in-place conflict), DPM_NOMEM. */
dpm_status dpm_autodiff(const dpm_net *fwd, dpm_shapes *t, const char *const *losses,
                        int n_losses, float loss_scale, const char *source, dpm_net *out,
                        char ***param_grad, dpm_err *err);

/* The gradient nodes of one node alone, for the op test harness: gout and
 * gin as in dpm_grad (n_out and n_in entries). */
dpm_status dpm_autodiff_node(const dpm_node *fwd, const char *const *gout,
                             const char *const *gin, dpm_net *out, dpm_err *err);

#endif
