/* Sample containers: the files that hold a data set's encoded images and
 * labels, indexed once and read per sample from any thread.
 *
 * Kinds (one row each in source.c's table, like the op list):
 *   tar     WebDataset shards (io/tar.c): members that share a key form a
 *           sample. The key is the member's path up to the first '.' of its
 *           last component ("train/n01/img7.jpg" -> "train/n01/img7"), the
 *           rest is its extension, matched without case: jpg or jpeg (JPEG),
 *           png (PNG), cls (the label: ASCII decimal, optional surrounding
 *           white space). Consecutive members with one key make one sample,
 *           as webdataset's tar reader groups them; a second image or label
 *           in one sample and other extensions (json, txt, ...) are
 *           ignored. A shard ends with the end-of-archive (zero) block.
 *           Shards are indexed in the order given.
 *   lmdb    a Caffe/Caffe2 LMDB of Datum records (io/lmdb.c, io/datum.h):
 *           one database directory (its data.mdb is read), or a path ending
 *           in ".mdb", the data file itself; one sample per record, in key
 *           order.
 *   folder  an image folder (io/folder.c): root/CLASS/FILE. Classes are the
 *           sub-folders' names sorted bytewise, labels 0..K-1; files inside
 *           are sorted bytewise; names starting with '.' and files whose
 *           extension is not jpg, jpeg or png are ignored.
 *
 * The index: open reads each container once, sequentially, and keeps per
 * sample its shard, where its encoded bytes lie in that shard [offset, len),
 * its encoding, its label and a bad reason. A sample is NOT dropped for bad
 * data: it stays in the index with its reason (no label, an unreadable
 * label, a label >= num_classes, no image, more bytes than max_sample_bytes,
 * a record that is not a Datum, not a regular file), so that the pipeline
 * applies on_bad_sample: fail turns dpm_source_bad_error's message (shard and
 * sample key) into its error, skip counts it (dpm_source_num_bad). A
 * container that cannot be walked at all (a bad tar header checksum, a
 * member that runs past the end of its shard, a truncated shard, an LMDB
 * that liblmdb refuses) fails open: no sample after it could be trusted.
 *
 * Shards: a tar file, the LMDB's data.mdb, or (folder) each image file; the
 * samples of a shard are consecutive in the index. A tar shard and the
 * data.mdb stay open (one descriptor each) until close; a folder holds only
 * its root's. open records each shard's size, mtime and inode; a read that
 * finds them changed, or comes up short, or (folder) finds a symbolic link
 * or nothing where the file was, is DPM_IO "changed while it was being
 * read", naming the shard.
 *
 * Files: every file and directory is opened through cfg->fs (common/file.h):
 * regular files only, without blocking on a FIFO; the folder walk opens each
 * class folder and file with openat(O_NOFOLLOW) below the root's descriptor,
 * so a symbolic link inside the folder is never followed (a linked class
 * folder is refused at open, a linked file is a bad sample). An LMDB is
 * opened by liblmdb through /proc/self/fd of the descriptor the fs gave,
 * read-only (MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR), walked once, and
 * closed: reads are plain preads of data.mdb, never through liblmdb's map.
 *
 * Threads: open and close on one thread; every other function may be called
 * from any number of threads at once on one open source (tar and lmdb
 * shards: pread on descriptors kept open; folder: each read opens its file).
 *
 * Ownership: the source copies what it keeps of cfg (paths); cfg->fs must
 * outlive it. A dpm_source_buf is the caller's, one per thread; data it
 * hands out stays valid until the buffer's next use or dpm_source_buf_free.
 *
 * Errors: a bad config is DPM_INVALID; a file that cannot be opened or read
 * is DPM_IO; a container that cannot be walked, or bounds exceeded (samples,
 * index bytes) are DPM_CORRUPT; every message names the file, and the sample
 * key where there is one (escaped), never a file's bytes. On failure nothing
 * stays allocated or open and *out is NULL. */
#ifndef DPM_IO_SOURCE_H
#define DPM_IO_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

struct dpm_fs;

typedef enum {
  DPM_SOURCE_TAR = 0,
  DPM_SOURCE_LMDB = 1,
  DPM_SOURCE_FOLDER = 2,
  DPM_SOURCE_KINDS
} dpm_source_kind;

/* How a sample's bytes are encoded. */
typedef enum {
  DPM_SAMPLE_JPEG = 0,
  DPM_SAMPLE_PNG = 1,
  DPM_SAMPLE_RAW = 2 /* Datum with encoded = false: CHW uint8 */
} dpm_sample_encoding;

/* Why a sample is bad; 0: it is not. */
typedef enum {
  DPM_BAD_NONE = 0,
  DPM_BAD_NO_LABEL,    /* tar: no .cls member */
  DPM_BAD_LABEL,       /* a label that is not a number (or too long) */
  DPM_BAD_LABEL_RANGE, /* label < 0 or >= num_classes */
  DPM_BAD_NO_IMAGE,    /* tar: no .jpg/.jpeg/.png member */
  DPM_BAD_TOO_LARGE,   /* more encoded bytes than max_sample_bytes */
  DPM_BAD_NOT_DATUM,   /* lmdb: a record that does not parse as a Datum */
  DPM_BAD_DATUM,       /* lmdb: a Datum with no usable image (float_data only,
                          raw size != channels x height x width, unknown encoding) */
  DPM_BAD_NOT_FILE,    /* folder: an entry that is not a regular file */
  DPM_BAD_REASONS
} dpm_bad_reason;

