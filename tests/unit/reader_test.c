/* IDX parsing and the prefetching reader: exact bytes, every refusal with
 * its message, seeded order, batch slicing, seek, shards, one-pass mode,
 * synthetic data, and destroy in mid-epoch. Small files are written to a
 * mkdtemp directory (raw and gzipped); Fashion-MNIST is loaded once when
 * present. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "common/idx.h"
#include "io/reader.h"
#include "test.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"

/* A temporary directory and the files written into it, removed by
 * tmp_cleanup. */
static char tmp_dir[64];
static char tmp_files[16][128];
static int tmp_count;

static const char *tmp_path(const char *name) {
  if (!tmp_dir[0]) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/dpm-reader-XXXXXX");
    if (!mkdtemp(tmp_dir)) return NULL;
  }
  if (tmp_count == 16) return NULL;
  snprintf(tmp_files[tmp_count], sizeof tmp_files[0], "%s/%s", tmp_dir, name);
  return tmp_files[tmp_count++];
}

static void tmp_cleanup(void) {
  for (int i = 0; i < tmp_count; i++) unlink(tmp_files[i]);
  if (tmp_dir[0]) rmdir(tmp_dir);
  tmp_dir[0] = 0;
  tmp_count = 0;
}

/* Writes bytes to a new temporary file (gzipped when gz); returns its path
 * or NULL. */
static const char *write_file(const char *name, int gz, const void *bytes, size_t len) {
  const char *path = tmp_path(name);
  if (!path) return NULL;
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f) return NULL;
    int ok = len == 0 || gzwrite(f, bytes, (unsigned)len) == (int)len;
    if (gzclose(f) != Z_OK || !ok) return NULL;
  } else {
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    int ok = fwrite(bytes, 1, len, f) == len;
    if (fclose(f) != 0 || !ok) return NULL;
  }
  return path;
}

/* An IDX image: magic, dims (big-endian) and data into buf; returns bytes. */
static size_t make_idx(uint8_t *buf, uint32_t magic, int ndim, const uint32_t *dims,
                       const uint8_t *data, size_t len) {
  size_t k = 0;
  for (int s = 24; s >= 0; s -= 8) buf[k++] = (uint8_t)(magic >> s);
  for (int i = 0; i < ndim; i++)
    for (int s = 24; s >= 0; s -= 8) buf[k++] = (uint8_t)(dims[i] >> s);
  memcpy(buf + k, data, len);
  return k + len;
}

/* ---- IDX ---- */

TEST(idx_load_raw_and_gzip) {
  const uint8_t px[3 * 2 * 3] = {0,  1,  2,  3,   4,   5,   10,  20,  30,
                                 40, 50, 60, 255, 254, 253, 128, 127, 9};
  const uint8_t lab[3] = {9, 0, 4};
  uint8_t img_buf[64], lab_buf[32];
  size_t ni =
      make_idx(img_buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){3, 2, 3}, px, sizeof px);
  size_t nl =
      make_idx(lab_buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){3}, lab, sizeof lab);
  for (int gz = 0; gz < 2; gz++) {
    const char *ip = write_file(gz ? "i.gz" : "i", gz, img_buf, ni);
    const char *lp = write_file(gz ? "l.gz" : "l", gz, lab_buf, nl);
    CHECK(ip && lp);
    dpm_err err = {0};
    dpm_idx x;
    CHECK_INT(dpm_idx_load(NULL, ip, 3, &x, &err), DPM_OK);
    CHECK_INT(x.ndim, 3);
    CHECK_INT(x.dim[0], 3);
    CHECK_INT(x.dim[1], 2);
    CHECK_INT(x.dim[2], 3);
    CHECK_INT(x.size, sizeof px);
    CHECK(memcmp(x.data, px, sizeof px) == 0);
    dpm_idx_fini(&x);
    CHECK_INT(dpm_idx_peek(NULL, ip, 3, &x, &err), DPM_OK);
    CHECK(x.data == NULL);
    CHECK_INT(x.dim[0] * 100 + x.dim[1] * 10 + x.dim[2], 323);
    CHECK_INT(dpm_idx_peek(NULL, lp, 3, &x, &err), DPM_CORRUPT);
    CHECK_INT(dpm_idx_load(NULL, lp, 0, &x, &err), DPM_OK);
    CHECK_INT(x.ndim, 1);
    CHECK_INT(x.dim[0], 3);
    CHECK(memcmp(x.data, lab, sizeof lab) == 0);
    dpm_idx_fini(&x);
    dpm_idx_dataset d;
    CHECK_INT(dpm_idx_dataset_load(NULL, ip, lp, 10, &d, &err), DPM_OK);
    CHECK_INT(d.n, 3);
    CHECK_INT(d.rows, 2);
    CHECK_INT(d.cols, 3);
    CHECK_INT(d.images.data[12], 255);
    CHECK_INT(d.labels.data[0], 9);
    dpm_idx_dataset_fini(&d);
    dpm_idx_dataset_fini(&d); /* twice is harmless */
  }
  tmp_cleanup();
}

