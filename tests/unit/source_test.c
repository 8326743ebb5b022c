/* Sample containers (io/source.h): WebDataset tar shards written here, an
 * LMDB of Datum records written with liblmdb here, an image folder made
 * here; the index, labels, reads from two threads, the shard view, and each
 * kind of bad data: truncated tar, bad header checksum, a member past the
 * end, a sample with no .cls, a non-numeric .cls, a label >= num_classes,
 * an absurd declared size, an LMDB record that is not a Datum, a shard
 * rewritten after open, and symlinks, FIFOs and files outside the allowed
 * roots refused through dpmd's confining fs (server/paths.h). */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "io/datum.h"
#include "io/source.h"
#include "io/tar.h"
#include "server/paths.h"
#include "test.h"
#include "testfile.h"
#include "testtar.h"

/* ---- scratch files ------------------------------------------------------------ */

typedef struct {
  char d[64];
} scratch;

static int scratch_make(scratch *s) {
  snprintf(s->d, sizeof s->d, "/tmp/dpm-source-XXXXXX");
  return mkdtemp(s->d) != NULL;
}

static void scratch_rm(scratch *s) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->d);
  if (system(cmd)) {
  }
}

static const char *in(const scratch *s, const char *rel) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", s->d, rel);
  return buf[k];
}

/* Sample k's image bytes: k+10 bytes of a pattern. */
static size_t image(int k, uint8_t *out) {
  size_t n = (size_t)k + 10;
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(k * 7 + i);
  return n;
}

/* n good samples, keys "dir/s%03d", label k % 10, .jpg for even k, .png odd. */
static void good_tar(test_tar *t, int first, int n) {
  for (int k = first; k < first + n; k++) {
    char name[64], cls[8];
    uint8_t img[256];
    size_t len = image(k, img);
    snprintf(name, sizeof name, "dir/s%03d.%s", k, k % 2 ? "png" : "jpg");
    test_tar_member(t, name, img, len);
    snprintf(name, sizeof name, "dir/s%03d.cls", k);
    int cl = snprintf(cls, sizeof cls, "%d\n", k % 10);
    test_tar_member(t, name, cls, (size_t)cl);
    snprintf(name, sizeof name, "dir/s%03d.json", k); /* ignored */
    test_tar_member(t, name, "{}", 2);
  }
}

static dpm_status open_kind(dpm_source_kind kind, const char *const *paths, int n,
                            const dpm_fs *fs, int num_classes, dpm_source **src,
                            dpm_err *err) {
  dpm_source_config cfg = {
      .kind = kind, .paths = paths, .n_paths = n, .fs = fs, .num_classes = num_classes};
  return dpm_source_open(&cfg, src, err);
}

static dpm_status open_tar(const char *path, int num_classes, dpm_source **src,
                           dpm_err *err) {
  return open_kind(DPM_SOURCE_TAR, &path, 1, NULL, num_classes, src, err);
}

/* ---- tar ---------------------------------------------------------------------- */

