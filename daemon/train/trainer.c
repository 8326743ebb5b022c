/* The data-parallel trainer: lock-step jobs on the replicas' workers,
 * training steps, evaluation, accessors and destroy (create is
 * train/setup.c; sync, checkpoints and loads train/state.c, both above
 * this file: it calls neither). */
#include "train/internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/escape.h"
#include "common/idx.h"
#include "common/spec.h"
#include "engine/rng.h"
#include "predictor/onnx_export.h"
#include "predictor/predictor_extract.h"

/* A grant holds as many steps as take about GRANT_MS at the last step's
 * pace, 1 to GRANT_MAX, never more than shard 0's call has left: the
 * decision's cost (a broadcast across the shards, ~0.2-0.5 ms on loopback)
 * is spread over them, and a stop waits at most about GRANT_MS. */
#define GRANT_MS 25.0
#define GRANT_MAX 64

/* ---- lock-step jobs ------------------------------------------------------ */

void trainer_claim(dpm_trainer *t) {
  if (t->claimed++ == 0) dpm_dev_claim(t->claim_set, t->claim_n, t->claim_owner);
}

void trainer_release(dpm_trainer *t) {
  if (--t->claimed == 0) dpm_dev_release(t->claim_set, t->claim_n);
}

/* The communicator moves the bytes of device buffers: it acts as the
 * device (backend.h: enter/leave), as the collective ops do
 * (engine/collective.h). */
static dpm_status sync_blobs(replica *r, const char *const *names, int n) {
  dpm_dev_enter(r->dev);
  for (int i = 0; i < n && !r->status; i++) {
    dpm_blob *b = dpm_ws_find(&r->ws, names[i]);
    if (!b) {
      r->status = dpm_errf(&r->err, DPM_NOT_FOUND, "no blob '%s' to sync", names[i]);
      break;
    }
    r->status = dpm_comm_broadcast(r->ctx.comm, r->rank, 0, b->t.data, /* pointer only */
                                   dpm_shape_bytes(&b->t.shape), &r->err);
  }
  dpm_dev_leave(r->dev);
  return r->status;
}

/* After a failed step a dag replica may still have allreduces started (the
 * waits after the failure were skipped): wait for them all, so that none is
 * in flight when the crew's run ends (crew.h). */
static void drain(replica *r) {
  dpm_err ignored;
  dpm_dev_enter(r->dev);
  for (; r->ctx.started > 0; r->ctx.started--)
    dpm_comm_allreduce_wait(r->ctx.comm, r->ctx.device, &ignored);
  dpm_dev_leave(r->dev);
}

/* This replica's part of a global batch (rows, labels): rows gathered and
 * converted on its worker; onto the device through a copy unless its
 * memory is the host's. A device orders the copy after the work queued
 * before it. */
static void load_input(dpm_trainer *t, replica *r, const uint8_t *const *rows,
                       const int32_t *labels) {
  int per = t->model.batch;
  dpm_reader_gather(t->reader, rows, per, r->input);
  if (dpm_dev_host_visible(r->dev)) return;
  dpm_tensor_write(&r->data->t, r->input, dpm_shape_bytes(&r->data->t.shape));
  dpm_tensor_write(&r->label->t, labels, (size_t)per * sizeof(int32_t));
}

/* How long a replica done with its own last backward op spins for a peer
 * that has not reached its own: replicas a step apart differ by
 * microseconds to a few milliseconds; a peer later than this is preempted
 * or stalled, and the wait moves to the collective, which sleeps and, for
 * a stalled peer, times out (comm_timeout_ms, not twice that). */
#define HELP_WAIT_MS 20

/* The step net; with a share, the last backward op is run with the peers'
 * help, and a replica done with its own helps the others before it waits
 * for them at the reduction. */
