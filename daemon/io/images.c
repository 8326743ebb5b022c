/* The image readers' decode pool (io/images.h).
 *
 * Pool: the job is one batch (its examples, epoch and output). Under mu,
 * `next` is the first example no thread has taken and `left` the examples
 * not yet finished; a thread takes one example at a time, works on it
 * outside the lock and counts it finished. The caller's thread works as
 * thread 0 and returns when `left` is 0; the workers sleep on `work`
 * between jobs. A failure is kept (the first one) and the examples not yet
 * taken are finished without work. */
#include "io/images.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "io/datacache.h"
#include "io/image.h"
#include "io/source.h"

#define IMAGES_MAX_SAMPLE_BYTES (16ll << 20) /* encoded bytes of one sample */
#define IMAGES_MAX_REPLACE 64                /* skip: bad samples in a row */

typedef struct worker {
  struct dpm_images *im;
  int id;
  pthread_t thread;
  int started;
  dpm_image_decoder *dec;
  dpm_augmenter *aug;
  dpm_source_buf buf; /* encoded bytes read from a shard */
  uint8_t *hwc;       /* raw Datum samples: CHW pixels turned HWC */
  size_t hwc_cap;
} worker;

struct dpm_images {
  dpm_source *src;
  dpm_augment_cfg aug;
  uint64_t seed;
  int skip;
  int64_t chw;   /* floats per example */
  int64_t n;     /* good samples */
  int64_t *good; /* [n]: their indices in the source */
  /* tar shards held in the data cache (NULL: each read is a pread) */
  dpm_data_cache *cache;
  dpm_data_entry **held;
  int64_t n_held;
  atomic_uint_fast64_t skipped;

  pthread_mutex_t mu;
  pthread_cond_t work, done;
  worker *w; /* [threads]; w[0] is the caller's */
  int threads;
  uint64_t gen; /* bumped per job */
  int stop;
  /* the job, under mu */
  const uint64_t *ex;
  int cnt, next, left;
  uint64_t epoch;
  float *data;
  int32_t *label;
  dpm_status st;
  dpm_err err;
};

static dpm_source_kind source_kind(int reader_kind) {
  return reader_kind == DPM_READER_TAR    ? DPM_SOURCE_TAR
         : reader_kind == DPM_READER_LMDB ? DPM_SOURCE_LMDB
                                          : DPM_SOURCE_FOLDER;
}

static dpm_status source_open(const dpm_reader_config *cfg, dpm_source **out,
                              dpm_err *err) {
  const dpm_reader_images *ri = &cfg->image;
  dpm_source_config sc = {.kind = source_kind(cfg->kind),
                          .paths = ri->paths,
                          .n_paths = ri->n_paths,
                          .fs = cfg->fs,
                          .num_classes = cfg->num_classes > 0 ? cfg->num_classes : 10,
                          .max_sample_bytes = IMAGES_MAX_SAMPLE_BYTES};
  return dpm_source_open(&sc, out, err);
}

/* The good samples of src: all of them with fail (where a bad one is an
 * error), the unflagged ones with skip. */
static dpm_status good_samples(const dpm_source *src, int skip, int64_t **good,
                               int64_t *n, dpm_err *err) {
  int64_t size = dpm_source_size(src), k = 0;
  if (!skip)
    for (int64_t i = 0; i < size; i++)
      if (dpm_source_bad_error(src, i, err)) return err->code;
  int64_t *g = malloc((size_t)(size ? size : 1) * sizeof *g);
  if (!g)
    return dpm_errf(err, DPM_NOMEM, "images: cannot index %lld samples", (long long)size);
  for (int64_t i = 0; i < size; i++)
    if (!dpm_source_bad(src, i)) g[k++] = i;
  if (k == 0) {
    free(g);
    return dpm_errf(err, DPM_CORRUPT, "images: no usable sample in %lld",
                    (long long)size);
  }
  *good = g;
  *n = k;
  return DPM_OK;
}

/* The decoders' limits: the defaults, max_pixels at most the spec's. */
static dpm_image_limits limits_of(const dpm_reader_config *cfg) {
  dpm_image_limits lim = dpm_image_limits_default();
  if (cfg->image.max_pixels < lim.max_pixels) lim.max_pixels = cfg->image.max_pixels;
  return lim;
}

