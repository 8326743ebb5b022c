/* The replicas' state: sync (FinalizeAfterCheckpoint), checkpoints, and
 * loads, one shard's or a fleet job's, run as train/trainer.c's lock-step
 * jobs (setup.c above calls dpm_trainer_sync; trainer.c calls nothing
 * here). */
#include "train/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/spec.h"
#include "io/checkpoint.h"

/* ---- sync and checkpoints ------------------------------------------------ */

dpm_status dpm_trainer_sync(dpm_trainer *t, dpm_err *err) {
  return trainer_broadcast(t, (const char *const *)t->plan.synced, t->plan.n_synced, err);
}

dpm_status dpm_trainer_sync_blobs(dpm_trainer *t, const char *const *names, int n,
                                  dpm_err *err) {
  for (int i = 0; i < n; i++)
    if (!dpm_ws_find(&t->r[0].ws, names[i]))
      return dpm_errf(err, DPM_NOT_FOUND, "no blob '%s'", names[i]);
  return trainer_broadcast(t, names, n, err);
}

/* b's bytes where host code may read them: the tensor itself when its
 * device's memory is the host's, else a copy in tmp (a host tensor). */
static const dpm_tensor *on_host(const dpm_blob *b, dpm_tensor *tmp, dpm_err *err) {
  if (!b->t.dev || dpm_dev_host_visible(b->t.dev)) return &b->t;
  if (dpm_tensor_resize(tmp, &b->t.shape)) {
    dpm_nomem(err);
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

/* With a loss scale (precision.loss_scale), a checkpoint also holds the
 * scaler as LOSS_SCALER, a counter of 3 i64: the scale's IEEE-754 double
 * bits, the clean updates since it last changed, and the skipped updates
 * in a row: resume is exact. */
#define LOSS_SCALER "precision/loss_scaler"
static int scaler_entries(const dpm_trainer *t) {
  return t->ls_kind != DPM_LOSS_SCALE_NONE;
}

static void scaler_words(const dpm_trainer *t, uint64_t w[3]) {
  memcpy(&w[0], &t->ls_scale, sizeof w[0]);
  w[1] = t->ls_good;
  w[2] = t->ls_run;
}

static void scaler_set(dpm_trainer *t, const uint64_t w[3]) {
  memcpy(&t->ls_scale, &w[0], sizeof t->ls_scale);
  t->ls_good = w[1];
  t->ls_run = w[2];
  trainer_update_seeds(t);
}

static const dpm_shape scaler_shape = {.dtype = DPM_I64, .ndim = 1, .d = {3}};

dpm_status dpm_trainer_checkpoint(dpm_trainer *t, const dpm_fs *fs, const char *path,
                                  dpm_err *err) {
  const dpm_plan *p = &t->plan;
  int n = p->n_synced + replica_entries(t) + scaler_entries(t);
  dpm_ckpt_entry *e = calloc((size_t)n + 1, sizeof *e);
  dpm_tensor *staged = calloc((size_t)n + 1, sizeof *staged);
  char **names = calloc((size_t)n + 1, sizeof *names); /* replica_D/NAME, owned */
  dpm_status s = e && staged && names ? DPM_OK : dpm_nomem(err);
  trainer_claim(t);
  for (int i = 0; !s && i < n - scaler_entries(t); i++) {
    int d = i < p->n_synced ? 0 : 1 + (i - p->n_synced) / t->bm.n_local;
    const char *name = d ? t->bm.local[(i - p->n_synced) % t->bm.n_local] : p->synced[i];
    dpm_blob *b = dpm_ws_find(&t->r[d].ws, name);
    const dpm_tensor *h = on_host(b, &staged[i], err);
    if (!h) s = err->code;
    if (d && !s && !(names[i] = replica_name(d, name))) s = dpm_nomem(err);
    e[i] = (dpm_ckpt_entry){.name = d ? names[i] : b->name, .kind = b->kind, .t = h};
  }
  trainer_release(t);
  if (!s && scaler_entries(t)) { /* the last entry */
    dpm_tensor *h = &staged[n - 1];
    if (dpm_tensor_resize(h, &scaler_shape)) {
      s = dpm_nomem(err);
    } else {
      uint64_t w[3];
      scaler_words(t, w);
      dpm_tensor_write(h, w, sizeof w);
      e[n - 1] = (dpm_ckpt_entry){.name = LOSS_SCALER, .kind = DPM_BLOB_COUNTER, .t = h};
    }
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
  if (c->n != t->plan.n_synced + replica_entries(t) + scaler_entries(t))
    return dpm_errf(err, DPM_SHAPE, "%s: holds %d blobs, the model has %d", path, c->n,
                    t->plan.n_synced + replica_entries(t) + scaler_entries(t));
  if (scaler_entries(t)) {
    dpm_blob_kind kind;
    const dpm_tensor *x = dpm_ckpt_find(c, LOSS_SCALER, &kind);
    if (!x || kind != DPM_BLOB_COUNTER || !dpm_shape_equal(&x->shape, &scaler_shape))
      return dpm_errf(err, DPM_SHAPE, "%s: no loss scaler ('%s', i64 [3])", path,
                      LOSS_SCALER);
  }
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
  t->copies_stale = 1;
  trainer_claim(t);
  for (int i = 0; i < c->n; i++) {
    dpm_blob *b = dpm_ws_find(&t->r[0].ws, c->names[i]);
    if (b) dpm_tensor_write(&b->t, c->tensors[i].data, dpm_shape_bytes(&b->t.shape));
  }
  trainer_release(t);
}

/* parallel.mode bmuf, after the sync: replicas 1.. take their own state
 * from c (fits checked that it is there). */
static dpm_status write_replicas(dpm_trainer *t, const dpm_ckpt *c, dpm_err *err) {
  dpm_status s = DPM_OK;
  t->copies_stale = 1;
  trainer_claim(t);
  for (int i = 0; i < replica_entries(t) && !s; i++) {
    int d = 1 + i / t->bm.n_local;
    dpm_blob *b = dpm_ws_find(&t->r[d].ws, t->bm.local[i % t->bm.n_local]);
    char *name = replica_name(d, b->name);
    dpm_blob_kind kind;
    const dpm_tensor *x = name ? dpm_ckpt_find(c, name, &kind) : NULL;
    free(name);
    if (!x) {
      s = dpm_nomem(err);
      break;
    }
    const void *src = x->data; /* a host tensor: pointer only */
    dpm_tensor_write(&b->t, src, dpm_shape_bytes(&b->t.shape));
  }
  trainer_release(t);
  return s;
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
    if (s)
      snprintf(m->msg, sizeof m->msg, "%s", err->msg);
    else {
      m->word[LOAD_ITER] = c.meta.iter;
      m->word[LOAD_EPOCH] = c.meta.reader_epoch;
      m->word[LOAD_INDEX] = c.meta.reader_index;
      if (scaler_entries(t))
        dpm_tensor_read(dpm_ckpt_find(&c, LOSS_SCALER, NULL), &m->word[LOAD_SCALER],
                        3 * sizeof(uint64_t));
    }
  }
  dpm_status s = trainer_dispatch(t, JOB_META, err);
  const meta *got = &t->r[0].meta;
  if (!s && got->word[LOAD_STATUS]) { /* shard 0 refused the file */
    uint64_t code = got->word[LOAD_STATUS];
    s = code < DPM_STATUS_COUNT ? (dpm_status)code : DPM_INTERNAL;
    if (t->shard != 0) {
      dpm_errf(err, s, "shard 0 could not load the checkpoint: %.*s",
               (int)sizeof got->msg, got->msg);
      trainer_shard_prefix(t, err);
    }
  }
  if (!s && !got->word[LOAD_NOTHING]) {
    if (t->shard != 0) {
      dpm_reader_pos pos = {got->word[LOAD_EPOCH], got->word[LOAD_INDEX]};
      if (dpm_reader_seek(t->reader, pos, err)) s = trainer_shard_prefix(t, err);
    } else {
      write_master(t, &c);
    }
    if (!s) {
      t->iter = got->word[LOAD_ITER];
      if (scaler_entries(t)) scaler_set(t, &got->word[LOAD_SCALER]);
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
  if (scaler_entries(t)) {
    uint64_t w[3];
    dpm_tensor_read(dpm_ckpt_find(&c, LOSS_SCALER, NULL), w, sizeof w);
    scaler_set(t, w);
  }
  s = dpm_trainer_sync(t, err);
  if (!s) s = write_replicas(t, &c, err);
  dpm_ckpt_fini(&c);
  return s;
}