/* Loads bytes written as a file (raw and gzipped); checks the status and
 * that the message names the file and contains want. */
static void expect_refused(const uint8_t *bytes, size_t len, int ndim, dpm_status code,
                           const char *want) {
  for (int gz = 0; gz < 2; gz++) {
    const char *p = write_file(gz ? "bad.gz" : "bad", gz, bytes, len);
    CHECK(p);
    dpm_err err = {0};
    dpm_idx x;
    CHECK_INT(dpm_idx_load(NULL, p, ndim, &x, &err), code);
    CHECK_INT(err.code, code);
    CHECK_HAS(err.msg, p);
    CHECK_HAS(err.msg, want);
    CHECK(x.data == NULL);
  }
}

TEST(idx_refuses_bad_magic_and_header) {
  uint8_t buf[64], px[4] = {1, 2, 3, 4};
  size_t n = make_idx(buf, 0x00000802u, 2, (uint32_t[]){2, 2}, px, 4);
  expect_refused(buf, n, 0, DPM_CORRUPT, "not an IDX file of unsigned bytes");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, 0x00000d03u, 3, (uint32_t[]){1, 2, 2}, px, 4); /* f32 */
  expect_refused(buf, n, 0, DPM_CORRUPT, "not an IDX file of unsigned bytes");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){4}, px, 4);
  expect_refused(buf, n, 3, DPM_CORRUPT, "is a 1-D label file");
  if (dpm_test_has_failed()) goto out;
  expect_refused(buf, 2, 0, DPM_CORRUPT, "truncated IDX header");
  if (dpm_test_has_failed()) goto out;
  expect_refused(buf, 6, 0, DPM_CORRUPT, "truncated IDX header");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){0, 2, 2}, px, 0);
  expect_refused(buf, n, 3, DPM_CORRUPT, "dimension 0 is out of range");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){100000, 65536, 65536}, px, 4);
  expect_refused(buf, n, 3, DPM_CORRUPT, "would exceed");
  if (dpm_test_has_failed()) goto out;
  expect_refused(buf, 0, 0, DPM_CORRUPT, "truncated IDX header");
out:
  tmp_cleanup();
}

/* A file a client names may be anyone's (/etc/shadow): the message says it
 * is not IDX and shows none of its bytes. */
TEST(idx_errors_show_no_file_contents) {
  static const char shadow[] = "root:$y$j9T$abc:19000:0:99999:7:::\n";
  const char *p = write_file("shadow", 0, (const uint8_t *)shadow, sizeof shadow - 1);
  dpm_err err = {0};
  dpm_idx x;
  CHECK(p);
  CHECK_INT(dpm_idx_load(NULL, p, 3, &x, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "not an IDX file");
  CHECK(!strstr(err.msg, "726f6f74") && !strstr(err.msg, "root") && !strstr(err.msg, "0x72"));
  tmp_cleanup();
}

TEST(idx_refuses_truncated_and_trailing) {
  uint8_t buf[64], px[13];
  for (int i = 0; i < 13; i++) px[i] = (uint8_t)i;
  /* 3 images of 2x2 promise 12 bytes */
  size_t n = make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){3, 2, 2}, px, 11);
  expect_refused(buf, n, 3, DPM_CORRUPT, "truncated IDX data: 11 of 12");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){3, 2, 2}, px, 13);
  expect_refused(buf, n, 3, DPM_CORRUPT, "trailing bytes");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){5}, px, 4);
  expect_refused(buf, n, 1, DPM_CORRUPT, "truncated IDX data: 4 of 5");
  if (dpm_test_has_failed()) goto out;
  n = make_idx(buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){5}, px, 6);
  expect_refused(buf, n, 1, DPM_CORRUPT, "trailing bytes");
  if (dpm_test_has_failed()) goto out;
  /* a gzip stream cut short */
  {
    uint8_t big[4096 + 16], pix[4096];
    for (int i = 0; i < 4096; i++) pix[i] = (uint8_t)(i * 37);
    size_t nb =
        make_idx(big, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){1, 64, 64}, pix, 4096);
    const char *p = write_file("cut.gz", 1, big, nb);
    CHECK(p);
    FILE *f = fopen(p, "rb");
    CHECK(f);
    uint8_t z[8192];
    size_t zn = fread(z, 1, sizeof z, f);
    fclose(f);
    const char *q = write_file("cut2.gz", 0, z, zn / 2);
    CHECK(q);
    dpm_err err = {0};
    dpm_idx x;
    CHECK_INT(dpm_idx_load(NULL, q, 3, &x, &err), DPM_CORRUPT);
    CHECK_HAS(err.msg, q);
  }
out:
  tmp_cleanup();
}

TEST(idx_refuses_missing_file) {
  dpm_err err = {0};
  dpm_idx x;
  CHECK_INT(dpm_idx_load(NULL, "/nonexistent/dpm/x-idx3-ubyte.gz", 3, &x, &err), DPM_IO);
  CHECK_HAS(err.msg, "/nonexistent/dpm/x-idx3-ubyte.gz");
  CHECK_HAS(err.msg, "No such file");
}