static void run_step(dpm_trainer *t, replica *r) {
  const dpm_plan *p = &t->plan;
  if (t->gathered) { /* accumulation, clipping, a loss scale (train/update.c) */
    trainer_gathered_step(t, r);
    return;
  }
  if (!t->share) {
    dpm_exec_run(&r->step);
    return;
  }
  dpm_exec_run_range(&r->step, 0, p->shared_op);
  dpm_share_run(t->share, r->rank, &r->step.ops[p->shared_op]);
  dpm_exec_run_range(&r->step, p->shared_op + 1, p->help_at);
  dpm_share_help(t->share, r->rank, HELP_WAIT_MS);
  dpm_exec_run_range(&r->step, p->help_at, r->step.n);
}

typedef struct step_arg {
  dpm_trainer *t;
  replica *r;
} step_arg;

static void step_run(void *arg) {
  step_arg *a = arg;
  run_step(a->t, a->r);
}

/* JOB_META: the job's rank 0's meta into every replica's (each its own
 * copy: ranks' buffers do not overlap); with agreement, then the count of
 * replicas whose own meta differs, summed over the job. Host memory only. */
static void meta_job(dpm_trainer *t, replica *r) {
  r->meta = t->meta;
  r->status =
      dpm_comm_broadcast(r->ctx.comm, r->rank, 0, &r->meta, sizeof r->meta, &r->err);
  if (r->status || !t->agree) return;
  r->flag = memcmp(r->meta.word, t->meta.word, sizeof t->meta.word) != 0;
  r->status = dpm_comm_allreduce(r->ctx.comm, r->rank, &r->flag, 1, &r->err);
}

/* JOB_GO: the job's rank 0's decision and iteration, and the yields
 * asked, summed into every replica's copy. Host memory only. */
static void go_job(dpm_trainer *t, replica *r) {
  int lead = t->shard == 0 && r->rank == 0;
  r->go[GO_STOP] = lead ? t->go_stop : 0;
  r->go[GO_ITER] = lead ? (double)t->iter : 0;
  r->go[GO_STEPS] = lead ? t->go_steps : 0;
  r->go[GO_YIELD] = r->rank == 0 && t->go_yield;
  r->status = dpm_comm_allreduce_f64(r->ctx.comm, r->rank, r->go, GO_WORDS, &r->err);
}

/* One rank's part of a crew run: the job on replica `rank`, on the group
 * as it is for this run (dispatch renews a broken one between runs). */
static void run_job(void *arg, int rank) {
  dpm_trainer *t = arg;
  replica *r = &t->r[rank];
  r->ctx.comm = t->comm;
  r->status = DPM_OK;
  if (t->job == JOB_SYNC) {
    sync_blobs(r, t->sync_names, t->sync_n);
    return;
  }
  if (t->job == JOB_META) {
    meta_job(t, r);
    return;
  }
  if (t->job == JOB_GO) {
    go_job(t, r);
    return;
  }
  if (t->job == JOB_BMUF) {
    int64_t t0 = dpm_mono_ns();
    r->status = dpm_bmuf_block(&t->bm, &r->ws, r->dev, r->ctx.comm, r->rank, r->bmuf_host,
                               &r->err);
    r->ctx.comm_ns += (uint64_t)(dpm_mono_ns() - t0);
    return;
  }
  if (!r->preloaded) load_input(t, r, r->rows, r->labels);
  if (t->copies_stale) dpm_exec_run(&r->refresh); /* eager: outside any graph */
  step_arg a = {t, r};
  r->status = dpm_step_graph_run(&r->graph, r->dev, &r->ctx, step_run, &a, &r->err);
  if (r->ctx.status) {
    r->status = r->ctx.status;
    r->err = r->ctx.err;
    r->ctx.status = DPM_OK;
    dpm_step_graph_drop(&r->graph, r->dev); /* captured around a failed collective */
    drain(r);
  }
  if (r->status || dpm_dev_host_visible(r->dev)) return;
  /* A device queues the step: the next step's input goes up behind it
   * while it runs; then wait for it (a stalled collective times out here),
   * and take its failure, or the group's if one broke meanwhile. */
  if (r->ahead_rows) load_input(t, r, r->ahead_rows, r->ahead_labels);
  dpm_dev_synchronize(r->dev);
  r->status = dpm_dev_failure(r->dev, &r->err);
  if (!r->status) r->status = dpm_comm_failure(r->ctx.comm, &r->err);
}

