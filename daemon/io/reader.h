/* The shared prefetching reader: one per model (and per shard), feeding the
 * global batch that the device workers slice.
 *
 * Data: kind 0 reads an IDX image file and its label file (gzip or raw; see
 * common/idx.h), kept as uint8 in memory; kinds 2-4 read encoded images
 * (WebDataset tar shards, an LMDB of Datum records, a folder per class)
 * through the decode pool of io/images.h, which writes float images into
 * the batch (their raw rows point at those floats); kind 1 generates a
 * synthetic set that is a pure function of the seed (uniform noise plus a
 * class-dependent band, labels uniform in [0, num_classes)), computed on
 * the fly, so it costs no memory. Pixels become floats (pixel * scale) in the producer thread, or,
 * for raw readers, in each consumer, which gathers its rows itself.
 *
 * Order: epoch e visits the examples in a permutation that depends only on
 * (seed, e) when shuffle is on (dpm_reader_order), else in file order. The
 * producer draws it lazily, only as far as the batches it has read, so the
 * first batch of an epoch does not wait for the whole epoch's shuffle.
 * Each global batch of all shards is batch x num_shards consecutive
 * entries of that order, starting at pos.index; shard s takes its contiguous
 * part [s*batch, (s+1)*batch), so shards see disjoint examples and together
 * cover the global batch. Positions are the same on every shard.
 *   repeat = 1 (training): endless epochs; the incomplete last global batch
 *     of an epoch is dropped, every batch has exactly `batch` examples.
 *   repeat = 0 (evaluation): one pass over epoch 0; the last batch may be
 *     partial, then next() yields NULL (and keeps doing so until a seek). A
 *     shard whose part of the last global batch is empty ends one batch
 *     before the others.
 *
 * Devices: a batch is the global batch of this shard, n = per-device batch x
 * devices rows. The caller slices it: device d takes rows [d*b, (d+1)*b) of
 * data and label (b = per-device batch). A partial last batch (repeat = 0)
 * leaves the last devices fewer rows, or none; the caller handles that.
 *
 * Threads: dpm_reader_create starts one producer thread that fills a ring of
 * prefetch + 1 batch buffers allocated once (prefetch batches queued ahead
 * plus the one the consumer holds; at least DPM_READER_RAW_QUEUE + 1 for
 * raw idx readers); nothing is allocated per batch. All the
 * dpm_reader_* functions are to be called from ONE consumer thread (or with
 * the caller's own lock); they are not safe to call concurrently.
 *
 * Ownership: the reader copies the config (it does not keep the path
 * strings). A batch returned by next() belongs to the reader and stays valid
 * until the next call of next, seek, rewind or destroy on that reader.
 *
 * Errors: create refuses a missing or unreadable file with DPM_IO naming the
 * path, a corrupt file with DPM_CORRUPT, and a bad config (unknown kind, no
 * file names, batch < 1, batch > examples / num_shards, shard_id outside
 * [0, num_shards), prefetch < 1, bad synthetic shape) with DPM_INVALID.
 * seek refuses a position outside the data set with DPM_INVALID. An image
 * reader's batch that cannot be made (a bad sample under on_bad_sample:
 * fail, a shard changed on disk) makes next and peek return its error
 * (io/images.h), and keep returning it until a seek. */
#ifndef DPM_IO_READER_H
#define DPM_IO_READER_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "io/augment.h"

struct dpm_fs;
/* The kinds; tar, lmdb and folder are the image readers (io/images.h). */
enum {
  DPM_READER_IDX = 0,
  DPM_READER_SYNTHETIC = 1,
  DPM_READER_TAR = 2,
  DPM_READER_LMDB = 3,
  DPM_READER_FOLDER = 4
};
#define DPM_READER_IMAGE_KIND(k) ((k) >= DPM_READER_TAR && (k) <= DPM_READER_FOLDER)

/* The image readers' files and pipeline. */
typedef struct dpm_reader_images {
  const char *const *paths; /* tar: the shards; lmdb, folder: one path */
  int n_paths;
  dpm_augment_cfg aug;      /* crop, resize, train (random crop), mean, std, ... */
  int decode_threads;       /* 1..64: the producer and decode_threads - 1 workers */
  int64_t max_pixels;       /* images declaring more are refused */
  int skip_bad;             /* on_bad_sample: 1 skip, 0 fail */
} dpm_reader_images;
#define DPM_READER_MAX_PREFETCH 64
#define DPM_READER_RAW_QUEUE 32 /* batches an idx raw reader queues, at least */

typedef struct dpm_reader dpm_reader;

typedef struct dpm_reader_config {
  int kind;           /* DPM_READER_IDX or DPM_READER_SYNTHETIC */
  const char *images; /* idx: image file (gzip or raw) */
  const char *labels; /* idx: label file */
  const struct dpm_fs *fs; /* how they are opened (common/file.h); NULL: plain paths */
  /* idx: the files' contents are held from this cache (io/datacache.h) for
   * the reader's life; NULL: the reader reads a private copy */
  struct dpm_data_cache *cache;
  double scale;       /* float value = pixel (0..255) * scale; finite */
  int shuffle;        /* 1: a seeded permutation per epoch; 0: file order */
  uint64_t seed;      /* shuffle order and synthetic data */
  int batch;          /* examples per global batch on this shard (per-device
                         batch x devices), >= 1 */
  int shard_id;       /* this shard, in [0, num_shards) */
  int num_shards;     /* hosts that share the data set, >= 1 */
  int prefetch;       /* batches queued ahead, 1..DPM_READER_MAX_PREFETCH */
  int repeat;         /* 1: endless epochs, drop the incomplete last batch;
                         0: one pass, last batch may be partial */
  /* synthetic (num_classes also bounds idx labels; <= 0 means 10 there) */
  int num_examples;            /* examples in the synthetic set */
  int channels, height, width; /* synthetic image shape */
  int num_classes;             /* labels are in [0, num_classes) */
  /* 1: batches carry where each example's raw pixels lie (dpm_batch.rows)
   * and each consumer gathers and converts its own rows with
   * dpm_reader_gather, in parallel on the device workers: the producer
   * copies no pixels of an idx file (it generates synthetic ones), so a
   * batch costs it microseconds and an idx ring holds at least
   * DPM_READER_RAW_QUEUE batches whatever prefetch says; 0: the producer
   * converts (dpm_batch.data). */
  int raw;
  dpm_reader_images image; /* tar, lmdb, folder (io/images.h) */
} dpm_reader_config;