/* Writes a small image/label pair; labels[i] = lab[i]. */
static int write_pair(int n_img, const uint8_t *lab, int n_lab, const char **ip,
                      const char **lp) {
  static uint8_t buf[4096];
  uint8_t px[1024] = {0};
  size_t k = make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){(uint32_t)n_img, 2, 2},
                      px, (size_t)n_img * 4);
  *ip = write_file("img", 1, buf, k);
  k = make_idx(buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){(uint32_t)n_lab}, lab,
               (size_t)n_lab);
  *lp = write_file("lab", 0, buf, k);
  return *ip && *lp;
}

TEST(idx_refuses_label_out_of_range_and_count_mismatch) {
  const char *ip, *lp;
  dpm_err err = {0};
  dpm_idx_dataset d;
  CHECK(write_pair(4, (uint8_t[]){1, 2, 10, 3}, 4, &ip, &lp));
  CHECK_INT(dpm_idx_dataset_load(NULL, ip, lp, 10, &d, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, lp);
  CHECK_HAS(err.msg, "the label at index 2 is out of range [0, 10)");
  CHECK(d.images.data == NULL && d.labels.data == NULL);
  CHECK_INT(dpm_idx_dataset_load(NULL, ip, lp, 11, &d, &err), DPM_OK);
  dpm_idx_dataset_fini(&d);
  tmp_cleanup();

  CHECK(write_pair(4, (uint8_t[]){1, 2, 3, 4, 5}, 5, &ip, &lp));
  CHECK_INT(dpm_idx_dataset_load(NULL, ip, lp, 10, &d, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "has 4 images but");
  CHECK_HAS(err.msg, "has 5 labels");
  CHECK_HAS(err.msg, ip);
  /* the same refusals through the reader */
  dpm_reader *r = NULL;
  dpm_reader_config cfg = {.kind = DPM_READER_IDX,
                           .images = ip,
                           .labels = lp,
                           .scale = 1,
                           .batch = 1,
                           .num_shards = 1,
                           .prefetch = 1,
                           .repeat = 1};
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_CORRUPT);
  CHECK(r == NULL);
  CHECK_HAS(err.msg, "has 4 images but");
  tmp_cleanup();
}

TEST(idx_fashion_mnist) {
  if (access(FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0 ||
      access(FMNIST "t10k-images-idx3-ubyte.gz", R_OK) != 0) {
    printf("    skipped: Fashion-MNIST is not in " FMNIST "\n");
    return;
  }
  dpm_err err = {0};
  dpm_idx_dataset d;
  CHECK_INT(dpm_idx_dataset_load(NULL, FMNIST "train-images-idx3-ubyte.gz",
                                 FMNIST "train-labels-idx1-ubyte.gz", 10, &d, &err),
            DPM_OK);
  CHECK_INT(d.n, 60000);
  CHECK_INT(d.rows, 28);
  CHECK_INT(d.cols, 28);
  CHECK_INT(d.images.size, 60000 * 784);
  int first = d.labels.data[0];
  long hist[10] = {0};
  for (int64_t i = 0; i < d.n; i++) hist[d.labels.data[i]]++;
  dpm_idx_dataset_fini(&d);
  CHECK_INT(first, 9); /* ankle boot */
  for (int k = 0; k < 10; k++) CHECK_INT(hist[k], 6000);

  /* the test set through the reader: floats equal pixel * scale */
  dpm_idx_dataset t;
  CHECK_INT(dpm_idx_dataset_load(NULL, FMNIST "t10k-images-idx3-ubyte.gz",
                                 FMNIST "t10k-labels-idx1-ubyte.gz", 10, &t, &err),
            DPM_OK);
  CHECK_INT(t.n, 10000);
  dpm_reader_config cfg = {.kind = DPM_READER_IDX,
                           .images = FMNIST "t10k-images-idx3-ubyte.gz",
                           .labels = FMNIST "t10k-labels-idx1-ubyte.gz",
                           .scale = 1.0 / 255,
                           .shuffle = 1,
                           .seed = 3,
                           .batch = 128,
                           .num_shards = 1,
                           .prefetch = 2,
                           .repeat = 0};
  dpm_reader *r = NULL;
  dpm_status st = dpm_reader_create(&cfg, &r, &err);
  uint32_t *order = malloc(10000 * sizeof *order);
  int bad = st != DPM_OK || !order, batches = 0, rows = 0;
  if (!bad) dpm_reader_order(3, 0, 1, 10000, order);
  while (!bad) {
    const dpm_batch *b;
    if (dpm_reader_next(r, &b, &err) != DPM_OK) bad = 1;
    if (bad || !b) break;
    if (b->c != 1 || b->h != 28 || b->w != 28) bad = 2;
    for (int k = 0; k < b->n && !bad; k++) {
      uint32_t ex = order[rows + k];
      if (b->label[k] != t.labels.data[ex]) bad = 3;
      for (int j = 0; j < 784; j++)
        if (b->data[k * 784 + j] != (float)t.images.data[ex * 784 + j] * (float)(1.0 / 255))
          bad = 4;
    }
    rows += b->n;
    batches++;
  }
  free(order);
  dpm_reader_destroy(r);
  dpm_idx_dataset_fini(&t);
  CHECK_INT(bad, 0);
  CHECK_INT(rows, 10000);
  CHECK_INT(batches, 79); /* 78 x 128 + 16 */
}

/* ---- reader on a small hand-written set ---- */

/* N examples of 2x2 pixels that spell out their index: (i & 255, i >> 8, 7,
 * 255 - (i & 255)), label i % 10. */
#define SMALL_N 103

static int write_small(const char **ip, const char **lp) {
  static uint8_t buf[16 + SMALL_N * 4];
  uint8_t px[SMALL_N * 4], lab[SMALL_N];
  for (int i = 0; i < SMALL_N; i++) {
    px[i * 4 + 0] = (uint8_t)(i & 255);
    px[i * 4 + 1] = (uint8_t)(i >> 8);
    px[i * 4 + 2] = 7;
    px[i * 4 + 3] = (uint8_t)(255 - (i & 255));
    lab[i] = (uint8_t)(i % 10);
  }
  size_t k =
      make_idx(buf, DPM_IDX_MAGIC_IMAGES, 3, (uint32_t[]){SMALL_N, 2, 2}, px, sizeof px);
  *ip = write_file("small-img.gz", 1, buf, k);
  k = make_idx(buf, DPM_IDX_MAGIC_LABELS, 1, (uint32_t[]){SMALL_N}, lab, sizeof lab);
  *lp = write_file("small-lab", 0, buf, k);
  return *ip && *lp;
}

static dpm_reader_config small_cfg(const char *ip, const char *lp) {
  return (dpm_reader_config){.kind = DPM_READER_IDX,
                             .images = ip,
                             .labels = lp,
                             .scale = 1.0,
                             .shuffle = 1,
                             .seed = 5,
                             .batch = 10,
                             .num_shards = 1,
                             .prefetch = 3,
                             .repeat = 1};
}

/* Example index of row k (scale 1), or -1 when the row is not a valid
 * example of the small set. */
static int row_id(const dpm_batch *b, int k) {
  const float *p = b->data + k * 4;
  int id = (int)p[0] + 256 * (int)p[1];
  if (p[2] != 7 || p[3] != (float)(255 - (id & 255))) return -1;
  if (b->label[k] != id % 10) return -1;
  return id;
}

TEST(reader_slices_follow_epoch_order) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  for (int prefetch = 1; prefetch <= 4; prefetch += 3) {
    dpm_reader_config cfg = small_cfg(ip, lp);
    cfg.prefetch = prefetch;
    dpm_reader *r = NULL;
    dpm_err err = {0};
    CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
    CHECK_INT(dpm_reader_size(r), SMALL_N);
    int c, h, w;
    dpm_reader_shape(r, &c, &h, &w);
    CHECK(c == 1 && h == 2 && w == 2);
    uint32_t order[SMALL_N];
    int bad = 0;
    /* 10 full batches per epoch (3 examples dropped); run 2.5 epochs */
    for (int i = 0; i < 25 && !bad; i++) {
      uint64_t epoch = (uint64_t)i / 10, index = (uint64_t)(i % 10) * 10;
      dpm_reader_pos want = {epoch, index};
      dpm_reader_pos at = dpm_reader_position(r);
      if (at.epoch != want.epoch || at.index != want.index) bad = 1;
      const dpm_batch *b;
      if (dpm_reader_next(r, &b, &err) != DPM_OK || !b) {
        bad = 2;
        break;
      }
      if (b->pos.epoch != epoch || b->pos.index != index) bad = 3;
      if (b->n != 10 || b->c != 1 || b->h != 2 || b->w != 2) bad = 4;
      if ((uintptr_t)b->data % 64) bad = 5;
      dpm_reader_order(5, epoch, 1, SMALL_N, order);
      for (int k = 0; k < b->n && !bad; k++)
        if (row_id(b, k) != (int)order[index + (uint64_t)k]) bad = 6;
    }
    dpm_reader_destroy(r);
    CHECK_INT(bad, 0);
  }
  /* scale applies to every pixel */
  dpm_reader_config cfg = small_cfg(ip, lp);
  cfg.scale = 0.5;
  cfg.shuffle = 0;
  dpm_reader *r = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
  const dpm_batch *b;
  CHECK_INT(dpm_reader_next(r, &b, &err), DPM_OK);
  int ok = b && b->data[4 * 3 + 0] == 1.5f && b->data[4 * 3 + 2] == 3.5f &&
           b->data[4 * 3 + 3] == 126.0f && b->label[3] == 3;
  dpm_reader_destroy(r);
  CHECK(ok);
  tmp_cleanup();
}

TEST(reader_order_is_seeded_permutation) {
  enum { N = 1000 };
  static uint32_t a[N], b[N], c[N];
  static uint8_t seen[N];
  dpm_reader_order(11, 0, 1, N, a);
  dpm_reader_order(11, 0, 1, N, b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < N; i++) {
    CHECK(a[i] < N && !seen[a[i]]);
    seen[a[i]] = 1;
  }
  dpm_reader_order(11, 1, 1, N, c);
  CHECK(memcmp(a, c, sizeof a) != 0);
  dpm_reader_order(12, 0, 1, N, c);
  CHECK(memcmp(a, c, sizeof a) != 0);
  dpm_reader_order(11, 0, 0, N, c);
  for (int i = 0; i < N; i++) CHECK_INT(c[i], i);
}

/* Copies the example ids of the next `batches` batches into ids. */
static int read_ids(dpm_reader *r, int batches, int *ids) {
  dpm_err err = {0};
  for (int i = 0; i < batches; i++) {
    const dpm_batch *b;
    if (dpm_reader_next(r, &b, &err) != DPM_OK || !b) return 0;
    for (int k = 0; k < b->n; k++) *ids++ = row_id(b, k);
  }
  return 1;
}

TEST(reader_shuffle_reproducible) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  dpm_reader_config cfg = small_cfg(ip, lp);
  cfg.seed = 7;
  dpm_reader *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
  dpm_err err = {0};
  static int x1[200], x2[200], x3[200], x4[200];
  CHECK_INT(dpm_reader_create(&cfg, &r1, &err), DPM_OK);
  cfg.prefetch = 1; /* prefetch depth does not change the stream */
  CHECK_INT(dpm_reader_create(&cfg, &r2, &err), DPM_OK);
  cfg.seed = 8;
  CHECK_INT(dpm_reader_create(&cfg, &r3, &err), DPM_OK);
  cfg.shuffle = 0;
  CHECK_INT(dpm_reader_create(&cfg, &r4, &err), DPM_OK);
  int ok = read_ids(r1, 20, x1) && read_ids(r2, 20, x2) && read_ids(r3, 20, x3) &&
           read_ids(r4, 20, x4);
  dpm_reader_destroy(r1);
  dpm_reader_destroy(r2);
  dpm_reader_destroy(r3);
  dpm_reader_destroy(r4);
  CHECK(ok);
  CHECK(memcmp(x1, x2, sizeof x1) == 0);                   /* same seed */
  CHECK(memcmp(x1, x3, sizeof x1) != 0);                   /* other seed */
  CHECK(memcmp(x1, x1 + 100, 100 * sizeof *x1) != 0);      /* epoch 1 != 0 */
  for (int i = 0; i < 200; i++) CHECK_INT(x4[i], i % 100); /* no shuffle */
  int seen[SMALL_N] = {0};
  for (int i = 0; i < 100; i++) {
    CHECK(x1[i] >= 0 && x1[i] < SMALL_N && !seen[x1[i]]);
    seen[x1[i]] = 1;
  }
  tmp_cleanup();
}

