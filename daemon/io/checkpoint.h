/* Checkpoint files: the state of a model (Caffe2's GetCheckpointParams +
 * save/load), written atomically and verified in full on read.
 *
 * What a checkpoint holds: the master device's parameters, computed params
 * (batch-norm running statistics), optimizer state (momentum, Adam moments)
 * and counters (iteration counter, learning rate), under stripped names
 * ("fc1_w", not "cpu_0/fc1_w"), each with its blob kind and tensor; and the
 * metadata in dpm_ckpt_meta. Choosing and stripping the blobs is the
 * caller's job; this module only stores and verifies them.
 *
 * Threads: every function is reentrant; different files may be written and
 * read from any threads at once (each write has a temporary file of its own).
 *
 * Errors: dpm_err's message always starts with the path. DPM_INVALID: bad
 * arguments to write (no file is touched). DPM_IO: open, read, write, fsync
 * or rename failed (strerror text), or the path is not a regular file.
 * DPM_CORRUPT: the bytes are not a valid version-1 checkpoint ("truncated",
 * "not a dpm checkpoint", "checksum mismatch in tensor 'fc1_w'", ...).
 * DPM_UNSUPPORTED: a newer format version. DPM_NOMEM: allocation failed.
 *
 * ---- File format, version 1 ---------------------------------------------
 *
 * All integers are little-endian, fixed width, written field by field (no
 * struct dumps). CRC means CRC-32 as in zlib's crc32() (the ISO-HDLC / IEEE
 * 802.3 CRC: reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF;
 * Python zlib.crc32, Go hash/crc32.ChecksumIEEE), initial value 0.
 * Offsets are bytes from the start of the file. A file is, in order:
 *
 *   header   96 bytes at offset 0
 *   index    index_bytes bytes at offset 96: entry_count entries
 *   padding  zero bytes up to data_offset = round_up(96 + index_bytes, 64)
 *   data     each tensor's bytes in index order, each starting at a multiple
 *            of 64, separated by the fewest zero bytes that achieve that;
 *            the file ends right after the last tensor (at data_offset
 *            when there are none)
 *
 * Header:
 *   off size  field
 *     0   8   magic        "DPMCKPT\0" (44 50 4D 43 4B 50 54 00)
 *     8   4   u32 version  1; a reader refuses a larger one as unsupported
 *    12   4   u32 header_bytes  96
 *    16   8   u64 spec_hash     dpm_spec_hash() of the model spec
 *    24   8   u64 iter          iterations done when written
 *    32   8   u64 reader_epoch  reader position (dpm_reader_pos) of the
 *    40   8   u64 reader_index  next batch to train on
 *    48   4   u32 devices       devices per shard when written (informative)
 *    52   4   u32 shards        shards when written (informative)
 *    56   8   i64 created_unix  creation time, seconds since 1970 (UTC)
 *    64   4   u32 entry_count   0 .. DPM_CKPT_MAX_ENTRIES
 *    68   4   u32 index_bytes   size of the index
 *    72   8   u64 data_offset   round_up(96 + index_bytes, 64)
 *    80   8   u64 file_bytes    size of the whole file
 *    88   4   u32 index_crc     CRC of the index_bytes bytes at offset 96
 *    92   4   u32 header_crc    CRC of header bytes [0, 92)
 *
 * Index entry (64 bytes, then the name, then zeros to a multiple of 8; so an
 * entry is 64 + round_up(name_len, 8) bytes and the next one follows):
 *   off size  field
 *     0   2   u16 name_len  1 .. DPM_CKPT_MAX_NAME
 *     2   1   u8 kind       1 param, 2 computed, 3 optimizer state, 4 counter
 *     3   1   u8 dtype      1 f32 (IEEE-754 binary32), 2 i32, 3 i64,
 *                           4 bf16, 5 f16 (16-bit patterns; a model's
 *                           checkpoint holds f32 masters, never these)
 *     4   1   u8 ndim       0 .. 4 (0: a scalar, one element)
 *     5   3   zero
 *     8  32   u64 dims[4]   dims[i] for i < ndim in 1 .. 2^63-1 (outermost
 *                           first, row-major data); the others zero
 *    40   8   u64 offset    where the tensor's data starts
 *    48   8   u64 nbytes    product(dims) x dtype size (4, 4, 8, 2, 2)
 *    56   4   u32 data_crc  CRC of the nbytes data bytes
 *    60   4   zero
 *    64   name_len bytes    the name: no bytes below 0x20 and no 0x7F,
 *                           unique within the file (compared bytewise)
 *
 * Tensor data is the elements in row-major order, each little-endian.
 *
 * A reader checks, and this one refuses with DPM_CORRUPT anything else:
 * the magic; version (0 is corrupt, > 1 DPM_UNSUPPORTED); the file holds
 * at least the 96 header bytes; header_crc; header_bytes = 96; the actual
 * file size = file_bytes (less: "truncated", more: "trailing bytes");
 * entry_count <= DPM_CKPT_MAX_ENTRIES; data_offset as above and
 * <= file_bytes; index_crc; each entry's fields as above (name length and
 * characters, kind, dtype, ndim, dims, zero fields, nbytes = product of
 * dims x dtype size without overflow); the entries exactly fill index_bytes;
 * each offset equals the end of the previous tensor (or data_offset)
 * rounded up to 64, so tensors never overlap and every byte is accounted
 * for; the last tensor ends at file_bytes; padding bytes are zero; no
 * duplicate names; and each tensor's data_crc.
 *
 * Version 1 readers refuse every other version; a later version may add
 * fields (header_bytes says how long the header is) or mmap the 64-byte
 * aligned data in place. Tensors with a zero-sized dimension cannot be
 * stored. This implementation assumes a little-endian host (checked at
 * compile time). */
