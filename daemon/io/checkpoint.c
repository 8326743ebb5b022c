/* Checkpoint files: the version-1 format described in io/checkpoint.h.
 * Writing streams each tensor through zlib's crc32 into a temporary file,
 * then writes header and index, fsyncs, renames and fsyncs the directory.
 * Reading checks the header, the index and the layout before it allocates
 * anything, then reads each tensor straight into its own buffer. */
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "checkpoint.c stores tensor data as it lies in memory: a "
               "big-endian host needs byte swapping here");

static const uint8_t ckpt_magic[8] = {'D', 'P', 'M', 'C', 'K', 'P', 'T', 0};

enum {
  CKPT_HEADER_BYTES = 96,
  CKPT_ENTRY_BYTES = 64, /* fixed part of an index entry; the name follows */
  CKPT_ALIGN = 64,       /* tensor data alignment in the file */
  CKPT_CHUNK = 1 << 22,  /* bytes per read/write + CRC step */
};

/* Header field offsets (see the table in checkpoint.h). */
enum {
  H_MAGIC = 0,
  H_VERSION = 8,
  H_HEADER_BYTES = 12,
  H_SPEC_HASH = 16,
  H_ITER = 24,
  H_EPOCH = 32,
  H_INDEX = 40,
  H_DEVICES = 48,
  H_SHARDS = 52,
  H_CREATED = 56,
  H_COUNT = 64,
  H_INDEX_BYTES = 68,
  H_DATA_OFFSET = 72,
  H_FILE_BYTES = 80,
  H_INDEX_CRC = 88,
  H_HEADER_CRC = 92,
};
_Static_assert(H_HEADER_CRC + 4 == CKPT_HEADER_BYTES, "header layout");

/* Index entry field offsets. */
enum {
  E_NAME_LEN = 0,
  E_KIND = 2,
  E_DTYPE = 3,
  E_NDIM = 4,
  E_ZERO1 = 5,
  E_DIMS = 8,
  E_OFFSET = 40,
  E_NBYTES = 48,
  E_CRC = 56,
  E_ZERO2 = 60,
};
_Static_assert(E_ZERO2 + 4 == CKPT_ENTRY_BYTES, "entry layout");

/* File codes of blob kinds and dtypes: code = position + 1 (0 is never
 * valid), independent of the enums' values. */
static const dpm_blob_kind file_kinds[] = {DPM_BLOB_PARAM, DPM_BLOB_COMPUTED,
                                           DPM_BLOB_OPTIM, DPM_BLOB_COUNTER};
static const dpm_dtype file_dtypes[] = {DPM_F32, DPM_I32, DPM_I64, DPM_BF16, DPM_F16};
#define ARRAY_LEN(a) ((int)(sizeof(a) / sizeof *(a)))
_Static_assert(ARRAY_LEN(file_dtypes) == DPM_DTYPE_COUNT, "dtype codes");

static int kind_code(dpm_blob_kind k) {
  for (int i = 0; i < ARRAY_LEN(file_kinds); i++)
    if (file_kinds[i] == k) return i + 1;
  return 0;
}

static int dtype_code(dpm_dtype t) {
  for (int i = 0; i < ARRAY_LEN(file_dtypes); i++)
    if (file_dtypes[i] == t) return i + 1;
  return 0;
}

/* ---- little-endian fields ----------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) {
  for (int i = 0; i < 2; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static int all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* CRC-32 of any length (zlib's crc32 takes an unsigned int). */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, uint64_t n) {
  while (n > 0) {
    unsigned step = n > CKPT_CHUNK ? CKPT_CHUNK : (unsigned)n;
    crc = (uint32_t)crc32(crc, p, step);
    p += step;
    n -= step;
  }
  return crc;
}

/* Bytes of index entry for a name of len bytes. */
static uint64_t entry_bytes(size_t len) { return CKPT_ENTRY_BYTES + round_up(len, 8); }