TEST(reader_seek_resumes_same_batches) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  dpm_reader_config cfg = small_cfg(ip, lp);
  dpm_reader *a = NULL, *b = NULL;
  dpm_err err = {0};
  static int xa[100], xb[100], xc[100];
  CHECK_INT(dpm_reader_create(&cfg, &a, &err), DPM_OK);
  CHECK_INT(dpm_reader_create(&cfg, &b, &err), DPM_OK);
  int ok = read_ids(a, 7, xa);
  dpm_reader_pos saved = dpm_reader_position(a);
  ok = ok && read_ids(a, 8, xa); /* crosses into epoch 1 */
  /* a fresh reader seeks to the saved position */
  ok = ok && dpm_reader_seek(b, saved, &err) == DPM_OK;
  dpm_reader_pos p = dpm_reader_position(b);
  ok = ok && p.epoch == saved.epoch && p.index == saved.index;
  ok = ok && read_ids(b, 8, xb);
  /* the reader that went on seeks back in the middle of a held batch */
  ok = ok && dpm_reader_seek(a, saved, &err) == DPM_OK;
  ok = ok && read_ids(a, 8, xc);
  /* positions in a later epoch, and repeated seeks without reading */
  dpm_reader_pos later = {5, 30};
  ok = ok && dpm_reader_seek(b, (dpm_reader_pos){2, 0}, &err) == DPM_OK;
  ok = ok && dpm_reader_seek(b, later, &err) == DPM_OK;
  const dpm_batch *bt = NULL;
  ok = ok && dpm_reader_next(b, &bt, &err) == DPM_OK && bt;
  int later_ok = ok && bt->pos.epoch == 5 && bt->pos.index == 30;
  uint32_t order[SMALL_N];
  dpm_reader_order(5, 5, 1, SMALL_N, order);
  for (int k = 0; later_ok && k < bt->n; k++)
    later_ok = row_id(bt, k) == (int)order[30 + k];
  /* positions that leave no full batch are refused */
  dpm_status s1 = dpm_reader_seek(b, (dpm_reader_pos){0, 94}, &err);
  dpm_status s2 = dpm_reader_seek(b, (dpm_reader_pos){0, 103}, &err);
  dpm_status s3 = dpm_reader_seek(b, (dpm_reader_pos){0, 93}, &err);
  dpm_reader_destroy(a);
  dpm_reader_destroy(b);
  CHECK(ok);
  CHECK(later_ok);
  CHECK(memcmp(xa, xb, 80 * sizeof *xa) == 0);
  CHECK(memcmp(xa, xc, 80 * sizeof *xa) == 0);
  CHECK_INT(saved.epoch, 0);
  CHECK_INT(saved.index, 70);
  CHECK_INT(s1, DPM_INVALID);
  CHECK_INT(s2, DPM_INVALID);
  CHECK_INT(s3, DPM_OK); /* unaligned but a full batch: allowed */
  tmp_cleanup();
}