/* Per decode thread at the configured limits: the encoded sample, the
 * decoder and the augmenter at their largest (io/image.h, io/augment.h)
 * and, for an LMDB (whose raw Datums are turned HWC), a copy of the
 * largest sample. */
static uint64_t thread_bytes(const dpm_reader_config *cfg) {
  dpm_image_limits lim = limits_of(cfg);
  uint64_t b = (uint64_t)IMAGES_MAX_SAMPLE_BYTES + dpm_image_decoder_max_bytes(&lim) +
               dpm_augmenter_max_bytes(&cfg->image.aug, lim.max_width, lim.max_height);
  return cfg->kind == DPM_READER_LMDB ? b + (uint64_t)IMAGES_MAX_SAMPLE_BYTES : b;
}

dpm_status dpm_images_bytes(const dpm_reader_config *cfg, uint64_t *bytes, int64_t *n,
                            dpm_err *err) {
  dpm_source *src = NULL;
  if (source_open(cfg, &src, err)) return err->code;
  int64_t size = dpm_source_size(src), good = size - dpm_source_num_bad(src);
  if (!cfg->image.skip_bad) good = size;
  *n = good;
  *bytes = dpm_source_index_bytes(src) + (uint64_t)size * sizeof(int64_t) +
           (uint64_t)cfg->image.decode_threads * thread_bytes(cfg);
  dpm_source_close(src);
  return DPM_OK;
}

/* Sample i's image, decoded at the scale its box allows, into *img. */
static dpm_status load(dpm_images *im, worker *w, int64_t i, uint64_t epoch, uint64_t e,
                       dpm_image *img, dpm_crop_box *box, int32_t *label, dpm_err *err) {
  dpm_sample s = {0};
  if (im->held) { /* a slice of the shard in the cache */
    int64_t shard;
    uint64_t off, len;
    if (dpm_source_locate(im->src, i, &shard, &off, &len, err)) return err->code;
    const dpm_idx *bytes = dpm_data_entry_idx(im->held[shard]);
    if (off > bytes->size || len > bytes->size - off)
      return dpm_errf(err, DPM_IO, "images: a shard changed while it was being read");
    s = (dpm_sample){.data = bytes->data + off,
                     .len = (size_t)len,
                     .encoding = DPM_SAMPLE_JPEG,
                     .label = dpm_source_label(im->src, i)};
  } else if (dpm_source_read(im->src, i, &w->buf, &s, err)) {
    return err->code;
  }
  *label = s.label;
  if (s.encoding == DPM_SAMPLE_RAW) { /* a raw Datum: CHW, BGR as Caffe writes it */
    if (s.channels != im->aug.channels)
      return dpm_errf(err, DPM_CORRUPT, "a raw Datum of %d channels (the spec wants %d)",
                      s.channels, im->aug.channels);
    size_t hw = (size_t)s.height * (size_t)s.width, need = hw * (size_t)s.channels;
    if (need > w->hwc_cap) {
      uint8_t *p = realloc(w->hwc, need);
      if (!p) return dpm_errf(err, DPM_NOMEM, "images: out of memory");
      w->hwc = p;
      w->hwc_cap = need;
    }
    int c = s.channels;
    for (int ch = 0; ch < c; ch++) {
      const uint8_t *plane = s.data + (size_t)(c == 3 ? 2 - ch : ch) * hw;
      for (size_t p = 0; p < hw; p++) w->hwc[p * (size_t)c + (size_t)ch] = plane[p];
    }
    *img = (dpm_image){.width = s.width,
                       .height = s.height,
                       .channels = c,
                       .scale_denom = 1,
                       .full_width = s.width,
                       .full_height = s.height,
                       .pixels = w->hwc};
    dpm_augment_box(&im->aug, im->seed, epoch, e, s.width, s.height, box);
    return DPM_OK;
  }
  dpm_image_info info;
  if (dpm_image_probe(s.data, s.len, &info, err)) return err->code;
  dpm_augment_box(&im->aug, im->seed, epoch, e, info.width, info.height, box);
  int denom = info.format == DPM_IMAGE_JPEG ? dpm_augment_scale(&im->aug, box) : 1;
  dpm_image_region part; /* what the resample reads: the rest is not decoded */
  dpm_augment_region(&im->aug, box, denom, info.width, info.height, &part);
  return dpm_image_decode_region(w->dec, s.data, s.len, im->aug.channels, denom, &part,
                                 img, err);
}