/* "shard 1 of 2: " in front of err's message, in a job of several shards. */
dpm_status trainer_shard_prefix(const dpm_trainer *t, dpm_err *err) {
  if (t->shards > 1) dpm_err_prefix(err, "shard %d of %d: ", t->shard, t->shards);
  return err ? err->code : DPM_INTERNAL;
}

/* Run a job on every replica (the master on this thread, the others on the
 * crew's workers), one crew run; the first replica's failure is the
 * result. */
dpm_status trainer_dispatch(dpm_trainer *t, job_kind job, dpm_err *err) {
  /* A failure broke the group in an earlier run (no rank is inside it now).
   * A local group is made anew; a job's group across processes is not: its
   * peers hold their own broken ends, and a new formation needs every
   * process and a new rendezvous prefix (comm.h). */
  if (t->shards > 1 && dpm_comm_broken(t->comm)) {
    dpm_errf(err, DPM_STATE,
             "the job's communicator failed in an earlier collective; a job over "
             "several processes must be formed again (new processes or a new "
             "rendezvous prefix) and resumed from a checkpoint");
    return trainer_shard_prefix(t, err);
  }
  dpm_comm *before = t->comm;
  dpm_status s = dpm_comm_renew(&t->comm, &t->comm_cfg, err);
  if (s) return s;
  for (int d = 0; t->comm != before && d < t->n; d++)
    dpm_step_graph_drop(&t->r[d].graph, t->r[d].dev); /* names the old group */
  t->job = job;
  trainer_claim(t);
  dpm_crew_run(t->crew, run_job, t);
  trainer_release(t);
  for (int d = 0; d < t->n; d++)
    if (t->r[d].status) {
      if (err) {
        char name[32];
        *err = t->r[d].err;
        dpm_err_prefix(err, "%s: ", dpm_device_format(t->dev[d], name, sizeof name));
        trainer_shard_prefix(t, err);
      }
      return t->r[d].status;
    }
  return DPM_OK;
}

dpm_status trainer_broadcast(dpm_trainer *t, const char *const *names, int n,
                             dpm_err *err) {
  t->copies_stale = 1;
  if (!t->comm) return DPM_OK; /* one replica alone */
  t->sync_names = names;
  t->sync_n = n;
  return trainer_dispatch(t, JOB_SYNC, err);
}

/* ---- training ------------------------------------------------------------ */

/* parallel.mode bmuf: the block update on every replica (one replica
 * alone: on this thread, with no collective). */
static dpm_status bmuf_block(dpm_trainer *t, dpm_err *err) {
  t->copies_stale = 1;
  if (t->comm) return trainer_dispatch(t, JOB_BMUF, err);
  replica *r = &t->r[0];
  return dpm_bmuf_block(&t->bm, &r->ws, r->dev, NULL, 0, r->bmuf_host, err);
}

/* Replica d's rows of the global batch become its data (gathered and
 * converted by its worker, load_input) and its labels: views of the batch
 * (no copy) when the device's memory is the host's. Dropout's stream is
 * seeded from (seed, iteration, the replica's rank in the job), so a
 * resumed run draws what an uninterrupted one would, and the rank that
 * reads given rows draws alike whether the job has one shard of 2n
 * replicas or two of n. */