TEST(reader_shards_disjoint_and_cover) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  enum { S = 3, B = 5, STEPS = 12 }; /* global 15: 6 per epoch, 2 epochs */
  dpm_reader *r[S] = {0};
  dpm_err err = {0};
  int ok = 1;
  for (int s = 0; s < S && ok; s++) {
    dpm_reader_config cfg = small_cfg(ip, lp);
    cfg.batch = B;
    cfg.shard_id = s;
    cfg.num_shards = S;
    cfg.prefetch = 2;
    ok = dpm_reader_create(&cfg, &r[s], &err) == DPM_OK;
  }
  uint32_t order[SMALL_N];
  int bad = !ok;
  for (int i = 0; i < STEPS && !bad; i++) {
    int seen[SMALL_N] = {0};
    uint64_t epoch = (uint64_t)i / 6, index = (uint64_t)(i % 6) * S * B;
    dpm_reader_order(5, epoch, 1, SMALL_N, order);
    for (int s = 0; s < S && !bad; s++) {
      const dpm_batch *b;
      if (dpm_reader_next(r[s], &b, &err) != DPM_OK || !b || b->n != B ||
          b->pos.epoch != epoch || b->pos.index != index) {
        bad = 1;
        break;
      }
      for (int k = 0; k < B; k++) {
        int id = row_id(b, k);
        if (id < 0 || seen[id]++) bad = 2; /* disjoint */
        if (id != (int)order[index + (uint64_t)(s * B + k)]) bad = 3;
      }
    }
    for (uint64_t j = index; j < index + S * B; j++)
      if (!seen[order[j]]) bad = 4; /* together they cover it */
  }
  for (int s = 0; s < S; s++) dpm_reader_destroy(r[s]);
  CHECK_INT(bad, 0);
  tmp_cleanup();
}

