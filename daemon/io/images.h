/* The image readers' pipeline (readers tar, lmdb and folder of
 * io/reader.h): a sample source (io/source.h) and a pool of decode threads
 * that turn the examples of a batch into float images with io/image.h and
 * io/augment.h.
 *
 * A batch's examples are shared out among the pool: the caller's thread
 * (the reader's producer) and decode_threads - 1 workers each take the next
 * undone example, read its encoded bytes, decode it at the DCT scale its
 * crop box allows and augment it into its own row of the output. Every
 * random choice is a function of (seed, epoch, example), so the output does
 * not depend on the number of threads, replicas or shards.
 *
 * Bad samples: the source's index flags samples without a usable label or
 * image; a decode can fail on corrupt bytes. With skip (on_bad_sample:
 * skip) flagged samples are left out of the data set at open, and a sample
 * that fails to read or decode is replaced by the next good one in index
 * order (its crop still drawn for its own example number); each is counted
 * (dpm_images_skipped). With fail, open refuses a flagged sample and fill a
 * failed one, naming the shard and the sample key (never their bytes).
 *
 * Encoded bytes: when the data cache (io/datacache.h) can hold every shard
 * (tar, lmdb), open takes a hold on each shard's bytes and samples are
 * sliced from memory; otherwise every read is a pread of the shard and
 * nothing but the per-thread buffers grows (a data set larger than the
 * cache streams).
 *
 * Threads: open, fill, close on one thread (the producer); fill blocks until
 * its batch is done. dpm_images_skipped from any thread.
 *
 * Memory: dpm_images_bytes counts the index, the order of good samples and
 * each decode thread's buffers at the configured limits (the encoded sample
 * bound, max_pixels x 3 decoded bytes, the augmenter's scratch). */
#ifndef DPM_IO_IMAGES_H
#define DPM_IO_IMAGES_H

#include <stdint.h>

#include "dpm/status.h"
#include "io/reader.h"

typedef struct dpm_images dpm_images;

/* Opens cfg's source (cfg->kind tar, lmdb or folder), indexes it, starts the
 * pool. *n: the examples (good samples) in the data set. */
dpm_status dpm_images_open(const dpm_reader_config *cfg, dpm_images **out, int64_t *n,
                           dpm_err *err);
/* The bytes open would take for cfg beyond the batch buffers, and the
 * example count, found by indexing the source (then closed). */
dpm_status dpm_images_bytes(const dpm_reader_config *cfg, uint64_t *bytes, int64_t *n,
                            dpm_err *err);
/* Examples ex[0..cnt) of epoch `epoch`: images into data (cnt x channels x
 * crop x crop floats), labels into label. */
dpm_status dpm_images_fill(dpm_images *im, uint64_t epoch, const uint64_t *ex, int cnt,
                           float *data, int32_t *label, dpm_err *err);
/* Samples skipped so far: flagged at open and replaced since. */
uint64_t dpm_images_skipped(const dpm_images *im);
/* Stops the pool and frees everything; NULL is a no-op. */
void dpm_images_close(dpm_images *im);

#endif