#ifndef DPM_IO_CHECKPOINT_H
#define DPM_IO_CHECKPOINT_H

#include <stdint.h>

#include "dpm/status.h"
#include "engine/op.h"
#include "engine/tensor.h"
#include "common/file.h"

#define DPM_CKPT_VERSION 1
#define DPM_CKPT_MAX_NAME 255          /* bytes in an entry name */
#define DPM_CKPT_MAX_ENTRIES (1 << 20) /* entries in one file */

/* Metadata of a checkpoint; stored and returned exactly as given. */
typedef struct dpm_ckpt_meta {
  uint64_t spec_hash;    /* dpm_spec_hash() of the spec (common/spec.h) */
  uint64_t iter;         /* iterations done */
  uint64_t reader_epoch; /* dpm_reader_pos of the next batch: epoch */
  uint64_t reader_index; /* ... and index */
  uint32_t devices;      /* devices per shard when written (informative) */
  uint32_t shards;       /* shards when written (informative) */
  int64_t created_unix;  /* seconds since 1970; the caller sets it */
} dpm_ckpt_meta;

/* One blob to write. Borrowed: read during dpm_ckpt_write only. */
typedef struct dpm_ckpt_entry {
  const char *name;    /* stripped name ("fc1_w"), see the format above */
  dpm_blob_kind kind;  /* PARAM, COMPUTED, OPTIM or COUNTER */
  const dpm_tensor *t; /* shape with every dim > 0, data non-NULL */
} dpm_ckpt_entry;

/* Write meta and e[0..n) to `path`, resolved through fs (NULL: plain
 * paths; common/file.h), atomically and durably: the data go to a new temporary
 * file in the same directory, tensor by tensor with a running CRC (no copy
 * of the data is made), then the header and index; the file is fsynced,
 * renamed over path, and the directory fsynced. On any failure the
 * temporary file is removed and a file already at path is left untouched,
 * except when only the final directory fsync fails (DPM_IO; the new file is
 * in place but may not survive a power loss). Entries are stored in the
 * order given. DPM_INVALID for bad arguments (names, duplicates, kinds,
 * shapes, n) before anything is written. */
dpm_status dpm_ckpt_write(const dpm_fs *fs, const char *path, const dpm_ckpt_meta *meta,
                          const dpm_ckpt_entry *e, int n, dpm_err *err);

/* A checkpoint read into memory. Everything is owned by it; release with
 * dpm_ckpt_fini. Entry i is names[i], kinds[i], tensors[i], in file order. */
typedef struct dpm_ckpt {
  dpm_ckpt_meta meta;
  int n;                /* entries */
  char **names;         /* [n], NUL-terminated */
  dpm_blob_kind *kinds; /* [n] */
  dpm_tensor *tensors;  /* [n], each owning its 64-byte aligned data */
} dpm_ckpt;

/* Read and verify the whole file (opened through fs; NULL: plain) (every check listed above, every CRC)
 * before returning DPM_OK. *out is overwritten (not freed first): on success
 * it owns the contents; on any error it is empty (n 0, NULL arrays) and
 * dpm_ckpt_fini on it is a no-op. */
dpm_status dpm_ckpt_read(const dpm_fs *fs, const char *path, dpm_ckpt *out,
                         dpm_err *err);

/* The tensor named `name`, or NULL; sets *kind when kind is non-NULL and the
 * name is found. Linear in n. */
const dpm_tensor *dpm_ckpt_find(const dpm_ckpt *c, const char *name, dpm_blob_kind *kind);

/* Free everything c owns and leave it empty; NULL is a no-op. */
void dpm_ckpt_fini(dpm_ckpt *c);

#endif