#define DPM_SOURCE_MAX_SAMPLES_DEFAULT 100000000ll       /* samples */
#define DPM_SOURCE_MAX_SAMPLE_BYTES_DEFAULT (64ll << 20) /* 64 MiB */
#define DPM_SOURCE_MAX_INDEX_BYTES_DEFAULT (4ll << 30)   /* 4 GiB */
#define DPM_SOURCE_MAX_PATHS 65536 /* tar shards (each holds a descriptor) */

typedef struct dpm_source_config {
  dpm_source_kind kind;
  const char *const *paths; /* tar: the shards, in order; lmdb, folder: one */
  int n_paths;              /* >= 1 (lmdb and folder: exactly 1) */
  const struct dpm_fs *fs;  /* how files are opened; NULL: plain paths */
  int num_classes;          /* >= 1: labels must be below it */
  /* Bounds; 0: the defaults above. */
  int64_t max_samples;      /* samples in the index */
  int64_t max_sample_bytes; /* encoded bytes of one sample */
  int64_t max_index_bytes;  /* memory the index may take */
} dpm_source_config;

typedef struct dpm_source dpm_source;

/* A caller's reusable read buffer; zero-initialise. Grows as needed within
 * the source's max_sample_bytes. One per thread. */
typedef struct dpm_source_buf {
  uint8_t *data;
  size_t cap;
} dpm_source_buf;

/* One sample as read. data points into the dpm_source_buf passed to read. */
typedef struct dpm_sample {
  const uint8_t *data; /* the encoded bytes (RAW: CHW pixels) */
  size_t len;
  dpm_sample_encoding encoding;
  int channels, height, width; /* RAW only; else 0 */
  int32_t label;
} dpm_sample;

/* Where one shard's samples lie, for a caller that holds whole shards in
 * memory (the data cache) and slices samples out of them. */
typedef struct dpm_source_shard_info {
  const char *path; /* as the shard is named in messages; the source's */
  uint64_t size;    /* bytes of the shard file, as at open */
  int64_t first;    /* its first sample's index */
  int64_t count;    /* its samples: first .. first + count - 1 */
} dpm_source_shard_info;

/* Index the container(s) of cfg (one sequential pass). */
dpm_status dpm_source_open(const dpm_source_config *cfg, dpm_source **out, dpm_err *err);
/* Close every descriptor and free the index; NULL is fine. */
void dpm_source_close(dpm_source *src);

/* "tar", "lmdb", "folder"; NULL for an unknown kind. */
const char *dpm_source_kind_name(dpm_source_kind kind);
/* The kind named name into *kind; -1 if none is. */
int dpm_source_kind_parse(const char *name, dpm_source_kind *kind);

int64_t dpm_source_size(const dpm_source *src);    /* samples, bad ones included */
int dpm_source_num_classes(const dpm_source *src); /* cfg's num_classes */
int64_t dpm_source_num_bad(const dpm_source *src); /* samples flagged bad */
/* Samples flagged with reason r. */
int64_t dpm_source_num_bad_reason(const dpm_source *src, dpm_bad_reason r);
uint64_t dpm_source_bytes(const dpm_source *src);       /* encoded bytes of all samples */
uint64_t dpm_source_index_bytes(const dpm_source *src); /* memory the index takes */
/* Sample i's label (-1 when it has none), and its bad reason. */
int32_t dpm_source_label(const dpm_source *src, int64_t i);
dpm_bad_reason dpm_source_bad(const dpm_source *src, int64_t i);
/* Short text of a reason ("no .cls label"). */
const char *dpm_source_bad_text(dpm_bad_reason r);
/* Sample i's key (tar key, LMDB key escaped, folder CLASS/FILE). */
const char *dpm_source_key(const dpm_source *src, int64_t i);
/* Sets err to DPM_CORRUPT "SHARD: sample KEY: REASON" and returns it when
 * sample i is bad; DPM_OK otherwise. */
dpm_status dpm_source_bad_error(const dpm_source *src, int64_t i, dpm_err *err);

/* Sample i's bytes into buf. A bad sample is dpm_source_bad_error's error;
 * a changed shard DPM_IO; i outside [0, size) DPM_INVALID. */
dpm_status dpm_source_read(const dpm_source *src, int64_t i, dpm_source_buf *buf,
                           dpm_sample *out, dpm_err *err);
void dpm_source_buf_free(dpm_source_buf *buf);

/* Shards: how many, where shard k's samples lie, and sample i's place in
 * its shard (the bytes [*offset, *offset + *len) of dpm_source_shard_read's
 * output; bad samples may have len 0). */
int64_t dpm_source_num_shards(const dpm_source *src);
dpm_status dpm_source_shard(const dpm_source *src, int64_t k, dpm_source_shard_info *info,
                            dpm_err *err);
dpm_status dpm_source_locate(const dpm_source *src, int64_t i, int64_t *shard,
                             uint64_t *offset, uint64_t *len, dpm_err *err);
/* Shard k's whole file (info.size bytes) into dst (cap >= info.size), with
 * the same change check as read. */
dpm_status dpm_source_shard_read(const dpm_source *src, int64_t k, void *dst, size_t cap,
                                 dpm_err *err);

#endif
