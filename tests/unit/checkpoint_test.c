/* Checkpoint files: exact round trips (f32/i32/i64, scalar and 4-D, meta and
 * kinds), the documented byte layout, every refusal with its message
 * (truncation at every offset, a flipped bit at every offset, bad magic,
 * newer version, trailing bytes, empty file, directory, index entries that
 * pass their checksum but break a limit), invalid writes, overwriting, and
 * failed or interrupted writes that leave the old file intact and no
 * temporary file behind. Files live in a mkdtemp directory. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/checkpoint.h"
#include "test.h"
#include "testfile.h"

/* ---- temporary directory -------------------------------------------------- */

static char ck_dir[64];

/* Remove the directory and everything in it (one level, plus one level of
 * subdirectories). */
static void ck_cleanup(void) {
  if (!ck_dir[0]) return;
  DIR *d = opendir(ck_dir);
  struct dirent *de;
  char p[sizeof ck_dir + sizeof de->d_name + 2];
  while (d && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", ck_dir, de->d_name);
    if (unlink(p) < 0) {
      chmod(p, 0755);
      rmdir(p);
    }
  }
  if (d) closedir(d);
  chmod(ck_dir, 0755);
  rmdir(ck_dir);
  ck_dir[0] = 0;
}

/* A fresh, empty temporary directory (the previous one removed). */
static const char *ck_mkdir(void) {
  ck_cleanup();
  snprintf(ck_dir, sizeof ck_dir, "/tmp/dpm-ckpt-XXXXXX");
  return mkdtemp(ck_dir);
}

static char path_buf[4][256];
static const char *ck_path(int slot, const char *name) {
  snprintf(path_buf[slot], sizeof path_buf[0], "%s/%s", ck_dir, name);
  return path_buf[slot];
}

/* Entries in the directory whose name contains ".tmp." */
static int count_temp_files(void) {
  DIR *d = opendir(ck_dir);
  struct dirent *de;
  int n = 0;
  while (d && (de = readdir(d)))
    if (strstr(de->d_name, ".tmp.")) n++;
  if (d) closedir(d);
  return n;
}

/* ---- fixture -------------------------------------------------------------- */

enum { FX_N = 7 };
typedef struct fixture {
  dpm_tensor t[FX_N];
  dpm_ckpt_entry e[FX_N];
  dpm_ckpt_meta meta;
} fixture;

static const char *fx_names[FX_N] = {
    "conv1_w", "conv1_w_momentum", "bn1_rm", "label_map", "iter", "lr", "offsets"};
static const dpm_blob_kind fx_kinds[FX_N] = {
    DPM_BLOB_PARAM,   DPM_BLOB_OPTIM,   DPM_BLOB_COMPUTED, DPM_BLOB_PARAM,
    DPM_BLOB_COUNTER, DPM_BLOB_COUNTER, DPM_BLOB_PARAM};

/* Tensors of every dtype incl. a 4-D one and two scalars; `salt` changes
 * the values and the meta, so two fixtures differ. */
static int fx_init(fixture *f, int salt) {
  memset(f, 0, sizeof *f);
  dpm_shape s[FX_N] = {
      dpm_shape_make(DPM_F32, 4, (int64_t[]){4, 3, 5, 5}),
      dpm_shape_make(DPM_F32, 4, (int64_t[]){4, 3, 5, 5}),
      dpm_shape_make(DPM_F32, 1, (int64_t[]){13}),
      dpm_shape_make(DPM_I32, 2, (int64_t[]){3, 7}),
      dpm_shape_scalar(DPM_I64),
      dpm_shape_scalar(DPM_F32),
      dpm_shape_make(DPM_I64, 3, (int64_t[]){2, 1, 3}),
  };
  for (int i = 0; i < FX_N; i++) {
    if (dpm_tensor_resize(&f->t[i], &s[i]) != DPM_OK) return -1;
    int64_t n = dpm_tensor_numel(&f->t[i]);
    for (int64_t k = 0; k < n; k++) {
      if (s[i].dtype == DPM_F32)
        dpm_f32(&f->t[i])[k] = (float)(k * 0.25 - 3.5 + salt + i);
      if (s[i].dtype == DPM_I32) dpm_i32(&f->t[i])[k] = (int32_t)(k * 1000003 - 7) ^ salt;
      if (s[i].dtype == DPM_I64)
        dpm_i64(&f->t[i])[k] = (int64_t)0x123456789abcdefLL * (k + 1) - salt;
    }
    f->e[i] = (dpm_ckpt_entry){fx_names[i], fx_kinds[i], &f->t[i]};
  }
  f->meta = (dpm_ckpt_meta){.spec_hash = 0xfedcba9876543210ULL + (uint64_t)salt,
                            .iter = (1ULL << 40) + 3 + (uint64_t)salt,
                            .reader_epoch = 7,
                            .reader_index = 12345 + (uint64_t)salt,
                            .devices = 4,
                            .shards = 2,
                            .created_unix = -5 - salt};
  return 0;
}