TEST(source_tar_indexes_and_reads_webdataset_shards) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar a = {0}, b = {0};
  good_tar(&a, 0, 5);
  test_tar_end(&a);
  good_tar(&b, 5, 7);
  test_tar_end(&b);
  CHECK(test_write_file(in(&s, "a.tar"), a.b, a.n) == 0);
  CHECK(test_write_file(in(&s, "b.tar"), b.b, b.n) == 0);
  const char *paths[] = {in(&s, "a.tar"), in(&s, "b.tar")};
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_kind(DPM_SOURCE_TAR, paths, 2, NULL, 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 12);
  CHECK_INT(dpm_source_num_bad(src), 0);
  CHECK_INT(dpm_source_num_shards(src), 2);
  CHECK_INT(dpm_source_num_classes(src), 10);
  uint64_t total = 0;
  dpm_source_buf buf = {0};
  for (int k = 0; k < 12; k++) {
    uint8_t want[256];
    size_t n = image(k, want);
    total += n;
    char key[32];
    snprintf(key, sizeof key, "dir/s%03d", k);
    CHECK(!strcmp(dpm_source_key(src, k), key));
    CHECK_INT(dpm_source_label(src, k), k % 10);
    dpm_sample smp;
    CHECK_INT(dpm_source_read(src, k, &buf, &smp, &err), DPM_OK);
    CHECK_INT(smp.len, n);
    CHECK(!memcmp(smp.data, want, n));
    CHECK_INT(smp.encoding, k % 2 ? DPM_SAMPLE_PNG : DPM_SAMPLE_JPEG);
    CHECK_INT(smp.label, k % 10);
  }
  CHECK_INT(dpm_source_bytes(src), total);
  CHECK(dpm_source_index_bytes(src) > 12 * 8);
  /* the shard view: shard 1 holds samples 5..11, whose bytes lie where
   * locate says in what shard_read returns */
  dpm_source_shard_info info;
  CHECK_INT(dpm_source_shard(src, 1, &info, &err), DPM_OK);
  CHECK_INT(info.first, 5);
  CHECK_INT(info.count, 7);
  CHECK_INT(info.size, b.n);
  CHECK(!strcmp(info.path, paths[1]));
  uint8_t *whole = malloc(info.size);
  CHECK_INT(dpm_source_shard_read(src, 1, whole, info.size, &err), DPM_OK);
  CHECK(!memcmp(whole, b.b, b.n));
  int64_t sh;
  uint64_t off, len;
  CHECK_INT(dpm_source_locate(src, 8, &sh, &off, &len, &err), DPM_OK);
  uint8_t want[256];
  CHECK_INT(sh, 1);
  CHECK_INT(len, image(8, want));
  CHECK(!memcmp(whole + off, want, len));
  free(whole);
  CHECK_INT(dpm_source_shard_read(src, 1, want, 10, &err), DPM_INVALID);
  CHECK_INT(dpm_source_read(src, 12, &buf, &(dpm_sample){0}, &err), DPM_INVALID);
  CHECK_INT(dpm_source_shard(src, 2, &info, &err), DPM_INVALID);
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  free(a.b);
  free(b.b);
  scratch_rm(&s);
}

typedef struct {
  const dpm_source *src;
  int ok;
} reader_arg;

static void *read_all(void *p) {
  reader_arg *a = p;
  dpm_source_buf buf = {0};
  dpm_err err;
  a->ok = 1;
  for (int round = 0; round < 20; round++)
    for (int64_t k = 0; k < dpm_source_size(a->src); k++) {
      dpm_sample smp;
      uint8_t want[256];
      size_t n = image((int)k, want);
      if (dpm_source_read(a->src, k, &buf, &smp, &err) || smp.len != n ||
          memcmp(smp.data, want, n))
        a->ok = 0;
    }
  dpm_source_buf_free(&buf);
  return NULL;
}

static int read_from_two_threads(const dpm_source *src) {
  pthread_t t[2];
  reader_arg a[2] = {{src, 0}, {src, 0}};
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, read_all, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  return a[0].ok && a[1].ok;
}

TEST(source_tar_reads_from_two_threads) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 30);
  test_tar_end(&t);
  CHECK(test_write_file(in(&s, "a.tar"), t.b, t.n) == 0);
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_tar(in(&s, "a.tar"), 10, &src, &err), DPM_OK);
  CHECK(read_from_two_threads(src));
  dpm_source_close(src);
  free(t.b);
  scratch_rm(&s);
}

TEST(source_tar_gnu_long_names_and_pax_paths) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  uint8_t h[DPM_TAR_BLOCK], zero[DPM_TAR_BLOCK] = {0};
  char longname[300];
  memset(longname, 'x', 200);
  snprintf(longname + 200, sizeof longname - 200, "/key.png");
  /* GNU 'L': a header named ././@LongLink whose payload is the name */
  CHECK(dpm_tar_header(h, "././@LongLink", strlen(longname) + 1, 0) == 0);
  h[156] = 'L';
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < DPM_TAR_BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  test_tar_put(&t, h, sizeof h);
  test_tar_put(&t, longname, strlen(longname) + 1);
  test_tar_put(&t, zero, dpm_tar_pad(strlen(longname) + 1));
  test_tar_member(&t, "truncated-name.png", "PNGDATA", 7);
  /* pax 'x': path= for the next member */
  char rec[400], body[320];
  snprintf(body, sizeof body, " path=%.*s.cls\n", (int)(strlen(longname) - 4), longname);
  int digits = 1, rl;
  while ((rl = (int)strlen(body) + digits) >= (digits == 1   ? 10
                                               : digits == 2 ? 100
                                                             : 1000))
    digits++;
  snprintf(rec, sizeof rec, "%d%s", rl, body);
  CHECK(dpm_tar_header(h, "PaxHeader", (uint64_t)rl, 0) == 0);
  h[156] = 'x';
  memset(h + 148, ' ', 8);
  sum = 0;
  for (int i = 0; i < DPM_TAR_BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  test_tar_put(&t, h, sizeof h);
  test_tar_put(&t, rec, (size_t)rl);
  test_tar_put(&t, zero, dpm_tar_pad((uint64_t)rl));
  test_tar_member(&t, "other.cls", "3", 1);
  test_tar_end(&t);
  CHECK(test_write_file(in(&s, "l.tar"), t.b, t.n) == 0);
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_tar(in(&s, "l.tar"), 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 1);
  CHECK_INT(dpm_source_bad(src, 0), DPM_BAD_NONE);
  CHECK_INT(dpm_source_label(src, 0), 3);
  CHECK_INT(strlen(dpm_source_key(src, 0)), 204);
  dpm_source_buf buf = {0};
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 0, &buf, &smp, &err), DPM_OK);
  CHECK(smp.len == 7 && !memcmp(smp.data, "PNGDATA", 7));
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  free(t.b);
  scratch_rm(&s);
}