TEST(reader_one_pass_partial_then_null) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  dpm_reader_config cfg = small_cfg(ip, lp);
  cfg.repeat = 0;
  cfg.shuffle = 0;
  dpm_reader *r = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
  int sizes[16], nb = 0, total = 0, bad = 0;
  for (int pass = 0; pass < 2 && !bad; pass++) {
    nb = total = 0;
    for (;;) {
      const dpm_batch *b;
      if (dpm_reader_next(r, &b, &err) != DPM_OK || nb == 16) {
        bad = 1;
        break;
      }
      if (!b) break;
      for (int k = 0; k < b->n; k++)
        if (row_id(b, k) != total + k) bad = 2;
      sizes[nb++] = b->n;
      total += b->n;
    }
    const dpm_batch *b = (const dpm_batch *)1;
    if (dpm_reader_next(r, &b, &err) != DPM_OK || b) bad = 3; /* stays NULL */
    dpm_reader_pos end = dpm_reader_position(r);
    if (end.epoch != 0 || end.index != SMALL_N) bad = 4;
    if (dpm_reader_rewind(r) != DPM_OK) bad = 5;
  }
  dpm_status s1 = dpm_reader_seek(r, (dpm_reader_pos){1, 0}, &err);
  dpm_status s2 = dpm_reader_seek(r, (dpm_reader_pos){0, SMALL_N + 1}, &err);
  dpm_status s3 = dpm_reader_seek(r, (dpm_reader_pos){0, SMALL_N}, &err);
  const dpm_batch *b = (const dpm_batch *)1;
  dpm_status s4 = dpm_reader_next(r, &b, &err);
  dpm_reader_destroy(r);
  CHECK_INT(bad, 0);
  CHECK_INT(nb, 11);
  CHECK_INT(total, SMALL_N);
  CHECK_INT(sizes[9], 10);
  CHECK_INT(sizes[10], 3);
  CHECK_INT(s1, DPM_INVALID);
  CHECK_INT(s2, DPM_INVALID);
  CHECK_INT(s3, DPM_OK);
  CHECK_INT(s4, DPM_OK);
  CHECK(b == NULL);

  /* two shards, global 20: the last global batch has 3 examples, all in
   * shard 0's part; shard 1 ends one batch earlier */
  int count[2] = {0}, rows[2] = {0};
  for (int s = 0; s < 2; s++) {
    cfg.shard_id = s;
    cfg.num_shards = 2;
    CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
    const dpm_batch *bt;
    while (dpm_reader_next(r, &bt, &err) == DPM_OK && bt && count[s] < 20) {
      count[s]++;
      rows[s] += bt->n;
    }
    dpm_reader_destroy(r);
  }
  CHECK_INT(count[0], 6);
  CHECK_INT(rows[0], 53);
  CHECK_INT(count[1], 5);
  CHECK_INT(rows[1], 50);
  tmp_cleanup();
}