static void fx_fini(fixture *f) {
  for (int i = 0; i < FX_N; i++) dpm_tensor_fini(&f->t[i]);
}

/* 1 when c holds exactly f's meta and entries. */
static int fx_matches(const fixture *f, const dpm_ckpt *c) {
  if (memcmp(&f->meta, &c->meta, sizeof f->meta) || c->n != FX_N) return 0;
  for (int i = 0; i < FX_N; i++) {
    if (strcmp(c->names[i], fx_names[i]) || c->kinds[i] != fx_kinds[i]) return 0;
    if (!dpm_shape_equal(&c->tensors[i].shape, &f->t[i].shape)) return 0;
    if (memcmp(c->tensors[i].data, f->t[i].data, dpm_shape_bytes(&f->t[i].shape)))
      return 0;
    if ((uintptr_t)c->tensors[i].data % DPM_ALIGN) return 0;
  }
  return 1;
}

/* Writes fixture `salt` to path; returns its status. */
static dpm_status fx_write(const char *path, int salt) {
  fixture f;
  if (fx_init(&f, salt)) return DPM_NOMEM;
  dpm_err err = {0};
  dpm_status st = dpm_ckpt_write(NULL, path, &f.meta, f.e, FX_N, &err);
  if (st) printf("    write: %s\n", err.msg);
  fx_fini(&f);
  return st;
}

/* 1 when path reads back as fixture `salt`. */
static int fx_reads_as(const char *path, int salt) {
  fixture f;
  dpm_ckpt c;
  dpm_err err = {0};
  if (fx_init(&f, salt)) return 0;
  int ok = dpm_ckpt_read(NULL, path, &c, &err) == DPM_OK && fx_matches(&f, &c);
  if (!ok) printf("    read %s: %s\n", path, err.msg);
  dpm_ckpt_fini(&c);
  fx_fini(&f);
  return ok;
}

/* Reads path expecting refusal `code` with a message holding path and
 * `sub`; returns 1 if so (printing what happened if not). */
static int refused(const char *path, dpm_status code, const char *sub) {
  dpm_ckpt c;
  dpm_err err = {0};
  dpm_status st = dpm_ckpt_read(NULL, path, &c, &err);
  int empty = c.n == 0 && !c.names && !c.kinds && !c.tensors;
  dpm_ckpt_fini(&c);
  if (st == code && empty && strstr(err.msg, path) && strstr(err.msg, sub)) return 1;
  printf("    %s: got %s \"%s\", expected %s \"%s\"\n", path, dpm_status_name(st),
         err.msg, dpm_status_name(code), sub);
  return 0;
}

/* Little-endian fields of a file image, for the layout and crafted tests. */
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}

/* Recompute index and header CRCs after editing an image. */
static void reseal(uint8_t *b) {
  wr32(b + 88, (uint32_t)crc32(0, b + 96, rd32(b + 68)));
  wr32(b + 92, (uint32_t)crc32(0, b, 92));
}

/* Offset in the image of index entry i. */
static size_t entry_at(const uint8_t *b, int i) {
  size_t q = 96;
  for (int k = 0; k < i; k++) q += 64 + ((b[q] | b[q + 1] << 8) + 7) / 8 * 8;
  return q;
}

