/* The container table, the shared index and the per-sample reads
 * (io/source.h, io/source_index.h). */
#include "io/source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/file.h"
#include "io/source_index.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* One row per container kind. read NULL: pread of the shard's descriptor. */
static const struct {
  const char *name;
  dpm_status (*index)(dpm_source *s, const dpm_source_config *cfg, dpm_err *err);
  dpm_status (*read)(const dpm_source *s, const src_shard *sh, uint64_t off, void *dst,
                     size_t len, dpm_err *err);
  int one_path; /* takes exactly one path */
} kinds[] = {
    [DPM_SOURCE_TAR] = {"tar", dpm_tar_index, NULL, 0},
    [DPM_SOURCE_LMDB] = {"lmdb", dpm_lmdb_index, NULL, 1},
    [DPM_SOURCE_FOLDER] = {"folder", dpm_folder_index, dpm_folder_read, 1},
};
_Static_assert(ARRAY_LEN(kinds) == DPM_SOURCE_KINDS, "a row per container kind");

static const char *const bad_text[] = {
    [DPM_BAD_NONE] = "not bad",
    [DPM_BAD_NO_LABEL] = "no .cls label",
    [DPM_BAD_LABEL] = "a label that is not a decimal number",
    [DPM_BAD_LABEL_RANGE] = "a label outside [0, num_classes)",
    [DPM_BAD_NO_IMAGE] = "no .jpg, .jpeg or .png image",
    [DPM_BAD_TOO_LARGE] = "more bytes than max_sample_bytes",
    [DPM_BAD_NOT_DATUM] = "a record that is not a Caffe Datum",
    [DPM_BAD_DATUM] = "a Datum with no usable image",
    [DPM_BAD_NOT_FILE] = "not a regular file",
};
_Static_assert(ARRAY_LEN(bad_text) == DPM_BAD_REASONS, "a text per bad reason");

const char *dpm_source_kind_name(dpm_source_kind kind) {
  return (unsigned)kind < DPM_SOURCE_KINDS ? kinds[kind].name : NULL;
}

int dpm_source_kind_parse(const char *name, dpm_source_kind *kind) {
  for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
    if (name && !strcmp(name, kinds[k].name)) {
      *kind = (dpm_source_kind)k;
      return 0;
    }
  return -1;
}

const char *dpm_source_bad_text(dpm_bad_reason r) {
  return (unsigned)r < DPM_BAD_REASONS ? bad_text[r] : "unknown";
}

/* ---- building ---------------------------------------------------------------- */

static uint64_t index_bytes(const dpm_source *s) {
  return (uint64_t)s->cap_shards * sizeof *s->shards +
         (uint64_t)s->cap * sizeof *s->items + s->keys_cap + s->path_bytes;
}

static dpm_status too_big(const dpm_source *s, const char *path, dpm_err *err) {
  char b[256];
  return dpm_errf(err, DPM_CORRUPT, "%s: the index would take more than %lld bytes",
                  dpm_escape(path, b, sizeof b), (long long)s->max_index_bytes);
}

/* Grows *v (elements of size sz, capacity *cap) to hold need; bounded by
 * the index bytes. */
static int grow(dpm_source *s, void **v, int64_t *cap, int64_t need, size_t sz) {
  if (need <= *cap) return 0;
  int64_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  uint64_t more = (uint64_t)(c - *cap) * sz;
  if (index_bytes(s) + more > (uint64_t)s->max_index_bytes) return -1;
  void *p = realloc(*v, (size_t)c * sz);
  if (!p) return -1;
  *v = p;
  *cap = c;
  return 0;
}

