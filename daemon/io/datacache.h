/* The dataset cache: decoded IDX files (common/idx.h), and the tar shards
 * of the image readers as they are, kept read-only in memory and shared by
 * every reader of the same file. dpmd makes one and every model's readers
 * (training and eval sets) take their files from it, so a second model on
 * Fashion-MNIST does not gunzip its 47 MB again.
 *
 * Key: the file's device, inode, size and modification time (to the
 * nanosecond), taken with fstat from the descriptor the data is read
 * through (opened by the caller's dpm_fs, on the caller's thread). A file
 * replaced (a new inode) or rewritten (a new size or mtime) is a new key
 * and is read again; the entries it replaces (the same device and inode,
 * or read by the same name) are stale and go as soon as no reader holds
 * them. A file rewritten in place at the same size within the file
 * system's timestamp granularity is not noticed.
 *
 * Holds: get returns a hold on an entry; its data stays valid and unchanged
 * until the hold is released. Holders never write it.
 *
 * Bound: max_bytes counts the data of every entry. Entries no reader holds
 * are evicted least recently released first while the total is over it;
 * a held entry is never evicted, so while readers hold more than max_bytes
 * the cache is over its bound, and each entry released then goes at once.
 * max_bytes 0 keeps nothing that is not held (readers of one file at the
 * same time still share it).
 *
 * Loading: a miss is read on the caller's thread, outside the cache's lock;
 * a caller asking for the same key meanwhile waits for that read instead of
 * reading the file again. A failed read is not cached: each waiter then
 * reads the file itself (and reports its own error).
 *
 * Threads: every function may be called from any thread. A NULL cache is
 * valid everywhere: get then reads a private copy, which release frees.
 *
 * Errors (get): those of dpm_file_open_read and dpm_idx_load (DPM_IO naming
 * the path, DPM_CORRUPT, DPM_NOMEM); DPM_IO "changed while it was being
 * read" when the file's key after the read differs from the one before.
 * Messages name the path, never the file's bytes. */
#ifndef DPM_IO_DATACACHE_H
#define DPM_IO_DATACACHE_H

#include <stdint.h>

#include "common/file.h"
#include "common/idx.h"
#include "dpm/status.h"

typedef struct dpm_data_cache dpm_data_cache;
typedef struct dpm_data_entry dpm_data_entry; /* what a hold holds */

/* Counters for metrics; a consistent snapshot. */
typedef struct dpm_data_cache_stats {
  uint64_t max_bytes;
  uint64_t bytes, held_bytes;     /* data of every entry; of the held ones */
  uint64_t entries, held_entries; /* entries (read, not being read) */
  uint64_t hits, misses, evictions;
} dpm_data_cache_stats;

dpm_status dpm_data_cache_create(uint64_t max_bytes, dpm_data_cache **out, dpm_err *err);
/* Frees every entry; no hold may remain. NULL is a no-op. */
void dpm_data_cache_destroy(dpm_data_cache *c);

/* ndim of a file held as its bytes (an image reader's tar shard): the
 * entry's dpm_idx has data and size (dim[0] = size), nothing decoded. */
#define DPM_DATA_BYTES (-1)
#define DPM_DATA_MAX_FILE (1ull << 40) /* bytes of a file held as it is */

/* A hold on path's contents (an IDX file of rank ndim: 1 labels, 3 images,
 * 0 either; or DPM_DATA_BYTES: the file as it is), opened through fs (NULL:
 * plain paths). */
dpm_status dpm_data_cache_get(dpm_data_cache *c, const dpm_fs *fs, const char *path,
                              int ndim, dpm_data_entry **out, dpm_err *err);
/* The file's contents; valid until the hold is released. */
const dpm_idx *dpm_data_entry_idx(const dpm_data_entry *e);
/* Releases one hold; NULL is a no-op. */
void dpm_data_cache_release(dpm_data_cache *c, dpm_data_entry *e);

/* Zeros for a NULL cache. */
void dpm_data_cache_stats_of(dpm_data_cache *c, dpm_data_cache_stats *out);

#endif