/* Why a name of len bytes is refused, or NULL. */
static const char *name_problem(const uint8_t *s, size_t len) {
  if (len == 0) return "empty name";
  if (len > DPM_CKPT_MAX_NAME) return "name longer than 255 bytes";
  for (size_t i = 0; i < len; i++)
    if (s[i] < 0x20 || s[i] == 0x7f) return "name with a control character";
  return NULL;
}

/* Bytes of a tensor of ndim dims d and element size es, or 0 if a dim is
 * outside 1 .. INT64_MAX or the size overflows 63 bits. */
static uint64_t shape_bytes(int ndim, const uint64_t *d, uint64_t es) {
  uint64_t bytes = es;
  for (int i = 0; i < ndim; i++) {
    if (d[i] == 0 || d[i] > (uint64_t)INT64_MAX) return 0;
    if (__builtin_mul_overflow(bytes, d[i], &bytes)) return 0;
  }
  return bytes > (uint64_t)INT64_MAX ? 0 : bytes;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first duplicate among names[0..n) (sorted in place), or NULL. */
static const char *find_duplicate(const char **names, int n) {
  qsort(names, (size_t)n, sizeof *names, cmp_names);
  for (int i = 1; i < n; i++)
    if (!strcmp(names[i - 1], names[i])) return names[i];
  return NULL;
}

/* ---- I/O loops ------------------------------------------------------------ */

/* 1 when all n bytes were read, 0 at end of file first, -1 with errno. */
static int pread_all(int fd, void *buf, uint64_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n > 0) {
    size_t step = n > CKPT_CHUNK ? CKPT_CHUNK : (size_t)n;
    ssize_t r = pread(fd, p, step, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    p += r;
    off += (uint64_t)r;
    n -= (uint64_t)r;
  }
  return 1;
}

/* ---- writing -------------------------------------------------------------- */

/* What dpm_ckpt_write lays out before touching the disk. */
typedef struct ckpt_plan {
  uint8_t *head;        /* header + index + padding: data_offset bytes */
  uint64_t data_offset; /* where the first tensor starts */
  uint64_t file_bytes;  /* total size */
  uint64_t *offsets;    /* [n] tensor offsets */
  uint64_t *nbytes;     /* [n] tensor sizes */
  uint32_t index_bytes;
} ckpt_plan;

static void plan_fini(ckpt_plan *p) {
  free(p->head);
  free(p->offsets);
  free(p->nbytes);
}

/* Validate the entries and fill the plan: header (without CRCs) and index
 * (without data CRCs). DPM_INVALID naming the entry, or DPM_NOMEM. */
static dpm_status plan_make(const char *path, const dpm_ckpt_meta *m,
                            const dpm_ckpt_entry *e, int n, ckpt_plan *p, dpm_err *err) {
  uint64_t index_bytes = 0;
  for (int i = 0; i < n; i++) {
    const dpm_ckpt_entry *x = &e[i];
    if (!x->name || !x->t)
      return dpm_errf(err, DPM_INVALID, "%s: entry %d: NULL name or tensor", path, i);
    size_t len = strnlen(x->name, DPM_CKPT_MAX_NAME + 1);
    const char *why = name_problem((const uint8_t *)x->name, len);
    if (why) return dpm_errf(err, DPM_INVALID, "%s: entry %d: %s", path, i, why);
    if ((unsigned)x->kind >= DPM_BLOB_KIND_COUNT || !kind_code(x->kind))
      return dpm_errf(
          err, DPM_INVALID, "%s: entry %d ('%s'): blob kind %s cannot be checkpointed",
          path, i, x->name,
          (unsigned)x->kind < DPM_BLOB_KIND_COUNT ? dpm_blob_kind_name(x->kind)
                                                  : "(invalid)");
    const dpm_shape *s = &x->t->shape;
    if ((unsigned)s->dtype >= DPM_DTYPE_COUNT || s->ndim < 0 || s->ndim > DPM_MAX_DIMS)
      return dpm_errf(err, DPM_INVALID, "%s: entry %d ('%s'): invalid dtype or ndim %d",
                      path, i, x->name, s->ndim);
    uint64_t d[DPM_MAX_DIMS] = {0};
    for (int k = 0; k < s->ndim; k++) d[k] = s->d[k] > 0 ? (uint64_t)s->d[k] : 0;
    if (!shape_bytes(s->ndim, d, dpm_dtype_size(s->dtype)))
      return dpm_errf(err, DPM_INVALID, "%s: entry %d ('%s'): every dim must be > 0",
                      path, i, x->name);
    if (!x->t->data)
      return dpm_errf(err, DPM_INVALID, "%s: entry %d ('%s'): tensor has no data", path,
                      i, x->name);
    index_bytes += entry_bytes(len);
  }
  const char **names = malloc(sizeof *names * (size_t)(n ? n : 1));
  if (!names) return dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < n; i++) names[i] = e[i].name;
  const char *dup = find_duplicate(names, n);
  if (dup) {
    dpm_status st =
        dpm_errf(err, DPM_INVALID, "%s: duplicate entry name '%s'", path, dup);
    free(names);
    return st;
  }
  free(names);

  p->index_bytes = (uint32_t)index_bytes; /* n <= MAX_ENTRIES: fits */
  p->data_offset = round_up(CKPT_HEADER_BYTES + index_bytes, CKPT_ALIGN);
  p->head = calloc(1, p->data_offset);
  p->offsets = malloc(sizeof *p->offsets * (size_t)(n ? n : 1));
  p->nbytes = malloc(sizeof *p->nbytes * (size_t)(n ? n : 1));
  if (!p->head || !p->offsets || !p->nbytes)
    return dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);

  uint64_t end = p->data_offset;
  uint8_t *q = p->head + CKPT_HEADER_BYTES;
  for (int i = 0; i < n; i++) {
    const dpm_shape *s = &e[i].t->shape;
    size_t len = strlen(e[i].name);
    p->offsets[i] = round_up(end, CKPT_ALIGN);
    p->nbytes[i] = dpm_shape_bytes(s);
    end = p->offsets[i] + p->nbytes[i];
    put16(q + E_NAME_LEN, (uint16_t)len);
    q[E_KIND] = (uint8_t)kind_code(e[i].kind);
    q[E_DTYPE] = (uint8_t)dtype_code(s->dtype);
    q[E_NDIM] = (uint8_t)s->ndim;
    for (int k = 0; k < s->ndim; k++) put64(q + E_DIMS + 8 * k, (uint64_t)s->d[k]);
    put64(q + E_OFFSET, p->offsets[i]);
    put64(q + E_NBYTES, p->nbytes[i]);
    memcpy(q + CKPT_ENTRY_BYTES, e[i].name, len);
    q += entry_bytes(len);
  }
  p->file_bytes = end;

  uint8_t *h = p->head;
  memcpy(h + H_MAGIC, ckpt_magic, sizeof ckpt_magic);
  put32(h + H_VERSION, DPM_CKPT_VERSION);
  put32(h + H_HEADER_BYTES, CKPT_HEADER_BYTES);
  put64(h + H_SPEC_HASH, m->spec_hash);
  put64(h + H_ITER, m->iter);
  put64(h + H_EPOCH, m->reader_epoch);
  put64(h + H_INDEX, m->reader_index);
  put32(h + H_DEVICES, m->devices);
  put32(h + H_SHARDS, m->shards);
  put64(h + H_CREATED, (uint64_t)m->created_unix);
  put32(h + H_COUNT, (uint32_t)n);
  put32(h + H_INDEX_BYTES, p->index_bytes);
  put64(h + H_DATA_OFFSET, p->data_offset);
  put64(h + H_FILE_BYTES, p->file_bytes);
  return DPM_OK;
}