static void feed(dpm_trainer *t, const dpm_batch *b, const dpm_batch *ahead,
                 int preloaded) {
  int per = t->model.batch;
  for (int d = 0; d < t->n; d++) {
    replica *r = &t->r[d];
    r->rows = b->rows + (size_t)d * per;
    r->labels = b->label + (size_t)d * per;
    r->preloaded = preloaded;
    r->ahead_rows = ahead ? ahead->rows + (size_t)d * per : NULL;
    r->ahead_labels = ahead ? ahead->label + (size_t)d * per : NULL;
    if (dpm_dev_host_visible(r->dev)) { /* views: no copy (eval may re-point them) */
      dpm_tensor_view(&r->data->t, &r->data->t.shape, r->input);
      dpm_tensor_view(&r->label->t, &r->label->t.shape, (int32_t *)r->labels);
    }
    uint64_t s = t->seed ^ 0x5eedull;
    s = dpm_splitmix64(&s) ^ t->iter;
    if (t->accum > 1) s = dpm_splitmix64(&s) ^ (uint64_t)t->micro; /* its micro-batch */
    s = dpm_splitmix64(&s) ^ (uint64_t)(t->shard * t->n + d);
    dpm_rng_seed(r->ctx.rng, s);
  }
}

/* A scalar (loss, accuracy, learning rate) read back from a device. */
double trainer_scalar(const dpm_blob *b) {
  float v;
  dpm_tensor_read(&b->t, &v, sizeof v);
  return v;
}

/* The losses summed and the accuracies of the replicas' last step, into
 * loss[0] and loss[1] (added to them). */
static void add_losses(dpm_trainer *t, double loss[2]) {
  trainer_claim(t); /* the reads queue copies on the devices */
  for (int d = 0; d < t->n; d++) {
    for (int l = 0; l < t->model.n_losses; l++)
      loss[0] += trainer_scalar(t->r[d].losses[l]);
    if (t->r[d].accuracy) loss[1] += trainer_scalar(t->r[d].accuracy);
  }
  trainer_release(t);
}

/* The last update's figures; sum: the loss and accuracy of its micro-batches
 * before the last (update.accumulate_steps; else zeros), averaged in. */
static void stats(dpm_trainer *t, dpm_step_stats *st, double sum[2]) {
  add_losses(t, sum);
  trainer_claim(t);
  st->lr = trainer_scalar(t->r[0].lr);
  trainer_release(t);
  st->iter = t->iter;
  st->loss = sum[0] / ((double)t->n * t->accum);
  st->accuracy = t->r[0].accuracy ? sum[1] / ((double)t->n * t->accum) : NAN;
  st->grad_norm = t->gathered ? t->r[0].norm : NAN;
  st->loss_scale = t->ls_scale;
  st->skipped = t->gathered && t->ls_kind != DPM_LOSS_SCALE_NONE && t->r[0].nonfinite;
  st->skipped_total = t->ls_skipped;
  st->samples_skipped = dpm_reader_skipped(t->reader);
}

/* Steps in a grant: about GRANT_MS at a pace of step_ms, 1..GRANT_MAX,
 * at most left. */
static int grant_steps(int left, double step_ms) {
  double g = step_ms > 0 ? GRANT_MS / step_ms : 1;
  int k = g >= GRANT_MAX ? GRANT_MAX : g < 1 ? 1 : (int)g;
  return k < left ? k : left;
}

/* The job's decision before its next grant of steps (a job of several
 * shards): rank 0 gives `stop` and `steps` (shard 0's; the others' are
 * ignored) and its iteration, every shard whether it asks to yield; *why
 * and *granted are what every shard received: rank 0's stop, else
 * DPM_STOP_YIELD when a shard asked (a grant outside 1..GRANT_MAX counts
 * as 1). A shard at another iteration than rank 0 fails (DPM_STATE): it
 * would read other examples. */