/* Example e (a position in the good samples) into out and *label; with
 * skip, a sample that fails is replaced by the next good one. */
static dpm_status example(dpm_images *im, worker *w, uint64_t epoch, uint64_t e,
                          float *out, int32_t *label, dpm_err *err) {
  int64_t pos = (int64_t)e;
  for (int tries = 0;; tries++) {
    int64_t i = im->good[pos];
    dpm_image img;
    dpm_crop_box box;
    dpm_status st = load(im, w, i, epoch, e, &img, &box, label, err);
    if (!st) st = dpm_augment_apply(w->aug, &img, &box, out, err);
    if (!st) return DPM_OK;
    if (st == DPM_NOMEM || st == DPM_INVALID || st == DPM_INTERNAL) return st;
    if (!im->skip || tries + 1 >= IMAGES_MAX_REPLACE) {
      int64_t shard;
      uint64_t off, len;
      dpm_source_shard_info si = {.path = "?"};
      if (!dpm_source_locate(im->src, i, &shard, &off, &len, NULL))
        dpm_source_shard(im->src, shard, &si, NULL);
      return dpm_err_prefix(err, "%s: sample %s%s", si.path, dpm_source_key(im->src, i),
                            im->skip ? " (64 samples in a row failed)" : "");
    }
    atomic_fetch_add(&im->skipped, 1);
    pos = (pos + 1) % im->n;
  }
}

/* Takes and works examples of the current job until none is left. */
static void work(dpm_images *im, worker *w) {
  pthread_mutex_lock(&im->mu);
  while (im->next < im->cnt) {
    int k = im->next++;
    int failed = im->st != DPM_OK;
    pthread_mutex_unlock(&im->mu);
    dpm_err err = {0};
    dpm_status st =
        failed ? DPM_OK
               : example(im, w, im->epoch, im->ex[k],
                         im->data + (size_t)k * (size_t)im->chw, &im->label[k], &err);
    pthread_mutex_lock(&im->mu);
    if (st && !im->st) {
      im->st = st;
      im->err = err;
    }
    if (--im->left == 0) pthread_cond_broadcast(&im->done);
  }
  pthread_mutex_unlock(&im->mu);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  dpm_images *im = w->im;
  uint64_t seen = 0;
  pthread_mutex_lock(&im->mu);
  for (;;) {
    while (!im->stop && im->gen == seen) pthread_cond_wait(&im->work, &im->mu);
    if (im->stop) break;
    seen = im->gen;
    pthread_mutex_unlock(&im->mu);
    work(im, w);
    pthread_mutex_lock(&im->mu);
  }
  pthread_mutex_unlock(&im->mu);
  return NULL;
}

dpm_status dpm_images_fill(dpm_images *im, uint64_t epoch, const uint64_t *ex, int cnt,
                           float *data, int32_t *label, dpm_err *err) {
  pthread_mutex_lock(&im->mu);
  im->ex = ex;
  im->cnt = cnt;
  im->next = 0;
  im->left = cnt;
  im->epoch = epoch;
  im->data = data;
  im->label = label;
  im->st = DPM_OK;
  im->gen++;
  pthread_cond_broadcast(&im->work);
  pthread_mutex_unlock(&im->mu);
  work(im, &im->w[0]);
  pthread_mutex_lock(&im->mu);
  while (im->left > 0) pthread_cond_wait(&im->done, &im->mu);
  dpm_status st = im->st;
  if (st && err) *err = im->err;
  pthread_mutex_unlock(&im->mu);
  return st;
}

uint64_t dpm_images_skipped(const dpm_images *im) {
  return im ? atomic_load(&((dpm_images *)im)->skipped) : 0;
}

void dpm_images_close(dpm_images *im) {
  if (!im) return;
  pthread_mutex_lock(&im->mu);
  im->stop = 1;
  pthread_cond_broadcast(&im->work);
  pthread_mutex_unlock(&im->mu);
  for (int t = 0; im->w && t < im->threads; t++) {
    worker *w = &im->w[t];
    if (w->started) pthread_join(w->thread, NULL);
    dpm_image_decoder_destroy(w->dec);
    dpm_augmenter_destroy(w->aug);
    dpm_source_buf_free(&w->buf);
    free(w->hwc);
  }
  free(im->w);
  for (int64_t k = 0; im->held && k < im->n_held; k++)
    dpm_data_cache_release(im->cache, im->held[k]);
  free(im->held);
  free(im->good);
  dpm_source_close(im->src);
  pthread_cond_destroy(&im->done);
  pthread_cond_destroy(&im->work);
  pthread_mutex_destroy(&im->mu);
  free(im);
}