dpm_status dpm_src_add_shard(dpm_source *s, const char *path, int fd,
                             const struct stat *st, int rel_off, dpm_err *err) {
  size_t plen = strlen(path) + 1;
  char *copy = NULL;
  if (s->n_shards >= UINT32_MAX || index_bytes(s) + plen > (uint64_t)s->max_index_bytes ||
      grow(s, (void **)&s->shards, &s->cap_shards, s->n_shards + 1, sizeof *s->shards) ||
      !(copy = malloc(plen))) {
    if (fd >= 0) close(fd);
    return too_big(s, path, err);
  }
  memcpy(copy, path, plen);
  s->path_bytes += plen;
  s->shards[s->n_shards++] = (src_shard){
      .path = copy,
      .rel = rel_off >= 0 ? copy + rel_off : NULL,
      .fd = fd,
      .size = (uint64_t)st->st_size,
      .mtime_s = st->st_mtim.tv_sec,
      .mtime_ns = st->st_mtim.tv_nsec,
      .ino = st->st_ino,
      .dev = st->st_dev,
      .first = s->n,
  };
  return DPM_OK;
}

dpm_status dpm_src_add_item(dpm_source *s, const char *key, size_t keylen, src_item it,
                            dpm_err *err) {
  src_shard *sh = &s->shards[s->n_shards - 1];
  char b[256];
  if (s->n >= s->max_samples)
    return dpm_errf(err, DPM_CORRUPT, "%s: more than %lld samples",
                    dpm_escape(sh->path, b, sizeof b), (long long)s->max_samples);
  size_t klen = 0; /* escaped length */
  for (size_t i = 0; i < keylen; i++) {
    unsigned char c = (unsigned char)key[i];
    klen += c < 0x20 || c > 0x7e ? 4 : 1;
  }
  int64_t kcap = (int64_t)s->keys_cap;
  if (grow(s, (void **)&s->items, &s->cap, s->n + 1, sizeof *s->items) ||
      grow(s, (void **)&s->keys, &kcap, (int64_t)(s->keys_len + klen + 1), 1))
    return too_big(s, sh->path, err);
  s->keys_cap = (size_t)kcap;
  it.key = s->keys_len;
  char *k = s->keys + s->keys_len;
  for (size_t i = 0; i < keylen; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c < 0x20 || c > 0x7e)
      k += sprintf(k, "\\x%02x", c);
    else
      *k++ = (char)c;
  }
  *k = 0;
  s->keys_len += klen + 1;
  it.shard = (uint32_t)(s->n_shards - 1);
  if (!it.bad && (int64_t)it.len > s->max_sample_bytes) it.bad = DPM_BAD_TOO_LARGE;
  if (!it.bad && (it.label < 0 || it.label >= s->num_classes))
    it.bad = DPM_BAD_LABEL_RANGE;
  if (it.bad) {
    s->n_bad++;
    s->n_bad_reason[it.bad]++;
  } else {
    s->bytes += it.len;
  }
  s->items[s->n++] = it;
  sh->count++;
  return DPM_OK;
}

/* ---- open, close ------------------------------------------------------------- */

void dpm_source_close(dpm_source *s) {
  if (!s) return;
  for (int64_t k = 0; k < s->n_shards; k++) {
    if (s->shards[k].fd >= 0) close(s->shards[k].fd);
    free(s->shards[k].path);
  }
  if (s->root_fd >= 0) close(s->root_fd);
  free(s->shards);
  free(s->items);
  free(s->keys);
  free(s);
}