static dpm_status decide(dpm_trainer *t, int stop, int steps, int *why, int *granted,
                         dpm_err *err) {
  t->go_stop = t->shard == 0 ? stop : 0;
  t->go_steps = t->shard == 0 ? steps : 0;
  t->go_yield = atomic_load(&t->yield);
  dpm_status s = trainer_dispatch(t, JOB_GO, err);
  if (s) return s;
  const double *g = t->r[0].go;
  if (g[GO_ITER] != (double)t->iter) {
    dpm_errf(err, DPM_STATE, "this shard is at iteration %llu, the job's rank 0 at %.0f",
             (unsigned long long)t->iter, g[GO_ITER]);
    return trainer_shard_prefix(t, err);
  }
  *why = g[GO_STOP] >= 1    ? (g[GO_STOP] > INT_MAX ? INT_MAX : (int)g[GO_STOP])
         : g[GO_YIELD] >= 1 ? DPM_STOP_YIELD
                            : 0;
  *granted = g[GO_STEPS] >= 1 && g[GO_STEPS] <= GRANT_MAX ? (int)g[GO_STEPS] : 1;
  return DPM_OK;
}

dpm_status dpm_trainer_stop(dpm_trainer *t, int why, dpm_err *err) {
  if (why <= 0) return dpm_errf(err, DPM_INVALID, "a stop needs a reason above 0");
  if (t->shards <= 1) return DPM_OK;
  if (t->shard != 0) {
    dpm_errf(err, DPM_INVALID, "only shard 0 stops the job");
    return trainer_shard_prefix(t, err);
  }
  if (t->granted) { /* shard 0 never leaves a step call inside a grant */
    dpm_errf(err, DPM_INTERNAL, "a stop inside a grant of %d more steps", t->granted);
    return trainer_shard_prefix(t, err);
  }
  int got, steps;
  return decide(t, why, 0, &got, &steps, err);
}

dpm_status dpm_trainer_step(dpm_trainer *t, int n, dpm_step_stats *last, dpm_err *err) {
  dpm_step_stats st = {0};
  atomic_store(&t->interrupted, 0);
  int preloaded = 0; /* the last step uploaded this one's input (run_job) */
  for (int i = 0; i < n; i++) {
    /* shard 0 finishes the job's grant first (the others are running it) */
    if (atomic_load(&t->interrupted) && (t->shard != 0 || !t->granted)) break;
    if (t->shards > 1 && !t->granted) { /* the job's decision first: no batch taken */
      int why = 0, granted = 0;
      if (decide(t, 0, grant_steps(n - i, t->last_step_ms), &why, &granted, err))
        return err->code;
      if (why) {
        st.iter = t->iter;
        st.stopped = why;
        break;
      }
      t->granted = granted;
    }
    double t0 = dpm_mono_ns() / 1e6, sum[2] = {0, 0}, input_ms = 0;
    uint64_t comm0 = t->r[0].ctx.comm_ns;
    /* an update: accum micro-batches (train/update.c), the last reduces and
       updates; nothing stops between them */
    for (t->micro = 0; t->micro < t->accum; t->micro++) {
      const dpm_batch *b;
      double w0 = dpm_mono_ns() / 1e6;
      if (dpm_reader_next(t->reader, &b, err)) return err->code;
      input_ms += dpm_mono_ns() / 1e6 - w0;
      if (!t->stepped) t->phase_ms[DPM_PHASE_FIRST_BATCH] = dpm_mono_ns() / 1e6 - t0;
      /* on devices: the next step's, uploaded by this one */
      const dpm_batch *ahead = NULL;
      if (t->pipeline && t->accum == 1 && i + 1 < n &&
          dpm_reader_peek(t->reader, &ahead, err))
        return err->code;
      feed(t, b, ahead, preloaded);
      if (trainer_dispatch(t, JOB_STEP, err)) return err->code;
      t->copies_stale = 0;
      preloaded = ahead != NULL;
      if (t->micro + 1 < t->accum) add_losses(t, sum);
    }
    t->micro = 0;
    t->iter++;
    if (t->gathered && trainer_update_after(t, err)) return err->code;
    /* bmuf: the block update follows a block's last step, in the same call */
    if (t->bm.on && t->iter % (uint64_t)t->bm.local_steps == 0 && bmuf_block(t, err))
      return err->code;
    stats(t, &st, sum);
    st.steps_done = i + 1;
    st.step_ms = dpm_mono_ns() / 1e6 - t0;
    if (!t->stepped) {
      t->phase_ms[DPM_PHASE_FIRST_STEP] = st.step_ms - t->phase_ms[DPM_PHASE_FIRST_BATCH];
      t->stepped = 1;
    }
    t->last_step_ms = st.step_ms;
    if (t->granted) t->granted--;
    st.comm_ms = (double)(t->r[0].ctx.comm_ns - comm0) / 1e6;
    st.input_ms = input_ms;
    if (!isfinite(st.loss))
      return dpm_errf(err, DPM_NUMERIC, "loss is %g at iteration %llu", st.loss,
                      (unsigned long long)t->iter);
    if (t->opt.progress && t->opt.progress_every && t->iter % t->opt.progress_every == 0)
      t->opt.progress(t->opt.progress_arg, &st);
  }
  if (last) *last = st;
  return DPM_OK;
}