TEST(source_tar_skips_members_larger_than_its_window) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  static const size_t sizes[] = {100000, 300001, 10, 70000};
  uint8_t *img = malloc(300004);
  for (size_t i = 0; i < 300004; i++) img[i] = (uint8_t)(i * 31 + i / 977);
  for (int k = 0; k < 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "big%d.jpg", k);
    test_tar_member(&t, name, img + k, sizes[k]);
    snprintf(name, sizeof name, "big%d.cls", k);
    test_tar_member(&t, name, k % 2 ? "1" : "0", 1);
  }
  test_tar_end(&t);
  CHECK(test_write_file(in(&s, "big.tar"), t.b, t.n) == 0);
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_tar(in(&s, "big.tar"), 2, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 4);
  CHECK_INT(dpm_source_num_bad(src), 0);
  dpm_source_buf buf = {0};
  for (int k = 0; k < 4; k++) {
    dpm_sample smp;
    CHECK_INT(dpm_source_read(src, k, &buf, &smp, &err), DPM_OK);
    CHECK_INT(smp.len, sizes[k]);
    CHECK(!memcmp(smp.data, img + k, sizes[k]));
    CHECK_INT(smp.label, k % 2);
  }
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  free(img);
  free(t.b);
  scratch_rm(&s);
}

/* Writes t's bytes, with what fn does to them, and opens them. */
static dpm_status open_bytes(const scratch *s, const uint8_t *b, size_t n,
                             int num_classes, dpm_source **src, dpm_err *err) {
  if (test_write_file(in(s, "x.tar"), b, n)) return DPM_IO;
  return open_tar(in(s, "x.tar"), num_classes, src, err);
}

TEST(source_tar_refuses_a_truncated_shard) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 4);
  test_tar_end(&t);
  dpm_source *src = (dpm_source *)1;
  dpm_err err = {0};
  /* mid-payload, mid-header, at a member boundary without the end blocks */
  CHECK_INT(open_bytes(&s, t.b, 512 + 5, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "past the end");
  CHECK(src == NULL);
  CHECK_INT(open_bytes(&s, t.b, 1024 + 100, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "truncated header");
  CHECK_INT(open_bytes(&s, t.b, t.n - DPM_TAR_END, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "end-of-archive");
  CHECK_HAS(err.msg, "x.tar");
  CHECK_INT(open_bytes(&s, t.b, 0, 10, &src, &err), DPM_CORRUPT);
  free(t.b);
  scratch_rm(&s);
}

TEST(source_tar_refuses_a_bad_header_checksum) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 4);
  test_tar_end(&t);
  t.b[1024 + 3] ^= 0x40; /* the second member's name */
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "offset 1024: bad header checksum");
  free(t.b);
  scratch_rm(&s);
}

/* Rewrites the size field of the header at off to the 12 bytes f. */
static void set_size(uint8_t *h, const uint8_t f[12]) {
  memcpy(h + 124, f, 12);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < DPM_TAR_BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
}