/* Write the data (with CRCs into the index), then header and index, to fd.
 * DPM_IO naming tmp on failure. */
static dpm_status write_body(int fd, const char *tmp, const dpm_ckpt_entry *e, int n,
                             ckpt_plan *p, dpm_err *err) {
  static const uint8_t zeros[CKPT_ALIGN];
  uint64_t end = p->data_offset;
  uint8_t *q = p->head + CKPT_HEADER_BYTES;
  for (int i = 0; i < n; i++) {
    if (dpm_pwrite_all(fd, zeros, p->offsets[i] - end, end) < 0) goto io_error;
    const uint8_t *data = e[i].t->data;
    uint32_t crc = 0;
    for (uint64_t done = 0; done < p->nbytes[i];) {
      uint64_t step = p->nbytes[i] - done < CKPT_CHUNK ? p->nbytes[i] - done : CKPT_CHUNK;
      crc = crc_update(crc, data + done, step);
      if (dpm_pwrite_all(fd, data + done, step, p->offsets[i] + done) < 0) goto io_error;
      done += step;
    }
    put32(q + E_CRC, crc);
    q += entry_bytes(get16(q + E_NAME_LEN));
    end = p->offsets[i] + p->nbytes[i];
  }
  put32(p->head + H_INDEX_CRC,
        crc_update(0, p->head + CKPT_HEADER_BYTES, p->index_bytes));
  put32(p->head + H_HEADER_CRC, crc_update(0, p->head, H_HEADER_CRC));
  if (dpm_pwrite_all(fd, p->head, p->data_offset, 0) < 0) goto io_error;
  return DPM_OK;
io_error:
  return dpm_errf(err, DPM_IO, "%s: write: %s", tmp, strerror(errno));
}

