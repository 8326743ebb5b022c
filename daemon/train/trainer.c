/* The data-parallel trainer: replicas, lock-step workers, reader slices,
 * sync, checkpoints and evaluation. */
#include "train/trainer.h"

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda_load.h"
#include "backend/device.h"
#include "comm/comm.h"
#include "common/device.h"
#include "common/escape.h"
#include "common/validate.h"
#include "engine/exec.h"
#include "engine/onnx_export.h"
#include "engine/predictor_extract.h"
#include "engine/rng.h"
#include "io/checkpoint.h"
#include "common/idx.h"
#include "io/reader.h"
#include "ops/collective.h"
#include "parallel/bmuf.h"
#include "parallel/crew.h"
#include "parallel/memshare.h"
#include "parallel/share.h"
#include "parallel/sync_bn.h"
#include "train/graph.h"
#include "common/spec.h"

typedef enum { JOB_STEP, JOB_SYNC, JOB_META, JOB_GO, JOB_BMUF } job_kind;

/* What a JOB_META run broadcasts from the job's rank 0 (shard 0's master)
 * to every replica of every shard: at create, what the shards must agree
 * on (the AGREE_ words); at load, shard 0's verdict on the checkpoint (the
 * LOAD_ words and msg). Host memory, one copy per replica. */
typedef struct meta {
  uint64_t word[6];
  char msg[sizeof ((dpm_err *)0)->msg]; /* load: shard 0's error message */
} meta;
enum { AGREE_MODEL, AGREE_PLAN, AGREE_DEVICES, AGREE_SHARDS, AGREE_EXAMPLES };
enum { LOAD_STATUS, LOAD_ITER, LOAD_EPOCH, LOAD_INDEX, LOAD_NOTHING };
/* What a JOB_GO run broadcasts from the job's rank 0 before each grant of
 * steps of a job of several shards: its decision (0: step; else stop, with
 * the reason rank 0's driver gave to dpm_trainer_stop), its iteration,
 * which every shard must share, and how many steps the grant holds. 24
 * bytes per grant. */
enum { GO_STOP, GO_ITER, GO_STEPS, GO_WORDS };
/* A grant holds as many steps as take about GRANT_MS at the last step's
 * pace, 1 to GRANT_MAX, never more than shard 0's call has left: the
 * decision's cost (a broadcast across the shards, ~0.2-0.5 ms on loopback)
 * is spread over them, and a stop waits at most about GRANT_MS. */
#define GRANT_MS 25.0
#define GRANT_MAX 64

typedef struct replica {
  int rank;
  dpm_dev *dev; /* its device (backend/device.h) */
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec step;
  dpm_step_graph graph; /* the step as a CUDA graph, where it can be one */
  void *arena; /* the gradients, back to back in plan order, on dev */
  size_t arena_bytes;
  void *shared; /* memory sharing's arena (parallel/memshare.h), on dev; NULL: none */
  size_t shared_got;
  dpm_blob *data, *label, *lr, *accuracy, **losses;
  /* This replica's rows as floats: gathered at the step's start from the
   * examples at `rows`, in place into the data blob's memory when the device
   * is host memory, else into this host staging and copied to the device;
   * the labels likewise (a view of the batch's, or copied from `labels`). */
  float *input;
  const uint8_t *const *rows;
  const int32_t *labels;
  /* On a device (not host memory): the next step's rows and labels, which
   * this step uploads once its own work is queued, so that their gather
   * and copy overlap the step on the device (NULL: none); and whether this
   * step's were uploaded so by the last one. */
  const uint8_t *const *ahead_rows;
  const int32_t *ahead_labels;
  int preloaded;
  meta meta;  /* JOB_META: the job's rank 0's, once the run is over */
  float flag; /* JOB_META with agreement: replicas that disagree, summed */
  uint64_t go[GO_WORDS]; /* JOB_GO: the job's rank 0's decision, once the run is over */
  float *bmuf_host; /* parallel.mode bmuf: host copies for the block update */
  dpm_status status; /* of the last job */
  dpm_err err;
} replica;

struct dpm_trainer {
  double phase_ms[DPM_TRAINER_PHASES]; /* dpm_trainer_phases */
  int stepped;                         /* a step has run (first_* are set) */
  dpm_model model;
  dpm_plan plan;
  dpm_memshare memshare; /* parallel.optimize_gradient_memory: which blobs share one
                            arena, where (n 0: none) */
  dpm_trainer_options opt;
  dpm_reader *reader, *eval_reader;
  dpm_crew *crew; /* the replicas' workers: opt.crew or own_crew */
  dpm_crew *own_crew;
  dpm_comm *comm;       /* the replicas' group, every shard's (NULL: one replica alone) */
  dpm_comm_config comm_cfg; /* how it was made: a broken local one is made anew */
  int staged;       /* the group is comm_cfg's wrapped in a staged one (comm.h): gloo
                       on host copies of the replicas' device buffers */
  int n;            /* replicas (of this shard) */
  int shard, shards; /* this process's shard of the job, and the job's shards (1: alone) */
  dpm_device *dev;  /* [n] their devices, parsed once */
  unsigned math;    /* dpm_ctx.math of every replica (parallel.allow_tf32, deterministic) */
  int graphs;       /* parallel.cuda_graphs */
  int pipeline;     /* the replicas' memory is not the host's: a step uploads the next
                       one's input while it runs (dpm_trainer_step) */
  void **streams;   /* [n] the replicas' CUDA streams, for a nccl group; else NULL */
  dpm_share *share; /* replicas take parts of each other's last backward op */
  replica *r;
  job_kind job;                  /* of the crew run in flight */
  const char *const *sync_names; /* JOB_SYNC: what to broadcast */
  int sync_n;
  meta meta;  /* JOB_META: this shard's own values (rank 0's are broadcast) */
  int agree;  /* JOB_META: also sum the replicas that disagree with rank 0 */
  int go_stop;  /* JOB_GO at shard 0: the decision to broadcast (0: step) */
  int go_steps; /* ... and the steps it grants */
  int granted;  /* steps of the job's current grant this shard has yet to run */
  double last_step_ms; /* the last step's wall time (shard 0 sizes grants by it) */
  atomic_int interrupted;
  uint64_t iter, seed, spec_hash;
  dpm_trainer_memory memory; /* counted at create */
  int eval_batch;
  char *eval_images, *eval_labels;
  double scale;
  dpm_bmuf bm;            /* parallel.mode bmuf (parallel/bmuf.h) */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

const char *const dpm_trainer_phase_names[DPM_TRAINER_PHASES] = {
    "validate", "graph", "data", "alloc", "init", "comm", "broadcast", "first_batch",
    "first_step"};

const double *dpm_trainer_phases(const dpm_trainer *t) { return t->phase_ms; }

/* Adds the time since *t0 to phase p and restarts *t0. */
static void lap(dpm_trainer *t, int p, double *t0) {
  double now = now_ms();
  t->phase_ms[p] += now - *t0;
  *t0 = now;
}

static dpm_status nomem(dpm_err *err) {
  return dpm_errf(err, DPM_NOMEM, "out of memory");
}

/* ---- lock-step jobs ------------------------------------------------------ */

/* The communicator moves the bytes of device buffers: it acts as the
 * device (backend.h: enter/leave), as the collective kernels do. */
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
  r->status = dpm_comm_broadcast(r->ctx.comm, r->rank, 0, &r->meta, sizeof r->meta,
                                 &r->err);
  if (r->status || !t->agree) return;
  r->flag = memcmp(r->meta.word, t->meta.word, sizeof t->meta.word) != 0;
  r->status = dpm_comm_allreduce(r->ctx.comm, r->rank, &r->flag, 1, &r->err);
}

/* JOB_GO: the job's rank 0's decision and iteration into every replica's
 * (its own copy). Host memory only. */
