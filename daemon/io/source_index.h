/* The index that every container kind builds (io/source.h), and the calls
 * the kinds (io/tar.c, io/lmdb.c, io/folder.c) build it with. Internal to
 * daemon/io/.
 *
 * A kind's index function walks its container(s) once and appends shards
 * (dpm_src_add_shard) and, after each shard, that shard's samples
 * (dpm_src_add_item); source.c checks the bounds (samples, index bytes) at
 * every append. A kind's read function fills dst with len bytes at off of a
 * shard, checking that the shard did not change since it was indexed.
 *
 * Threads: building happens on open's thread; afterwards the index is
 * read-only. Errors as io/source.h. */
#ifndef DPM_IO_SOURCE_INDEX_H
#define DPM_IO_SOURCE_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "io/source.h"

typedef struct src_shard {
  char *path;      /* for messages and the folder read (owned) */
  const char *rel; /* folder: "CLASS/FILE" inside path; else NULL */
  int fd;          /* open for reading, or -1 (folder: opened per read) */
  uint64_t size;   /* as at open */
  int64_t mtime_s, mtime_ns;
  uint64_t ino, dev;
  int64_t first, count; /* its samples */
} src_shard;

typedef struct src_item {
  uint64_t off, len; /* the sample's bytes within its shard */
  uint64_t key;      /* offset of its key (NUL-terminated) in the key pool */
  uint32_t shard;
  int32_t label;                    /* -1: none */
  uint8_t enc;                      /* dpm_sample_encoding */
  uint8_t bad;                      /* dpm_bad_reason */
  uint16_t channels, height, width; /* RAW */
} src_item;

struct dpm_source {
  dpm_source_kind kind;
  int num_classes;
  int64_t max_samples, max_sample_bytes, max_index_bytes;
  const struct dpm_fs *fs;
  int root_fd; /* folder: the root's descriptor; else -1 */
  src_shard *shards;
  int64_t n_shards, cap_shards;
  src_item *items;
  int64_t n, cap;
  char *keys;
  size_t keys_len, keys_cap;
  uint64_t bytes, path_bytes;
  int64_t n_bad;
  int64_t n_bad_reason[DPM_BAD_REASONS];
};

/* Appends a shard named path (copied) whose descriptor is fd (-1: none;
 * the source owns it from this call, even on failure) and whose stat is st.
 * rel_off: folder, where "CLASS/FILE" starts in path; else -1. */
dpm_status dpm_src_add_shard(dpm_source *s, const char *path, int fd,
                             const struct stat *st, int rel_off, dpm_err *err);
/* Appends a sample of the last shard added: key (keylen bytes, copied;
 * bytes below 0x20 or above 0x7e are escaped), and it (its shard, key and
 * the source's counters are filled here). Applies the label and size checks:
 * a sample not bad yet becomes DPM_BAD_LABEL_RANGE or DPM_BAD_TOO_LARGE. */
dpm_status dpm_src_add_item(dpm_source *s, const char *key, size_t keylen, src_item it,
                            dpm_err *err);
/* Checks fd against what shard sh recorded (fstat: size, mtime, inode) and
 * reads len bytes at off into dst; DPM_IO "changed while it was being read"
 * on any difference or a short read. */
dpm_status dpm_src_pread(const src_shard *sh, int fd, uint64_t off, void *dst, size_t len,
                         dpm_err *err);
/* The changed-shard error for sh. */
dpm_status dpm_src_changed(const src_shard *sh, dpm_err *err);

/* The kinds' index and read functions (the table in source.c). */
dpm_status dpm_tar_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err);
dpm_status dpm_lmdb_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err);
dpm_status dpm_folder_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err);
dpm_status dpm_folder_read(const dpm_source *s, const src_shard *sh, uint64_t off,
                           void *dst, size_t len, dpm_err *err);

#endif
