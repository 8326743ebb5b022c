/* The gathered step: gradient accumulation (update.accumulate_steps),
 * global-norm clipping (update.clip_grad_norm) and loss scaling
 * (precision.loss_scale).
 *
 * The gradients cross to the host and back through the backend's copies
 * (engine/tensor.h), so the pass runs on any device whose step is not
 * captured as a graph (setup turns graphs off); cuda is refused until
 * tested there.
 *
 * An update is accum micro-batches. Each runs forward and backward (the
 * plan's [0, reduce_at)); the first accum-1 add their gradients into the
 * replica's own buffer (no collective: DDP no_sync); the last adds the
 * buffer into its gradients, reduces them ([reduce_at, update_at)), then,
 * on every replica alike (the reduced gradients are the same everywhere,
 * so no other collective decides anything):
 *
 *   unscale   g *= 1/scale (GradScaler's unscale_; scale 1: nothing)
 *   check     any g not finite, with a loss scale on: skip the optimizer
 *   norm      ||g||_2 over every gradient, summed in double
 *   clip      g *= min(1, max / (norm + 1e-6)), always (no branch)
 *   update    the optimizer ops ([update_at, update_end)), unless skipped
 *
 * and the rest of the step (the computed params' Broadcast, Iter) runs
 * either way: a skipped update still counts as an iteration. The loss
 * gradients' seeds (1 / (replicas x accum)) carry the scale. */
#include "train/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "ops/fill.h"

dpm_status trainer_update_setup(dpm_trainer *t, const Dpm__ModelSpec *spec,
                                dpm_err *err) {
  const Dpm__UpdateSpec *up = spec->update;
  const Dpm__PrecisionSpec *pr = spec->precision;
  t->accum = up && up->accumulate_steps > 1 ? (int)up->accumulate_steps : 1;
  t->clip = up ? up->clip_grad_norm : 0;
  t->ls_kind = dpm_spec_loss_scale(pr ? pr->loss_scale : NULL, &t->ls_scale);
  t->ls_growth_interval = pr ? pr->growth_interval : 2000;
  t->ls_max_skipped = pr ? pr->max_skipped : 1000;
  if (t->ls_kind < 0) /* a checked spec never has one */
    return dpm_errf(err, DPM_SPEC,
                    "%s: precision.loss_scale '%s' is not none, dynamic "
                    "or a positive number",
                    spec->source, pr->loss_scale);
  t->gathered = t->accum > 1 || t->clip > 0 || t->ls_kind != DPM_LOSS_SCALE_NONE;
  if (!t->gathered) return DPM_OK;
  const char *why = NULL;
  if (spec->parallel && spec->parallel->mode == DPM__PARALLEL_MODE__PARALLEL_BMUF)
    why = "parallel.mode bmuf (its replicas update on their own)";
  else if (t->dev[0].kind == DPM_DEVICE_CUDA)
    why = "cuda replicas in this build (the host pass between backward and the update "
          "is tested on cpu and fenced devices only)";
  if (why) {
    unsigned line = up && up->has_line ? up->line : pr && pr->has_line ? pr->line : 0;
    return dpm_errf(err, DPM_SPEC,
                    "%s:%u: update.accumulate_steps > 1, update.clip_grad_norm and "
                    "precision.loss_scale do not run with %s",
                    spec->source, line, why);
  }
  return DPM_OK;
}

/* The loss gradients' seeds: each ConstantFill writing LOSS_grad (with a
 * loss scale; else they stay as built). */