typedef struct {
  const char *path;
  const dpm_ckpt_entry *e;
  int n;
  ckpt_plan *plan;
} ckpt_job;

static dpm_status write_job(int fd, void *arg, dpm_err *err) {
  ckpt_job *j = arg;
  return write_body(fd, j->path, j->e, j->n, j->plan, err);
}

dpm_status dpm_ckpt_write(const dpm_fs *fs, const char *path, const dpm_ckpt_meta *meta,
                          const dpm_ckpt_entry *e, int n, dpm_err *err) {
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "checkpoint: empty path");
  if (!meta || n < 0 || n > DPM_CKPT_MAX_ENTRIES || (n > 0 && !e))
    return dpm_errf(err, DPM_INVALID, "%s: no metadata, or entry count %d outside 0..%d",
                    path, n, DPM_CKPT_MAX_ENTRIES);
  ckpt_plan plan = {0};
  dpm_status st = plan_make(path, meta, e, n, &plan, err);
  ckpt_job job = {path, e, n, &plan};
  if (st == DPM_OK) st = dpm_file_write(fs, path, 0, write_job, &job, err);
  plan_fini(&plan);
  return st;
}

/* ---- reading -------------------------------------------------------------- */

void dpm_ckpt_fini(dpm_ckpt *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    if (c->names) free(c->names[i]);
    if (c->tensors) dpm_tensor_fini(&c->tensors[i]);
  }
  free(c->names);
  free(c->kinds);
  free(c->tensors);
  *c = (dpm_ckpt){0};
}

const dpm_tensor *dpm_ckpt_find(const dpm_ckpt *c, const char *name,
                                dpm_blob_kind *kind) {
  if (!c || !name) return NULL;
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->names[i], name)) {
      if (kind) *kind = c->kinds[i];
      return &c->tensors[i];
    }
  return NULL;
}

/* State of one read; the index entries parsed into offsets and sizes. */
typedef struct ckpt_reader {
  const char *path;
  int fd;
  uint64_t size;     /* actual file size */
  uint64_t *offsets; /* [n] */
  uint64_t *nbytes;  /* [n] */
  uint32_t *crcs;    /* [n] */
} ckpt_reader;