TEST(source_tar_refuses_a_member_past_the_end_and_absurd_sizes) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 3);
  test_tar_end(&t);
  dpm_source *src;
  dpm_err err = {0};
  set_size(t.b, (const uint8_t *)"77777777777\0"); /* 8 GiB: past the end */
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "offset 0: a member runs past the end");
  /* base-256: 2^62 - 1, and an out-of-range one */
  const uint8_t huge[12] = {0x80, 0,    0,    0,    0x3f, 0xff,
                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  set_size(t.b, huge);
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "past the end");
  const uint8_t neg[12] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                           0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  set_size(t.b, neg);
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "bad size field");
  set_size(t.b, (const uint8_t *)"0000000x012\0");
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "bad size field");
  free(t.b);
  /* a sample larger than max_sample_bytes is flagged, not read */
  test_tar u = {0};
  good_tar(&u, 40, 2); /* 50 and 51 bytes */
  test_tar_end(&u);
  CHECK(test_write_file(in(&s, "y.tar"), u.b, u.n) == 0);
  const char *p = in(&s, "y.tar");
  dpm_source_config cfg = {.kind = DPM_SOURCE_TAR,
                           .paths = &p,
                           .n_paths = 1,
                           .num_classes = 10,
                           .max_sample_bytes = 50};
  CHECK_INT(dpm_source_open(&cfg, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_bad(src, 0), DPM_BAD_NONE);
  CHECK_INT(dpm_source_bad(src, 1), DPM_BAD_TOO_LARGE);
  dpm_source_close(src);
  /* and the index bounds */
  cfg.max_sample_bytes = 0;
  cfg.max_samples = 1;
  CHECK_INT(dpm_source_open(&cfg, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "more than 1 samples");
  cfg.max_samples = 0;
  cfg.max_index_bytes = 100;
  CHECK_INT(dpm_source_open(&cfg, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "the index would take more than 100 bytes");
  free(u.b);
  scratch_rm(&s);
}

/* One tar with a bad sample between two good ones, checked: flagged with
 * reason, counted, the good ones read, the bad one's read fails naming the
 * shard and the key. */
static void check_one_bad(const char *cls_member, const char *cls, int drop_image,
                          dpm_bad_reason want, const char *text) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 1);
  if (!drop_image) test_tar_member(&t, "dir/bad.jpg", "\xff\xd8\xff", 3);
  if (cls_member) test_tar_member(&t, cls_member, cls, strlen(cls));
  good_tar(&t, 2, 1);
  test_tar_end(&t);
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 3);
  CHECK_INT(dpm_source_num_bad(src), 1);
  CHECK_INT(dpm_source_bad(src, 0), DPM_BAD_NONE);
  CHECK_INT(dpm_source_bad(src, 1), want);
  CHECK_INT(dpm_source_bad(src, 2), DPM_BAD_NONE);
  dpm_source_buf buf = {0};
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 1, &buf, &smp, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "x.tar: sample dir/bad: ");
  CHECK_HAS(err.msg, text);
  CHECK_INT(dpm_source_bad_error(src, 1, &err), DPM_CORRUPT);
  CHECK_INT(dpm_source_bad_error(src, 2, &err), DPM_OK);
  CHECK_INT(dpm_source_read(src, 2, &buf, &smp, &err), DPM_OK);
  CHECK_INT(smp.label, 2);
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  free(t.b);
  scratch_rm(&s);
}

TEST(source_tar_flags_a_sample_with_no_cls) {
  check_one_bad(NULL, NULL, 0, DPM_BAD_NO_LABEL, "no .cls label");
}

TEST(source_tar_flags_a_non_numeric_cls) {
  check_one_bad("dir/bad.cls", "seven", 0, DPM_BAD_LABEL, "not a decimal number");
  check_one_bad("dir/bad.cls", "12345678901", 0, DPM_BAD_LABEL, "not a decimal number");
  check_one_bad("dir/bad.cls", "-1", 0, DPM_BAD_LABEL, "not a decimal number");
  check_one_bad("dir/bad.cls", "", 0, DPM_BAD_LABEL, "not a decimal number");
}

TEST(source_tar_flags_a_label_out_of_range) {
  check_one_bad("dir/bad.cls", " 10 \n", 0, DPM_BAD_LABEL_RANGE,
                "outside [0, num_classes)");
}

TEST(source_tar_flags_a_sample_with_no_image) {
  check_one_bad("dir/bad.cls", "1", 1, DPM_BAD_NO_IMAGE, "no .jpg");
}