dpm_status trainer_update_plan(dpm_trainer *t, dpm_err *err) {
  const dpm_model *m = &t->model;
  dpm_net *net = &t->plan.step;
  t->n_seed_ops = 0;
  if (t->ls_kind == DPM_LOSS_SCALE_NONE) return DPM_OK;
  for (int l = 0; l < m->n_losses; l++) {
    char name[300];
    snprintf(name, sizeof name, "%s_grad", m->losses[l]);
    for (int i = 0; i < net->n; i++) {
      const dpm_node *nd = &net->nodes[i];
      if (nd->def->id != DPM_OP_CONSTANT_FILL || nd->n_out != 1 ||
          strcmp(nd->out[0], name))
        continue;
      if (t->n_seed_ops == (int)(sizeof t->seed_op / sizeof *t->seed_op))
        return dpm_errf(err, DPM_UNSUPPORTED, "%s: a loss scale over more than %d losses",
                        m->source, t->n_seed_ops);
      t->seed_base = (float)nd->arg[C_VALUE].f;
      t->seed_op[t->n_seed_ops++] = i;
    }
  }
  if (t->n_seed_ops != m->n_losses)
    return dpm_errf(err, DPM_INTERNAL, "%s: found %d of the %d losses' gradient seeds",
                    m->source, t->n_seed_ops, m->n_losses);
  trainer_update_seeds(t);
  return DPM_OK;
}

void trainer_update_seeds(dpm_trainer *t) {
  for (int k = 0; k < t->n_seed_ops; k++)
    t->plan.step.nodes[t->seed_op[k]].arg[C_VALUE].f = (double)t->seed_base * t->ls_scale;
}

dpm_status trainer_update_replica(dpm_trainer *t, replica *r, dpm_err *err) {
  if (!t->gathered) return DPM_OK;
  const dpm_plan *p = &t->plan;
  r->grad = calloc((size_t)p->n_grads + 1, sizeof *r->grad);
  r->grad_n = calloc((size_t)p->n_grads + 1, sizeof *r->grad_n);
  if (!r->grad || !r->grad_n) return dpm_nomem(err);
  size_t total = 0;
  for (int i = 0; i < p->n_grads; i++) {
    dpm_blob *b = dpm_ws_find(&r->ws, p->grads[i]);
    if (!b || b->t.shape.dtype != DPM_F32)
      return dpm_errf(err, DPM_INTERNAL, "gradient '%s' is not a f32 blob", p->grads[i]);
    r->grad[i] = &b->t;
    r->grad_n[i] = (size_t)dpm_shape_numel(&b->t.shape);
    total += r->grad_n[i];
  }
  if (!(r->stage = calloc(total + 1, sizeof *r->stage))) return dpm_nomem(err);
  if (t->accum > 1 && !(r->acc = calloc(total + 1, sizeof *r->acc)))
    return dpm_nomem(err);
  return DPM_OK;
}

void trainer_update_fini(replica *r) {
  free(r->grad);
  free(r->grad_n);
  free(r->stage);
  free(r->acc);
}

/* Every gradient into r->stage, back to back in plan order (gather), or
 * back from it (scatter): copies through the backend (engine/tensor.h). */
static size_t gather(const dpm_plan *p, replica *r) {
  size_t at = 0;
  for (int i = 0; i < p->n_grads; i++) {
    dpm_tensor_read(r->grad[i], r->stage + at, r->grad_n[i] * sizeof *r->stage);
    at += r->grad_n[i];
  }
  return at;
}

static void scatter(const dpm_plan *p, replica *r) {
  size_t at = 0;
  for (int i = 0; i < p->n_grads; i++) {
    dpm_tensor_write(r->grad[i], r->stage + at, r->grad_n[i] * sizeof *r->stage);
    at += r->grad_n[i];
  }
}

/* The tests' inf (dpm_trainer_options.test_inf_first) in the update about
 * to be reduced, on the replica it names. */
static int inject_inf(const dpm_trainer *t, const replica *r) {
  const dpm_trainer_options *o = &t->opt;
  return o->test_inf_first && t->iter + 1 >= o->test_inf_first &&
         t->iter + 1 < o->test_inf_first + o->test_inf_count &&
         r->rank == o->test_inf_rank;
}

/* Before the reduction: a micro-batch before the last adds its gradients
 * to r->acc (the first copies them); the last adds r->acc to its own. */