/* The offsets the truncation and bit-flip tests try: every one up to 128
 * bytes into the data (header, index, padding, first tensor), then every
 * 13th, and the last. */
static size_t next_probe(size_t i, size_t data_offset, size_t len) {
  if (i + 1 >= len) return len;
  if (i + 1 < data_offset + 128) return i + 1;
  return i + 13 < len ? i + 13 : len - 1;
}

/* ---- tests ---------------------------------------------------------------- */

TEST(ckpt_round_trip) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "model.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  CHECK(fx_reads_as(p, 0));
  CHECK_INT(count_temp_files(), 0);

  dpm_ckpt c;
  dpm_err err = {0};
  CHECK_INT(dpm_ckpt_read(NULL, p, &c, &err), DPM_OK);
  dpm_blob_kind k = DPM_BLOB_ACT;
  const dpm_tensor *t = dpm_ckpt_find(&c, "iter", &k);
  CHECK(t && k == DPM_BLOB_COUNTER && t->shape.ndim == 0 && t->shape.dtype == DPM_I64);
  t = dpm_ckpt_find(&c, "conv1_w_momentum", &k);
  CHECK(t && k == DPM_BLOB_OPTIM && t->shape.ndim == 4 && t->shape.d[3] == 5);
  CHECK(dpm_ckpt_find(&c, "conv1", NULL) == NULL);
  CHECK(dpm_ckpt_find(&c, "bn1_rm", NULL) != NULL);
  dpm_ckpt_fini(&c);
  dpm_ckpt_fini(&c); /* idempotent */
  CHECK(c.n == 0 && c.names == NULL);
  ck_cleanup();
}

TEST(ckpt_no_entries) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "empty.ckpt");
  dpm_ckpt_meta m = {.spec_hash = 1, .iter = 2, .devices = 1, .shards = 1};
  dpm_err err = {0};
  CHECK_INT(dpm_ckpt_write(NULL, p, &m, NULL, 0, &err), DPM_OK);
  dpm_ckpt c;
  CHECK_INT(dpm_ckpt_read(NULL, p, &c, &err), DPM_OK);
  CHECK(c.n == 0 && !memcmp(&c.meta, &m, sizeof m));
  dpm_ckpt_fini(&c);
  size_t len;
  uint8_t *b = test_read_file(p, &len);
  CHECK(b);
  int size_ok = len == 128;
  free(b);
  CHECK(size_ok);
  ck_cleanup();
}

/* The bytes follow the layout documented in checkpoint.h. */
TEST(ckpt_documented_layout) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "layout.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  fixture f;
  CHECK(fx_init(&f, 0) == 0);
  size_t len;
  uint8_t *b = test_read_file(p, &len);
  int ok = b && !memcmp(b, "DPMCKPT\0", 8) && rd32(b + 8) == 1 && rd32(b + 12) == 96 &&
           rd64(b + 16) == f.meta.spec_hash && rd64(b + 24) == f.meta.iter &&
           rd64(b + 32) == 7 && rd64(b + 40) == f.meta.reader_index &&
           rd32(b + 48) == 4 && rd32(b + 52) == 2 &&
           (int64_t)rd64(b + 56) == f.meta.created_unix && rd32(b + 64) == FX_N &&
           rd64(b + 72) == (96 + rd32(b + 68) + 63) / 64 * 64 && rd64(b + 80) == len &&
           rd32(b + 88) == crc32(0, b + 96, rd32(b + 68)) &&
           rd32(b + 92) == crc32(0, b, 92);
  static const uint8_t kind_codes[FX_N] = {1, 3, 2, 1, 4, 4, 1};
  static const uint8_t dtype_codes[FX_N] = {1, 1, 1, 2, 3, 1, 3};
  uint64_t expect = b ? rd64(b + 72) : 0;
  for (int i = 0; ok && i < FX_N; i++) {
    const uint8_t *q = b + entry_at(b, i);
    size_t nl = q[0] | q[1] << 8;
    uint64_t off = rd64(q + 40), nbytes = rd64(q + 48);
    ok = nl == strlen(fx_names[i]) && !memcmp(q + 64, fx_names[i], nl) &&
         q[2] == kind_codes[i] && q[3] == dtype_codes[i] && q[4] == f.t[i].shape.ndim &&
         off % 64 == 0 && off == (expect + 63) / 64 * 64 &&
         nbytes == dpm_shape_bytes(&f.t[i].shape) &&
         !memcmp(b + off, f.t[i].data, nbytes) &&
         rd32(q + 56) == crc32(0, b + off, (uInt)nbytes);
    for (int k = 0; ok && k < 4; k++)
      ok = rd64(q + 8 + 8 * k) ==
           (k < f.t[i].shape.ndim ? (uint64_t)f.t[i].shape.d[k] : 0);
    expect = off + nbytes;
  }
  ok = ok && expect == len;
  free(b);
  fx_fini(&f);
  CHECK(ok);
  ck_cleanup();
}