/* Holds every tar shard's bytes from the cache when they all fit in it;
 * else leaves im->held NULL (reads are preads). */
static dpm_status hold_shards(dpm_images *im, const dpm_reader_config *cfg,
                              dpm_err *err) {
  dpm_data_cache_stats cs;
  dpm_data_cache_stats_of(cfg->cache, &cs);
  if (!cfg->cache || cfg->kind != DPM_READER_TAR) return DPM_OK;
  int64_t shards = dpm_source_num_shards(im->src);
  uint64_t total = 0;
  for (int64_t k = 0; k < shards; k++) {
    dpm_source_shard_info si;
    if (dpm_source_shard(im->src, k, &si, err)) return err->code;
    total += si.size; /* each below 2^40: no overflow below 2^24 shards */
    if (total > cs.max_bytes) return DPM_OK;
  }
  if (!(im->held = calloc((size_t)shards, sizeof *im->held)))
    return dpm_errf(err, DPM_NOMEM, "images: out of memory");
  im->cache = cfg->cache;
  for (; im->n_held < shards; im->n_held++) {
    dpm_source_shard_info si;
    if (dpm_source_shard(im->src, im->n_held, &si, err) ||
        dpm_data_cache_get(cfg->cache, cfg->fs, si.path, DPM_DATA_BYTES,
                           &im->held[im->n_held], err))
      return err->code;
    if (dpm_data_entry_idx(im->held[im->n_held])->size != si.size)
      return dpm_errf(err, DPM_IO, "%s: changed while it was being read", si.path);
  }
  return DPM_OK;
}

dpm_status dpm_images_open(const dpm_reader_config *cfg, dpm_images **out, int64_t *n,
                           dpm_err *err) {
  *out = NULL;
  const dpm_reader_images *ri = &cfg->image;
  if (ri->decode_threads < 1 || ri->decode_threads > 64 || ri->max_pixels < 1)
    return dpm_errf(err, DPM_INVALID, "images: decode_threads %d, max_pixels %lld",
                    ri->decode_threads, (long long)ri->max_pixels);
  if (dpm_augment_check(&ri->aug, err)) return err->code;
  dpm_images *im = calloc(1, sizeof *im);
  if (!im) return dpm_errf(err, DPM_NOMEM, "images: out of memory");
  pthread_mutex_init(&im->mu, NULL);
  pthread_cond_init(&im->work, NULL);
  pthread_cond_init(&im->done, NULL);
  im->aug = ri->aug;
  im->seed = cfg->seed;
  im->skip = ri->skip_bad;
  im->chw = (int64_t)ri->aug.channels * ri->aug.crop * ri->aug.crop;
  dpm_status st = source_open(cfg, &im->src, err);
  if (!st) st = good_samples(im->src, im->skip, &im->good, &im->n, err);
  if (!st) {
    atomic_store(&im->skipped, (uint64_t)(dpm_source_size(im->src) - im->n));
    st = hold_shards(im, cfg, err);
  }
  if (!st && !(im->w = calloc((size_t)ri->decode_threads, sizeof *im->w)))
    st = dpm_errf(err, DPM_NOMEM, "images: out of memory");
  dpm_image_limits lim = limits_of(cfg);
  for (int t = 0; !st && t < ri->decode_threads; t++) {
    worker *w = &im->w[t];
    im->threads = t + 1;
    w->im = im;
    w->id = t;
    if (!(w->dec = dpm_image_decoder_create(&lim, err)) ||
        !(w->aug = dpm_augmenter_create(&im->aug, err))) {
      st = err->code;
      break;
    }
    if (t == 0) continue; /* the caller's */
    sigset_t all, old;    /* the workers take no signals: the daemon's threads do */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
      st = dpm_errf(err, DPM_INTERNAL, "images: cannot start a decode thread: %s",
                    strerror(rc));
      break;
    }
    w->started = 1;
    pthread_setname_np(w->thread, "dpm-decode");
  }
  if (st) {
    dpm_images_close(im);
    return st;
  }
  *n = im->n;
  *out = im;
  return DPM_OK;
}
