/* IDX file loading through zlib (gzip and raw files alike). */
#include "common/idx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Read up to n bytes into buf; returns the bytes read (short at the end of
 * the data) or -1 with err filled. */
static int64_t idx_read(gzFile f, const char *path, void *buf, size_t n, dpm_err *err) {
  size_t done = 0;
  while (done < n) {
    size_t want = n - done;
    if (want > (1u << 30)) want = 1u << 30;
    errno = 0;
    int got = gzread(f, (char *)buf + done, (unsigned)want);
    if (got < 0) {
      int zerr = 0;
      const char *msg = gzerror(f, &zerr);
      if (zerr == Z_ERRNO)
        dpm_errf(err, DPM_IO, "%s: read failed: %s", path, strerror(errno));
      else
        dpm_errf(err, DPM_CORRUPT, "%s: bad gzip data: %s", path, msg);
      return -1;
    }
    if (got == 0) break;
    done += (size_t)got;
  }
  return (int64_t)done;
}

#define IDX_LOAD_BUFFER (1u << 17) /* zlib's buffers when reading the data */
#define IDX_PEEK_BUFFER 1024u      /* ... when reading the header alone */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

/* Check the magic and dimensions in the header; fills x->ndim, x->dim and
 * x->size. */
static dpm_status idx_header(gzFile f, const char *path, int want_ndim, dpm_idx *x,
                             dpm_err *err) {
  uint8_t head[4 + 4 * 3];
  int64_t got = idx_read(f, path, head, 4, err);
  if (got < 0) return err ? err->code : DPM_IO;
  if (got < 4)
    return dpm_errf(err, DPM_CORRUPT, "%s: truncated IDX header (%lld of 4 magic bytes)",
                    path, (long long)got);
  uint32_t magic = be32(head);
  if (magic != DPM_IDX_MAGIC_LABELS && magic != DPM_IDX_MAGIC_IMAGES)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: not an IDX file of unsigned bytes (its magic is neither 0x%08x, "
                    "labels, nor 0x%08x, images)",
                    path, DPM_IDX_MAGIC_LABELS, DPM_IDX_MAGIC_IMAGES);
  int ndim = (int)(magic & 0xff);
  if (want_ndim && ndim != want_ndim)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: IDX magic 0x%08x is a %d-D %s file, expected %s "
                    "(magic 0x%08x)",
                    path, magic, ndim, ndim == 1 ? "label" : "image",
                    want_ndim == 1 ? "labels" : "images",
                    want_ndim == 1 ? DPM_IDX_MAGIC_LABELS : DPM_IDX_MAGIC_IMAGES);
  got = idx_read(f, path, head + 4, 4 * (size_t)ndim, err);
  if (got < 0) return err ? err->code : DPM_IO;
  if (got < 4 * ndim)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: truncated IDX header (%lld of %d dimension bytes)", path,
                    (long long)got, 4 * ndim);
  int64_t size = 1;
  for (int i = 0; i < ndim; i++) {
    int64_t d = be32(head + 4 + 4 * i);
    int64_t max = i == 0 ? DPM_IDX_MAX_ITEMS : DPM_IDX_MAX_SIDE;
    if (d < 1 || d > max)
      return dpm_errf(err, DPM_CORRUPT, "%s: IDX dimension %d is out of range (1..%lld)",
                      path, i, (long long)max);
    x->dim[i] = d;
    size *= d; /* each factor is bounded, so no overflow before the check */
    if (size > DPM_IDX_MAX_BYTES)
      return dpm_errf(err, DPM_CORRUPT, "%s: IDX data would exceed %lld bytes", path,
                      (long long)DPM_IDX_MAX_BYTES);
  }
  x->ndim = ndim;
  x->size = (size_t)size;
  return DPM_OK;
}

/* Read the header of the file open at fd (gzip or raw; fd is taken: gzclose
 * closes it) into *x. zlib fills its whole output buffer (twice `buffer`)
 * at the first read, so a peek, which reads only the header, takes a small
 * one. */
static dpm_status idx_start(int fd, const char *path, int ndim, size_t buffer, dpm_idx *x,
                            gzFile *f, dpm_err *err) {
  if (!(*f = gzdopen(fd, "rb"))) {
    close(fd);
    return dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);
  }
  gzbuffer(*f, (unsigned)buffer);
  dpm_status st = idx_header(*f, path, ndim, x, err);
  if (st != DPM_OK) {
    gzclose(*f);
    memset(x, 0, sizeof *x);
  }
  return st;
}

static dpm_status idx_args(const char *path, int ndim, dpm_idx *x, dpm_err *err) {
  if (!x) return dpm_errf(err, DPM_INVALID, "idx: no output");
  memset(x, 0, sizeof *x);
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "idx: no file name");
  if (ndim != 0 && ndim != 1 && ndim != 3)
    return dpm_errf(err, DPM_INVALID, "%s: IDX rank %d requested (0, 1, 3)", path, ndim);
  return DPM_OK;
}

/* Open path through fs and read its header into *x (shared by load and
 * peek). */
static dpm_status idx_open(const dpm_fs *fs, const char *path, int ndim, size_t buffer,
                           dpm_idx *x, gzFile *f, dpm_err *err) {
  if (idx_args(path, ndim, x, err)) return err->code;
  int fd;
  dpm_status st = dpm_file_open_read(fs, path, &fd, err);
  if (st != DPM_OK) return st;
  return idx_start(fd, path, ndim, buffer, x, f, err);
}