void dpm_trainer_interrupt(dpm_trainer *t) { atomic_store(&t->interrupted, 1); }

void dpm_trainer_yield(dpm_trainer *t, int on) { atomic_store(&t->yield, on != 0); }

/* ---- evaluation ---------------------------------------------------------- */

/* The eval reader's config (made at the first eval). */
dpm_reader_config trainer_eval_config(const dpm_trainer *t) {
  return (dpm_reader_config){.kind = t->eval_kind,
                             .images = t->eval_images,
                             .labels = t->eval_labels,
                             .fs = t->opt.fs,
                             .cache = t->opt.data_cache,
                             .scale = t->scale,
                             .batch = t->eval_batch,
                             .num_shards = 1,
                             .prefetch = 2,
                             .num_classes = t->num_classes,
                             .image = t->eval_image};
}

dpm_status dpm_trainer_eval(dpm_trainer *t, double *loss, double *accuracy,
                            dpm_err *err) {
  const dpm_model *m = &t->model;
  replica *r = &t->r[0];
  if (!t->has_eval) return dpm_errf(err, DPM_STATE, "%s: no eval data", m->source);
  if (!t->eval_reader) {
    dpm_reader_config rc = trainer_eval_config(t);
    if (dpm_reader_create(&rc, &t->eval_reader, err)) return err->code;
  } else if (dpm_reader_rewind(t->eval_reader)) {
    return dpm_errf(err, DPM_INTERNAL, "cannot rewind the eval reader");
  }
  dpm_workspace ws = {.parent = &r->ws, .dev = r->dev};
  dpm_exec x = {0};
  double sum_loss = 0, sum_acc = 0;
  int64_t seen = 0;
  int shaped = -1;
  dpm_status s = DPM_OK;
  t->eval_ctx.dev = r->dev;
  t->eval_ctx.math = t->math;
  t->eval_ctx.job = t->claim_owner;
  trainer_claim(t);
  for (;;) {
    const dpm_batch *b;
    if ((s = dpm_reader_next(t->eval_reader, &b, err)) || !b) break;
    if (b->n != shaped) {
      dpm_shapes shapes = {0};
      s = dpm_model_test_shapes(m, b->n, &shapes, err);
      if (!s) s = dpm_exec_bind(&x, &m->test, &shapes, &ws, &t->eval_ctx, err);
      dpm_shapes_fini(&shapes);
      if (s) break;
      shaped = b->n;
    }
    dpm_blob *data = dpm_ws_find(&ws, m->data), *label = dpm_ws_find(&ws, m->label);
    if (dpm_dev_host_visible(r->dev)) { /* views of the batch: no copy */
      dpm_tensor_view(&data->t, &data->t.shape, b->data);
      dpm_tensor_view(&label->t, &label->t.shape, b->label);
    } else {
      dpm_tensor_write(&data->t, b->data, dpm_shape_bytes(&data->t.shape));
      dpm_tensor_write(&label->t, b->label, (size_t)b->n * sizeof(int32_t));
    }
    dpm_exec_run(&x);
    for (int l = 0; l < m->n_losses; l++)
      sum_loss += trainer_scalar(dpm_ws_find(&ws, m->losses[l])) * b->n;
    if (m->accuracy) sum_acc += trainer_scalar(dpm_ws_find(&ws, m->accuracy)) * b->n;
    seen += b->n;
  }
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
  trainer_release(t);
  /* the master's data and label may now view the eval reader's buffers:
     the next step re-points them */
  if (s) return s;
  *loss = seen ? sum_loss / seen : NAN;
  *accuracy = seen && m->accuracy ? sum_acc / seen : NAN;
  return DPM_OK;
}

