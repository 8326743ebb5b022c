/* dpm_trainer_create_checked (and dpm_trainer_create, which checks a
 * protobuf spec first): devices, the model and its plan, the memory count,
 * the reader, the replicas and their group, the initial broadcast; the
 * phases it records (dpm_trainer_phases). The top of the trainer's files:
 * it calls train/trainer.c and train/state.c, and neither calls it. */
#include "train/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked_spec.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/idx.h"
#include "common/validate.h"
#include "ops/collective.h"
#include "parallel/sync_bn.h"

/* Adds the time since *t0 to phase p and restarts *t0. */
static void lap(dpm_trainer *t, int p, double *t0) {
  double now = dpm_mono_ns() / 1e6;
  t->phase_ms[p] += now - *t0;
  *t0 = now;
}

/* ---- setup --------------------------------------------------------------- */

/* The reader kind of a spec's reader (the enums share their values). */
static int reader_kind(Dpm__ReaderKind k) {
  static const int kinds[] = {[DPM__READER_KIND__READER_IDX] = DPM_READER_IDX,
                              [DPM__READER_KIND__READER_SYNTHETIC] = DPM_READER_SYNTHETIC,
                              [DPM__READER_KIND__READER_TAR] = DPM_READER_TAR,
                              [DPM__READER_KIND__READER_LMDB] = DPM_READER_LMDB,
                              [DPM__READER_KIND__READER_FOLDER] = DPM_READER_FOLDER};
  return kinds[k]; /* a checked spec's kind is one of these */
}

/* The image pipeline of input.image: train, a random-resized crop and the
 * mirror as the spec says; else (and for eval) resize and centre crop.
 * resize defaults to crop x 8/7 (256 for 224); one mean or std serves
 * every channel; none: 0 and 1. Paths are set by the caller. */
static dpm_reader_images image_config(const Dpm__InputSpec *in, int train) {
  const Dpm__ImageSpec *im = in->image;
  dpm_reader_images ri = {.decode_threads = (int)im->decode_threads,
                          .max_pixels = (int64_t)im->max_pixels,
                          .skip_bad =
                              in->on_bad_sample == DPM__BAD_SAMPLE__BAD_SAMPLE_SKIP};
  dpm_augment_cfg *a = &ri.aug;
  a->train = train && im->random_crop;
  a->mirror = train && im->mirror;
  a->crop = (int)im->crop;
  a->resize = im->has_resize ? (int)im->resize : (int)((im->crop * 8 + 6) / 7);
  a->channels = (int)im->channels;
  a->area_min = im->area_min;
  a->area_max = im->area_max;
  a->aspect_min = im->aspect_min;
  a->aspect_max = im->aspect_max;
  for (int c = 0; c < 3; c++) {
    a->mean[c] = (float)(im->n_mean ? im->mean[im->n_mean == 1 ? 0 : c] : 0);
    a->std[c] = (float)(im->n_std ? im->std[im->n_std == 1 ? 0 : c] : 1);
  }
  return ri;
}

static dpm_status input_shape(const dpm_fs *fs, const Dpm__InputSpec *in, int64_t chw[3],
                              dpm_err *err) {
  if (in->image && dpm_reader_kind_is_image(in->reader)) {
    chw[0] = in->image->channels;
    chw[1] = chw[2] = in->image->crop;
    return DPM_OK;
  }
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
  dpm_reader_images img = {0};
  if (DPM_READER_IMAGE_KIND(reader_kind(in->reader))) {
    img = image_config(in, 1);
    img.paths = in->reader == DPM__READER_KIND__READER_TAR
                    ? (const char *const *)in->shards
                    : (const char *const *)&in->path;
    img.n_paths = in->reader == DPM__READER_KIND__READER_TAR ? (int)in->n_shards : 1;
  }
  return (dpm_reader_config){
      .kind = reader_kind(in->reader),
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
      .image = img,
  };
}

