/* The shared prefetching reader: one producer thread fills a ring of batch
 * buffers; the consumer holds at most one of them at a time.
 *
 * Ring invariants (under mu): slots [head, head + count) are filled, in
 * order; when `holding`, slot head is the batch the consumer was given. The
 * producer writes slot (head + count) % nslots outside the lock, only while
 * count < nslots, so it never touches a filled or held slot. A seek bumps
 * `gen` and empties the ring; a producer that finishes a slot for an older
 * generation throws it away.
 *
 * A full ring puts the producer to sleep, and the consumer wakes it only once
 * the ring has drained to half (`low`): waking a sleeping thread costs tens
 * of microseconds on a virtual machine, so it happens once per few batches,
 * not once per batch. A raw idx batch is row pointers and labels, filled in
 * about a microsecond: its ring is long (DPM_READER_RAW_QUEUE), so the
 * producer wakes once per 16 steps and runs too briefly to hold up the
 * device worker whose core it lands on (it used to copy 100 KB of pixels
 * per MLP step there, and the other worker waited at the all-reduce). */
#include "io/reader.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/idx.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "io/datacache.h"
#include "io/images.h"

#define READER_MAX_SLOT_BYTES (1ll << 30) /* floats in one batch buffer */
#define READER_MAX_SIDE 65536
#define READER_MAX_EXAMPLE (1ll << 24) /* pixels in one synthetic example */

typedef struct reader_slot {
  dpm_batch batch;     /* what next() hands out; data/rows/label allocated once */
  uint8_t *pixels;     /* raw synthetic: the examples that rows point to */
  int end;             /* a one-pass reader ran out: next() yields NULL */
  dpm_status st;       /* image readers: the batch failed (next() returns err) */
  dpm_err err;
  dpm_reader_pos next; /* position of the batch after this one */
} reader_slot;

/* An epoch's order, drawn as far as it has been read (perm_extend). */
typedef struct reader_perm {
  uint32_t *order; /* [n]: positions [0, done) final, the rest not yet drawn */
  int64_t n, done;
  uint64_t epoch;
  uint64_t st[2]; /* the draw's random stream, at step `done` */
} reader_perm;

struct dpm_reader {
  dpm_reader_config cfg; /* copy; images/labels cleared after loading */
  int64_t n;             /* examples in the data set */
  int c, h, w;           /* image shape */
  int64_t chw;           /* pixels per example */
  int64_t global;        /* batch x num_shards: one step of pos.index */
  dpm_data_cache *cache; /* idx: where the files' holds come from (NULL: private) */
  dpm_data_entry *held[2]; /* idx: holds on the image and label files */
  const uint8_t *images, *labels; /* idx: their data */
  dpm_images *decode;             /* image readers: the source and the decode pool */
  uint64_t *ex;          /* image readers: the examples of the batch being filled */
  float scale;           /* pixel -> (float)pixel * scale, as the predictor does */

  /* Producer-private. */
  uint32_t *order;      /* the current epoch's order (shuffle only) */
  reader_perm perm;     /* how far `order` is drawn; perm.order NULL: not yet */
  uint8_t *scratch;     /* synthetic: one example's pixels */

  /* Shared, under mu. */
  pthread_mutex_t mu;
  pthread_cond_t not_full;  /* producer waits: ring full, done, or stop */
  pthread_cond_t not_empty; /* consumer waits: ring empty */
  reader_slot *slots;       /* nslots = prefetch + 1 */
  int nslots;
  int low;                  /* the consumer wakes the producer at count <= low */
  int head, count, holding;
  int done;                /* the producer produced the end marker */
  int stop;                /* destroy asked the producer to exit */
  uint64_t gen;            /* bumped by every seek */
  dpm_reader_pos prod_pos; /* position of the next batch to produce */
  pthread_t thread;
  int thread_started;

  /* Consumer-private. */
  dpm_reader_pos next_pos; /* position of the batch next() returns */
};

/* The order of one epoch, drawn lazily: a forward Fisher-Yates shuffle in
 * which step i fixes position i (swapping it with a uniform pick from
 * [i, n)), so the first positions are final after as many steps, not after
 * the whole epoch's n. */