/* A cut at every offset is refused: in the header, index, padding, data. */
TEST(ckpt_truncated_everywhere) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "full.ckpt"), *cut = ck_path(1, "cut.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  size_t len;
  uint8_t *b = test_read_file(p, &len);
  CHECK(b);
  int bad = 0;
  size_t data_offset = rd64(b + 72);
  for (size_t n = 0; n < len && bad < 3; n = next_probe(n, data_offset, len)) {
    if (test_write_file(cut, b, n))
      bad++;
    else if (!refused(cut, DPM_CORRUPT, n == 0 ? "empty file" : "truncated"))
      bad++;
  }
  free(b);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

/* One flipped bit anywhere is refused; in data, naming the tensor. */
TEST(ckpt_bit_flip_everywhere) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "full.ckpt"), *q = ck_path(1, "flip.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  size_t len;
  uint8_t *b = test_read_file(p, &len);
  CHECK(b);
  uint64_t data_offset = rd64(b + 72);
  int bad = 0;
  for (size_t i = 0; i < len && bad < 3; i = next_probe(i, data_offset, len)) {
    b[i] ^= (uint8_t)(1u << (i % 8));
    dpm_ckpt c;
    dpm_err err = {0};
    dpm_status st = test_write_file(q, b, len) ? DPM_IO : dpm_ckpt_read(NULL, q, &c, &err);
    b[i] ^= (uint8_t)(1u << (i % 8));
    if (st == DPM_OK) dpm_ckpt_fini(&c);
    if (st != DPM_CORRUPT && !(st == DPM_UNSUPPORTED && i >= 8 && i < 12)) {
      printf("    flip at %zu: %s %s\n", i, dpm_status_name(st), err.msg);
      bad++;
    }
  }
  /* Each region's message. */
  const char *where[][2] = {
      {"24", "checksum mismatch in header"}, /* iter */
      {"92", "checksum mismatch in header"}, /* the header CRC itself */
      {"88", "checksum mismatch in header"}, /* the index CRC (in the header) */
      {"140", "checksum mismatch in index"}, /* first entry's dims */
  };
  for (size_t k = 0; k < sizeof where / sizeof *where && !bad; k++) {
    size_t at = (size_t)atoi(where[k][0]);
    b[at] ^= 4;
    bad += test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, where[k][1]);
    b[at] ^= 4;
  }
  for (int i = 0; i < FX_N && !bad; i++) {
    const uint8_t *e = b + entry_at(b, i);
    size_t at = rd64(e + 40) + rd64(e + 48) - 1; /* last data byte */
    char want[96];
    snprintf(want, sizeof want, "checksum mismatch in tensor '%s'", fx_names[i]);
    b[at] ^= 0x80;
    bad += test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, want);
    b[at] ^= 0x80;
  }
  /* Padding after the index and between tensors. */
  size_t index_end = 96 + rd32(b + 68);
  if (!bad && index_end < data_offset) {
    b[data_offset - 1] = 1;
    bad += test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, "nonzero padding after the index");
    b[data_offset - 1] = 0;
  }
  const uint8_t *e1 = b + entry_at(b, 1);
  if (!bad && rd64(e1 + 40) > data_offset) {
    b[rd64(e1 + 40) - 1] = 1;
    bad += test_write_file(q, b, len) ||
           !refused(q, DPM_CORRUPT, "nonzero padding before tensor 'conv1_w_momentum'");
    b[rd64(e1 + 40) - 1] = 0;
  }
  free(b);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