TEST(source_tar_shard_rewritten_after_open_is_changed) {
  scratch s;
  CHECK(scratch_make(&s));
  test_tar t = {0};
  good_tar(&t, 0, 3);
  test_tar_end(&t);
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_OK);
  /* in place: same inode and size, new bytes and mtime */
  struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  int fd = open(in(&s, "x.tar"), O_WRONLY);
  CHECK(fd >= 0);
  CHECK(pwrite(fd, "zz", 2, 600) == 2);
  CHECK(futimens(fd, later) == 0);
  close(fd);
  dpm_source_buf buf = {0};
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 0, &buf, &smp, &err), DPM_IO);
  CHECK_HAS(err.msg, "x.tar: changed while it was being read");
  static uint8_t whole[1 << 16];
  CHECK_INT(dpm_source_shard_read(src, 0, whole, sizeof whole, &err), DPM_IO);
  CHECK_HAS(err.msg, "changed while it was being read");
  dpm_source_close(src);
  /* truncated */
  CHECK_INT(open_bytes(&s, t.b, t.n, 10, &src, &err), DPM_OK);
  CHECK(truncate(in(&s, "x.tar"), 700) == 0);
  CHECK_INT(dpm_source_read(src, 2, &buf, &smp, &err), DPM_IO);
  CHECK_HAS(err.msg, "changed while it was being read");
  dpm_source_close(src);
  dpm_source_buf_free(&buf);
  free(t.b);
  scratch_rm(&s);
}

/* ---- lmdb --------------------------------------------------------------------- */

/* An LMDB at dir (nosubdir: the file dir) with records k = 0..n-1 keyed
 * "%08d": encoded JPEG-looking Datums of image(k), label k % 10; record 3 a
 * raw 2x3x4 Datum, record 5 not a Datum, record 9 a raw Datum whose sides
 * do not match its bytes, record 10 an encoded one that is no JPEG or PNG. */
static int write_lmdb(const char *dir, int n, int nosubdir) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  if (mdb_env_create(&env) || mdb_env_set_mapsize(env, 1 << 22) ||
      mdb_env_open(env, dir, nosubdir ? MDB_NOSUBDIR : 0, 0644))
    return -1;
  if (mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi)) return -1;
  for (int k = 0; k < n; k++) {
    char key[16];
    uint8_t img[300], rec[400];
    size_t len = image(k, img), rl;
    img[0] = 0xff, img[1] = 0xd8, img[2] = 0xff;
    snprintf(key, sizeof key, "%08d", k);
    if (k == 3) {
      for (int i = 0; i < 24; i++) img[i] = (uint8_t)(100 + i);
      rl = dpm_datum_write(rec, sizeof rec, 2, 3, 4, img, 24, 3, 0);
    } else if (k == 5) {
      memcpy(rec, "\x0b\x0c garbage", 10); /* a group: not a Datum */
      rl = 10;
    } else if (k == 9) {
      rl = dpm_datum_write(rec, sizeof rec, 2, 3, 5, img, 24, 9, 0);
    } else if (k == 10) {
      rl = dpm_datum_write(rec, sizeof rec, 0, 0, 0, "GIF89a", 6, 0, 1);
    } else {
      rl = dpm_datum_write(rec, sizeof rec, 0, 0, 0, img, len, k % 10, 1);
    }
    MDB_val kv = {strlen(key), key}, vv = {rl, rec};
    if (mdb_put(txn, dbi, &kv, &vv, 0)) return -1;
  }
  int rc = mdb_txn_commit(txn);
  mdb_env_close(env);
  return rc ? -1 : 0;
}

static int check_lmdb_sample(const dpm_source *src, int k, dpm_source_buf *buf) {
  dpm_sample smp;
  dpm_err err;
  if (dpm_source_read(src, k, buf, &smp, &err)) return 0;
  uint8_t want[300];
  if (k == 3) {
    for (int i = 0; i < 24; i++) want[i] = (uint8_t)(100 + i);
    return smp.encoding == DPM_SAMPLE_RAW && smp.channels == 2 && smp.height == 3 &&
           smp.width == 4 && smp.len == 24 && !memcmp(smp.data, want, 24) &&
           smp.label == 3;
  }
  size_t n = image(k, want);
  want[0] = 0xff, want[1] = 0xd8, want[2] = 0xff;
  return smp.encoding == DPM_SAMPLE_JPEG && smp.len == n && !memcmp(smp.data, want, n) &&
         smp.label == k % 10;
}