static void perm_start(reader_perm *p, uint64_t seed, uint64_t epoch, int64_t n,
                       uint32_t *order) {
  for (int64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
  uint64_t k = seed;
  uint64_t base = dpm_splitmix64(&k);
  dpm_rng_seed(p->st, base ^ (epoch * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
  p->order = order;
  p->n = n;
  p->done = 0;
  p->epoch = epoch;
}

/* Makes positions [0, upto) of the order final. */
static void perm_extend(reader_perm *p, int64_t upto) {
  if (upto > p->n) upto = p->n;
  uint32_t *o = p->order;
  for (int64_t i = p->done; i < upto; i++) {
    int64_t j = i + (int64_t)dpm_rng_below(p->st, (uint64_t)(p->n - i));
    uint32_t t = o[i];
    o[i] = o[j];
    o[j] = t;
  }
  if (upto > p->done) p->done = upto;
}

void dpm_reader_order(uint64_t seed, uint64_t epoch, int shuffle, int64_t n,
                      uint32_t *order) {
  reader_perm p;
  perm_start(&p, seed, epoch, n, order);
  if (shuffle) perm_extend(&p, n);
}

/* Position of the global batch after the one at pos. */
static dpm_reader_pos reader_advance(const dpm_reader *r, dpm_reader_pos pos) {
  uint64_t n = (uint64_t)r->n, g = (uint64_t)r->global;
  pos.index += g;
  if (r->cfg.repeat) {
    if (pos.index + g > n) {
      pos.epoch++;
      pos.index = 0;
    }
  } else if (pos.index > n) {
    pos.index = n;
  }
  return pos;
}

/* Fill slot s with this shard's part of the global batch at pos. Runs on
 * the producer thread without the lock. */
static void reader_fill(dpm_reader *r, dpm_reader_pos pos, reader_slot *s) {
  const dpm_reader_config *cfg = &r->cfg;
  uint64_t lo = pos.index + (uint64_t)cfg->shard_id * (uint64_t)cfg->batch;
  uint64_t cnt = (uint64_t)cfg->batch;
  s->batch.pos = pos;
  s->end = 0;
  if (lo >= (uint64_t)r->n) { /* only in one-pass mode; see seek checks */
    s->end = 1;
    s->batch.n = 0;
    s->next = pos;
    return;
  }
  if (cnt > (uint64_t)r->n - lo) cnt = (uint64_t)r->n - lo;
  if (cfg->shuffle) { /* this epoch's order, drawn as far as this batch */
    if (!r->perm.order || r->perm.epoch != pos.epoch)
      perm_start(&r->perm, cfg->seed, pos.epoch, r->n, r->order);
    perm_extend(&r->perm, (int64_t)(lo + cnt));
  }
  s->batch.n = (int)cnt;
  s->next = reader_advance(r, pos);
  s->st = DPM_OK;
  if (r->decode) { /* decoded into data by the pool; raw rows point at it */
    for (uint64_t k = 0; k < cnt; k++)
      r->ex[k] = cfg->shuffle ? r->order[lo + k] : lo + k;
    s->st = dpm_images_fill(r->decode, pos.epoch, r->ex, (int)cnt, s->batch.data,
                            s->batch.label, &s->err);
    for (uint64_t k = 0; cfg->raw && k < cnt; k++)
      s->batch.rows[k] = (const uint8_t *)(s->batch.data + k * (uint64_t)r->chw);
    return;
  }
  for (uint64_t k = 0; k < cnt; k++) {
    uint64_t ex = cfg->shuffle ? r->order[lo + k] : lo + k;
    const uint8_t *src;
    if (cfg->kind == DPM_READER_IDX) {
      src = r->images + ex * (uint64_t)r->chw;
      s->batch.label[k] = r->labels[ex];
    } else {
      src = cfg->raw ? s->pixels + k * (uint64_t)r->chw : r->scratch;
      dpm_synthetic_example(cfg->seed, (int64_t)ex, r->c, r->h, r->w, cfg->num_classes,
                            (uint8_t *)src, &s->batch.label[k]);
    }
    if (cfg->raw)
      s->batch.rows[k] = src;
    else
      dpm_reader_convert(r, src, s->batch.data + k * (uint64_t)r->chw, (size_t)r->chw);
  }
}

void dpm_reader_convert(const dpm_reader *r, const uint8_t *src, float *dst, size_t n) {
  const float scale = r->scale;
  for (size_t j = 0; j < n; j++) dst[j] = (float)src[j] * scale; /* vectorised */
}

/* Rows ahead of the one converted whose cache lines are asked for: the
 * rows lie at random in the data set, and a row's first lines miss. */
#define GATHER_AHEAD 4

static void prefetch_row(const uint8_t *row, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
}

void dpm_reader_gather(const dpm_reader *r, const uint8_t *const *rows, int n,
                       float *dst) {
  size_t bytes = (size_t)r->chw * (r->decode ? sizeof(float) : 1);
  for (int k = 0; k < n && k < GATHER_AHEAD; k++) prefetch_row(rows[k], bytes);
  for (int k = 0; k < n; k++) {
    if (k + GATHER_AHEAD < n) prefetch_row(rows[k + GATHER_AHEAD], bytes);
    if (r->decode) /* rows are decoded float images */
      memcpy(dst + (size_t)k * (size_t)r->chw, rows[k], bytes);
    else
      dpm_reader_convert(r, rows[k], dst + (size_t)k * (size_t)r->chw, (size_t)r->chw);
  }
}

static void *reader_main(void *arg) {
  dpm_reader *r = arg;
  pthread_mutex_lock(&r->mu);
  while (!r->stop) {
    if (r->count == r->nslots || r->done) {
      pthread_cond_wait(&r->not_full, &r->mu);
      continue;
    }
    uint64_t gen = r->gen;
    dpm_reader_pos pos = r->prod_pos;
    reader_slot *s = &r->slots[(r->head + r->count) % r->nslots];
    pthread_mutex_unlock(&r->mu);
    reader_fill(r, pos, s);
    pthread_mutex_lock(&r->mu);
    if (gen != r->gen) continue; /* a seek happened meanwhile: discard */
    r->count++;
    r->prod_pos = s->next;
    if (s->end || s->st) r->done = 1; /* a failed batch ends the stream */
    pthread_cond_signal(&r->not_empty);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* Checks cfg and finds the data set's size and example shape: for idx
 * files from their headers alone (through cfg->fs), nothing loaded; image
 * readers take *n from the caller (their source's index) and the shape
 * from their crop. */
static dpm_status reader_geometry(const dpm_reader_config *cfg, int64_t *n, int *c,
                                  int *h, int *w, dpm_err *err) {
  if (!isfinite(cfg->scale))
    return dpm_errf(err, DPM_INVALID, "reader: scale %g is not finite", cfg->scale);
  if (cfg->batch < 1)
    return dpm_errf(err, DPM_INVALID, "reader: batch %d (must be >= 1)", cfg->batch);
  if (cfg->num_shards < 1 || cfg->shard_id < 0 || cfg->shard_id >= cfg->num_shards)
    return dpm_errf(err, DPM_INVALID, "reader: shard_id %d is outside [0, num_shards %d)",
                    cfg->shard_id, cfg->num_shards);
  if (cfg->prefetch < 1 || cfg->prefetch > DPM_READER_MAX_PREFETCH)
    return dpm_errf(err, DPM_INVALID, "reader: prefetch %d (must be 1..%d)",
                    cfg->prefetch, DPM_READER_MAX_PREFETCH);
  if (cfg->kind == DPM_READER_IDX) {
    if (!cfg->images || !*cfg->images || !cfg->labels || !*cfg->labels)
      return dpm_errf(err, DPM_INVALID,
                      "reader: idx needs both an images and a labels file");
    dpm_idx img, lab;
    if (dpm_idx_peek(cfg->fs, cfg->images, 3, &img, err) ||
        dpm_idx_peek(cfg->fs, cfg->labels, 1, &lab, err))
      return err->code;
    if (img.dim[0] != lab.dim[0])
      return dpm_errf(err, DPM_CORRUPT, "%s has %lld images but %s has %lld labels",
                      cfg->images, (long long)img.dim[0], cfg->labels,
                      (long long)lab.dim[0]);
    *n = img.dim[0];
    *c = 1;
    *h = (int)img.dim[1];
    *w = (int)img.dim[2];
  } else if (cfg->kind == DPM_READER_SYNTHETIC) {
    if (cfg->num_examples < 1)
      return dpm_errf(err, DPM_INVALID,
                      "reader: synthetic num_examples %d (must be >= 1)",
                      cfg->num_examples);
    if (cfg->channels < 1 || cfg->height < 1 || cfg->width < 1 ||
        cfg->channels > READER_MAX_SIDE || cfg->height > READER_MAX_SIDE ||
        cfg->width > READER_MAX_SIDE ||
        (int64_t)cfg->channels * cfg->height * cfg->width > READER_MAX_EXAMPLE)
      return dpm_errf(err, DPM_INVALID,
                      "reader: synthetic shape [%d, %d, %d] (each >= 1, at "
                      "most %lld pixels)",
                      cfg->channels, cfg->height, cfg->width,
                      (long long)READER_MAX_EXAMPLE);
    if (cfg->num_classes < 1)
      return dpm_errf(err, DPM_INVALID, "reader: synthetic num_classes %d (must be >= 1)",
                      cfg->num_classes);
    *n = cfg->num_examples;
    *c = cfg->channels;
    *h = cfg->height;
    *w = cfg->width;
  } else if (DPM_READER_IMAGE_KIND(cfg->kind)) {
    *c = cfg->image.aug.channels;
    *h = *w = cfg->image.aug.crop;
  } else {
    return dpm_errf(err, DPM_INVALID,
                    "reader: unknown kind %d (0 idx, 1 synthetic, 2-4 images)",
                    cfg->kind);
  }
  int64_t chw = (int64_t)*c * *h * *w, per_shard = *n / cfg->num_shards;
  if (cfg->batch > per_shard)
    return dpm_errf(err, DPM_INVALID,
                    "reader: batch %d is larger than the %lld examples per "
                    "shard (%lld examples, %d shards)",
                    cfg->batch, (long long)per_shard, (long long)*n, cfg->num_shards);
  if ((int64_t)cfg->batch * chw * (int64_t)sizeof(float) > READER_MAX_SLOT_BYTES)
    return dpm_errf(err, DPM_INVALID, "reader: batch %d x %lld pixels exceeds %lld bytes",
                    cfg->batch, (long long)chw, (long long)READER_MAX_SLOT_BYTES);
  return DPM_OK;
}

/* Batch buffers in the ring: the prefetched ones and the consumer's. */
static int reader_slots(const dpm_reader_config *cfg) {
  int queue = cfg->prefetch; /* an idx raw batch is row pointers: queue many */
  if (cfg->raw && cfg->kind == DPM_READER_IDX && queue < DPM_READER_RAW_QUEUE)
    queue = DPM_READER_RAW_QUEUE;
  return queue + 1;
}

dpm_status dpm_reader_bytes(const dpm_reader_config *cfg, uint64_t *bytes, dpm_err *err) {
  int64_t n = 0;
  int c, h, w;
  uint64_t decode = 0; /* image readers: index, order, decode threads' buffers */
  int images = DPM_READER_IMAGE_KIND(cfg->kind);
  if (images && dpm_images_bytes(cfg, &decode, &n, err)) return err->code;
  if (reader_geometry(cfg, &n, &c, &h, &w, err)) return err->code;
  uint64_t chw = (uint64_t)c * (uint64_t)h * (uint64_t)w, b = (uint64_t)cfg->batch;
  uint64_t slot = b * sizeof(int32_t) + 3 * DPM_ALIGN; /* labels; alignment */
  if (!cfg->raw || images) slot += b * chw * sizeof(float);
  if (cfg->raw)
    slot += b * sizeof(uint8_t *) + (cfg->kind == DPM_READER_SYNTHETIC ? b * chw : 0);
  uint64_t total = decode + (uint64_t)reader_slots(cfg) * slot; /* well below 2^62 */
  if (cfg->kind == DPM_READER_IDX) total += (uint64_t)n * (chw + 1);
  if (cfg->shuffle) total += (uint64_t)n * sizeof(uint32_t);
  if (cfg->kind == DPM_READER_SYNTHETIC && !cfg->raw) total += chw;
  *bytes = total;
  return DPM_OK;
}

/* Checks the config and fills r->n and the shape (loading idx files). */
static dpm_status reader_setup(dpm_reader *r, dpm_err *err) {
  dpm_reader_config *cfg = &r->cfg;
  if (DPM_READER_IMAGE_KIND(cfg->kind)) {
    if (dpm_images_open(cfg, &r->decode, &r->n, err)) return err->code;
    if (!(r->ex = malloc((size_t)(cfg->batch > 0 ? cfg->batch : 1) * sizeof *r->ex)))
      return dpm_errf(err, DPM_NOMEM, "reader: out of memory");
  }
  if (reader_geometry(cfg, &r->n, &r->c, &r->h, &r->w, err)) return err->code;
  if (cfg->kind == DPM_READER_IDX) {
    if (cfg->num_classes <= 0) cfg->num_classes = 10;
    r->cache = cfg->cache;
    if (dpm_data_cache_get(r->cache, cfg->fs, cfg->images, 3, &r->held[0], err) ||
        dpm_data_cache_get(r->cache, cfg->fs, cfg->labels, 1, &r->held[1], err))
      return err->code;
    const dpm_idx *img = dpm_data_entry_idx(r->held[0]), *lab = dpm_data_entry_idx(r->held[1]);
    if (img->dim[0] != r->n || img->dim[1] != r->h || img->dim[2] != r->w)
      return dpm_errf(err, DPM_IO, "%s: changed while it was being read", cfg->images);
    if (lab->dim[0] != r->n)
      return dpm_errf(err, DPM_IO, "%s: changed while it was being read", cfg->labels);
    if (dpm_idx_check_labels(lab, cfg->num_classes, cfg->labels, err)) return err->code;
    r->images = img->data;
    r->labels = lab->data;
  }
  cfg->images = cfg->labels = NULL; /* not kept: the caller owns them */
  cfg->image.paths = NULL;
  cfg->fs = NULL;
  cfg->cache = NULL;
  r->chw = (int64_t)r->c * r->h * r->w;
  r->global = (int64_t)cfg->batch * cfg->num_shards;
  return DPM_OK;
}

/* Frees what create allocated; the thread must not be running. */
static void reader_free(dpm_reader *r) {
  if (r->slots)
    for (int i = 0; i < r->nslots; i++) {
      dpm_free(r->slots[i].batch.data);
      dpm_free(r->slots[i].pixels);
      free(r->slots[i].batch.rows);
      dpm_free(r->slots[i].batch.label);
    }
  free(r->slots);
  free(r->order);
  free(r->ex);
  dpm_images_close(r->decode);
  free(r->scratch);
  for (int i = 0; i < 2; i++) dpm_data_cache_release(r->cache, r->held[i]);
  pthread_cond_destroy(&r->not_empty);
  pthread_cond_destroy(&r->not_full);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

dpm_status dpm_reader_create(const dpm_reader_config *cfg, dpm_reader **out,
                             dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "reader: no output");
  *out = NULL;
  if (!cfg) return dpm_errf(err, DPM_INVALID, "reader: no config");
  dpm_reader *r = calloc(1, sizeof *r);
  if (!r) return dpm_errf(err, DPM_NOMEM, "reader: out of memory");
  r->cfg = *cfg;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->not_full, NULL);
  pthread_cond_init(&r->not_empty, NULL);
  dpm_status st = reader_setup(r, err);
  if (st != DPM_OK) {
    reader_free(r);
    return st;
  }
  r->scale = (float)r->cfg.scale;
  r->nslots = reader_slots(&r->cfg);
  r->low = r->nslots > 3 ? (r->nslots - 1) / 2 : 1; /* a ready batch remains */
  r->slots = calloc((size_t)r->nslots, sizeof *r->slots);
  int ok = r->slots != NULL;
  for (int i = 0; ok && i < r->nslots; i++) {
    reader_slot *s = &r->slots[i];
    s->batch.c = r->c;
    s->batch.h = r->h;
    s->batch.w = r->w;
    size_t px = (size_t)r->cfg.batch * (size_t)r->chw;
    if (!r->cfg.raw || r->decode)
      ok = (s->batch.data = dpm_alloc(px * sizeof(float))) != NULL;
    if (ok && r->cfg.raw &&
        !(s->batch.rows = calloc((size_t)r->cfg.batch, sizeof *s->batch.rows)))
      ok = 0;
    else if (ok && r->cfg.raw && r->cfg.kind == DPM_READER_SYNTHETIC)
      ok = (s->pixels = dpm_alloc(px)) != NULL;
    s->batch.label = dpm_alloc((size_t)r->cfg.batch * sizeof(int32_t));
    ok = ok && (s->batch.data || s->batch.rows) && s->batch.label;
  }
  if (ok && r->cfg.shuffle)
    ok = (r->order = malloc((size_t)r->n * sizeof *r->order)) != NULL;
  if (ok && r->cfg.kind == DPM_READER_SYNTHETIC && !r->cfg.raw)
    ok = (r->scratch = malloc((size_t)r->chw)) != NULL;
  if (!ok) {
    reader_free(r);
    return dpm_errf(err, DPM_NOMEM, "reader: cannot allocate %d buffers", r->nslots);
  }
  /* The producer takes no signals: they belong to the daemon's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&r->thread, NULL, reader_main, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    reader_free(r);
    return dpm_errf(err, DPM_INTERNAL, "reader: cannot start thread: %s", strerror(rc));
  }
  r->thread_started = 1;
  pthread_setname_np(r->thread, "dpm-reader");
  *out = r;
  return DPM_OK;
}

dpm_status dpm_reader_next(dpm_reader *r, const dpm_batch **out, dpm_err *err) {
  if (!r || !out) return dpm_errf(err, DPM_INVALID, "reader: no reader");
  *out = NULL;
  pthread_mutex_lock(&r->mu);
  if (r->holding) { /* the previous batch is released */
    r->head = (r->head + 1) % r->nslots;
    r->count--;
    r->holding = 0;
    if (r->count <= r->low) pthread_cond_signal(&r->not_full);
  }
  while (r->count == 0) pthread_cond_wait(&r->not_empty, &r->mu);
  reader_slot *s = &r->slots[r->head];
  if (s->st) { /* a failed batch stays queued: next() keeps failing until a seek */
    dpm_status st = s->st;
    if (err) *err = s->err;
    pthread_mutex_unlock(&r->mu);
    return st;
  }
  if (!s->end) { /* the end marker stays queued: next() keeps yielding NULL */
    r->holding = 1;
    r->next_pos = s->next;
    *out = &s->batch;
  }
  pthread_mutex_unlock(&r->mu);
  return DPM_OK;
}

dpm_status dpm_reader_peek(dpm_reader *r, const dpm_batch **out, dpm_err *err) {
  if (!r || !out) return dpm_errf(err, DPM_INVALID, "reader: no reader");
  pthread_mutex_lock(&r->mu);
  /* the slot after the held one; the producer fills it (a ring holding only
     the consumer's batch is at or below `low`, so the producer is awake) */
  while (r->count <= r->holding) pthread_cond_wait(&r->not_empty, &r->mu);
  reader_slot *s = &r->slots[(r->head + r->holding) % r->nslots];
  dpm_status st = s->st;
  if (st && err) *err = s->err;
  *out = s->end || st ? NULL : &s->batch;
  pthread_mutex_unlock(&r->mu);
  return st;
}

dpm_reader_pos dpm_reader_position(const dpm_reader *r) {
  return r ? r->next_pos : (dpm_reader_pos){0, 0};
}

dpm_status dpm_reader_seek(dpm_reader *r, dpm_reader_pos pos, dpm_err *err) {
  if (!r) return dpm_errf(err, DPM_INVALID, "reader: no reader");
  uint64_t n = (uint64_t)r->n, g = (uint64_t)r->global;
  if (r->cfg.repeat) {
    if (pos.index >= n || pos.index + g > n)
      return dpm_errf(err, DPM_INVALID,
                      "reader: position (epoch %llu, index %llu) leaves no "
                      "full batch of %llu in %llu examples",
                      (unsigned long long)pos.epoch, (unsigned long long)pos.index,
                      (unsigned long long)g, (unsigned long long)n);
  } else if (pos.epoch != 0 || pos.index > n) {
    return dpm_errf(err, DPM_INVALID,
                    "reader: position (epoch %llu, index %llu) is outside a "
                    "one-pass reader of %llu examples",
                    (unsigned long long)pos.epoch, (unsigned long long)pos.index,
                    (unsigned long long)n);
  }
  pthread_mutex_lock(&r->mu);
  r->gen++;
  r->head = r->count = r->holding = r->done = 0;
  r->prod_pos = pos;
  r->next_pos = pos;
  pthread_cond_signal(&r->not_full);
  pthread_mutex_unlock(&r->mu);
  return DPM_OK;
}

dpm_status dpm_reader_rewind(dpm_reader *r) {
  return dpm_reader_seek(r, (dpm_reader_pos){0, 0}, NULL);
}

void dpm_reader_shape(const dpm_reader *r, int *c, int *h, int *w) {
  *c = r->c;
  *h = r->h;
  *w = r->w;
}

int64_t dpm_reader_size(const dpm_reader *r) { return r ? r->n : 0; }

int dpm_reader_decodes(const dpm_reader *r) { return r && r->decode; }

uint64_t dpm_reader_skipped(const dpm_reader *r) {
  return r ? dpm_images_skipped(r->decode) : 0;
}

void dpm_reader_destroy(dpm_reader *r) {
  if (!r) return;
  if (r->thread_started) {
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->not_full);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
  }
  reader_free(r);
}
