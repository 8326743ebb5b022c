/* IDX files (MNIST, Fashion-MNIST): unsigned-byte labels (1-D, magic
 * 0x00000801) and images (3-D, magic 0x00000803), gzip-compressed or raw.
 *
 * Format: a 4-byte big-endian magic (0, 0, type 0x08 = u8, ndim), ndim
 * big-endian uint32 dimensions, then exactly dims[0] x ... bytes of data.
 * zlib reads gzip and raw files alike, so both load through the same path.
 *
 * Ownership: a loaded dpm_idx owns its data until dpm_idx_fini; a
 * dpm_idx_dataset owns both of its files until dpm_idx_dataset_fini. Pixels
 * stay uint8 in memory (60000 x 28 x 28 is 47 MB; float would be 188 MB).
 *
 * Threads: the functions keep no shared state; a loaded file may be read by
 * any number of threads at once.
 *
 * Errors: a file that cannot be opened or read is DPM_IO; a bad magic, a
 * zero or oversized dimension, data shorter or longer than the dimensions
 * say, a label >= num_classes, or image and label counts that differ are
 * DPM_CORRUPT; bad arguments are DPM_INVALID. Every message names the file
 * and none shows its bytes (a file a client names may be anyone's).
 * On failure nothing is left allocated and *out is zeroed. */
#ifndef DPM_IO_IDX_H
#define DPM_IO_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "common/file.h"

#define DPM_IDX_MAGIC_LABELS 0x00000801u /* u8, 1-D: [items] */
#define DPM_IDX_MAGIC_IMAGES 0x00000803u /* u8, 3-D: [items, rows, cols] */
#define DPM_IDX_MAX_ITEMS 100000000ll    /* items in one file */
#define DPM_IDX_MAX_SIDE 65536ll         /* rows, cols */
#define DPM_IDX_MAX_BYTES (1ll << 31)    /* data bytes in one file */

/* One loaded IDX file. */
typedef struct dpm_idx {
  int ndim;       /* 1 (labels) or 3 (images) */
  int64_t dim[3]; /* dim[0] = items; images: dim[1] = rows, dim[2] = cols */
  uint8_t *data;  /* the data, row-major, `size` bytes; owned */
  size_t size;    /* product of the dims */
} dpm_idx;

/* Load path (gzip or raw), opened through fs (NULL: plain paths; common/file.h:
 * a regular file, never blocking on a FIFO). ndim 1 accepts only a label
 * file, 3 only an image file, 0 either. On success *out owns the data. */
dpm_status dpm_idx_load(const dpm_fs *fs, const char *path, int ndim, dpm_idx *out,
                        dpm_err *err);
/* dpm_idx_load of the file open for reading at fd, from its current offset
 * (fd stays the caller's, open; path only names it in messages). */
dpm_status dpm_idx_load_fd(int fd, const char *path, int ndim, dpm_idx *out,
                           dpm_err *err);
/* Read only the header of path: fills ndim, dim and size, leaves data NULL
 * (nothing to free). Checks the magic and dimensions, not the data length. */
dpm_status dpm_idx_peek(const dpm_fs *fs, const char *path, int ndim, dpm_idx *out,
                        dpm_err *err);
/* Free the data and zero x; safe on a zeroed or already finalised x. */
void dpm_idx_fini(dpm_idx *x);

/* An image file and its label file, checked against each other. */
typedef struct dpm_idx_dataset {
  dpm_idx images; /* [n, rows, cols] */
  dpm_idx labels; /* [n], every label < num_classes */
  int64_t n;      /* examples */
  int rows, cols; /* image size */
} dpm_idx_dataset;

/* DPM_CORRUPT naming path and the first label at or above num_classes,
 * if any; else DPM_OK. */
dpm_status dpm_idx_check_labels(const dpm_idx *labels, int num_classes, const char *path,
                                dpm_err *err);
/* Load both files; the counts must match and every label must be below
 * num_classes (>= 1). */
dpm_status dpm_idx_dataset_load(const dpm_fs *fs, const char *images, const char *labels,
                                int num_classes, dpm_idx_dataset *out, dpm_err *err);
void dpm_idx_dataset_fini(dpm_idx_dataset *d);

#endif