TEST(ckpt_refuses_foreign_files) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "full.ckpt"), *q = ck_path(1, "other");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  size_t len;
  uint8_t *b = test_read_file(p, &len);
  CHECK(b);
  int bad = 0;
  /* Bad magic, text, a short foreign file. */
  b[3] = 'X';
  bad += test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, "not a dpm checkpoint (bad magic)");
  b[3] = 'C';
  bad +=
      test_write_file(q, "hello, world\n", 13) || !refused(q, DPM_CORRUPT, "not a dpm checkpoint");
  bad += test_write_file(q, "\x89PNG", 4) || !refused(q, DPM_CORRUPT, "not a dpm checkpoint");
  /* A newer version, and version 0. */
  wr32(b + 8, 7);
  bad +=
      test_write_file(q, b, len) || !refused(q, DPM_UNSUPPORTED, "unsupported checkpoint version 7");
  wr32(b + 8, 0);
  bad += test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, "invalid checkpoint version 0");
  wr32(b + 8, 1);
  /* Trailing bytes are refused. */
  uint8_t *longer = calloc(1, len + 3);
  if (longer) memcpy(longer, b, len);
  bad += !longer || test_write_file(q, longer, len + 3) ||
         !refused(q, DPM_CORRUPT, "3 trailing bytes after the end of the checkpoint");
  free(longer);
  /* Empty file, directory, missing file. */
  bad += test_write_file(q, "", 0) || !refused(q, DPM_CORRUPT, "empty file, not a dpm checkpoint");
  bad += !refused(ck_dir, DPM_IO, "is a directory");
  bad += !refused(ck_path(2, "missing.ckpt"), DPM_IO, "cannot open: No such file");
  free(b);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

/* Index entries whose checksums are right but whose content breaks a rule
 * (as a buggy or hostile writer would make them). */