/* ---- accessors ----------------------------------------------------------- */

const dpm_tensor *dpm_trainer_blob(const dpm_trainer *t, const char *name) {
  int d = 0;
  const char *slash = strrchr(name, '/');
  if (slash) { /* "cpu_1/fc1_w": a replica's scope (common/device.h) */
    d = -1;
    for (int k = 0; k < t->n && d < 0; k++) {
      char scope[32];
      size_t n = strlen(dpm_device_scope(t->dev[k], scope, sizeof scope));
      if ((size_t)(slash - name) == n && !memcmp(name, scope, n)) d = k;
    }
    if (d < 0) return NULL;
    name = slash + 1;
  }
  const dpm_blob *b = dpm_ws_find(&t->r[d].ws, name);
  return b ? &b->t : NULL;
}

const dpm_device *dpm_trainer_device(const dpm_trainer *t, int d) { return &t->dev[d]; }

dpm_status dpm_trainer_read_blob(const dpm_trainer *t, const char *name, dpm_tensor *out,
                                 dpm_err *err) {
  const dpm_tensor *x = dpm_trainer_blob(t, name);
  if (!x || !x->data) /* pointer only */
    return dpm_errf(err, DPM_NOT_FOUND, "no blob '%s'", name);
  const char *slash = strrchr(name, '/');
  if (dpm_memshare_find(&t->memshare, slash ? slash + 1 : name) >= 0)
    return dpm_errf(err, DPM_NOT_FOUND,
                    "blob '%s' shares its memory with other blobs during a step "
                    "(parallel.optimize_gradient_memory): name it in parallel.keep_blobs "
                    "to read it",
                    name);
  if (dpm_tensor_resize(out, &x->shape)) return dpm_nomem(err);
  dpm_trainer *claimer = (dpm_trainer *)t; /* the claim is bookkeeping, not state */
  trainer_claim(claimer);
  dpm_tensor_read(x, out->data, dpm_shape_bytes(&x->shape));
  trainer_release(claimer);
  return DPM_OK;
}

const char *const dpm_trainer_phase_names[DPM_TRAINER_PHASES] = {
    "validate", "graph",     "data",        "alloc",     "init",
    "comm",     "broadcast", "first_batch", "first_step"};

const double *dpm_trainer_phases(const dpm_trainer *t) { return t->phase_ms; }

int dpm_trainer_devices(const dpm_trainer *t) { return t->n; }
const char *dpm_trainer_comm_backend(const dpm_trainer *t) {
  return dpm_comm_backend(t->comm);
}
const dpm_trainer_memory *dpm_trainer_memory_of(const dpm_trainer *t) {
  return &t->memory;
}
int dpm_trainer_image_reader(const dpm_trainer *t) {
  return dpm_reader_decodes(t->reader);
}

int64_t dpm_trainer_steps_per_epoch(const dpm_trainer *t) {
  return dpm_reader_size(t->reader) /
         ((int64_t)t->model.batch * t->n * t->shards * t->accum);
}
int dpm_trainer_batch(const dpm_trainer *t) { return t->model.batch; }
int dpm_trainer_accumulate_steps(const dpm_trainer *t) { return t->accum; }
uint64_t dpm_trainer_iter(const dpm_trainer *t) { return t->iter; }
const dpm_model *dpm_trainer_model(const dpm_trainer *t) { return &t->model; }
const dpm_plan *dpm_trainer_plan(const dpm_trainer *t) { return &t->plan; }
dpm_graph_stats dpm_trainer_graph_stats(const dpm_trainer *t, int d) {
  return t->r[d].graph.stats;
}
dpm_workspace *dpm_trainer_workspace(dpm_trainer *t, int d) {
  t->copies_stale = 1; /* the caller may write the masters */
  return &t->r[d].ws;
}