/* A position in the stream: the epoch and the index (in that epoch's order)
 * of the first example of a global batch. One-pass readers end at
 * {0, size}. */
typedef struct dpm_reader_pos {
  uint64_t epoch;
  uint64_t index;
} dpm_reader_pos;

typedef struct dpm_batch {
  int n;              /* examples in this batch (= batch unless partial) */
  int c, h, w;        /* image shape */
  float *data;        /* [n, c, h, w], 64-byte aligned, pixel * scale; NULL if raw */
  const uint8_t **rows; /* raw readers: [n] example k's c*h*w pixels; else NULL */
  int32_t *label;     /* [n], in [0, num_classes) */
  dpm_reader_pos pos; /* position of this batch */
} dpm_batch;

/* Load the data (or set up the synthetic set), allocate the buffers and
 * start the producer thread at {0, 0}. On success *out owns all that. */
dpm_status dpm_reader_create(const dpm_reader_config *cfg, dpm_reader **out,
                             dpm_err *err);
/* Every byte create would allocate for cfg (data, order, ring), in *bytes,
 * found without allocating: idx files are only opened for their headers.
 * Refuses what create would refuse (same errors), including image and
 * label files of different lengths. */
dpm_status dpm_reader_bytes(const dpm_reader_config *cfg, uint64_t *bytes, dpm_err *err);
/* Block for the next batch. *out is valid until the next call of next,
 * seek, rewind or destroy; *out is NULL at the end of a one-pass reader. */
dpm_status dpm_reader_next(dpm_reader *r, const dpm_batch **out, dpm_err *err);
/* The batch the next call of next will return, without taking it; blocks
 * until it is read. *out (NULL at the end of a one-pass reader) stays valid
 * until next has returned it and is called again, or a seek, rewind or
 * destroy. The position next will return it at is dpm_reader_position. */
dpm_status dpm_reader_peek(dpm_reader *r, const dpm_batch **out, dpm_err *err);
/* dst[i] = (float)src[i] * (float)scale for n pixels (what a non-raw reader
 * stores in data, and what the predictor runtime's users compute). Reads
 * only the reader's constants: safe from any thread. */
void dpm_reader_convert(const dpm_reader *r, const uint8_t *src, float *dst, size_t n);
/* Raw readers: convert examples rows[0..n) into dst, one after another
 * (n x c*h*w floats): what a non-raw reader stores in data for them. Reads
 * the rows and the reader's constants: safe from any thread while the
 * batch holding rows is valid. */
void dpm_reader_gather(const dpm_reader *r, const uint8_t *const *rows, int n,
                       float *dst);
/* Position of the batch the next call to next() returns (the one to save in
 * a checkpoint); {0, size} once a one-pass reader has run out. */
dpm_reader_pos dpm_reader_position(const dpm_reader *r);
/* Drop what was prefetched and restart the producer so that next() returns
 * the batch at pos. Valid positions: index < size, and index + batch x
 * num_shards <= size when repeat is on (any epoch); when repeat is off,
 * epoch 0 and index <= size (size: at the end). Does not block on the
 * producer. */
dpm_status dpm_reader_seek(dpm_reader *r, dpm_reader_pos pos, dpm_err *err);
/* Seek to {0, 0} (evaluation passes). */
dpm_status dpm_reader_rewind(dpm_reader *r);
/* Image shape of every batch (c = 1 for IDX files). */
void dpm_reader_shape(const dpm_reader *r, int *c, int *h, int *w);
/* 1 for an image reader (its batches come from the decode pool). */
int dpm_reader_decodes(const dpm_reader *r);
/* Image readers: bad samples skipped so far (io/images.h); 0 for other
 * kinds. Any thread. */
uint64_t dpm_reader_skipped(const dpm_reader *r);
/* Examples in the whole data set (all shards). */
int64_t dpm_reader_size(const dpm_reader *r);
/* Stop and join the producer (it never waits on the consumer to exit) and
 * free everything; NULL is a no-op. */
void dpm_reader_destroy(dpm_reader *r);

/* The order of epoch `epoch`: fills order[0..n) with a permutation of
 * 0..n-1 seeded from (seed, epoch) if shuffle (a forward Fisher-Yates
 * shuffle: step i swaps position i with a uniform pick from [i, n)), else
 * the identity. Pure; the reader draws exactly this, step by step. */
void dpm_reader_order(uint64_t seed, uint64_t epoch, int shuffle, int64_t n,
                      uint32_t *order);

/* Synthetic example i of the set seeded by seed (io/synthetic.c): its label,
 * uniform in [0, num_classes), and c*h*w pixels: uniform noise in [0, 128)
 * plus 127 on the band of the image that belongs to the label (flattened
 * h*w pixels cut into num_classes equal bands, the same in every channel).
 * Pure; the reader uses exactly this. */
void dpm_synthetic_example(uint64_t seed, int64_t i, int c, int h, int w, int num_classes,
                           uint8_t *pixels, int32_t *label);

#endif