static dpm_status read_error(const ckpt_reader *r, dpm_err *err) {
  return dpm_errf(err, DPM_IO, "%s: read: %s", r->path, strerror(errno));
}

/* Check the header's fields against the file; fills meta and the index
 * geometry. */
static dpm_status parse_header(const ckpt_reader *r, const uint8_t *h, dpm_ckpt_meta *m,
                               uint32_t *count, uint32_t *index_bytes,
                               uint64_t *data_offset, dpm_err *err) {
  const char *path = r->path;
  if (get32(h + H_HEADER_CRC) != crc_update(0, h, H_HEADER_CRC))
    return dpm_errf(err, DPM_CORRUPT, "%s: checksum mismatch in header", path);
  if (get32(h + H_HEADER_BYTES) != CKPT_HEADER_BYTES)
    return dpm_errf(err, DPM_CORRUPT, "%s: header size %u, expected %d", path,
                    get32(h + H_HEADER_BYTES), CKPT_HEADER_BYTES);
  uint64_t file_bytes = get64(h + H_FILE_BYTES);
  if (r->size < file_bytes)
    return dpm_errf(err, DPM_CORRUPT, "%s: truncated: %llu of %llu bytes", path,
                    (unsigned long long)r->size, (unsigned long long)file_bytes);
  if (r->size > file_bytes)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: %llu trailing bytes after the end of the checkpoint", path,
                    (unsigned long long)(r->size - file_bytes));
  *count = get32(h + H_COUNT);
  *index_bytes = get32(h + H_INDEX_BYTES);
  *data_offset = get64(h + H_DATA_OFFSET);
  if (*count > DPM_CKPT_MAX_ENTRIES)
    return dpm_errf(err, DPM_CORRUPT, "%s: %u entries, more than the limit %d", path,
                    *count, DPM_CKPT_MAX_ENTRIES);
  if ((uint64_t)*count * CKPT_ENTRY_BYTES > *index_bytes)
    return dpm_errf(err, DPM_CORRUPT, "%s: an index of %u bytes cannot hold %u entries",
                    path, *index_bytes, *count);
  uint64_t want = round_up((uint64_t)CKPT_HEADER_BYTES + *index_bytes, CKPT_ALIGN);
  if (*data_offset != want)
    return dpm_errf(err, DPM_CORRUPT, "%s: data offset %llu, expected %llu", path,
                    (unsigned long long)*data_offset, (unsigned long long)want);
  if (*data_offset > file_bytes)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: index (%u bytes) extends past the end of the file", path,
                    *index_bytes);
  *m = (dpm_ckpt_meta){
      .spec_hash = get64(h + H_SPEC_HASH),
      .iter = get64(h + H_ITER),
      .reader_epoch = get64(h + H_EPOCH),
      .reader_index = get64(h + H_INDEX),
      .devices = get32(h + H_DEVICES),
      .shards = get32(h + H_SHARDS),
      .created_unix = (int64_t)get64(h + H_CREATED),
  };
  return DPM_OK;
}

/* Parse index entry i at q (avail bytes left in the index) into c and r;
 * *used = its size. `expect` is where its data must start. */