/* The replicas' devices: the options' (a count of one kind), else the
 * checked spec's (parsed at its check), else cpu:0; each of a kind this
 * build has a backend for. */
static dpm_status replica_devices(dpm_trainer *t, const dpm_checked_spec *cs,
                                  dpm_err *err) {
  size_t named;
  const dpm_device *devs = dpm_checked_spec_devices(cs, &named);
  t->n = t->opt.devices > 0 ? t->opt.devices : named ? (int)named : 1;
  if (!(t->dev = calloc((size_t)t->n, sizeof *t->dev))) return dpm_nomem(err);
  for (int i = 0; i < t->n; i++) {
    char name[32];
    t->dev[i] = t->opt.devices > 0 ? (dpm_device){t->opt.kind, i}
                : named            ? devs[i]
                                   : (dpm_device){DPM_DEVICE_CPU, i};
    if (!dpm_backend_of(t->dev[i].kind))
      return dpm_errf(err, DPM_UNSUPPORTED, "%s: device %s: this build has no %s backend",
                      dpm_checked_spec_pb(cs)->source,
                      dpm_device_format(t->dev[i], name, sizeof name),
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
  r->arena = dpm_dev_alloc(r->dev, total, &r->arena_bytes);
  if (dpm_dptr_null(r->arena)) return dpm_nomem(err);
  size_t at = 0;
  for (int i = 0; i < p->n_grads; i++) {
    dpm_tensor *g = &dpm_ws_find(&r->ws, p->grads[i])->t;
    dpm_tensor_view_mem(g, &g->shape, dpm_dptr_at(r->arena, at));
    at += (dpm_shape_bytes(&g->shape) + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
  }
  return DPM_OK;
}

/* Ranks in the job's group: every shard's replicas. */
static int trainer_ranks(const dpm_trainer *t) { return t->n * t->shards; }
/* Whether the replicas have a group and the step its collectives (several
 * ranks, or one forced to: dpm_trainer_options.force_comm). */
static int trainer_reduces(const dpm_trainer *t) {
  return trainer_ranks(t) > 1 || t->opt.force_comm;
}

/* parallel.optimize_gradient_memory: which blobs of the step share one arena
 * (parallel/memshare.h). Never shared: the data and label, the losses and
 * accuracy the trainer reads, parallel.keep_blobs, and with several ranks
 * the gradients, which the arena lays out back to back for the reduction. */
static dpm_status plan_sharing(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  const dpm_model *m = &t->model;
  const Dpm__ParallelSpec *par = spec->parallel;
  int most = 3 + m->n_losses + (int)par->n_keep_blobs + t->plan.n_grads, n = 0;
  const char **keep = calloc((size_t)most, sizeof *keep);
  if (!keep) return dpm_nomem(err);
  keep[n++] = m->data;
  keep[n++] = m->label;
  if (m->accuracy) keep[n++] = m->accuracy;
  for (int i = 0; i < m->n_losses; i++) keep[n++] = m->losses[i];
  for (size_t i = 0; i < par->n_keep_blobs; i++) {
    if (!dpm_shapes_get(&m->shapes, par->keep_blobs[i])) {
      free(keep);
      return dpm_errf(err, DPM_SPEC,
                      "%s: parallel.keep_blobs: the model has no blob '%s'", spec->source,
                      par->keep_blobs[i]);
    }
    keep[n++] = par->keep_blobs[i];
  }
  for (int i = 0; trainer_reduces(t) && i < t->plan.n_grads; i++)
    keep[n++] = t->plan.grads[i];
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
  r->shared = dpm_dev_alloc(r->dev, ms->after, &r->shared_got);
  if (dpm_dptr_null(r->shared)) return dpm_nomem(err);
  for (int i = 0; i < ms->n; i++) {
    const dpm_blobinfo *info = dpm_shapes_get(&t->model.shapes, ms->names[i]);
    dpm_blob *b;
    if (dpm_ws_view_shared(&r->ws, ms->names[i], info->kind, &info->shape,
                           dpm_dptr_at(r->shared, ms->offset[i]), &b))
      return dpm_nomem(err);
  }
  return DPM_OK;
}

static void fnv(uint64_t *h, uint64_t v) {
  for (int i = 0; i < 8; i++, v >>= 8) *h = (*h ^ (v & 0xff)) * 1099511628211ull;
}

/* Opens the replicas' devices (each replica's dev) and makes the set of
 * those to claim while the trainer queues work on them. */
static dpm_status claim_devices(dpm_trainer *t, dpm_err *err) {
  if (!(t->claim_set = malloc((size_t)t->n * sizeof *t->claim_set)))
    return dpm_nomem(err);
  for (int d = 0; d < t->n; d++) {
    dpm_status s = dpm_dev_get(t->dev[d], &t->r[d].dev, err);
    if (s) return s;
    t->claim_set[d] = t->r[d].dev;
  }
  t->claim_n = dpm_dev_claim_set(t->claim_set, t->n);
  /* the shards of one job in this process wait for each other inside their
     runs: they claim as one owner, named by the job's rendezvous prefix */
  t->claim_owner = (uint64_t)(uintptr_t)t;
  const char *prefix = t->opt.fleet.rendezvous.prefix;
  if (t->shards > 1 && prefix) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = prefix; *c; c++) fnv(&h, (uint8_t)*c);
    t->claim_owner = h | 1; /* odd: never a trainer's address */
  }
  return DPM_OK;
}

/* Replica r on its device (opened by claim_devices). */
static dpm_status replica_init(dpm_trainer *t, replica *r, dpm_err *err) {
  dpm_model *m = &t->model;
  dpm_status s;
  r->ws.dev = r->ctx.dev = r->dev;
  r->ctx.device = r->rank; /* comm: set per crew run */
  r->ctx.math = t->math;
  r->ctx.job = t->claim_owner;
  dpm_exec init = {0};
  s = dpm_exec_bind(&init, &m->init, &m->shapes, &r->ws, &r->ctx, err);
  if (!s && r->rank == 0) { /* the others get the broadcast */
    double t0 = dpm_mono_ns() / 1e6;
    dpm_exec_run(&init);
    lap(t, DPM_PHASE_INIT, &t0);
  }
  dpm_exec_fini(&init);
  if (!s) s = share_arena(t, r, err);
  if (!s) s = dpm_exec_bind(&r->step, &t->plan.step, &m->shapes, &r->ws, &r->ctx, err);
  if (!s) s = dpm_exec_bind(&r->refresh, &m->refresh, &m->shapes, &r->ws, &r->ctx, err);
  if (!s) dpm_step_graph_init(&r->graph, r->dev, &t->plan.step, t->graphs);
  if (!s && trainer_reduces(t)) s = grad_arena(r, &t->plan, err);
  if (!s) s = dpm_bmuf_replica(&t->bm, &r->ws, r->rank == 0, &r->bmuf_host, err);
  if (!s) s = trainer_update_replica(t, r, err);
  if (s) return s;
  r->data = dpm_ws_find(&r->ws, m->data);
  if (!(r->input = dpm_alloc(dpm_shape_bytes(&r->data->t.shape)))) return dpm_nomem(err);
  r->label = dpm_ws_find(&r->ws, m->label);
  r->lr = dpm_ws_find(&r->ws, "lr");
  r->accuracy = m->accuracy ? dpm_ws_find(&r->ws, m->accuracy) : NULL;
  if (!(r->losses = calloc((size_t)m->n_losses, sizeof *r->losses)))
    return dpm_nomem(err);
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
static float loss_scale(int devices, int shards) {
  return 1.0f / (float)(devices * shards);
}

/* Adds b to *sum; saturates instead of wrapping (and then fails any limit). */
static void add_bytes(uint64_t *sum, uint64_t b) {
  if (__builtin_add_overflow(*sum, b, sum)) *sum = UINT64_MAX;
}

static uint64_t aligned(uint64_t b) {
  return (b + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
}

/* Every byte the model will allocate, known before it allocates any: the
 * tensors of every replica (with dag's gradient arena), each replica's
 * scratch and input staging, the reader (data, order, ring) and the eval
 * set with its test-mode activations and scratch. Checks the eval files
 * too. */
static dpm_status count_bytes(dpm_trainer *t, int devices, const dpm_reader_config *rc,
                              dpm_trainer_memory *mem, dpm_err *err) {
  const dpm_model *m = &t->model;
  uint64_t per = 0, b;
  for (int i = 0; i < m->shapes.n; i++)
    add_bytes(&per, aligned(dpm_shape_bytes(&m->shapes.v[i].shape)));
  for (int i = 0; trainer_reduces(t) && i < t->plan.n_grads; i++)
    add_bytes(&per, aligned(dpm_shape_bytes(
                        &dpm_shapes_get(&m->shapes, t->plan.grads[i])->shape)));
  add_bytes(&per, aligned(dpm_shape_bytes(&dpm_shapes_get(&m->shapes, m->data)->shape)));
  add_bytes(&per, t->bm.state_bytes); /* parallel.mode bmuf: the block state */
  /* accumulation, clipping, a loss scale: the gradients' host copy, and with
     accumulation the sum of an update's earlier micro-batches' gradients
     (train/update.c) */
  for (int i = 0; t->gathered && i < t->plan.n_grads; i++)
    add_bytes(&per,
              (t->accum > 1 ? 2 : 1) *
                  dpm_shape_bytes(&dpm_shapes_get(&m->shapes, t->plan.grads[i])->shape));
  mem->tensors_unshared =
      __builtin_mul_overflow(per, (uint64_t)devices, &b) ? UINT64_MAX : b;
  /* shared blobs (all counted above) take their arena instead */
  if (per != UINT64_MAX) per = per - t->memshare.before + t->memshare.after;
  mem->tensors = __builtin_mul_overflow(per, (uint64_t)devices, &b) ? UINT64_MAX : b;
  mem->shared_apart = t->memshare.before * (uint64_t)devices; /* far below 2^64 */
  mem->shared_arena = t->memshare.after * (uint64_t)devices;
  mem->scratch = 0; /* each replica's kernels, as its device's backend sizes them */
  for (int d = 0; d < devices; d++)
    add_bytes(&mem->scratch,
              dpm_net_scratch(&t->plan.step, &m->shapes, dpm_backend_of(t->dev[d].kind)));
  mem->reader = mem->eval = 0;
  if (t->opt.plan_only) return DPM_OK; /* no data opened */
  if (dpm_reader_bytes(rc, &mem->reader, err)) return err->code;
  if (t->has_eval) {
    dpm_reader_config ec = trainer_eval_config(t);
    dpm_shapes test = {0};
    dpm_status s = dpm_reader_bytes(&ec, &mem->eval, err);
    if (!s) s = dpm_model_test_shapes(m, t->eval_batch, &test, err);
    for (int i = 0; !s && i < test.n; i++)
      add_bytes(&mem->eval, aligned(dpm_shape_bytes(&test.v[i].shape)));
    /* the eval net's own scratch on the master (its context is not the step's) */
    if (!s)
      add_bytes(&mem->eval,
                dpm_net_scratch(&m->test, &test, dpm_backend_of(t->dev[0].kind)));
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
    const char *what = par && par->n_shards     ? "parallel.shards"
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
  if (in->num_shards > 1 &&
      (in->num_shards != (uint32_t)shards || in->shard_id != (uint32_t)shard))
    return dpm_errf(
        err, DPM_SPEC,
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
                    "fleet: %d shards of %d replicas are more than %d ranks", shards,
                    t->n, DPM_COMM_MAX_RANKS);
  const dpm_comm_rendezvous *rv = &t->opt.fleet.rendezvous;
  if ((!rv->store || !*rv->store) && !rv->kv)
    return dpm_errf(err, DPM_INVALID, "fleet: the rendezvous has no store");
  if (!rv->prefix || !*rv->prefix)
    return dpm_errf(err, DPM_INVALID, "fleet: the rendezvous has no prefix");
  t->shard = shard, t->shards = shards;
  return DPM_OK;
}

/* Creates the group with this thread's CPU set narrowed, for the call, to
 * the cores of the replicas' crew when the group is Gloo's: the threads it
 * starts (Gloo's I/O loop, the job thread of comm/gloo.c) inherit that set,
 * so the network work of one shard never preempts the replica of another
 * shard on the same host (the I/O loop, under SCHED_IDLE, yields to
 * its own replicas: comm/gloo_shim.cc). Other groups start no threads of their
 * own, or place them themselves (NCCL). */
static dpm_status create_on_cores(dpm_trainer *t, const dpm_comm_config *cfg,
                                  dpm_err *err) {
  cpu_set_t cores, was;
  pthread_t self = pthread_self();
  int narrowed = cfg->kind == DPM_COMM_GLOO && dpm_crew_cpus(t->crew, &cores) &&
                 !pthread_getaffinity_np(self, sizeof was, &was) &&
                 !pthread_setaffinity_np(self, sizeof cores, &cores);
  dpm_status s = dpm_comm_create(cfg, &t->comm, err);
  if (narrowed) pthread_setaffinity_np(self, sizeof was, &was);
  return s;
}

/* The replicas' group, as the factory chose it at setup (t->comm_cfg.kind,
 * comm.h: dpm_comm_choose): local threads for a process alone (none for one
 * replica), else across the job's processes, this shard's replicas being
 * ranks shard*n .. shard*n+n-1 of n*shards (formed at the fleet's
 * rendezvous: this waits for every shard, up to comm_timeout_ms). A nccl
 * group gets each replica's stream, a staged one its devices; gloo and
 * staged groups send float gradients as bf16 with precision.allreduce bf16
 * (comm.h: dpm_comm_wire; within one process nothing is rounded). */
static dpm_status make_comm(dpm_trainer *t, const Dpm__ModelSpec *spec, dpm_err *err) {
  dpm_comm_config *cfg = &t->comm_cfg;
  cfg->size = t->n;
  cfg->rank_base = t->shard * t->n;
  cfg->world = trainer_ranks(t);
  cfg->timeout_ms = t->opt.comm_timeout_ms;
  cfg->deterministic = (t->math & DPM_MATH_DETERMINISTIC) != 0;
  cfg->wire =
      spec->precision && spec->precision->allreduce == DPM__ALLREDUCE_TYPE__ALLREDUCE_BF16
          ? DPM_COMM_WIRE_BF16
          : DPM_COMM_WIRE_F32;
  if (t->shards > 1) cfg->rendezvous = t->opt.fleet.rendezvous;
  if (!trainer_reduces(t)) return DPM_OK;
  if (cfg->kind ==
      DPM_COMM_NCCL) { /* NCCL queues each rank's collectives on its stream */
    if (!(t->streams = calloc((size_t)t->n, sizeof *t->streams))) return dpm_nomem(err);
    for (int d = 0; d < t->n; d++) t->streams[d] = dpm_dev_stream(t->r[d].dev);
    cfg->streams = t->streams;
  } else if (cfg->kind == DPM_COMM_STAGED) {
    if (!(t->devs = calloc((size_t)t->n, sizeof *t->devs))) return dpm_nomem(err);
    for (int d = 0; d < t->n; d++) t->devs[d] = t->r[d].dev;
    cfg->devs = t->devs;
  }
  if (create_on_cores(t, cfg, err)) {
    dpm_err_prefix(err, "%s: ", spec->source);
    return trainer_shard_prefix(t, err);
  }
  return DPM_OK;
}

/* The collectives of one step, in order, with their sizes: what every rank
 * of the job must run alike (net type, buckets, computed broadcasts), and
 * how float sums cross processes (precision.allreduce: a bf16 wire and an
 * fp32 one move other messages). */
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
  fnv(&h, (uint64_t)t->comm_cfg.wire);
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
  m->word[AGREE_MODEL] = t->spec_hash;
  m->word[AGREE_PLAN] = plan_digest(t);
  m->word[AGREE_DEVICES] = (uint64_t)t->n;
  m->word[AGREE_SHARDS] = (uint64_t)t->shards;
  m->word[AGREE_EXAMPLES] = (uint64_t)dpm_reader_size(t->reader);
  t->agree = 1;
  dpm_status s = trainer_dispatch(t, JOB_META, err);
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
  return trainer_shard_prefix(t, err);
}

/* precision.compute bf16/fp16 runs on cpu devices (the 16-bit ops through
 * the CPU's f32 kernels: backend/cpu/lowp_run.h) and fenced ones (the same,
 * inside the fence); bf16 also on cuda devices, where FC, FCGradient, Relu,
 * ReluGradient, Cast and the byte moves (Copy, Flatten, Reshape, Concat
 * ...) have bf16 kernels: a net with another op on bf16 tensors is refused
 * when it is bound, naming op and device (engine/exec.h). fp16 is refused
 * on cuda here. */
static dpm_status precision_check(const dpm_trainer *t, const Dpm__ModelSpec *spec,
                                  dpm_err *err) {
  static const char *const names[] = {[DPM__COMPUTE_TYPE__COMPUTE_FP32] = "fp32",
                                      [DPM__COMPUTE_TYPE__COMPUTE_BF16] = "bf16",
                                      [DPM__COMPUTE_TYPE__COMPUTE_FP16] = "fp16"};
  const Dpm__PrecisionSpec *p = spec->precision;
  if (!p || p->compute == DPM__COMPUTE_TYPE__COMPUTE_FP32 ||
      t->dev[0].kind == DPM_DEVICE_CPU || t->dev[0].kind == DPM_DEVICE_FENCED ||
      (t->dev[0].kind == DPM_DEVICE_CUDA &&
       p->compute == DPM__COMPUTE_TYPE__COMPUTE_BF16))
    return DPM_OK;
  char at[32] = "";
  if (p->has_line) snprintf(at, sizeof at, "%u:", p->line);
  return dpm_errf(err, DPM_UNSUPPORTED,
                  "%s:%s precision.compute %s: not supported on %s devices in this "
                  "build (cpu and fenced devices; cuda: bf16 only)",
                  spec->source ? spec->source : "spec", at,
                  (unsigned)p->compute < sizeof names / sizeof *names ? names[p->compute]
                                                                      : "?",
                  dpm_device_kind_name(t->dev[0].kind));
}

/* The eval section's reader, copied into t (the spec is not kept): its
 * files, and for an image reader the centre crop of input.image. Nonzero
 * when memory runs out. */
static int eval_config(dpm_trainer *t, const Dpm__ModelSpec *spec) {
  const Dpm__EvalSpec *ev = spec->eval;
  t->has_eval = 1;
  t->eval_kind = reader_kind(ev->reader);
  t->eval_batch = (int)ev->batch_size;
  t->scale = spec->input->scale;
  t->num_classes = (int)spec->input->num_classes;
  if (!DPM_READER_IMAGE_KIND(t->eval_kind))
    return !(t->eval_images = strdup(ev->images)) ||
           !(t->eval_labels = strdup(ev->labels ? ev->labels : ""));
  int n = ev->reader == DPM__READER_KIND__READER_TAR ? (int)ev->n_shards : 1;
  if (!(t->eval_paths = calloc((size_t)n, sizeof *t->eval_paths))) return 1;
  for (; t->n_eval_paths < n; t->n_eval_paths++)
    if (!(t->eval_paths[t->n_eval_paths] = strdup(
              ev->reader == DPM__READER_KIND__READER_TAR ? ev->shards[t->n_eval_paths]
                                                         : ev->path)))
      return 1;
  t->eval_image = image_config(spec->input, 0);
  t->eval_image.paths = (const char *const *)t->eval_paths;
  t->eval_image.n_paths = n;
  return 0;
}

static dpm_status setup(dpm_trainer *t, const dpm_checked_spec *cs, dpm_err *err) {
  const Dpm__ModelSpec *spec = dpm_checked_spec_pb(cs);
  const Dpm__ParallelSpec *par = spec->parallel;
  double t0 = dpm_mono_ns() / 1e6;
  t->copies_stale = 1; /* the working copies are made before the first step */
  if (replica_devices(t, cs, err) || precision_check(t, spec, err)) return err->code;
  t->math = (par && par->allow_tf32 ? DPM_MATH_TF32 : 0) |
            (par && par->deterministic ? DPM_MATH_DETERMINISTIC : 0);
  t->graphs = par ? par->cuda_graphs : 1;
  int devices = t->n;
  if (t->opt.crew && dpm_crew_size(t->opt.crew) != devices)
    return dpm_errf(err, DPM_INVALID, "%s: %d devices, but the crew has %d ranks",
                    spec->source, devices, dpm_crew_size(t->opt.crew));
  if (fleet_check(t, spec, err)) return err->code;
  t->pipeline = !dpm_backend_of(t->dev[0].kind)->host_visible;
  /* the factory's choice, from the device kind; a staged group copies to the
     host mid-step: no step is captured as a graph */
  t->comm_cfg.kind = dpm_comm_choose(t->dev[0].kind, t->shards);
  if (t->comm_cfg.kind == DPM_COMM_STAGED) t->graphs = 0;
  int type = t->opt.net_type >= 0                                ? t->opt.net_type
             : par && par->net_type == DPM__NET_TYPE__NET_SIMPLE ? DPM_NET_SIMPLE
                                                                 : DPM_NET_DAG;
  /* parallel.device_batch: an elastic resume's, in place of input.batch_size */
  if (par && par->device_batch > DPM_SPEC_MAX_BATCH)
    return dpm_errf(err, DPM_SPEC, "parallel.device_batch must be 1..%u, got %u",
                    DPM_SPEC_MAX_BATCH, par->device_batch);
  int batch =
      par && par->device_batch ? (int)par->device_batch : (int)spec->input->batch_size;
  int64_t chw[3];
  dpm_status s = trainer_update_setup(t, spec, err);
  if (t->gathered) t->graphs = 0; /* host work between the step's ranges (update.c) */
  if (!s) s = input_shape(t->opt.fs, spec->input, chw, err);
  /* accumulation: each micro-batch's loss gradient carries 1/K */
  if (!s)
    s = dpm_model_build(spec, chw, batch,
                        loss_scale(devices, t->shards) / (float)t->accum, &t->model, err);
  /* SpatialBN's statistics over every replica of the job (parallel/sync_bn.h) */
  if (!s && par && par->combine_spatial_bn && trainer_ranks(t) > 1)
    s = dpm_sync_bn(&t->model, err);
  /* the plan is the job's: its collectives span every shard's replicas */
  /* bmuf: each replica runs the one-device plan; the block update averages */
  int bmuf = par && par->mode == DPM__PARALLEL_MODE__PARALLEL_BMUF;
  if (!s)
    s = dpm_plan_build(
        &t->model, bmuf ? 1 : trainer_ranks(t), !bmuf && trainer_reduces(t), type,
        par ? par->bucket_bytes : 4 << 20, par ? par->broadcast_computed_params : 1,
        t->gathered, replicas_backend(t), &t->plan, err);
  if (!s) s = trainer_update_plan(t, err);
  if (!s)
    s = dpm_bmuf_init(&t->bm, par, &t->model, trainer_ranks(t),
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
                    (unsigned long long)t->opt.max_bytes,
                    t->opt.max_bytes_name ? " (" : "",
                    t->opt.max_bytes_name ? t->opt.max_bytes_name : "",
                    t->opt.max_bytes_name ? ")" : "");
  if (t->opt.plan_only) return DPM_OK;
  if (t->opt.admit && t->opt.admit(t->opt.admit_arg, mb, devices, err)) return err->code;
  /* the spec is valid and fits: now allocate */
  if (dpm_reader_create(&rc, &t->reader, err)) return err->code;
  lap(t, DPM_PHASE_DATA, &t0);
  if (!(t->crew = t->opt.crew)) {
    /* the job's rank of each replica picks its core, so that shards of one
       job sharing a host spread over its cores (trainer_ranks(t) <= DPM_COMM_MAX_RANKS)
     */
    int *cores = malloc((size_t)devices * sizeof *cores);
    dpm_device *at = malloc((size_t)devices * sizeof *at);
    if (!cores || !at) {
      free(cores), free(at);
      return dpm_nomem(err);
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
  /* and none while a graph is captured: it records the replica's own work */
  int graphs = t->graphs && dpm_backend_of(t->dev[0].kind)->capture_begin;
  if (!t->opt.no_share && !graphs && t->plan.shared_op >= 0 && devices > 1 &&
      devices <= cpus && dpm_share_create(devices, &t->share, err))
    return err->code;
  if (!(t->r = calloc((size_t)devices, sizeof *t->r))) return dpm_nomem(err);
  if (claim_devices(t, err)) return err->code;
  trainer_claim(t);
  for (int d = 0; d < devices && !s; d++) {
    t->r[d].rank = d;
    char name[32];
    if ((s = replica_init(t, &t->r[d], err)) && strncmp(err->msg, "device ", 7))
      dpm_err_prefix(err, "%s: ", dpm_device_format(t->dev[d], name, sizeof name));
  } /* the device's own errors name it already */
  trainer_release(t);
  if (s) return s;
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

dpm_status dpm_trainer_create_checked(const dpm_checked_spec *cs,
                                      const dpm_trainer_options *opt, dpm_trainer **out,
                                      dpm_err *err) {
  *out = NULL;
  double t0 = dpm_mono_ns() / 1e6;
  const Dpm__ModelSpec *spec = dpm_checked_spec_pb(cs);
  dpm_trainer *t = calloc(1, sizeof *t);
  if (!t) return dpm_nomem(err);
  t->opt = opt ? *opt : (dpm_trainer_options){.net_type = -1};
  if (!t->opt.comm_timeout_ms) t->opt.comm_timeout_ms = 60000;
  t->seed = spec->input->seed;
  t->spec_hash = dpm_checked_spec_hash(cs);
  if (spec->eval && eval_config(t, spec)) {
    dpm_trainer_destroy(t);
    return dpm_nomem(err);
  }
  lap(t, DPM_PHASE_VALIDATE, &t0); /* nothing left to validate: the spec was checked */
  dpm_status s = setup(t, cs, err);
  if (s) {
    dpm_trainer_destroy(t);
    return s;
  }
  *out = t;
  return DPM_OK;
}

dpm_status dpm_trainer_create(const Dpm__ModelSpec *spec, const dpm_trainer_options *opt,
                              dpm_trainer **out, dpm_err *err) {
  *out = NULL;
  double t0 = dpm_mono_ns() / 1e6;
  dpm_checked_spec *cs;
  if (dpm_spec_check_borrowed(spec, &cs, err)) return err->code;
  double checked = dpm_mono_ns() / 1e6 - t0;
  dpm_status s = dpm_trainer_create_checked(cs, opt, out, err);
  if (!s) (*out)->phase_ms[DPM_PHASE_VALIDATE] += checked;
  dpm_checked_spec_free(cs);
  return s;
}