TEST(reader_refuses_bad_config) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  struct {
    const char *what;
    dpm_status code;
    const char *msg;
  } cases[] = {
      {"batch 0", DPM_INVALID, "batch 0"},
      {"batch too big", DPM_INVALID, "larger than the 51 examples"},
      {"shard", DPM_INVALID, "shard_id 2 is outside"},
      {"prefetch", DPM_INVALID, "prefetch 0"},
      {"kind", DPM_INVALID, "unknown kind 7"},
      {"missing", DPM_IO, "/nonexistent/labels"},
      {"no file", DPM_INVALID, "needs both"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpm_reader_config cfg = small_cfg(ip, lp);
    switch (i) {
    case 0:
      cfg.batch = 0;
      break;
    case 1:
      cfg.batch = 52;
      cfg.num_shards = 2;
      break;
    case 2:
      cfg.shard_id = 2;
      cfg.num_shards = 2;
      break;
    case 3:
      cfg.prefetch = 0;
      break;
    case 4:
      cfg.kind = 7;
      break;
    case 5:
      cfg.labels = "/nonexistent/labels";
      break;
    case 6:
      cfg.images = NULL;
      break;
    }
    dpm_reader *r = (dpm_reader *)1;
    dpm_err err = {0};
    dpm_status st = dpm_reader_create(&cfg, &r, &err);
    if (st != cases[i].code || r != NULL || !strstr(err.msg, cases[i].msg))
      dpm_test_fail(__FILE__, __LINE__, "%s: %s (%s)", cases[i].what, dpm_status_name(st),
                    err.msg);
  }
  /* the largest valid batch is accepted */
  dpm_reader_config cfg = small_cfg(ip, lp);
  cfg.batch = 51;
  cfg.num_shards = 2;
  cfg.shard_id = 1;
  dpm_reader *r = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
  dpm_reader_destroy(r);
  tmp_cleanup();
}

TEST(reader_destroy_mid_epoch) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  dpm_err err = {0};
  for (int i = 0; i < 20; i++) {
    dpm_reader_config cfg = small_cfg(ip, lp);
    cfg.prefetch = 1 + i % 4;
    cfg.repeat = i % 2;
    cfg.batch = 1;
    dpm_reader *r = NULL;
    CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
    const dpm_batch *b;
    for (int k = 0; k < i % 5; k++) CHECK_INT(dpm_reader_next(r, &b, &err), DPM_OK);
    if (i % 3 == 0) CHECK_INT(dpm_reader_seek(r, (dpm_reader_pos){0, 50}, &err), DPM_OK);
    dpm_reader_destroy(r); /* producer blocked on a full ring, or working */
  }
  dpm_reader_destroy(NULL);
  tmp_cleanup();
}

TEST(reader_synthetic_deterministic_and_learnable) {
  dpm_reader_config cfg = {.kind = DPM_READER_SYNTHETIC,
                           .scale = 1.0 / 255,
                           .shuffle = 1,
                           .seed = 42,
                           .batch = 32,
                           .num_shards = 1,
                           .prefetch = 2,
                           .repeat = 1,
                           .num_examples = 200,
                           .channels = 2,
                           .height = 5,
                           .width = 6,
                           .num_classes = 10};
  dpm_reader *r1 = NULL, *r2 = NULL, *r3 = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&cfg, &r1, &err), DPM_OK);
  CHECK_INT(dpm_reader_create(&cfg, &r2, &err), DPM_OK);
  cfg.seed = 43;
  CHECK_INT(dpm_reader_create(&cfg, &r3, &err), DPM_OK);
  int same = 1, differ = 0, bad = 0, hist[10] = {0};
  double on = 0, off = 0;
  long n_on = 0, n_off = 0;
  uint32_t order[200];
  for (int i = 0; i < 12 && !bad; i++) { /* 6 batches per epoch: 2 epochs */
    const dpm_batch *a, *b, *c;
    if (dpm_reader_next(r1, &a, &err) || dpm_reader_next(r2, &b, &err) ||
        dpm_reader_next(r3, &c, &err) || !a || !b || !c) {
      bad = 1;
      break;
    }
    if (a->n != 32 || a->c != 2 || a->h != 5 || a->w != 6) bad = 2;
    size_t bytes = 32 * 60 * sizeof(float);
    same &= memcmp(a->data, b->data, bytes) == 0 &&
            memcmp(a->label, b->label, 32 * sizeof(int32_t)) == 0;
    differ |= memcmp(a->data, c->data, bytes) != 0;
    dpm_reader_order(42, a->pos.epoch, 1, 200, order);
    for (int k = 0; k < 32 && !bad; k++) {
      uint8_t px[60];
      int32_t y;
      dpm_synthetic_example(42, order[a->pos.index + (uint64_t)k], 2, 5, 6, 10, px, &y);
      if (y != a->label[k] || y < 0 || y >= 10) bad = 3;
      hist[y]++;
      for (int j = 0; j < 60; j++) {
        float v = a->data[k * 60 + j];
        if (v != (float)px[j] * (float)(1.0 / 255)) bad = 4;
        int band = (j % 30) * 10 / 30;
        if (band == y)
          on += v, n_on++;
        else
          off += v, n_off++;
      }
    }
  }
  dpm_reader_destroy(r1);
  dpm_reader_destroy(r2);
  dpm_reader_destroy(r3);
  CHECK_INT(bad, 0);
  CHECK(same);
  CHECK(differ);
  for (int k = 0; k < 10; k++) CHECK(hist[k] > 0);
  CHECK(on / n_on > off / n_off + 0.4); /* the band stands out */

  cfg.height = 0;
  dpm_reader *r = NULL;
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "synthetic shape");
}