static dpm_status parse_entry(const ckpt_reader *r, int i, const uint8_t *q,
                              uint64_t avail, uint64_t expect, dpm_ckpt *c,
                              uint64_t *used, dpm_err *err) {
  const char *path = r->path;
  if (avail < CKPT_ENTRY_BYTES)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: index entry %d cut short by the end of the index", path, i);
  size_t len = get16(q + E_NAME_LEN);
  if (entry_bytes(len) > avail)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: index entry %d: name length %zu runs past the index", path, i,
                    len);
  const uint8_t *name = q + CKPT_ENTRY_BYTES;
  const char *why = name_problem(name, len);
  if (why) return dpm_errf(err, DPM_CORRUPT, "%s: index entry %d: %s", path, i, why);
  c->names[i] = malloc(len + 1);
  if (!c->names[i]) return dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);
  memcpy(c->names[i], name, len);
  c->names[i][len] = 0;
  const char *nm = c->names[i];
  *used = entry_bytes(len);

  unsigned kind = q[E_KIND], dtype = q[E_DTYPE], ndim = q[E_NDIM];
  if (kind < 1 || kind > (unsigned)ARRAY_LEN(file_kinds))
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s': invalid blob kind %u", path, nm,
                    kind);
  if (dtype < 1 || dtype > (unsigned)ARRAY_LEN(file_dtypes))
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s': invalid dtype %u", path, nm,
                    dtype);
  if (ndim > DPM_MAX_DIMS)
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s': %u dims, at most %d", path, nm,
                    ndim, DPM_MAX_DIMS);
  uint64_t d[DPM_MAX_DIMS];
  int64_t dims[DPM_MAX_DIMS] = {0};
  for (int k = 0; k < DPM_MAX_DIMS; k++) d[k] = get64(q + E_DIMS + 8 * k);
  if (!all_zero(q + E_ZERO1, 3) || !all_zero(q + E_ZERO2, 4) ||
      !all_zero(q + E_DIMS + 8 * ndim, 8 * (DPM_MAX_DIMS - ndim)) ||
      !all_zero(name + len, entry_bytes(len) - CKPT_ENTRY_BYTES - len))
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: tensor '%s': nonzero reserved bytes in its entry", path, nm);
  dpm_dtype t = file_dtypes[dtype - 1];
  uint64_t bytes = shape_bytes((int)ndim, d, dpm_dtype_size(t));
  if (!bytes)
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s': a dim is 0 or the size overflows",
                    path, nm);
  uint64_t off = get64(q + E_OFFSET), nbytes = get64(q + E_NBYTES);
  if (nbytes != bytes)
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s': %llu bytes, its shape needs %llu",
                    path, nm, (unsigned long long)nbytes, (unsigned long long)bytes);
  if (off < expect)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: tensor '%s' at offset %llu overlaps what precedes it", path, nm,
                    (unsigned long long)off);
  if (off != expect)
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s' at offset %llu, expected %llu",
                    path, nm, (unsigned long long)off, (unsigned long long)expect);
  if (off > r->size || nbytes > r->size - off)
    return dpm_errf(err, DPM_CORRUPT, "%s: tensor '%s' extends past the end of the file",
                    path, nm);
  for (unsigned k = 0; k < ndim; k++) dims[k] = (int64_t)d[k];
  c->kinds[i] = file_kinds[kind - 1];
  c->tensors[i].shape = dpm_shape_make(t, (int)ndim, dims);
  r->offsets[i] = off;
  r->nbytes[i] = nbytes;
  r->crcs[i] = get32(q + E_CRC);
  return DPM_OK;
}

/* Read and check the index; fills c's names, kinds and shapes and r's
 * geometry. Allocates no tensor data. */