static void go_job(dpm_trainer *t, replica *r) {
  r->go[GO_STOP] = (uint64_t)t->go_stop;
  r->go[GO_ITER] = t->iter;
  r->go[GO_STEPS] = (uint64_t)t->go_steps;
  r->status = dpm_comm_broadcast(r->ctx.comm, r->rank, 0, r->go, sizeof r->go, &r->err);
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->status = dpm_bmuf_block(&t->bm, &r->ws, r->dev, r->ctx.comm, r->rank, r->bmuf_host,
                               &r->err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->ctx.comm_ns +=
        (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000L + t1.tv_nsec - t0.tv_nsec);
    return;
  }
  if (!r->preloaded) load_input(t, r, r->rows, r->labels);
  step_arg a = {t, r};
  r->status = dpm_step_graph_run(&r->graph, r->dev, step_run, &a, &r->err);
  if (r->ctx.status) {
    r->status = r->ctx.status;
    r->err = r->ctx.err;
    r->ctx.status = DPM_OK;
    dpm_step_graph_fini(&r->graph); /* captured around a failed collective */
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
static dpm_status shard_prefix(const dpm_trainer *t, dpm_err *err) {
  if (t->shards > 1) dpm_err_prefix(err, "shard %d of %d: ", t->shard, t->shards);
  return err ? err->code : DPM_INTERNAL;
}

/* A new group for the replicas from t->comm_cfg: as it says, or, for a
 * staged group, wrapped around the replicas' devices. */
static dpm_status new_comm(dpm_trainer *t, dpm_comm **out, dpm_err *err) {
  if (!t->staged) return dpm_comm_create(&t->comm_cfg, out, err);
  *out = NULL;
  dpm_dev **devs = malloc((size_t)t->n * sizeof *devs);
  if (!devs) return nomem(err);
  for (int d = 0; d < t->n; d++) devs[d] = t->r[d].dev;
  dpm_comm *inner;
  dpm_status s = dpm_comm_create(&t->comm_cfg, &inner, err);
  if (!s) s = dpm_comm_staged_create(inner, devs, t->comm_cfg.rank_base, out, err);
  free(devs);
  return s;
}

/* dpm_comm_renew for the trainer's group, made the way new_comm makes it. */
static dpm_status renew_comm(dpm_trainer *t, dpm_err *err) {
  if (!t->staged) return dpm_comm_renew(&t->comm, &t->comm_cfg, err);
  if (!t->comm || !dpm_comm_broken(t->comm)) return DPM_OK;
  dpm_comm *fresh;
  dpm_status s = new_comm(t, &fresh, err);
  if (s) return s;
  dpm_comm_destroy(t->comm);
  t->comm = fresh;
  return DPM_OK;
}

/* Run a job on every replica (the master on this thread, the others on the
 * crew's workers), one crew run; the first replica's failure is the
 * result. */
static dpm_status dispatch(dpm_trainer *t, job_kind job, dpm_err *err) {
  /* A failure broke the group in an earlier run (no rank is inside it now).
   * A local group is made anew; a job's group across processes is not: its
   * peers hold their own broken ends, and a new formation needs every
   * process and a new rendezvous prefix (comm.h). */
  if (t->shards > 1 && dpm_comm_broken(t->comm)) {
    dpm_errf(err, DPM_STATE,
             "the job's communicator failed in an earlier collective; a job over "
             "several processes must be formed again (new processes or a new "
             "rendezvous prefix) and resumed from a checkpoint");
    return shard_prefix(t, err);
  }
  dpm_comm *before = t->comm;
  dpm_status s = renew_comm(t, err);
  if (s) return s;
  for (int d = 0; t->comm != before && d < t->n; d++)
    dpm_step_graph_fini(&t->r[d].graph); /* captured with the old group's collectives */
  t->job = job;
  dpm_crew_run(t->crew, run_job, t);
  for (int d = 0; d < t->n; d++)
    if (t->r[d].status) {
      if (err) {
        char name[32];
        *err = t->r[d].err;
        dpm_err_prefix(err, "%s: ", dpm_device_format(t->dev[d], name, sizeof name));
        shard_prefix(t, err);
      }
      return t->r[d].status;
    }
  return DPM_OK;
}

static dpm_status broadcast_from_master(dpm_trainer *t, const char *const *names, int n,
                                        dpm_err *err) {
  if (!t->comm) return DPM_OK; /* one replica alone */
  t->sync_names = names;
  t->sync_n = n;
  return dispatch(t, JOB_SYNC, err);
}

/* ---- setup --------------------------------------------------------------- */

static dpm_status input_shape(const dpm_fs *fs, const Dpm__InputSpec *in, int64_t chw[3],
                              dpm_err *err) {
  if (in->reader == DPM__READER_KIND__READER_IDX) {
    dpm_idx x;
    if (dpm_idx_peek(fs, in->images, 3, &x, err)) return err->code;
    chw[0] = 1;
    chw[1] = x.dim[1];
    chw[2] = x.dim[2];
    return DPM_OK;
  }
  for (int i = 0; i < 3; i++) chw[i] = in->n_shape == 3 ? in->shape[i] : (i ? 28 : 1);
  return DPM_OK;
}

static dpm_reader_config reader_config(const dpm_trainer *t, const Dpm__InputSpec *in,
                                       int batch) {
  return (dpm_reader_config){
      .kind = in->reader == DPM__READER_KIND__READER_IDX ? DPM_READER_IDX
                                                         : DPM_READER_SYNTHETIC,
      .images = in->images,
      .labels = in->labels,
      .fs = t->opt.fs,
      .cache = t->opt.data_cache,
      .scale = in->scale,
      .shuffle = in->shuffle,
      .seed = in->seed,
      .batch = batch,
      .shard_id = (int)in->shard_id,
      .num_shards = (int)in->num_shards,
      .prefetch = (int)in->prefetch,
      .repeat = 1,
      .num_examples = (int)in->num_examples,
      .channels = in->n_shape == 3 ? (int)in->shape[0] : 1,
      .height = in->n_shape == 3 ? (int)in->shape[1] : 28,
      .width = in->n_shape == 3 ? (int)in->shape[2] : 28,
      .num_classes = (int)in->num_classes,
  };
}

/* The replicas' devices, parsed once: the options' (a count of one kind),
 * else the spec's (canonical: common/validate.h checked them), else cpu:0;
 * each of a kind this build has a backend for. */
static dpm_status parse_devices(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  const Dpm__ParallelSpec *p = spec->parallel;
  int named = p ? (int)p->n_devices : 0;
  t->n = t->opt.devices > 0 ? t->opt.devices : named ? named : 1;
  if (!(t->dev = calloc((size_t)t->n, sizeof *t->dev))) return nomem(err);
  for (int i = 0; i < t->n; i++) {
    char name[32];
    t->dev[i] = (dpm_device){t->opt.devices > 0 ? t->opt.kind : DPM_DEVICE_CPU, i};
    if (t->opt.devices <= 0 && named && dpm_device_parse(p->devices[i], &t->dev[i]))
      return dpm_errf(err, DPM_SPEC, "device '%s' is not a device", p->devices[i]);
    if (!dpm_backend_of(t->dev[i].kind))
      return dpm_errf(err, DPM_UNSUPPORTED, "%s: device %s: this build has no %s backend",
                      spec->source, dpm_device_format(t->dev[i], name, sizeof name),
                      dpm_device_kind_name(t->dev[i].kind));
  }
  return DPM_OK;
}

/* The backend of every replica's device, or NULL when their kinds differ. */
static const dpm_backend *replicas_backend(const dpm_trainer *t) {
  const dpm_backend *be = dpm_backend_of(t->dev[0].kind);
  for (int i = 1; i < t->n; i++)
    if (dpm_backend_of(t->dev[i].kind) != be) return NULL;
  return be;
}

/* Lay the gradients out back to back (plan order), so a bucket is one
 * contiguous reduction. */
static dpm_status grad_arena(replica *r, const dpm_plan *p, dpm_err *err) {
  size_t total = 0;
  for (int i = 0; i < p->n_grads; i++)
    total +=
        (dpm_shape_bytes(&dpm_ws_find(&r->ws, p->grads[i])->t.shape) + DPM_ALIGN - 1) /
        DPM_ALIGN * DPM_ALIGN;
  if (!(r->arena = dpm_dev_alloc(r->dev, total, &r->arena_bytes))) return nomem(err);
  char *at = r->arena;
  for (int i = 0; i < p->n_grads; i++) {
    dpm_tensor *g = &dpm_ws_find(&r->ws, p->grads[i])->t;
    dpm_tensor_view(g, &g->shape, at);
    at += (dpm_shape_bytes(&g->shape) + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
  }
  return DPM_OK;
}

/* Ranks in the job's group: every shard's replicas. */
static int ranks(const dpm_trainer *t) { return t->n * t->shards; }

/* parallel.optimize_gradient_memory: which blobs of the step share one arena
 * (parallel/memshare.h). Never shared: the data and label, the losses and
 * accuracy the trainer reads, parallel.keep_blobs, and with several ranks
 * the gradients, which the arena lays out back to back for the reduction. */
static dpm_status plan_sharing(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  const dpm_model *m = &t->model;
  const Dpm__ParallelSpec *par = spec->parallel;
  int most = 3 + m->n_losses + (int)par->n_keep_blobs + t->plan.n_grads, n = 0;
  const char **keep = calloc((size_t)most, sizeof *keep);
  if (!keep) return nomem(err);
  keep[n++] = m->data;
  keep[n++] = m->label;
  if (m->accuracy) keep[n++] = m->accuracy;
  for (int i = 0; i < m->n_losses; i++) keep[n++] = m->losses[i];
  for (size_t i = 0; i < par->n_keep_blobs; i++) {
    if (!dpm_shapes_get(&m->shapes, par->keep_blobs[i])) {
      free(keep);
      return dpm_errf(err, DPM_SPEC, "%s: parallel.keep_blobs: the model has no blob '%s'",
                      spec->source, par->keep_blobs[i]);
    }
    keep[n++] = par->keep_blobs[i];
  }
  for (int i = 0; ranks(t) > 1 && i < t->plan.n_grads; i++) keep[n++] = t->plan.grads[i];
  dpm_status s = dpm_memshare_plan(&t->plan.step, &m->shapes, keep, n, &t->memshare, err);
  free(keep);
  return s;
}

/* Memory sharing's arena on the replica's device, and each shared blob a
 * view at its offset, before the step is bound (binding keeps a view of
 * the bound shape). */
static dpm_status share_arena(dpm_trainer *t, replica *r, dpm_err *err) {
  const dpm_memshare *ms = &t->memshare;
  if (!ms->n) return DPM_OK;
  if (!(r->shared = dpm_dev_alloc(r->dev, ms->after, &r->shared_got))) return nomem(err);
  for (int i = 0; i < ms->n; i++) {
    const dpm_blobinfo *info = dpm_shapes_get(&t->model.shapes, ms->names[i]);
    dpm_blob *b;
    if (dpm_ws_view_shared(&r->ws, ms->names[i], info->kind, &info->shape,
                           (char *)r->shared + ms->offset[i], &b))
      return nomem(err);
  }
  return DPM_OK;
}

static dpm_status replica_init(dpm_trainer *t, replica *r, dpm_err *err) {
  dpm_model *m = &t->model;
  dpm_status s = dpm_dev_get(t->dev[r->rank], &r->dev, err);
  if (s) return s;
  r->ws.dev = r->ctx.dev = r->dev;
  r->ctx.device = r->rank; /* comm: set per crew run */
  r->ctx.math = t->math;
  dpm_exec init = {0};
  s = dpm_exec_bind(&init, &m->init, &m->shapes, &r->ws, &r->ctx, err);
  if (!s && r->rank == 0) { /* the others get the broadcast */
    double t0 = now_ms();
    dpm_exec_run(&init);
    lap(t, DPM_PHASE_INIT, &t0);
  }
  dpm_exec_fini(&init);
  if (!s) s = share_arena(t, r, err);
  if (!s) s = dpm_exec_bind(&r->step, &t->plan.step, &m->shapes, &r->ws, &r->ctx, err);
  if (!s) dpm_step_graph_init(&r->graph, r->dev, &t->plan.step, t->graphs);
  if (!s && ranks(t) > 1) s = grad_arena(r, &t->plan, err);
  if (!s) s = dpm_bmuf_replica(&t->bm, &r->ws, r->rank == 0, &r->bmuf_host, err);
  if (s) return s;
  r->data = dpm_ws_find(&r->ws, m->data);
  if (!(r->input = dpm_alloc(dpm_shape_bytes(&r->data->t.shape)))) return nomem(err);
  r->label = dpm_ws_find(&r->ws, m->label);
  r->lr = dpm_ws_find(&r->ws, "lr");
  r->accuracy = m->accuracy ? dpm_ws_find(&r->ws, m->accuracy) : NULL;
  if (!(r->losses = calloc((size_t)m->n_losses, sizeof *r->losses))) return nomem(err);
  for (int i = 0; i < m->n_losses; i++) r->losses[i] = dpm_ws_find(&r->ws, m->losses[i]);
  return DPM_OK;
}

/* The CPUs this process may use, as the main thread found them at load:
 * crew runs pin their callers, so a thread's own set later may be one CPU. */
static cpu_set_t process_cpus;
static int process_cpus_known;

__attribute__((constructor)) static void remember_process_cpus(void) {
  process_cpus_known = !sched_getaffinity(0, sizeof process_cpus, &process_cpus);
}

void dpm_device_cores(const dpm_device *devs, int n, int *cores) {
  int allowed[CPU_SETSIZE], n_allowed = 0;
  for (int c = 0; process_cpus_known && c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &process_cpus)) allowed[n_allowed++] = c;
  for (int r = 0; r < n; r++) {
    int k = devs ? devs[r].index : r;
    cores[r] = n_allowed ? allowed[k % n_allowed] : -1;
  }
}

/* The gradient of the losses is seeded with this (Caffe2: 1 / (devices x
 * shards)), so N replicas with B/N examples each train like one with B. */
static float loss_scale(int devices, int shards) { return 1.0f / (float)(devices * shards); }

/* Adds b to *sum; saturates instead of wrapping (and then fails any limit). */
static void add_bytes(uint64_t *sum, uint64_t b) {
  if (__builtin_add_overflow(*sum, b, sum)) *sum = UINT64_MAX;
}

static uint64_t aligned(uint64_t b) { return (b + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN; }

/* The eval reader's config (made at the first eval). */
static dpm_reader_config eval_config(const dpm_trainer *t) {
  return (dpm_reader_config){.kind = DPM_READER_IDX,
                             .images = t->eval_images,
                             .labels = t->eval_labels,
                             .fs = t->opt.fs,
                             .cache = t->opt.data_cache,
                             .scale = t->scale,
                             .batch = t->eval_batch,
                             .num_shards = 1,
                             .prefetch = 2};
}

/* Every byte the model will allocate, known before it allocates any: the
 * tensors of every replica (with dag's gradient arena), each replica's
 * scratch and input staging, the reader (data, order, ring) and the eval
 * set with its test-mode activations. Checks the eval files too. */
static dpm_status count_bytes(dpm_trainer *t, int devices, const dpm_reader_config *rc,
                              dpm_trainer_memory *mem, dpm_err *err) {
  const dpm_model *m = &t->model;
  uint64_t per = 0, b;
  for (int i = 0; i < m->shapes.n; i++) add_bytes(&per, aligned(dpm_shape_bytes(&m->shapes.v[i].shape)));
  for (int i = 0; ranks(t) > 1 && i < t->plan.n_grads; i++)
    add_bytes(&per, aligned(dpm_shape_bytes(&dpm_shapes_get(&m->shapes, t->plan.grads[i])->shape)));
  add_bytes(&per, aligned(dpm_shape_bytes(&dpm_shapes_get(&m->shapes, m->data)->shape)));
  add_bytes(&per, t->bm.state_bytes); /* parallel.mode bmuf: the block state */
  mem->tensors_unshared = __builtin_mul_overflow(per, (uint64_t)devices, &b) ? UINT64_MAX : b;
  /* shared blobs (all counted above) take their arena instead */
  if (per != UINT64_MAX) per = per - t->memshare.before + t->memshare.after;
  mem->tensors = __builtin_mul_overflow(per, (uint64_t)devices, &b) ? UINT64_MAX : b;
  mem->shared_apart = t->memshare.before * (uint64_t)devices; /* far below 2^64 */
  mem->shared_arena = t->memshare.after * (uint64_t)devices;
  mem->scratch = 0; /* each replica's kernels, as its device's backend sizes them */
  for (int d = 0; d < devices; d++)
    add_bytes(&mem->scratch,
              dpm_net_scratch(&t->plan.step, &m->shapes, dpm_backend_of(t->dev[d].kind)));
  if (dpm_reader_bytes(rc, &mem->reader, err)) return err->code;
  mem->eval = 0;
  if (t->eval_images) {
    dpm_reader_config ec = eval_config(t);
    dpm_shapes test = {0};
    dpm_status s = dpm_reader_bytes(&ec, &mem->eval, err);
    if (!s) s = dpm_model_test_shapes(m, t->eval_batch, &test, err);
    for (int i = 0; !s && i < test.n; i++) add_bytes(&mem->eval, aligned(dpm_shape_bytes(&test.v[i].shape)));
    dpm_shapes_fini(&test);
    if (s) return dpm_err_prefix(err, "eval: ");
  }
  mem->total = 0;
  add_bytes(&mem->total, mem->tensors);
  add_bytes(&mem->total, mem->scratch);
  add_bytes(&mem->total, mem->reader);
  add_bytes(&mem->total, mem->eval);
  return DPM_OK;
}

/* This process's part of the job: the options' fleet (shard_id of
 * num_shards) or, with num_shards 0, a job of its own. A spec that
 * describes a job over several processes (parallel.shards,
 * parallel.rendezvous, input.num_shards above 1) needs a fleet from
 * whoever forms the job (a fleet of one shard is fine: a job re-formed
 * smaller); the spec's own input shard fields and daemon list, when given,
 * must be the fleet's. Sets t->shard and t->shards. */
static dpm_status fleet_check(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  const Dpm__ParallelSpec *par = spec->parallel;
  const Dpm__InputSpec *in = spec->input;
  int shard = t->opt.fleet.shard_id, shards = t->opt.fleet.num_shards;
  int world;
  if (shards < 0 || shard < 0 || (shards > 0 && shard >= shards) || (!shards && shard))
    return dpm_errf(err, DPM_INVALID, "fleet: shard %d of %d is not a shard of the job",
                    shard, shards);
  if (!shards) {
    const char *what = par && par->n_shards ? "parallel.shards"
                       : par && par->rendezvous ? "parallel.rendezvous"
                       : in->num_shards > 1     ? "input.num_shards"
                                                : NULL;
    if (what)
      return dpm_errf(err, DPM_SPEC,
                      "%s: %s describes a job over several processes, and this trainer "
                      "was given no shard of one: dpmd forms such jobs (dpmctl submit "
                      "--shards), or run dpm-train once per shard (--shard I/N --job "
                      "NAME --store URL)",
                      spec->source, what);
    t->shard = 0, t->shards = 1;
    return DPM_OK;
  }
  if (in->num_shards > 1 && (in->num_shards != (uint32_t)shards || in->shard_id != (uint32_t)shard))
    return dpm_errf(err, DPM_SPEC,
                    "%s: input.shard_id %u of num_shards %u disagrees with this process's "
                    "shard %d of %d (leave them out of the spec, or give the same)",
                    spec->source, in->shard_id, in->num_shards, shard, shards);
  if (par && par->n_shards && par->n_shards != (size_t)shards)
    return dpm_errf(err, DPM_SPEC,
                    "%s: parallel.shards names %zu daemons, but the job has %d shards",
                    spec->source, par->n_shards, shards);
  t->shard = 0, t->shards = 1;
  if (shards == 1) return DPM_OK; /* the whole job: no rendezvous */
  if (__builtin_mul_overflow(t->n, shards, &world) || world > DPM_COMM_MAX_RANKS)
    return dpm_errf(err, DPM_INVALID,
                    "fleet: %d shards of %d replicas are more than %d ranks", shards, t->n,
                    DPM_COMM_MAX_RANKS);
  const dpm_comm_rendezvous *rv = &t->opt.fleet.rendezvous;
  if ((!rv->store || !*rv->store) && !rv->kv)
    return dpm_errf(err, DPM_INVALID, "fleet: the rendezvous has no store");
  if (!rv->prefix || !*rv->prefix)
    return dpm_errf(err, DPM_INVALID, "fleet: the rendezvous has no prefix");
  t->shard = shard, t->shards = shards;
  return DPM_OK;
}

/* Whether NCCL can form the job's group of cuda replicas: in one process,
 * or across processes whose rendezvous store NCCL's bootstrap can use (a
 * file:// store, or the caller's key-value store). */
static int nccl_reaches(const dpm_trainer *t) {
  const dpm_comm_rendezvous *rv = &t->opt.fleet.rendezvous;
  if (t->shards <= 1) return 1;
  if (rv->store && *rv->store) return !strncmp(rv->store, "file://", strlen("file://"));
  return rv->kv != NULL;
}

/* Whether the replicas' group is staged (comm.h: gloo on host copies of
 * their device buffers): a job of several shards on devices whose memory
 * host code cannot touch, unless they are cuda GPUs NCCL can join across
 * the job. Known from the device kinds, before any device opens. */
static int staged_group(const dpm_trainer *t) {
  if (t->shards <= 1) return 0;
  if (t->dev[0].kind == DPM_DEVICE_CUDA && nccl_reaches(t)) return 0;
  for (int d = 0; d < t->n; d++)
    if (!dpm_backend_of(t->dev[d].kind)->host_visible) return 1;
  return 0;
}

/* The replicas' group: local threads for a process alone (none for one
 * replica), else gloo across the job's processes, this shard's replicas
 * being ranks shard*n .. shard*n+n-1 of n*shards (formed at the fleet's
 * rendezvous: this waits for every shard, up to comm_timeout_ms). Cuda
 * replicas use NCCL where it reaches every process of the job; gloo over
 * devices host code cannot touch runs on host copies (t->staged, set at
 * setup). */
static dpm_status make_comm(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  int nccl = t->dev[0].kind == DPM_DEVICE_CUDA && !t->staged;
  t->comm_cfg = (dpm_comm_config){
      .kind = nccl ? DPM_COMM_NCCL : t->shards > 1 ? DPM_COMM_GLOO : DPM_COMM_LOCAL,
      .size = t->n,
      .rank_base = t->shard * t->n,
      .world = ranks(t),
      .timeout_ms = t->opt.comm_timeout_ms,
  };
  if (t->shards > 1) t->comm_cfg.rendezvous = t->opt.fleet.rendezvous;
  if (ranks(t) == 1) return DPM_OK;
  if (nccl) { /* NCCL queues each rank's collectives on its device's stream */
    const dpm_cuda_plugin *p = dpm_cuda_plugin_get();
    if (!(t->streams = calloc((size_t)t->n, sizeof *t->streams))) return nomem(err);
    for (int d = 0; d < t->n; d++) t->streams[d] = p->stream_of(dpm_dev_state(t->r[d].dev));
    t->comm_cfg.streams = t->streams;
  }
  if (new_comm(t, &t->comm, err)) {
    dpm_err_prefix(err, "%s: ", spec->source);
    return shard_prefix(t, err);
  }
  return DPM_OK;
}

static void fnv(uint64_t *h, uint64_t v) {
  for (int i = 0; i < 8; i++, v >>= 8) *h = (*h ^ (v & 0xff)) * 1099511628211ull;
}

/* The collectives of one step, in order, with their sizes: what every rank
 * of the job must run alike (net type, buckets, computed broadcasts). */
static uint64_t plan_digest(const dpm_trainer *t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < t->plan.step.n; i++) {
    const dpm_node *nd = &t->plan.step.nodes[i];
    dpm_op_id id = nd->def->id;
    if (id != DPM_OP_ALLREDUCE && id != DPM_OP_ALLREDUCE_START &&
        id != DPM_OP_ALLREDUCE_WAIT && id != DPM_OP_BROADCAST)
      continue;
    fnv(&h, (uint64_t)id);
    if (id == DPM_OP_ALLREDUCE && nd->def->args) /* f32 or f64 sums */
      fnv(&h, (uint64_t)nd->arg[ALLREDUCE_ARG_DTYPE].i);
    for (int k = 0; k < nd->n_in; k++)
      fnv(&h, dpm_shape_bytes(&dpm_shapes_get(&t->model.shapes, nd->in[k])->shape));
  }
  if (t->bm.on) { /* bmuf: the block's all-reduce and when it runs */
    fnv(&h, (uint64_t)t->bm.local_steps);
    fnv(&h, t->bm.arena_span);
    fnv(&h, (uint64_t)t->bm.n_computed);
  }
  return h;
}

/* Every shard of a job must train the same model on as many replicas, with
 * the same collectives, over a data set of the same size: a difference
 * would hang the collectives or train on mismatched gradients. Shard 0's
 * facts are broadcast and every rank compares them with its own; all
 * shards fail alike when any differs, the differing one naming what. */
static dpm_status agree(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  meta *m = &t->meta;
  memset(m, 0, sizeof *m);
  m->word[AGREE_MODEL] = dpm_spec_hash(spec);
  m->word[AGREE_PLAN] = plan_digest(t);
  m->word[AGREE_DEVICES] = (uint64_t)t->n;
  m->word[AGREE_SHARDS] = (uint64_t)t->shards;
  m->word[AGREE_EXAMPLES] = (uint64_t)dpm_reader_size(t->reader);
  t->agree = 1;
  dpm_status s = dispatch(t, JOB_META, err);
  t->agree = 0;
  if (s) return s;
  const uint64_t *got = t->r[0].meta.word, *mine = m->word;
  if (t->r[0].flag == 0) return DPM_OK;
  static const char *const what[] = {
      [AGREE_MODEL] = "spec hash %016llx, shard 0's %016llx",
      [AGREE_PLAN] = ("step collectives %016llx (net type, buckets, computed params), "
                      "shard 0's %016llx"),
      [AGREE_DEVICES] = "%llu devices, shard 0 %llu",
      [AGREE_SHARDS] = "%llu shards, shard 0 %llu",
      [AGREE_EXAMPLES] = "%llu examples, shard 0's data %llu"};
  char diff[384] = "";
  size_t at = 0;
  for (int w = 0; w <= AGREE_EXAMPLES; w++) {
    if (got[w] == mine[w] || at >= sizeof diff) continue;
    int k = snprintf(diff + at, sizeof diff - at, at ? "; " : "");
    if (k > 0) at += (size_t)k;
    if (at >= sizeof diff) break;
    k = snprintf(diff + at, sizeof diff - at, what[w], (unsigned long long)mine[w],
                 (unsigned long long)got[w]);
    if (k > 0) at += (size_t)k;
  }
  dpm_errf(err, DPM_SPEC,
           "%s: %s%s; every shard runs the same spec on as many devices, with the same "
           "net type",
           spec->source,
           at ? "this shard's model differs from shard 0's: "
              : "another shard's model differs from shard 0's (its own error says how)",
           diff);
  return shard_prefix(t, err);
}

static dpm_status setup(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  const Dpm__ParallelSpec *par = spec->parallel;
  double t0 = now_ms();
  if (parse_devices(t, spec, err)) return err->code;
  t->math = (par && par->allow_tf32 ? DPM_MATH_TF32 : 0) |
            (par && par->deterministic ? DPM_MATH_DETERMINISTIC : 0);
  t->graphs = par ? par->cuda_graphs : 1;
  int devices = t->n;
  if (t->opt.crew && dpm_crew_size(t->opt.crew) != devices)
    return dpm_errf(err, DPM_INVALID, "%s: %d devices, but the crew has %d ranks",
                    spec->source, devices, dpm_crew_size(t->opt.crew));
  if (fleet_check(t, spec, err)) return err->code;
  t->pipeline = !dpm_backend_of(t->dev[0].kind)->host_visible;
  /* a staged group copies to the host mid-step: no step is captured as a graph */
  if ((t->staged = staged_group(t))) t->graphs = 0;
  int type = t->opt.net_type >= 0                                ? t->opt.net_type
             : par && par->net_type == DPM__NET_TYPE__NET_SIMPLE ? DPM_NET_SIMPLE
                                                                 : DPM_NET_DAG;
  /* parallel.device_batch: an elastic resume's, in place of input.batch_size */
  if (par && par->device_batch > DPM_SPEC_MAX_BATCH)
    return dpm_errf(err, DPM_SPEC, "parallel.device_batch must be 1..%u, got %u",
                    DPM_SPEC_MAX_BATCH, par->device_batch);
  int batch = par && par->device_batch ? (int)par->device_batch : (int)spec->input->batch_size;
  int64_t chw[3];
  dpm_status s = input_shape(t->opt.fs, spec->input, chw, err);
  if (!s)
    s = dpm_model_build(spec, chw, batch, loss_scale(devices, t->shards), &t->model, err);
  /* SpatialBN's statistics over every replica of the job (parallel/sync_bn.h) */
  if (!s && par && par->combine_spatial_bn && ranks(t) > 1) s = dpm_sync_bn(&t->model, err);
  /* the plan is the job's: its collectives span every shard's replicas */
  /* bmuf: each replica runs the one-device plan; the block update averages */
  int bmuf = par && par->mode == DPM__PARALLEL_MODE__PARALLEL_BMUF;
  if (!s)
    s = dpm_plan_build(&t->model, bmuf ? 1 : ranks(t), type,
                       par ? par->bucket_bytes : 4 << 20,
                       par ? par->broadcast_computed_params : 1, replicas_backend(t),
                       &t->plan, err);
  if (!s)
    s = dpm_bmuf_init(&t->bm, par, &t->model, ranks(t),
                      par ? par->broadcast_computed_params : 1, &t->plan, err);
  if (!s && par && par->optimize_gradient_memory) s = plan_sharing(t, spec, err);
  if (s) return s;
  dpm_reader_config rc = reader_config(t, spec->input, batch * devices);
  rc.shard_id = t->shard; /* this shard's slice of each global batch */
  rc.num_shards = t->shards;
  rc.raw = 1; /* each replica gathers and converts its rows on its own worker */
  if (count_bytes(t, devices, &rc, &t->memory, err)) return err->code;
  lap(t, DPM_PHASE_GRAPH, &t0);
  const dpm_trainer_memory *mb = &t->memory;
  if (t->opt.max_bytes && mb->total > t->opt.max_bytes)
    return dpm_errf(err, DPM_DENIED,
                    "%s: %d replica(s) need %llu bytes (tensors %llu, scratch %llu, "
                    "reader %llu, eval %llu); the limit is %llu%s%s%s",
                    spec->source, devices, (unsigned long long)mb->total,
                    (unsigned long long)mb->tensors, (unsigned long long)mb->scratch,
                    (unsigned long long)mb->reader, (unsigned long long)mb->eval,
                    (unsigned long long)t->opt.max_bytes, t->opt.max_bytes_name ? " (" : "",
                    t->opt.max_bytes_name ? t->opt.max_bytes_name : "",
                    t->opt.max_bytes_name ? ")" : "");
  /* the spec is valid and fits: now allocate */
  if (dpm_reader_create(&rc, &t->reader, err)) return err->code;
  lap(t, DPM_PHASE_DATA, &t0);
  if (!(t->crew = t->opt.crew)) {
    /* the job's rank of each replica picks its core, so that shards of one
       job sharing a host spread over its cores (ranks(t) <= DPM_COMM_MAX_RANKS) */
    int *cores = malloc((size_t)devices * sizeof *cores);
    dpm_device *at = malloc((size_t)devices * sizeof *at);
    if (!cores || !at) {
      free(cores), free(at);
      return nomem(err);
    }
    for (int d = 0; d < devices; d++)
      at[d] = (dpm_device){t->dev[d].kind, t->dev[d].index + t->shard * devices};
    dpm_device_cores(at, devices, cores);
    dpm_status cs = dpm_crew_create_pinned(devices, cores, &t->own_crew, err);
    free(cores);
    free(at);
    if (cs) return cs;
    t->crew = t->own_crew;
  }
  /* with more replicas than CPUs, one waiting to help would hold a CPU a peer needs */
  int cpus = process_cpus_known ? CPU_COUNT(&process_cpus) : 1;
  if (!t->opt.no_share && t->plan.shared_op >= 0 && devices > 1 && devices <= cpus &&
      dpm_share_create(devices, &t->share, err))
    return err->code;
  if (!(t->r = calloc((size_t)devices, sizeof *t->r))) return nomem(err);
  for (int d = 0; d < devices; d++) {
    t->r[d].rank = d;
    char name[32];
    if (replica_init(t, &t->r[d], err)) /* the device's own errors name it already */
      return strncmp(err->msg, "device ", 7)
                 ? dpm_err_prefix(err, "%s: ", dpm_device_format(t->dev[d], name, sizeof name))
                 : err->code;
  }
  /* Everything of this process is in place: only now meet the other shards
   * (a shard that failed above never keeps them waiting past the timeout
   * of their rendezvous). Every shard's master ran the seeded init (fills
   * are seeded by the spec's seed and the blob's name: the same values by
   * construction); the job's rank 0's are then broadcast to every replica
   * of every shard, so all start bitwise identical whatever each host's
   * math library computed. */
  lap(t, DPM_PHASE_ALLOC, &t0); /* less the init, which replica_init timed */
  t->phase_ms[DPM_PHASE_ALLOC] -= t->phase_ms[DPM_PHASE_INIT];
  if (make_comm(t, spec, err)) return err->code;
  if (t->shards > 1 && agree(t, spec, err)) return err->code;
  lap(t, DPM_PHASE_COMM, &t0);
  s = dpm_trainer_sync(t, err);
  lap(t, DPM_PHASE_BROADCAST, &t0);
  return s;
}

dpm_status dpm_trainer_create(const Dpm__ModelSpec *spec, const dpm_trainer_options *opt,
                              dpm_trainer **out, dpm_err *err) {
  *out = NULL;
  double t0 = now_ms();
  if (dpm_spec_validate(spec, err)) return err->code;
  dpm_trainer *t = calloc(1, sizeof *t);
  if (!t) return nomem(err);
  lap(t, DPM_PHASE_VALIDATE, &t0);
  t->opt = opt ? *opt : (dpm_trainer_options){.net_type = -1};
  if (!t->opt.comm_timeout_ms) t->opt.comm_timeout_ms = 60000;
  t->seed = spec->input->seed;
  t->spec_hash = dpm_spec_hash(spec);
  if (spec->eval && spec->eval->images) {
    t->eval_batch = (int)spec->eval->batch_size;
    t->scale = spec->input->scale;
    if (!(t->eval_images = strdup(spec->eval->images)) ||
        !(t->eval_labels = strdup(spec->eval->labels ? spec->eval->labels : ""))) {
      dpm_trainer_destroy(t);
      return nomem(err);
    }
  }
  dpm_status s = setup(t, spec, err);
  if (s) {
    dpm_trainer_destroy(t);
    return s;
  }
  *out = t;
  return DPM_OK;
}

/* ---- training ------------------------------------------------------------ */

/* parallel.mode bmuf: the block update on every replica (one replica
 * alone: on this thread, with no collective). */
static dpm_status bmuf_block(dpm_trainer *t, dpm_err *err) {
  if (t->comm) return dispatch(t, JOB_BMUF, err);
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
static void feed(dpm_trainer *t, const dpm_batch *b, const dpm_batch *ahead, int preloaded) {
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
    s = dpm_splitmix64(&s) ^ (uint64_t)(t->shard * t->n + d);
    dpm_rng_seed(r->ctx.rng, s);
  }
}

/* A scalar (loss, accuracy, learning rate) read back from a device. */
static double scalar(const dpm_blob *b) {
  float v;
  dpm_tensor_read(&b->t, &v, sizeof v);
  return v;
}

static void stats(const dpm_trainer *t, dpm_step_stats *st) {
  double loss = 0, acc = 0;
  for (int d = 0; d < t->n; d++) {
    for (int l = 0; l < t->model.n_losses; l++) loss += scalar(t->r[d].losses[l]);
    if (t->r[d].accuracy) acc += scalar(t->r[d].accuracy);
  }
  st->iter = t->iter;
  st->loss = loss / t->n;
  st->accuracy = t->r[0].accuracy ? acc / t->n : NAN;
  st->lr = scalar(t->r[0].lr);
}

/* Steps in a grant: about GRANT_MS at a pace of step_ms, 1..GRANT_MAX,
 * at most left. */
static int grant_steps(int left, double step_ms) {
  double g = step_ms > 0 ? GRANT_MS / step_ms : 1;
  int k = g >= GRANT_MAX ? GRANT_MAX : g < 1 ? 1 : (int)g;
  return k < left ? k : left;
}

/* The job's decision before its next grant of steps (a job of several
 * shards): rank 0 broadcasts `stop` and `steps` (shard 0's; the others'
 * are ignored) and its iteration; *why and *granted are what every shard
 * received (a grant outside 1..GRANT_MAX counts as 1). A shard at another
 * iteration than rank 0 fails (DPM_STATE): it would read other examples. */
static dpm_status decide(dpm_trainer *t, int stop, int steps, int *why, int *granted,
                         dpm_err *err) {
  t->go_stop = t->shard == 0 ? stop : 0;
  t->go_steps = t->shard == 0 ? steps : 0;
  dpm_status s = dispatch(t, JOB_GO, err);
  if (s) return s;
  const uint64_t *g = t->r[0].go;
  if (g[GO_ITER] != t->iter) {
    dpm_errf(err, DPM_STATE, "this shard is at iteration %llu, the job's rank 0 at %llu",
             (unsigned long long)t->iter, (unsigned long long)g[GO_ITER]);
    return shard_prefix(t, err);
  }
  *why = (int)(g[GO_STOP] > INT_MAX ? INT_MAX : g[GO_STOP]);
  *granted = g[GO_STEPS] >= 1 && g[GO_STEPS] <= GRANT_MAX ? (int)g[GO_STEPS] : 1;
  return DPM_OK;
}

dpm_status dpm_trainer_stop(dpm_trainer *t, int why, dpm_err *err) {
  if (why <= 0) return dpm_errf(err, DPM_INVALID, "a stop needs a reason above 0");
  if (t->shards <= 1) return DPM_OK;
  if (t->shard != 0) {
    dpm_errf(err, DPM_INVALID, "only shard 0 stops the job");
    return shard_prefix(t, err);
  }
  if (t->granted) { /* shard 0 never leaves a step call inside a grant */
    dpm_errf(err, DPM_INTERNAL, "a stop inside a grant of %d more steps", t->granted);
    return shard_prefix(t, err);
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
    double t0 = now_ms();
    const dpm_batch *b;
    if (dpm_reader_next(t->reader, &b, err)) return err->code;
    if (!t->stepped) t->phase_ms[DPM_PHASE_FIRST_BATCH] = now_ms() - t0;
    const dpm_batch *ahead = NULL; /* on devices: the next step's, uploaded by this one */
    if (t->pipeline && i + 1 < n && dpm_reader_peek(t->reader, &ahead, err))
      return err->code;
    feed(t, b, ahead, preloaded);
    uint64_t comm0 = t->r[0].ctx.comm_ns;
    if (dispatch(t, JOB_STEP, err)) return err->code;
    preloaded = ahead != NULL;
    t->iter++;
    /* bmuf: the block update follows a block's last step, in the same call */
    if (t->bm.on && t->iter % (uint64_t)t->bm.local_steps == 0 && bmuf_block(t, err))
      return err->code;
    stats(t, &st);
    st.steps_done = i + 1;
    st.step_ms = now_ms() - t0;
    if (!t->stepped) {
      t->phase_ms[DPM_PHASE_FIRST_STEP] = st.step_ms - t->phase_ms[DPM_PHASE_FIRST_BATCH];
      t->stepped = 1;
    }
    t->last_step_ms = st.step_ms;
    if (t->granted) t->granted--;
    st.comm_ms = (double)(t->r[0].ctx.comm_ns - comm0) / 1e6;
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

/* ---- sync and checkpoints ------------------------------------------------ */

dpm_status dpm_trainer_sync(dpm_trainer *t, dpm_err *err) {
  return broadcast_from_master(t, (const char *const *)t->plan.synced, t->plan.n_synced,
                               err);
}

dpm_status dpm_trainer_sync_blobs(dpm_trainer *t, const char *const *names, int n,
                                  dpm_err *err) {
  for (int i = 0; i < n; i++)
    if (!dpm_ws_find(&t->r[0].ws, names[i]))
      return dpm_errf(err, DPM_NOT_FOUND, "no blob '%s'", names[i]);
  return broadcast_from_master(t, names, n, err);
}

/* b's bytes where host code may read them: the tensor itself when its
 * device's memory is the host's, else a copy in tmp (a host tensor). */
static const dpm_tensor *on_host(const dpm_blob *b, dpm_tensor *tmp, dpm_err *err) {
  if (!b->t.dev || dpm_dev_host_visible(b->t.dev)) return &b->t;
  if (dpm_tensor_resize(tmp, &b->t.shape)) {
    nomem(err);
    return NULL;
  }
  dpm_tensor_read(&b->t, tmp->data, dpm_shape_bytes(&b->t.shape));
  return tmp;
}

/* parallel.mode bmuf: a checkpoint also holds, for replicas 1.. of this
 * shard, what each keeps its own of inside a block (params, computed params,
 * optimizer state), as "replica_D/NAME": resume mid-block is exact. */
static int replica_entries(const dpm_trainer *t) {
  return t->bm.on ? (t->n - 1) * t->bm.n_local : 0;
}

static char *replica_name(int d, const char *name) {
  size_t len = strlen(name) + 32;
  char *s = malloc(len);
  if (s) snprintf(s, len, "replica_%d/%s", d, name);
  return s;
}

dpm_status dpm_trainer_checkpoint(dpm_trainer *t, const dpm_fs *fs, const char *path,
                                  dpm_err *err) {
  const dpm_plan *p = &t->plan;
  int n = p->n_synced + replica_entries(t);
  dpm_ckpt_entry *e = calloc((size_t)n + 1, sizeof *e);
  dpm_tensor *staged = calloc((size_t)n + 1, sizeof *staged);
  char **names = calloc((size_t)n + 1, sizeof *names); /* replica_D/NAME, owned */
  dpm_status s = e && staged && names ? DPM_OK : nomem(err);
  for (int i = 0; !s && i < n; i++) {
    int d = i < p->n_synced ? 0 : 1 + (i - p->n_synced) / t->bm.n_local;
    const char *name = d ? t->bm.local[(i - p->n_synced) % t->bm.n_local] : p->synced[i];
    dpm_blob *b = dpm_ws_find(&t->r[d].ws, name);
    const dpm_tensor *h = on_host(b, &staged[i], err);
    if (!h) s = err->code;
    if (d && !s && !(names[i] = replica_name(d, name))) s = nomem(err);
    e[i] = (dpm_ckpt_entry){.name = d ? names[i] : b->name, .kind = b->kind, .t = h};
  }
  if (s) goto out;
  dpm_reader_pos pos = dpm_reader_position(t->reader);
  dpm_ckpt_meta meta = {.spec_hash = t->spec_hash,
                        .iter = t->iter,
                        .reader_epoch = pos.epoch,
                        .reader_index = pos.index,
                        .devices = (uint32_t)t->n,
                        .shards = (uint32_t)t->shards,
                        .created_unix = (int64_t)time(NULL)};
  s = dpm_ckpt_write(fs, path, &meta, e, n, err);
out:
  for (int i = 0; staged && i < n; i++) dpm_tensor_fini(&staged[i]);
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
  free(staged);
  free(e);
  return s;
}

/* Every blob the model checkpoints must be in c with its kind and shape. */
static dpm_status fits(const dpm_trainer *t, const dpm_ckpt *c, const char *path,
                       dpm_err *err) {
  if (c->meta.spec_hash != t->spec_hash)
    return dpm_errf(err, DPM_SPEC,
                    "%s: written for another spec (hash %016llx, this "
                    "model's is %016llx)",
                    path, (unsigned long long)c->meta.spec_hash,
                    (unsigned long long)t->spec_hash);
  /* parallel.mode is outside the spec hash, but the blobs differ */
  int bmuf_file = 0;
  for (int i = 0; i < c->n && !bmuf_file; i++) bmuf_file = dpm_bmuf_is_state(c->names[i]);
  if (bmuf_file != t->bm.on)
    return dpm_errf(err, DPM_SPEC,
                    "%s: written by a model in parallel.mode %s (%s block state), this "
                    "model is in parallel.mode %s: load it into a model of that mode",
                    path, bmuf_file ? "bmuf" : "sync", bmuf_file ? "with" : "without",
                    t->bm.on ? "bmuf" : "sync");
  if (t->bm.on && c->meta.devices != (uint32_t)t->n)
    return dpm_errf(err, DPM_SHAPE,
                    "%s: a parallel.mode bmuf checkpoint holds every replica's own "
                    "parameters and optimizer state; it was written on %u devices, this "
                    "model has %d",
                    path, c->meta.devices, t->n);
  if (c->n != t->plan.n_synced + replica_entries(t))
    return dpm_errf(err, DPM_SHAPE, "%s: holds %d blobs, the model has %d", path, c->n,
                    t->plan.n_synced + replica_entries(t));
  for (int i = 0; i < replica_entries(t); i++) {
    int d = 1 + i / t->bm.n_local;
    const dpm_blob *b = dpm_ws_find(&t->r[d].ws, t->bm.local[i % t->bm.n_local]);
    char *name = replica_name(d, b->name);
    dpm_blob_kind kind;
    const dpm_tensor *x = name ? dpm_ckpt_find(c, name, &kind) : NULL;
    int ok = x && kind == b->kind && dpm_shape_equal(&x->shape, &b->t.shape);
    free(name);
    if (!ok)
      return dpm_errf(err, DPM_SHAPE, "%s: no blob 'replica_%d/%s' of the model's shape",
                      path, d, b->name);
  }
  for (int i = 0; i < t->plan.n_synced; i++) {
    const dpm_blob *b = dpm_ws_find(&t->r[0].ws, t->plan.synced[i]);
    dpm_blob_kind kind;
    const dpm_tensor *x = dpm_ckpt_find(c, b->name, &kind);
    char want[64], got[64];
    if (!x) return dpm_errf(err, DPM_SHAPE, "%s: no blob '%s'", path, b->name);
    if (kind != b->kind || !dpm_shape_equal(&x->shape, &b->t.shape))
      return dpm_errf(err, DPM_SHAPE, "%s: '%s' is %s %s, the model's is %s %s", path,
                      b->name, dpm_blob_kind_name(kind),
                      dpm_shape_str(&x->shape, got, 64), dpm_blob_kind_name(b->kind),
                      dpm_shape_str(&b->t.shape, want, 64));
  }
  return DPM_OK;
}

/* Reads path into c and checks it against the model, then moves the
 * reader to its position; nothing else is touched. On failure c is empty. */
static dpm_status read_fitting(dpm_trainer *t, const dpm_fs *fs, const char *path,
                               dpm_ckpt *c, dpm_err *err) {
  if (!path) return dpm_errf(err, DPM_INVALID, "no checkpoint file given");
  if (dpm_ckpt_read(fs, path, c, err)) return err->code;
  dpm_reader_pos pos = {c->meta.reader_epoch, c->meta.reader_index};
  dpm_status s = fits(t, c, path, err);
  if (!s) s = dpm_reader_seek(t->reader, pos, err);
  if (s) dpm_ckpt_fini(c);
  return s;
}

/* c's tensors into the master (entries "replica_D/NAME" are replica d's:
 * write_replicas). */
static void write_master(dpm_trainer *t, const dpm_ckpt *c) {
  for (int i = 0; i < c->n; i++) {
    dpm_blob *b = dpm_ws_find(&t->r[0].ws, c->names[i]);
    if (b) dpm_tensor_write(&b->t, c->tensors[i].data, dpm_shape_bytes(&b->t.shape));
  }
}

/* parallel.mode bmuf, after the sync: replicas 1.. take their own state
 * from c (fits checked that it is there). */
static dpm_status write_replicas(dpm_trainer *t, const dpm_ckpt *c, dpm_err *err) {
  for (int i = 0; i < replica_entries(t); i++) {
    int d = 1 + i / t->bm.n_local;
    dpm_blob *b = dpm_ws_find(&t->r[d].ws, t->bm.local[i % t->bm.n_local]);
    char *name = replica_name(d, b->name);
    dpm_blob_kind kind;
    const dpm_tensor *x = name ? dpm_ckpt_find(c, name, &kind) : NULL;
    free(name);
    if (!x) return nomem(err);
    dpm_tensor_write(&b->t, x->data, dpm_shape_bytes(&b->t.shape)); /* host: pointer only */
  }
  return DPM_OK;
}

/* A job of several shards: shard 0 reads and checks the file and moves its
 * reader, then tells every shard its verdict and, when it loaded, the
 * iteration and reader position (JOB_META); the others move their readers
 * there (the agreement at create made their data sets alike, so a position
 * valid on shard 0 is valid on all), shard 0 writes its master, and the
 * sync takes the master's state to every replica of every shard. */
static dpm_status fleet_load(dpm_trainer *t, const dpm_fs *fs, const char *path,
                             dpm_err *err) {
  dpm_ckpt c;
  int have = 0;
  meta *m = &t->meta;
  memset(m, 0, sizeof *m);
  if (t->shard == 0 && !path) {
    m->word[LOAD_NOTHING] = 1;
  } else if (t->shard == 0) {
    dpm_status s = read_fitting(t, fs, path, &c, err);
    have = !s;
    m->word[LOAD_STATUS] = (uint64_t)s;
    if (s) snprintf(m->msg, sizeof m->msg, "%s", err->msg);
    else {
      m->word[LOAD_ITER] = c.meta.iter;
      m->word[LOAD_EPOCH] = c.meta.reader_epoch;
      m->word[LOAD_INDEX] = c.meta.reader_index;
    }
  }
  dpm_status s = dispatch(t, JOB_META, err);
  const meta *got = &t->r[0].meta;
  if (!s && got->word[LOAD_STATUS]) { /* shard 0 refused the file */
    uint64_t code = got->word[LOAD_STATUS];
    s = code < DPM_STATUS_COUNT ? (dpm_status)code : DPM_INTERNAL;
    if (t->shard != 0) {
      dpm_errf(err, s, "shard 0 could not load the checkpoint: %.*s",
               (int)sizeof got->msg, got->msg);
      shard_prefix(t, err);
    }
  }
  if (!s && !got->word[LOAD_NOTHING]) {
    if (t->shard != 0) {
      dpm_reader_pos pos = {got->word[LOAD_EPOCH], got->word[LOAD_INDEX]};
      if (dpm_reader_seek(t->reader, pos, err)) s = shard_prefix(t, err);
    } else {
      write_master(t, &c);
    }
    if (!s) {
      t->iter = got->word[LOAD_ITER];
      s = dpm_trainer_sync(t, err);
    }
    /* bmuf: shard 0's replicas take their own state; the other shards' the
       master's (the file holds shard 0's replicas only) */
    if (!s && t->shard == 0) s = write_replicas(t, &c, err);
  }
  if (have) dpm_ckpt_fini(&c);
  return s;
}

dpm_status dpm_trainer_load(dpm_trainer *t, const dpm_fs *fs, const char *path,
                            dpm_err *err) {
  if (t->shards > 1) return fleet_load(t, fs, path, err);
  dpm_ckpt c;
  dpm_status s = read_fitting(t, fs, path, &c, err);
  if (s) return s;
  write_master(t, &c);
  t->iter = c.meta.iter;
  s = dpm_trainer_sync(t, err);
  if (!s) s = write_replicas(t, &c, err);
  dpm_ckpt_fini(&c);
  return s;
}

/* ---- evaluation ---------------------------------------------------------- */

dpm_status dpm_trainer_eval(dpm_trainer *t, double *loss, double *accuracy,
                            dpm_err *err) {
  const dpm_model *m = &t->model;
  replica *r = &t->r[0];
  if (!t->eval_images) return dpm_errf(err, DPM_STATE, "%s: no eval data", m->source);
  if (!t->eval_reader) {
    dpm_reader_config rc = eval_config(t);
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
  for (;;) {
    const dpm_batch *b;
    if ((s = dpm_reader_next(t->eval_reader, &b, err)) || !b) break;
    if (b->n != shaped) {
      dpm_shapes shapes = {0};
      s = dpm_model_test_shapes(m, b->n, &shapes, err);
      if (!s) s = dpm_exec_bind(&x, &m->test, &shapes, &ws, &r->ctx, err);
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
      sum_loss += scalar(dpm_ws_find(&ws, m->losses[l])) * b->n;
    if (m->accuracy) sum_acc += scalar(dpm_ws_find(&ws, m->accuracy)) * b->n;
    seen += b->n;
  }
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
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
  if (dpm_tensor_resize(out, &x->shape)) return nomem(err);
  dpm_tensor_read(x, out->data, dpm_shape_bytes(&x->shape));
  return DPM_OK;
}

int dpm_trainer_devices(const dpm_trainer *t) { return t->n; }
const char *dpm_trainer_comm_backend(const dpm_trainer *t) { return dpm_comm_backend(t->comm); }
const dpm_trainer_memory *dpm_trainer_memory_of(const dpm_trainer *t) { return &t->memory; }
int64_t dpm_trainer_steps_per_epoch(const dpm_trainer *t) {
  return dpm_reader_size(t->reader) / ((int64_t)t->model.batch * t->n * t->shards);
}
int dpm_trainer_batch(const dpm_trainer *t) { return t->model.batch; }
uint64_t dpm_trainer_iter(const dpm_trainer *t) { return t->iter; }
const dpm_model *dpm_trainer_model(const dpm_trainer *t) { return &t->model; }
const dpm_plan *dpm_trainer_plan(const dpm_trainer *t) { return &t->plan; }
dpm_workspace *dpm_trainer_workspace(dpm_trainer *t, int d) { return &t->r[d].ws; }

void dpm_trainer_destroy(dpm_trainer *t) {
  if (!t) return;
  dpm_crew_destroy(t->own_crew); /* a borrowed crew stays */
  dpm_comm_destroy(t->comm);
  dpm_share_destroy(t->share);
  for (int d = 0; t->r && d < t->n; d++) {
    replica *r = &t->r[d];
    dpm_step_graph_fini(&r->graph);
    dpm_exec_fini(&r->step);
    dpm_ws_fini(&r->ws);
    if (r->arena) dpm_dev_free(r->dev, r->arena, r->arena_bytes);
    if (r->shared) dpm_dev_free(r->dev, r->shared, r->shared_got);
    dpm_free(r->input);
    dpm_free(r->bmuf_host);
    dpm_ctx_fini(&r->ctx);
    free(r->losses);
  }
  free(t->r);
  dpm_reader_destroy(t->reader);
  dpm_reader_destroy(t->eval_reader);
  dpm_bmuf_fini(&t->bm);
  dpm_plan_fini(&t->plan);
  dpm_memshare_fini(&t->memshare);
  dpm_model_fini(&t->model);
  free(t->eval_images);
  free(t->eval_labels);
  free(t->dev);
  free(t->streams);
  free(t);
}

dpm_status dpm_trainer_export_predictor(dpm_trainer *t, const char *const *inputs,
                                        int n_in, const char *const *outputs, int n_out,
                                        const dpm_fs *fs, const char *dir, dpm_err *err) {
  return dpm_predictor_export(&t->model, &t->r[0].ws, inputs, n_in, outputs, n_out, fs,
                              dir, err);
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
    if (!strcmp(format, predictor_formats[f].name))
      return predictor_formats[f].write(&t->model, &t->r[0].ws, inputs, n_in, outputs,
                                        n_out, fs, dir, err);
  char b[80];
  return dpm_errf(err, DPM_UNSUPPORTED, "predictor format '%s': dpm writes 'dpm' or 'onnx'",
                  dpm_escape(format, b, sizeof b));
}