TEST(source_lmdb_indexes_datums_and_flags_non_datums) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(mkdir(in(&s, "db"), 0755) == 0);
  CHECK(write_lmdb(in(&s, "db"), 12, 0) == 0);
  const char *p = in(&s, "db");
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, NULL, 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 12);
  CHECK_INT(dpm_source_num_bad(src), 3);
  CHECK_INT(dpm_source_bad(src, 5), DPM_BAD_NOT_DATUM);
  CHECK_INT(dpm_source_bad(src, 9), DPM_BAD_DATUM);
  CHECK_INT(dpm_source_bad(src, 10), DPM_BAD_DATUM);
  CHECK(!strcmp(dpm_source_key(src, 7), "00000007"));
  dpm_source_buf buf = {0};
  for (int k = 0; k < 12; k++)
    if (k != 5 && k != 9 && k != 10) CHECK(check_lmdb_sample(src, k, &buf));
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 5, &buf, &smp, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "data.mdb: sample 00000005: a record that is not a Caffe Datum");
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  /* a data.mdb named directly; num_classes 5 puts labels 5..9 out of range */
  CHECK(write_lmdb(in(&s, "one.mdb"), 8, 1) == 0);
  p = in(&s, "one.mdb");
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, NULL, 5, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 8);
  CHECK_INT(dpm_source_bad(src, 6), DPM_BAD_LABEL_RANGE);
  CHECK_INT(dpm_source_num_bad(src), 3); /* 5 (not a Datum), 6, 7 */
  CHECK_INT(dpm_source_num_bad_reason(src, DPM_BAD_LABEL_RANGE), 2);
  CHECK_INT(dpm_source_num_bad_reason(src, DPM_BAD_NOT_DATUM), 1);
  dpm_source_close(src);
  /* truncated: shorter than the pages its meta page counts */
  size_t mlen;
  uint8_t *m = test_read_file(in(&s, "one.mdb"), &mlen);
  CHECK(m && mlen >= 3 * 4096);
  CHECK(test_write_file(in(&s, "cut.mdb"), m, mlen - 4096) == 0);
  free(m);
  p = in(&s, "cut.mdb");
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, NULL, 5, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "cut.mdb: shorter than its pages");
  /* not an LMDB */
  CHECK(test_write_file(in(&s, "junk.mdb"), "not an lmdb at all", 18) == 0);
  p = in(&s, "junk.mdb");
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, NULL, 5, &src, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "junk.mdb: not an LMDB data file");
  scratch_rm(&s);
}

static void *lmdb_reader(void *p) {
  reader_arg *a = p;
  dpm_source_buf buf = {0};
  a->ok = 1;
  for (int round = 0; round < 20; round++)
    for (int k = 0; k < 12; k++)
      if (k != 5 && k != 9 && k != 10 && !check_lmdb_sample(a->src, k, &buf)) a->ok = 0;
  dpm_source_buf_free(&buf);
  return NULL;
}

TEST(source_lmdb_reads_from_two_threads) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(mkdir(in(&s, "db"), 0755) == 0);
  CHECK(write_lmdb(in(&s, "db"), 12, 0) == 0);
  const char *p = in(&s, "db");
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, NULL, 10, &src, &err), DPM_OK);
  pthread_t t[2];
  reader_arg a[2] = {{src, 0}, {src, 0}};
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, lmdb_reader, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(a[0].ok && a[1].ok);
  /* data.mdb written to after open: its reads fail, naming it */
  struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  CHECK(utimensat(AT_FDCWD, in(&s, "db/data.mdb"), later, 0) == 0);
  dpm_source_buf buf = {0};
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 0, &buf, &smp, &err), DPM_IO);
  CHECK_HAS(err.msg, "data.mdb: changed while it was being read");
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  scratch_rm(&s);
}

TEST(source_datum_parser_round_trips_and_refuses_garbage) {
  uint8_t rec[64];
  size_t n = dpm_datum_write(rec, sizeof rec, 3, 2, 1, "abcdef", 6, -7, 0);
  CHECK(n > 0);
  dpm_datum d;
  dpm_err err = {0};
  CHECK_INT(dpm_datum_parse(rec, n, &d, &err), DPM_OK);
  CHECK(d.channels == 3 && d.height == 2 && d.width == 1 && d.label == -7 && !d.encoded);
  CHECK(d.has_data && d.data_len == 6 && !memcmp(rec + d.data_off, "abcdef", 6));
  for (size_t cut = 0; cut < n; cut++)
    if (dpm_datum_parse(rec, cut, &d, &err) == DPM_OK)
      CHECK(!d.has_data || d.data_off + d.data_len <= cut);
  CHECK_INT(dpm_datum_parse((const uint8_t *)"\x22\x05"
                                             "ab",
                            4, &d, &err),
            DPM_CORRUPT);
  CHECK_HAS(err.msg, "past the end");
  CHECK_INT(dpm_datum_parse((const uint8_t *)"\x08\x80\x80", 3, &d, &err), DPM_CORRUPT);
  CHECK_INT(dpm_datum_parse((const uint8_t *)"\x20\x01", 2, &d, &err), DPM_CORRUPT);
  CHECK_INT(dpm_datum_parse((const uint8_t *)"\x35\0\0\x80\x3f", 5, &d, &err), DPM_OK);
  CHECK(d.has_float_data && !d.has_data);
  CHECK_INT(dpm_datum_write(rec, 5, 3, 2, 1, "abcdef", 6, 1, 0), 0);
}