static dpm_status read_index(ckpt_reader *r, uint32_t count, uint32_t index_bytes,
                             uint64_t data_offset, uint32_t index_crc, dpm_ckpt *c,
                             dpm_err *err) {
  const char *path = r->path;
  /* parse_header checked data_offset: past the header, within the file */
  uint64_t region = data_offset > CKPT_HEADER_BYTES ? data_offset - CKPT_HEADER_BYTES : 0;
  uint8_t *buf = malloc(region ? region : 1);
  const char **sorted = malloc(sizeof *sorted * (count ? count : 1));
  c->names = calloc(count ? count : 1, sizeof *c->names);
  c->kinds = calloc(count ? count : 1, sizeof *c->kinds);
  c->tensors = calloc(count ? count : 1, sizeof *c->tensors);
  r->offsets = malloc(sizeof *r->offsets * (count ? count : 1));
  r->nbytes = malloc(sizeof *r->nbytes * (count ? count : 1));
  r->crcs = malloc(sizeof *r->crcs * (count ? count : 1));
  c->n = (int)count;
  dpm_status st = DPM_OK;
  if (!buf || !sorted || !c->names || !c->kinds || !c->tensors || !r->offsets ||
      !r->nbytes || !r->crcs) {
    st = dpm_errf(err, DPM_NOMEM, "%s: out of memory", path);
    goto out;
  }
  int got = pread_all(r->fd, buf, region, CKPT_HEADER_BYTES);
  if (got <= 0) {
    st = got < 0 ? read_error(r, err) : dpm_errf(err, DPM_CORRUPT, "%s: truncated", path);
    goto out;
  }
  if (crc_update(0, buf, index_bytes) != index_crc) {
    st = dpm_errf(err, DPM_CORRUPT, "%s: checksum mismatch in index", path);
    goto out;
  }
  if (!all_zero(buf + index_bytes, region - index_bytes)) {
    st = dpm_errf(err, DPM_CORRUPT, "%s: nonzero padding after the index", path);
    goto out;
  }
  uint64_t pos = 0, expect = data_offset;
  for (uint32_t i = 0; i < count; i++) {
    uint64_t used = 0;
    st = parse_entry(r, (int)i, buf + pos, index_bytes - pos,
                     round_up(expect, CKPT_ALIGN), c, &used, err);
    if (st != DPM_OK) goto out;
    pos += used;
    expect = r->offsets[i] + r->nbytes[i];
    sorted[i] = c->names[i];
  }
  if (pos != index_bytes) {
    st = dpm_errf(err, DPM_CORRUPT, "%s: %llu unused bytes at the end of the index", path,
                  (unsigned long long)(index_bytes - pos));
    goto out;
  }
  if (expect != r->size) {
    st = dpm_errf(err, DPM_CORRUPT, "%s: the last tensor ends at %llu, the file at %llu",
                  path, (unsigned long long)expect, (unsigned long long)r->size);
    goto out;
  }
  const char *dup = find_duplicate(sorted, (int)count);
  if (dup) st = dpm_errf(err, DPM_CORRUPT, "%s: duplicate tensor name '%s'", path, dup);
out:
  free(buf);
  free(sorted);
  return st;
}

/* Read every tensor into its own buffer, checking padding and CRCs. */
static dpm_status read_data(ckpt_reader *r, uint64_t data_offset, dpm_ckpt *c,
                            dpm_err *err) {
  uint64_t end = data_offset;
  for (int i = 0; i < c->n; i++) {
    uint8_t pad[CKPT_ALIGN];
    uint64_t gap = r->offsets[i] - end;
    int got = pread_all(r->fd, pad, gap, end);
    if (got < 0) return read_error(r, err);
    if (got == 0) return dpm_errf(err, DPM_CORRUPT, "%s: truncated", r->path);
    if (!all_zero(pad, gap))
      return dpm_errf(err, DPM_CORRUPT, "%s: nonzero padding before tensor '%s'", r->path,
                      c->names[i]);
    dpm_shape s = c->tensors[i].shape;
    c->tensors[i].shape = (dpm_shape){0};
    if (dpm_tensor_resize(&c->tensors[i], &s) != DPM_OK)
      return dpm_errf(err, DPM_NOMEM, "%s: out of memory for tensor '%s' (%llu bytes)",
                      r->path, c->names[i], (unsigned long long)r->nbytes[i]);
    uint8_t *data = c->tensors[i].data;
    uint32_t crc = 0;
    for (uint64_t done = 0; done < r->nbytes[i];) {
      uint64_t step = r->nbytes[i] - done < CKPT_CHUNK ? r->nbytes[i] - done : CKPT_CHUNK;
      got = pread_all(r->fd, data + done, step, r->offsets[i] + done);
      if (got < 0) return read_error(r, err);
      if (got == 0) return dpm_errf(err, DPM_CORRUPT, "%s: truncated", r->path);
      crc = crc_update(crc, data + done, step);
      done += step;
    }
    if (crc != r->crcs[i])
      return dpm_errf(err, DPM_CORRUPT, "%s: checksum mismatch in tensor '%s'", r->path,
                      c->names[i]);
    end = r->offsets[i] + r->nbytes[i];
  }
  return DPM_OK;
}