dpm_status dpm_source_open(const dpm_source_config *cfg, dpm_source **out, dpm_err *err) {
  *out = NULL;
  if ((unsigned)cfg->kind >= DPM_SOURCE_KINDS)
    return dpm_errf(err, DPM_INVALID, "unknown source kind %d", (int)cfg->kind);
  if (!cfg->paths || cfg->n_paths < 1 || cfg->n_paths > DPM_SOURCE_MAX_PATHS ||
      (kinds[cfg->kind].one_path && cfg->n_paths != 1))
    return dpm_errf(err, DPM_INVALID, "%s: %s", kinds[cfg->kind].name,
                    kinds[cfg->kind].one_path ? "needs exactly one path"
                                              : "needs 1 to 65536 shard paths");
  for (int i = 0; i < cfg->n_paths; i++)
    if (!cfg->paths[i] || !*cfg->paths[i])
      return dpm_errf(err, DPM_INVALID, "%s: path %d is empty", kinds[cfg->kind].name, i);
  if (cfg->num_classes < 1) return dpm_errf(err, DPM_INVALID, "num_classes must be >= 1");
  if (cfg->max_samples < 0 || cfg->max_sample_bytes < 0 || cfg->max_index_bytes < 0)
    return dpm_errf(err, DPM_INVALID, "source bounds must be >= 0");
  dpm_source *s = calloc(1, sizeof *s);
  if (!s) return dpm_errf(err, DPM_NOMEM, "out of memory");
  s->kind = cfg->kind;
  s->num_classes = cfg->num_classes;
  s->fs = cfg->fs ? cfg->fs : &dpm_fs_plain;
  s->root_fd = -1;
  s->max_samples = cfg->max_samples ? cfg->max_samples : DPM_SOURCE_MAX_SAMPLES_DEFAULT;
  s->max_sample_bytes =
      cfg->max_sample_bytes ? cfg->max_sample_bytes : DPM_SOURCE_MAX_SAMPLE_BYTES_DEFAULT;
  s->max_index_bytes =
      cfg->max_index_bytes ? cfg->max_index_bytes : DPM_SOURCE_MAX_INDEX_BYTES_DEFAULT;
  dpm_status st = kinds[s->kind].index(s, cfg, err);
  if (st) {
    dpm_source_close(s);
    return st;
  }
  *out = s;
  return DPM_OK;
}

/* ---- queries ----------------------------------------------------------------- */

int64_t dpm_source_size(const dpm_source *s) { return s->n; }
int dpm_source_num_classes(const dpm_source *s) { return s->num_classes; }
int64_t dpm_source_num_bad(const dpm_source *s) { return s->n_bad; }
int64_t dpm_source_num_bad_reason(const dpm_source *s, dpm_bad_reason r) {
  return (unsigned)r < DPM_BAD_REASONS && r != DPM_BAD_NONE ? s->n_bad_reason[r] : 0;
}
uint64_t dpm_source_bytes(const dpm_source *s) { return s->bytes; }
uint64_t dpm_source_index_bytes(const dpm_source *s) {
  return sizeof *s + index_bytes(s);
}
int64_t dpm_source_num_shards(const dpm_source *s) { return s->n_shards; }

int32_t dpm_source_label(const dpm_source *s, int64_t i) {
  return i >= 0 && i < s->n ? s->items[i].label : -1;
}

dpm_bad_reason dpm_source_bad(const dpm_source *s, int64_t i) {
  return i >= 0 && i < s->n ? (dpm_bad_reason)s->items[i].bad : DPM_BAD_NONE;
}

const char *dpm_source_key(const dpm_source *s, int64_t i) {
  return i >= 0 && i < s->n ? s->keys + s->items[i].key : "";
}

dpm_status dpm_source_bad_error(const dpm_source *s, int64_t i, dpm_err *err) {
  if (i < 0 || i >= s->n || !s->items[i].bad) return DPM_OK;
  const src_item *it = &s->items[i];
  char b[256], k[200];
  return dpm_errf(err, DPM_CORRUPT, "%s: sample %s: %s",
                  dpm_escape(s->shards[it->shard].path, b, sizeof b),
                  dpm_escape(s->keys + it->key, k, sizeof k), bad_text[it->bad]);
}

static dpm_status bad_index(int64_t i, int64_t n, const char *what, dpm_err *err) {
  return dpm_errf(err, DPM_INVALID, "%s %lld outside [0, %lld)", what, (long long)i,
                  (long long)n);
}

/* ---- reads ------------------------------------------------------------------- */

dpm_status dpm_src_changed(const src_shard *sh, dpm_err *err) {
  char b[256];
  return dpm_errf(err, DPM_IO, "%s: changed while it was being read",
                  dpm_escape(sh->path, b, sizeof b));
}