void dpm_trainer_destroy(dpm_trainer *t) {
  if (!t) return;
  dpm_crew_destroy(t->own_crew); /* a borrowed crew stays */
  dpm_comm_destroy(t->comm);
  dpm_share_destroy(t->share);
  trainer_claim(t); /* freeing device memory queues work on the devices */
  for (int d = 0; t->r && d < t->n; d++) {
    replica *r = &t->r[d];
    dpm_step_graph_fini(&r->graph, r->dev);
    dpm_exec_fini(&r->step);
    dpm_exec_fini(&r->refresh);
    dpm_ws_fini(&r->ws);
    if (!dpm_dptr_null(r->arena)) dpm_dev_free(r->dev, r->arena, r->arena_bytes);
    if (!dpm_dptr_null(r->shared)) dpm_dev_free(r->dev, r->shared, r->shared_got);
    dpm_free(r->input);
    dpm_free(r->bmuf_host);
    dpm_ctx_fini(&r->ctx);
    free(r->losses);
    trainer_update_fini(r);
  }
  dpm_ctx_fini(&t->eval_ctx);
  trainer_release(t);
  free(t->claim_set);
  free(t->r);
  dpm_reader_destroy(t->reader);
  dpm_reader_destroy(t->eval_reader);
  dpm_bmuf_fini(&t->bm);
  dpm_plan_fini(&t->plan);
  dpm_memshare_fini(&t->memshare);
  dpm_model_fini(&t->model);
  free(t->eval_images);
  free(t->eval_labels);
  for (int i = 0; i < t->n_eval_paths; i++) free(t->eval_paths[i]);
  free(t->eval_paths);
  free(t->dev);
  free(t->streams);
  free(t->devs);
  free(t);
}

dpm_status dpm_trainer_export_predictor(dpm_trainer *t, const char *const *inputs,
                                        int n_in, const char *const *outputs, int n_out,
                                        const dpm_fs *fs, const char *dir, dpm_err *err) {
  return dpm_trainer_export_format(t, "dpm", inputs, n_in, outputs, n_out, fs, dir, err);
}

/* Predictor formats and their writers. */
static const struct {
  const char *name;
  dpm_status (*write)(const dpm_model *m, const dpm_workspace *ws,
                      const char *const *inputs, int n_in, const char *const *outputs,
                      int n_out, const dpm_fs *fs, const char *dir, dpm_err *err);
} predictor_formats[] = {
    {"dpm", dpm_predictor_export},
    {"onnx", dpm_onnx_export},
};

dpm_status dpm_trainer_export_format(dpm_trainer *t, const char *format,
                                     const char *const *inputs, int n_in,
                                     const char *const *outputs, int n_out,
                                     const dpm_fs *fs, const char *dir, dpm_err *err) {
  if (!format) format = "dpm";
  for (size_t f = 0; f < sizeof predictor_formats / sizeof *predictor_formats; f++)
    if (!strcmp(format, predictor_formats[f].name)) {
      trainer_claim(t); /* the parameters are read from the master's device */
      dpm_status s = predictor_formats[f].write(&t->model, &t->r[0].ws, inputs, n_in,
                                                outputs, n_out, fs, dir, err);
      trainer_release(t);
      return s;
    }
  char b[80];
  return dpm_errf(err, DPM_UNSUPPORTED,
                  "predictor format '%s': dpm writes 'dpm' or 'onnx'",
                  dpm_escape(format, b, sizeof b));
}