TEST(ckpt_refuses_bad_entries) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "full.ckpt"), *q = ck_path(1, "bad.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  size_t len;
  uint8_t *orig = test_read_file(p, &len);
  uint8_t *b = malloc(len ? len : 1);
  if (!orig || !b) {
    free(orig);
    free(b);
    CHECK(0);
  }
  size_t e0 = entry_at(orig, 0), e1 = entry_at(orig, 1), e6 = entry_at(orig, 6);
  const struct {
    size_t at;      /* first byte to patch */
    int width;      /* bytes patched, little-endian */
    uint64_t value; /* or a name when width is 0 */
    const char *name;
    const char *want;
  } cases[] = {
      {e0 + 2, 1, 0, NULL, "tensor 'conv1_w': invalid blob kind 0"},
      {e0 + 2, 1, 5, NULL, "tensor 'conv1_w': invalid blob kind 5"},
      {e0 + 3, 1, 0, NULL, "tensor 'conv1_w': invalid dtype 0"},
      {e0 + 3, 1, 6, NULL, "tensor 'conv1_w': invalid dtype 6"},
      {e0 + 4, 1, 5, NULL, "tensor 'conv1_w': 5 dims, at most 4"},
      {e0 + 4, 1, 3, NULL, "tensor 'conv1_w': nonzero reserved bytes"}, /* dims[3] set */
      {e0 + 8, 8, 0, NULL, "tensor 'conv1_w': a dim is 0 or the size overflows"},
      {e0 + 8, 8, 1ULL << 62, NULL, "a dim is 0 or the size overflows"},
      {e0 + 8, 8, 1ULL << 63, NULL, "a dim is 0 or the size overflows"},
      {e0 + 5, 1, 1, NULL, "nonzero reserved bytes"},
      {e0 + 60, 1, 1, NULL, "nonzero reserved bytes"},
      {e0 + 64 + 7, 1, 1, NULL, "nonzero reserved bytes"}, /* name padding */
      {e0 + 48, 8, 4, NULL, "tensor 'conv1_w': 4 bytes, its shape needs 1200"},
      {e1 + 40, 8, rd64(orig + e0 + 40), NULL,
       "'conv1_w_momentum' at offset 640 overlaps what precedes it"},
      {e1 + 40, 8, rd64(orig + e1 + 40) + 64, NULL,
       "tensor 'conv1_w_momentum' at offset 1920, expected 1856"},
      {e0 + 64, 1, 0x1b, NULL, "index entry 0: name with a control character"},
      {e0 + 64, 1, 0x7f, NULL, "index entry 0: name with a control character"},
      {e0 + 0, 1, 0, NULL, "index entry 0: empty name"},
      {e6 + 0, 1, 200, NULL, "index entry 6: name length 200 runs past the index"},
      {e6 + 64, 0, 0, "conv1_w", "duplicate tensor name 'conv1_w'"}, /* was "offsets" */
      {64, 4, DPM_CKPT_MAX_ENTRIES + 1, NULL, "more than the limit"},
      {64, 4, 1000, NULL, "cannot hold 1000 entries"},
      {64, 4, FX_N + 1, NULL, "index entry 7 cut short"},
      {64, 4, FX_N - 1, NULL, "unused bytes at the end of the index"},
      {12, 4, 128, NULL, "header size 128, expected 96"},
      {72, 8, 4096, NULL, "data offset 4096, expected"},
  };
  int bad = 0;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    memcpy(b, orig, len);
    if (cases[k].name) memcpy(b + cases[k].at, cases[k].name, strlen(cases[k].name));
    for (int i = 0; i < cases[k].width; i++)
      b[cases[k].at + i] = (uint8_t)(cases[k].value >> 8 * i);
    reseal(b);
    if (test_write_file(q, b, len) || !refused(q, DPM_CORRUPT, cases[k].want)) {
      printf("    case %zu\n", k);
      bad++;
    }
  }
  /* The unpatched image still reads (the cases were the only fault). */
  memcpy(b, orig, len);
  reseal(b);
  bad += test_write_file(q, b, len) || !fx_reads_as(q, 0);
  free(orig);
  free(b);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