dpm_status dpm_src_pread(const src_shard *sh, int fd, uint64_t off, void *dst, size_t len,
                         dpm_err *err) {
  struct stat st;
  if (fstat(fd, &st)) {
    char b[256];
    return dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(sh->path, b, sizeof b),
                    strerror(errno));
  }
  if ((uint64_t)st.st_size != sh->size || st.st_mtim.tv_sec != sh->mtime_s ||
      st.st_mtim.tv_nsec != sh->mtime_ns || st.st_ino != sh->ino ||
      st.st_dev != sh->dev || off > sh->size || len > sh->size - off)
    return dpm_src_changed(sh, err);
  for (size_t done = 0; done < len;) {
    ssize_t n = pread(fd, (char *)dst + done, len - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      char b[256];
      return dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(sh->path, b, sizeof b),
                      strerror(errno));
    }
    if (n == 0) return dpm_src_changed(sh, err);
    done += (size_t)n;
  }
  return DPM_OK;
}

static dpm_status read_range(const dpm_source *s, const src_shard *sh, uint64_t off,
                             void *dst, size_t len, dpm_err *err) {
  if (kinds[s->kind].read) return kinds[s->kind].read(s, sh, off, dst, len, err);
  return dpm_src_pread(sh, sh->fd, off, dst, len, err);
}

void dpm_source_buf_free(dpm_source_buf *buf) {
  free(buf->data);
  buf->data = NULL;
  buf->cap = 0;
}

dpm_status dpm_source_read(const dpm_source *s, int64_t i, dpm_source_buf *buf,
                           dpm_sample *out, dpm_err *err) {
  memset(out, 0, sizeof *out);
  if (i < 0 || i >= s->n) return bad_index(i, s->n, "sample", err);
  const src_item *it = &s->items[i];
  if (it->bad) return dpm_source_bad_error(s, i, err);
  size_t need = it->len ? (size_t)it->len : 1; /* it->len <= max_sample_bytes */
  if (buf->cap < need) {
    uint8_t *p = realloc(buf->data, need);
    if (!p) return dpm_errf(err, DPM_NOMEM, "out of memory (%zu bytes)", need);
    buf->data = p;
    buf->cap = need;
  }
  dpm_status st = read_range(s, &s->shards[it->shard], it->off, buf->data, it->len, err);
  if (st) return st;
  *out = (dpm_sample){.data = buf->data,
                      .len = it->len,
                      .encoding = (dpm_sample_encoding)it->enc,
                      .channels = it->enc == DPM_SAMPLE_RAW ? it->channels : 0,
                      .height = it->enc == DPM_SAMPLE_RAW ? it->height : 0,
                      .width = it->enc == DPM_SAMPLE_RAW ? it->width : 0,
                      .label = it->label};
  return DPM_OK;
}

dpm_status dpm_source_shard(const dpm_source *s, int64_t k, dpm_source_shard_info *info,
                            dpm_err *err) {
  memset(info, 0, sizeof *info);
  if (k < 0 || k >= s->n_shards) return bad_index(k, s->n_shards, "shard", err);
  const src_shard *sh = &s->shards[k];
  *info = (dpm_source_shard_info){sh->path, sh->size, sh->first, sh->count};
  return DPM_OK;
}

dpm_status dpm_source_locate(const dpm_source *s, int64_t i, int64_t *shard,
                             uint64_t *offset, uint64_t *len, dpm_err *err) {
  if (i < 0 || i >= s->n) return bad_index(i, s->n, "sample", err);
  *shard = s->items[i].shard;
  *offset = s->items[i].off;
  *len = s->items[i].len;
  return DPM_OK;
}

dpm_status dpm_source_shard_read(const dpm_source *s, int64_t k, void *dst, size_t cap,
                                 dpm_err *err) {
  if (k < 0 || k >= s->n_shards) return bad_index(k, s->n_shards, "shard", err);
  const src_shard *sh = &s->shards[k];
  if (cap < sh->size)
    return dpm_errf(err, DPM_INVALID, "shard %lld: %llu bytes do not fit in %zu",
                    (long long)k, (unsigned long long)sh->size, cap);
  return read_range(s, sh, 0, dst, (size_t)sh->size, err);
}