TEST(reader_seek_while_producing) {
  /* Big synthetic batches keep the producer busy, so seeks land while a
   * slot is being filled; the first batch after each seek must be the one
   * sought, never a stale one. */
  dpm_reader_config cfg = {.kind = DPM_READER_SYNTHETIC,
                           .scale = 1,
                           .shuffle = 1,
                           .seed = 9,
                           .batch = 16,
                           .num_shards = 1,
                           .prefetch = 2,
                           .repeat = 1,
                           .num_examples = 64,
                           .channels = 3,
                           .height = 32,
                           .width = 32,
                           .num_classes = 10};
  dpm_reader *r = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&cfg, &r, &err), DPM_OK);
  int bad = 0;
  for (int i = 0; i < 120 && !bad; i++) {
    const dpm_batch *b;
    dpm_reader_pos want = {(uint64_t)(i % 7), (uint64_t)(i % 4) * 16};
    if (dpm_reader_seek(r, want, &err) != DPM_OK ||
        dpm_reader_next(r, &b, &err) != DPM_OK || !b)
      bad = 1;
    else if (b->pos.epoch != want.epoch || b->pos.index != want.index)
      bad = 2;
    if (!bad && i % 2 && dpm_reader_next(r, &b, &err) != DPM_OK) bad = 3;
  }
  dpm_reader_destroy(r);
  CHECK_INT(bad, 0);
}

/* Raw readers hand out row pointers; gathering them must give exactly what
 * a converting reader of the same config stores, batch after batch (across
 * an epoch boundary and a seek), for idx files and synthetic sets. */
static int raw_matches_converted(dpm_reader_config cfg, int batches) {
  dpm_reader *conv = NULL, *raw = NULL;
  dpm_err err = {0};
  cfg.raw = 0;
  if (dpm_reader_create(&cfg, &conv, &err)) return 1;
  cfg.raw = 1;
  if (dpm_reader_create(&cfg, &raw, &err)) {
    dpm_reader_destroy(conv);
    return 2;
  }
  int c, h, w, bad = 0;
  dpm_reader_shape(raw, &c, &h, &w);
  size_t chw = (size_t)c * h * w;
  float *got = malloc((size_t)cfg.batch * chw * sizeof *got);
  for (int i = 0; i < batches && !bad && got; i++) {
    if (i == batches / 2) { /* mid-run seek: both restart at the same place */
      dpm_reader_pos at = {3, (uint64_t)cfg.batch};
      if (dpm_reader_seek(conv, at, &err) || dpm_reader_seek(raw, at, &err)) bad = 3;
    }
    const dpm_batch *a, *b;
    if (dpm_reader_next(conv, &a, &err) || dpm_reader_next(raw, &b, &err) || !a || !b) {
      bad = 4;
      break;
    }
    if (b->data || !b->rows || a->rows || b->n != a->n) bad = 5;
    if (bad) break;
    dpm_reader_gather(raw, b->rows, b->n, got);
    if (memcmp(got, a->data, (size_t)a->n * chw * sizeof *got) ||
        memcmp(a->label, b->label, (size_t)a->n * sizeof *a->label) ||
        a->pos.epoch != b->pos.epoch || a->pos.index != b->pos.index)
      bad = 6;
  }
  free(got);
  dpm_reader_destroy(conv);
  dpm_reader_destroy(raw);
  return bad;
}

TEST(reader_raw_rows_gather_to_converted_data) {
  const char *ip, *lp;
  CHECK(write_small(&ip, &lp));
  dpm_reader_config idx = small_cfg(ip, lp);
  idx.scale = 0.5;
  CHECK_INT(raw_matches_converted(idx, 40), 0); /* 10 batches per epoch */
  dpm_reader_config syn = {.kind = DPM_READER_SYNTHETIC,
                           .scale = 1.0 / 255,
                           .shuffle = 1,
                           .seed = 3,
                           .batch = 8,
                           .num_shards = 2,
                           .shard_id = 1,
                           .prefetch = 2,
                           .repeat = 1,
                           .num_examples = 50,
                           .channels = 3,
                           .height = 4,
                           .width = 5,
                           .num_classes = 4};
  CHECK_INT(raw_matches_converted(syn, 20), 0);
}