/* ---- folder ------------------------------------------------------------------- */

TEST(source_folder_indexes_sorted_classes_and_flags_non_files) {
  scratch s;
  CHECK(scratch_make(&s));
  static const char *const dirs[] = {"root", "root/zebra", "root/ant", "root/.hidden"};
  for (size_t i = 0; i < 4; i++) CHECK(mkdir(in(&s, dirs[i]), 0755) == 0);
  CHECK(test_write_file(in(&s, "root/ant/b.PNG"), "png-b", 5) == 0);
  CHECK(test_write_file(in(&s, "root/ant/a.jpg"), "jpg-a", 5) == 0);
  CHECK(test_write_file(in(&s, "root/ant/notes.txt"), "x", 1) == 0);
  CHECK(test_write_file(in(&s, "root/zebra/c.jpeg"), "jpeg-c", 6) == 0);
  CHECK(test_write_file(in(&s, "root/README"), "x", 1) == 0);
  CHECK(test_write_file(in(&s, "secret.jpg"), "secret", 6) == 0);
  CHECK(symlink(in(&s, "secret.jpg"), in(&s, "root/zebra/d.jpg")) == 0);
  CHECK(mkfifo(in(&s, "root/zebra/e.jpg"), 0600) == 0);
  char root[512];
  snprintf(root, sizeof root, "%s", in(&s, "root"));
  const char *p = root;
  dpm_source *src;
  dpm_err err = {0};
  CHECK_INT(open_kind(DPM_SOURCE_FOLDER, &p, 1, NULL, 2, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 5);
  CHECK(!strcmp(dpm_source_key(src, 0), "ant/a.jpg"));
  CHECK(!strcmp(dpm_source_key(src, 1), "ant/b.PNG"));
  CHECK(!strcmp(dpm_source_key(src, 2), "zebra/c.jpeg"));
  CHECK_INT(dpm_source_label(src, 1), 0);
  CHECK_INT(dpm_source_label(src, 2), 1);
  CHECK_INT(dpm_source_bad(src, 3), DPM_BAD_NOT_FILE); /* the symlink */
  CHECK_INT(dpm_source_bad(src, 4), DPM_BAD_NOT_FILE); /* the FIFO */
  CHECK_INT(dpm_source_num_bad(src), 2);
  CHECK_INT(dpm_source_num_bad_reason(src, DPM_BAD_NOT_FILE), 2);
  CHECK_INT(dpm_source_num_bad_reason(src, DPM_BAD_NO_LABEL), 0);
  CHECK_INT(dpm_source_bytes(src), 16);
  dpm_source_buf buf = {0};
  dpm_sample smp;
  CHECK_INT(dpm_source_read(src, 1, &buf, &smp, &err), DPM_OK);
  CHECK(smp.len == 5 && !memcmp(smp.data, "png-b", 5) && smp.encoding == DPM_SAMPLE_PNG);
  CHECK_INT(dpm_source_read(src, 3, &buf, &smp, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "zebra/d.jpg: sample zebra/d.jpg: not a regular file");
  dpm_source_shard_info info;
  CHECK_INT(dpm_source_num_shards(src), 5);
  CHECK_INT(dpm_source_shard(src, 2, &info, &err), DPM_OK);
  CHECK(info.first == 2 && info.count == 1 && info.size == 6);
  /* a file swapped for a symlink after open is refused at read */
  CHECK(unlink(in(&s, "root/ant/a.jpg")) == 0);
  CHECK(symlink(in(&s, "secret.jpg"), in(&s, "root/ant/a.jpg")) == 0);
  CHECK_INT(dpm_source_read(src, 0, &buf, &smp, &err), DPM_IO);
  CHECK_HAS(err.msg, "changed while it was being read");
  /* a class folder swapped for a symlink, too */
  CHECK(rename(in(&s, "root/zebra"), in(&s, "zebra2")) == 0);
  CHECK(symlink(in(&s, "zebra2"), in(&s, "root/zebra")) == 0);
  CHECK_INT(dpm_source_read(src, 2, &buf, &smp, &err), DPM_IO);
  CHECK_HAS(err.msg, "changed while it was being read");
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  /* now that a class folder is a symlink, open refuses the folder */
  CHECK_INT(open_kind(DPM_SOURCE_FOLDER, &p, 1, NULL, 2, &src, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "zebra is a symbolic link");
  scratch_rm(&s);
}

/* ---- confinement -------------------------------------------------------------- */

TEST(source_confined_fs_refuses_symlinks_fifos_and_outside_files) {
  scratch s;
  CHECK(scratch_make(&s));
  static const char *const dirs[] = {"state",   "state/models", "data",
                                     "outside", "data/img",     "data/img/c0"};
  for (size_t i = 0; i < 6; i++) CHECK(mkdir(in(&s, dirs[i]), 0755) == 0);
  char text[512];
  snprintf(text, sizeof text, "state_dir: %s\ndata_paths: [%s]\n", in(&s, "state"),
           in(&s, "data"));
  dpmd_config cfg;
  dpmd_paths *paths;
  dpm_err err = {0};
  CHECK_INT(dpmd_config_parse(text, strlen(text), "t", &cfg, &err), DPM_OK);
  CHECK_INT(dpmd_paths_create(&cfg, &paths, &err), DPM_OK);
  const dpm_fs *fs = dpmd_paths_data(paths);
  test_tar t = {0};
  good_tar(&t, 0, 2);
  test_tar_end(&t);
  CHECK(test_write_file(in(&s, "data/ok.tar"), t.b, t.n) == 0);
  CHECK(test_write_file(in(&s, "outside/x.tar"), t.b, t.n) == 0);
  CHECK(test_write_file(in(&s, "data/img/c0/a.png"), "p", 1) == 0);
  CHECK(symlink(in(&s, "outside/x.tar"), in(&s, "data/link.tar")) == 0);
  CHECK(symlink(in(&s, "outside"), in(&s, "data/linkdir")) == 0);
  CHECK(mkfifo(in(&s, "data/fifo.tar"), 0600) == 0);
  dpm_source *src;
  const char *p = in(&s, "data/ok.tar");
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, fs, 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 2);
  dpm_source_close(src);
  p = in(&s, "data/link.tar");
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, fs, 10, &src, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "symbolic link");
  p = in(&s, "outside/x.tar");
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, fs, 10, &src, &err), DPM_DENIED);
  p = in(&s, "data/fifo.tar");
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, fs, 10, &src, &err), DPM_IO);
  CHECK_HAS(err.msg, "not a regular file");
  p = in(&s, "data/img");
  CHECK_INT(open_kind(DPM_SOURCE_FOLDER, &p, 1, fs, 10, &src, &err), DPM_OK);
  CHECK_INT(dpm_source_size(src), 1);
  dpm_source_close(src);
  p = in(&s, "data/linkdir");
  CHECK_INT(open_kind(DPM_SOURCE_FOLDER, &p, 1, fs, 10, &src, &err), DPM_DENIED);
  p = in(&s, "outside");
  CHECK_INT(open_kind(DPM_SOURCE_FOLDER, &p, 1, fs, 10, &src, &err), DPM_DENIED);
  p = in(&s, "data/linkdir/x");
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, &p, 1, fs, 10, &src, &err), DPM_DENIED);
  dpmd_paths_destroy(paths);
  dpmd_config_fini(&cfg);
  free(t.b);
  scratch_rm(&s);
}

TEST(source_config_errors) {
  dpm_source *src;
  dpm_err err = {0};
  const char *p = "/nonexistent.tar";
  const char *two[] = {"/a", "/b"};
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 0, NULL, 10, &src, &err), DPM_INVALID);
  CHECK_INT(open_kind(DPM_SOURCE_LMDB, two, 2, NULL, 10, &src, &err), DPM_INVALID);
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, NULL, 0, &src, &err), DPM_INVALID);
  CHECK_INT(open_kind((dpm_source_kind)9, &p, 1, NULL, 10, &src, &err), DPM_INVALID);
  CHECK_INT(open_kind(DPM_SOURCE_TAR, &p, 1, NULL, 10, &src, &err), DPM_IO);
  CHECK_HAS(err.msg, "/nonexistent.tar");
  dpm_source_kind k;
  CHECK(dpm_source_kind_parse("lmdb", &k) == 0 && k == DPM_SOURCE_LMDB);
  CHECK(dpm_source_kind_parse("zip", &k) == -1);
  CHECK(!strcmp(dpm_source_kind_name(DPM_SOURCE_FOLDER), "folder"));
}