/* Bad arguments are refused before any file is made. */
TEST(ckpt_write_refuses_bad_input) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "x.ckpt");
  fixture f;
  CHECK(fx_init(&f, 0) == 0);
  char long_name[DPM_CKPT_MAX_NAME + 2];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  dpm_tensor nodata = {.shape = dpm_shape_scalar(DPM_F32)};
  dpm_tensor five = f.t[0];
  five.shape.ndim = 5;
  dpm_tensor zero = f.t[2];
  zero.shape.d[0] = 0;
  dpm_tensor neg = f.t[2];
  neg.shape.d[0] = -3;
  const struct {
    int idx; /* entry replaced */
    dpm_ckpt_entry e;
    const char *want;
  } cases[] = {
      {1, {"conv1_w", DPM_BLOB_OPTIM, &f.t[1]}, "duplicate entry name 'conv1_w'"},
      {1, {"g", DPM_BLOB_GRAD, &f.t[1]}, "blob kind gradient cannot be checkpointed"},
      {1, {"a", DPM_BLOB_ACT, &f.t[1]}, "blob kind activation cannot be checkpointed"},
      {1, {"a", (dpm_blob_kind)99, &f.t[1]}, "blob kind (invalid)"},
      {1, {"a", DPM_BLOB_PARAM, &five}, "invalid dtype or ndim 5"},
      {1, {"a", DPM_BLOB_PARAM, &zero}, "every dim must be > 0"},
      {1, {"a", DPM_BLOB_PARAM, &neg}, "every dim must be > 0"},
      {1, {"a", DPM_BLOB_PARAM, &nodata}, "entry 1 ('a'): tensor has no data"},
      {1, {"", DPM_BLOB_PARAM, &f.t[1]}, "entry 1: empty name"},
      {1, {long_name, DPM_BLOB_PARAM, &f.t[1]}, "name longer than 255 bytes"},
      {1, {"a\nb", DPM_BLOB_PARAM, &f.t[1]}, "name with a control character"},
      {1, {NULL, DPM_BLOB_PARAM, &f.t[1]}, "NULL name or tensor"},
      {1, {"a", DPM_BLOB_PARAM, NULL}, "NULL name or tensor"},
  };
  int bad = 0;
  dpm_err err = {0};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    dpm_ckpt_entry e[FX_N];
    memcpy(e, f.e, sizeof e);
    e[cases[k].idx] = cases[k].e;
    dpm_status st = dpm_ckpt_write(NULL, p, &f.meta, e, FX_N, &err);
    if (st != DPM_INVALID || !strstr(err.msg, cases[k].want) || !strstr(err.msg, p) ||
        access(p, F_OK) == 0 || count_temp_files()) {
      printf("    case %zu: %s \"%s\"\n", k, dpm_status_name(st), err.msg);
      bad++;
    }
  }
  bad += dpm_ckpt_write(NULL, p, NULL, f.e, FX_N, &err) != DPM_INVALID;
  bad += dpm_ckpt_write(NULL, p, &f.meta, f.e, -1, &err) != DPM_INVALID;
  bad += dpm_ckpt_write(NULL, p, &f.meta, f.e, DPM_CKPT_MAX_ENTRIES + 1, &err) != DPM_INVALID;
  bad += dpm_ckpt_write(NULL, p, &f.meta, NULL, 1, &err) != DPM_INVALID;
  bad += dpm_ckpt_write(NULL, "", &f.meta, f.e, FX_N, &err) != DPM_INVALID;
  bad += dpm_ckpt_write(NULL, NULL, &f.meta, f.e, FX_N, &err) != DPM_INVALID;
  bad += access(p, F_OK) == 0;
  dpm_ckpt c;
  bad += dpm_ckpt_read(NULL, NULL, &c, &err) != DPM_INVALID || c.n != 0;
  bad += dpm_ckpt_read(NULL, p, NULL, &err) != DPM_INVALID;
  fx_fini(&f);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

TEST(ckpt_overwrite) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "model.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  CHECK_INT(fx_write(p, 1), DPM_OK);
  CHECK(fx_reads_as(p, 1));
  CHECK_INT(count_temp_files(), 0);
  ck_cleanup();
}

/* A write that fails (missing directory, rename onto a directory, a write
 * error mid-data, an unwritable directory) leaves the old file and no
 * temporary file. */
TEST(ckpt_failed_write_keeps_old) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "model.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  fixture f;
  CHECK(fx_init(&f, 1) == 0);
  dpm_err err = {0};
  int bad = 0;

  /* A path in a missing directory. */
  const char *missing = ck_path(1, "nope/model.ckpt");
  bad += dpm_ckpt_write(NULL, missing, &f.meta, f.e, FX_N, &err) != DPM_IO ||
         !strstr(err.msg, "cannot open directory") || !strstr(err.msg, "No such file");

  /* The target is a directory: everything is written, rename fails. */
  const char *sub = ck_path(1, "sub");
  bad += mkdir(sub, 0755) != 0;
  bad += dpm_ckpt_write(NULL, sub, &f.meta, f.e, FX_N, &err) != DPM_IO ||
         !strstr(err.msg, "cannot rename");
  bad += count_temp_files() != 0;

  /* A write error in the middle of the data (file size limit: EFBIG). */
  struct rlimit old_lim, lim;
  getrlimit(RLIMIT_FSIZE, &old_lim);
  lim = old_lim;
  lim.rlim_cur = 1024;
  void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &lim);
  dpm_status st = dpm_ckpt_write(NULL, p, &f.meta, f.e, FX_N, &err);
  setrlimit(RLIMIT_FSIZE, &old_lim);
  signal(SIGXFSZ, old_sig);
  if (st != DPM_IO || !strstr(err.msg, "write: File too large")) {
    printf("    fsize: %s \"%s\"\n", dpm_status_name(st), err.msg);
    bad++;
  }
  bad += !fx_reads_as(p, 0) || count_temp_files() != 0;

  /* An unwritable directory (root writes anyway: skipped then). */
  if (geteuid() != 0) {
    bad += chmod(ck_dir, 0555) != 0;
    bad += dpm_ckpt_write(NULL, p, &f.meta, f.e, FX_N, &err) != DPM_IO ||
           !strstr(err.msg, "cannot create");
    bad += chmod(ck_dir, 0755) != 0;
  }
  bad += !fx_reads_as(p, 0) || count_temp_files() != 0;
  fx_fini(&f);
  CHECK_INT(bad, 0);
  ck_cleanup();
}