dpm_status dpm_idx_peek(const dpm_fs *fs, const char *path, int ndim, dpm_idx *out,
                        dpm_err *err) {
  gzFile f;
  dpm_status st = idx_open(fs, path, ndim, IDX_PEEK_BUFFER, out, &f, err);
  if (st == DPM_OK) gzclose(f);
  return st;
}

/* The data after a header read into *x (f is closed): exactly x->size
 * bytes, nothing after them. */
static dpm_status idx_body(gzFile f, const char *path, dpm_idx *x, dpm_idx *out,
                           dpm_err *err) {
  dpm_status st;
  /* malloc, not calloc: pages are touched only as the data arrives, so a
   * header that lies about a huge size costs nothing before the check. */
  x->data = malloc(x->size);
  if (!x->data) {
    st = dpm_errf(err, DPM_NOMEM, "%s: cannot allocate %zu bytes", path, x->size);
    goto fail;
  }
  int64_t got = idx_read(f, path, x->data, x->size, err);
  if (got < 0) {
    st = err ? err->code : DPM_IO;
    goto fail;
  }
  if ((size_t)got < x->size) {
    st = dpm_errf(err, DPM_CORRUPT,
                  "%s: truncated IDX data: %lld of %zu bytes the dimensions "
                  "promise",
                  path, (long long)got, x->size);
    goto fail;
  }
  uint8_t extra[256];
  got = idx_read(f, path, extra, sizeof extra, err);
  if (got < 0) {
    st = err ? err->code : DPM_IO;
    goto fail;
  }
  if (got > 0) {
    st = dpm_errf(err, DPM_CORRUPT, "%s: trailing bytes after the %zu bytes of IDX data",
                  path, x->size);
    goto fail;
  }
  gzclose(f);
  *out = *x;
  return DPM_OK;
fail:
  gzclose(f);
  free(x->data);
  return st;
}

dpm_status dpm_idx_load(const dpm_fs *fs, const char *path, int ndim, dpm_idx *out,
                        dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "idx: no output");
  memset(out, 0, sizeof *out);
  gzFile f;
  dpm_idx x;
  dpm_status st = idx_open(fs, path, ndim, IDX_LOAD_BUFFER, &x, &f, err);
  if (st != DPM_OK) return st;
  return idx_body(f, path, &x, out, err);
}

dpm_status dpm_idx_load_fd(int fd, const char *path, int ndim, dpm_idx *out,
                           dpm_err *err) {
  dpm_idx x;
  if (idx_args(path, ndim, out, err)) return err->code;
  int own = dup(fd);
  if (own < 0) return dpm_errf(err, DPM_IO, "%s: dup: %s", path, strerror(errno));
  gzFile f;
  dpm_status st = idx_start(own, path, ndim, IDX_LOAD_BUFFER, &x, &f, err);
  if (st != DPM_OK) return st;
  return idx_body(f, path, &x, out, err);
}

void dpm_idx_fini(dpm_idx *x) {
  if (!x) return;
  free(x->data);
  memset(x, 0, sizeof *x);
}

dpm_status dpm_idx_check_labels(const dpm_idx *labels, int num_classes, const char *path,
                                dpm_err *err) {
  for (size_t i = 0; i < labels->size; i++)
    if (labels->data[i] >= num_classes)
      return dpm_errf(err, DPM_CORRUPT, "%s: the label at index %zu is out of range [0, %d)",
                      path, i, num_classes);
  return DPM_OK;
}

dpm_status dpm_idx_dataset_load(const dpm_fs *fs, const char *images, const char *labels,
                                int num_classes, dpm_idx_dataset *out, dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "idx: no output");
  memset(out, 0, sizeof *out);
  if (num_classes < 1)
    return dpm_errf(err, DPM_INVALID, "idx: num_classes %d (must be >= 1)", num_classes);
  dpm_idx img = {0}, lab = {0};
  dpm_status st = dpm_idx_load(fs, labels, 1, &lab, err);
  if (st != DPM_OK) return st;
  if ((st = dpm_idx_check_labels(&lab, num_classes, labels, err))) {
    dpm_idx_fini(&lab);
    return st;
  }
  st = dpm_idx_load(fs, images, 3, &img, err);
  if (st != DPM_OK) {
    dpm_idx_fini(&lab);
    return st;
  }
  if (img.dim[0] != lab.dim[0]) {
    st = dpm_errf(err, DPM_CORRUPT, "%s has %lld images but %s has %lld labels", images,
                  (long long)img.dim[0], labels, (long long)lab.dim[0]);
    dpm_idx_fini(&img);
    dpm_idx_fini(&lab);
    return st;
  }
  out->images = img;
  out->labels = lab;
  out->n = img.dim[0];
  out->rows = (int)img.dim[1];
  out->cols = (int)img.dim[2];
  return DPM_OK;
}

void dpm_idx_dataset_fini(dpm_idx_dataset *d) {
  if (!d) return;
  dpm_idx_fini(&d->images);
  dpm_idx_fini(&d->labels);
  memset(d, 0, sizeof *d);
}