static void accumulate(const dpm_trainer *t, replica *r) {
  const dpm_plan *p = &t->plan;
  int last = t->micro + 1 == t->accum, inf = last && inject_inf(t, r);
  if (t->accum == 1 && !inf) return;
  size_t n = gather(p, r);
  float *g = r->stage, *a = r->acc;
  if (t->micro == 0 && !last)
    memcpy(a, g, n * sizeof *a);
  else if (!last)
    for (size_t k = 0; k < n; k++) a[k] += g[k];
  else if (t->accum > 1)
    for (size_t k = 0; k < n; k++) g[k] += a[k];
  if (inf && n) g[0] = INFINITY;
  if (last) scatter(p, r);
}

/* Unscale, check, norm and clip the reduced gradients (the file's comment). */
static void unscale_clip(const dpm_trainer *t, replica *r) {
  const dpm_plan *p = &t->plan;
  float inv = (float)(1.0 / t->ls_scale); /* GradScaler: in double, then fp32 */
  size_t n = gather(p, r);
  float *g = r->stage;
  double ss = 0;
  int bad = 0;
  for (size_t k = 0; k < n; k++) {
    float v = g[k] * inv;
    g[k] = v;
    bad |= !isfinite(v);
    ss += (double)v * v;
  }
  r->norm = sqrt(ss);
  r->nonfinite = bad;
  if (bad && t->ls_kind != DPM_LOSS_SCALE_NONE) return; /* the update is skipped */
  if (t->clip > 0) {
    double c = t->clip / (r->norm + 1e-6);
    float coef = (float)(c < 1 ? c : 1);
    for (size_t k = 0; k < n; k++) g[k] *= coef;
  }
  if (t->clip > 0 || inv != 1) scatter(p, r);
}

void trainer_gathered_step(dpm_trainer *t, replica *r) {
  const dpm_plan *p = &t->plan;
  dpm_exec_run_range(&r->step, 0, p->reduce_at);
  accumulate(t, r);
  if (t->micro + 1 < t->accum) return;
  dpm_exec_run_range(&r->step, p->reduce_at, p->update_at);
  if (r->ctx.status) return; /* a failed collective: the gradients are not the job's */
  unscale_clip(t, r);
  if (!(r->nonfinite && t->ls_kind != DPM_LOSS_SCALE_NONE))
    dpm_exec_run_range(&r->step, p->update_at, p->update_end);
  dpm_exec_run_range(&r->step, p->update_end, r->step.n);
}

dpm_status trainer_update_after(dpm_trainer *t, dpm_err *err) {
  if (t->ls_kind == DPM_LOSS_SCALE_NONE) return DPM_OK;
  int skipped = t->r[0].nonfinite;
  for (int d = 1; d < t->n; d++)
    if (t->r[d].nonfinite != skipped)
      return dpm_errf(err, DPM_INTERNAL,
                      "replicas 0 and %d disagree on whether the reduced gradients are "
                      "finite",
                      d);
  int dynamic = t->ls_kind == DPM_LOSS_SCALE_DYNAMIC;
  if (skipped) {
    t->ls_skipped++;
    t->ls_run++;
    if (dynamic) t->ls_scale *= 0.5, t->ls_good = 0;
  } else {
    t->ls_run = 0;
    if (dynamic && ++t->ls_good >= t->ls_growth_interval) {
      double grown = t->ls_scale * 2;
      if (isfinite((float)grown)) t->ls_scale = grown;
      t->ls_good = 0;
    }
  }
  trainer_update_seeds(t);
  if (t->ls_run >= t->ls_max_skipped)
    return dpm_errf(err, DPM_NUMERIC,
                    "%llu updates in a row skipped for gradients that are not finite "
                    "(precision.max_skipped %u; loss scale now %g, iteration %llu): the "
                    "model diverged or the loss overflows at any scale",
                    (unsigned long long)t->ls_run, t->ls_max_skipped, t->ls_scale,
                    (unsigned long long)t->iter);
  return DPM_OK;
}