/* A crash mid-write leaves a partial temporary file and no rename: the old
 * checkpoint still reads, and the next write uses a temporary of its own,
 * leaving the stale one alone (dpmd removes leftovers at start). */
TEST(ckpt_crash_mid_write) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "model.ckpt"), *other = ck_path(1, "new.ckpt");
  CHECK_INT(fx_write(p, 0), DPM_OK);
  CHECK_INT(fx_write(other, 1), DPM_OK);
  size_t len;
  uint8_t *b = test_read_file(other, &len);
  CHECK(b);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
  int bad = test_write_file(tmp, b, len / 2) != 0;
  unlink(other);
  free(b);
  bad += !fx_reads_as(p, 0);
  bad += !refused(tmp, DPM_CORRUPT, "truncated");
  bad += fx_write(p, 2) != DPM_OK;
  bad += !fx_reads_as(p, 2) || count_temp_files() != 1;
  bad += !refused(tmp, DPM_CORRUPT, "truncated");
  CHECK_INT(bad, 0);
  ck_cleanup();
}

/* A tensor larger than the I/O chunk goes through the streaming CRC. */
TEST(ckpt_large_tensor) {
  CHECK(ck_mkdir());
  const char *p = ck_path(0, "big.ckpt");
  dpm_tensor t = {0};
  dpm_shape s = dpm_shape_make(DPM_F32, 2, (int64_t[]){1000, 2500}); /* 10 MB */
  CHECK_INT(dpm_tensor_resize(&t, &s), DPM_OK);
  for (int64_t i = 0; i < dpm_tensor_numel(&t); i++)
    dpm_f32(&t)[i] = (float)(i % 977) * 0.5f;
  dpm_tensor lr = {0};
  dpm_shape ls = dpm_shape_scalar(DPM_F32);
  int bad = dpm_tensor_resize(&lr, &ls) != DPM_OK;
  dpm_ckpt_entry e[2] = {{"lr", DPM_BLOB_COUNTER, &lr}, {"fc_w", DPM_BLOB_PARAM, &t}};
  dpm_ckpt_meta m = {.iter = 9};
  dpm_err err = {0};
  bad += dpm_ckpt_write(NULL, p, &m, e, 2, &err) != DPM_OK;
  dpm_ckpt c;
  if (!bad && dpm_ckpt_read(NULL, p, &c, &err) == DPM_OK) {
    const dpm_tensor *r = dpm_ckpt_find(&c, "fc_w", NULL);
    bad += !r || memcmp(r->data, t.data, dpm_shape_bytes(&s)) != 0;
    dpm_ckpt_fini(&c);
  } else {
    bad++;
  }
  /* One bit in the middle chunk. */
  FILE *fp = fopen(p, "r+b");
  if (fp) {
    fseek(fp, 6 << 20, SEEK_SET);
    int ch = fgetc(fp);
    fseek(fp, 6 << 20, SEEK_SET);
    fputc(ch ^ 0x10, fp);
    fclose(fp);
  }
  bad += !fp || !refused(p, DPM_CORRUPT, "checksum mismatch in tensor 'fc_w'");
  dpm_tensor_fini(&t);
  dpm_tensor_fini(&lr);
  CHECK_INT(bad, 0);
  ck_cleanup();
}