/* Open path (through fs) as a regular file; DPM_IO otherwise. */
static dpm_status open_file(const dpm_fs *fs, ckpt_reader *r, dpm_err *err) {
  dpm_status s = dpm_file_open_read(fs, r->path, &r->fd, err);
  if (s) return s;
  struct stat st;
  if (fstat(r->fd, &st) < 0)
    return dpm_errf(err, DPM_IO, "%s: stat: %s", r->path, strerror(errno));
  r->size = (uint64_t)st.st_size;
  return DPM_OK;
}

/* Magic, version and size, from the first min(size, 96) bytes in h. */
static dpm_status check_prefix(const ckpt_reader *r, const uint8_t *h, dpm_err *err) {
  const char *path = r->path;
  if (r->size == 0)
    return dpm_errf(err, DPM_CORRUPT, "%s: empty file, not a dpm checkpoint", path);
  size_t have = r->size < sizeof ckpt_magic ? (size_t)r->size : sizeof ckpt_magic;
  if (memcmp(h, ckpt_magic, have))
    return dpm_errf(err, DPM_CORRUPT, "%s: not a dpm checkpoint (bad magic)", path);
  if (r->size >= H_VERSION + 4) {
    uint32_t v = get32(h + H_VERSION);
    if (v > DPM_CKPT_VERSION)
      return dpm_errf(
          err, DPM_UNSUPPORTED,
          "%s: unsupported checkpoint version %u (this build reads version %d)", path, v,
          DPM_CKPT_VERSION);
    if (v == 0)
      return dpm_errf(err, DPM_CORRUPT, "%s: invalid checkpoint version 0", path);
  }
  if (r->size < CKPT_HEADER_BYTES)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: truncated: %llu bytes, the header alone needs %d", path,
                    (unsigned long long)r->size, CKPT_HEADER_BYTES);
  return DPM_OK;
}

dpm_status dpm_ckpt_read(const dpm_fs *fs, const char *path, dpm_ckpt *out,
                         dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "checkpoint: no output");
  *out = (dpm_ckpt){0};
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "checkpoint: empty path");
  ckpt_reader r = {.path = path, .fd = -1};
  dpm_ckpt c = {0};
  uint8_t h[CKPT_HEADER_BYTES] = {0};
  uint32_t count = 0, index_bytes = 0;
  uint64_t data_offset = 0;
  dpm_status st = open_file(fs, &r, err);
  if (st != DPM_OK) goto out;
  int got = pread_all(r.fd, h, r.size < sizeof h ? r.size : sizeof h, 0);
  if (got <= 0) {
    st =
        got < 0 ? read_error(&r, err) : dpm_errf(err, DPM_CORRUPT, "%s: truncated", path);
    goto out;
  }
  if ((st = check_prefix(&r, h, err)) != DPM_OK) goto out;
  if ((st = parse_header(&r, h, &c.meta, &count, &index_bytes, &data_offset, err)) !=
      DPM_OK)
    goto out;
  st = read_index(&r, count, index_bytes, data_offset, get32(h + H_INDEX_CRC), &c, err);
  if (st != DPM_OK) goto out;
  st = read_data(&r, data_offset, &c, err);
out:
  if (r.fd >= 0) close(r.fd);
  free(r.offsets);
  free(r.nbytes);
  free(r.crcs);
  if (st == DPM_OK)
    *out = c;
  else
    dpm_ckpt_fini(&c);
  return st;
}
