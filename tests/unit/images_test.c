/* The image readers (io/images.h through io/reader.h): tar shards of PNG
 * images written here, read as batches. An identity crop gives the very
 * floats of the IDX reader on the same pixels; the batches do not depend on
 * the decode threads or the shard count; bad samples fail or are skipped and
 * counted; the data cache holds whole shards, or streams when they do not
 * fit; the decode threads' buffers are in the reader's bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/datacache.h"
#include "io/reader.h"
#include "pack/encode.h"
#include "test.h"
#include "testfile.h"
#include "testtar.h"

#define W 20
#define H 14
#define N 40 /* samples */

typedef struct {
  char d[64];
  const char *p[4];
} scratch;
static char paths_of[4][96]; /* the scratch's files */

static int scratch_make(scratch *s) {
  snprintf(s->d, sizeof s->d, "/tmp/dpm-images-XXXXXX");
  for (int i = 0; i < 4; i++) s->p[i] = paths_of[i];
  return mkdtemp(s->d) != NULL;
}

static void scratch_rm(scratch *s) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->d);
  if (system(cmd)) {
  }
}

/* Sample k's pixels (ch channels, W x H): a pattern that differs per sample
 * and per channel. */
static void pixels(int k, int ch, uint8_t *px) {
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < ch; c++)
        px[(y * W + x) * ch + c] = (uint8_t)(k * 37 + x * 11 + y * 5 + c * 70);
}

enum { BAD_NONE = -1 };

/* Writes samples [first, first + n) as path: PNG images of ch channels,
 * label k % 10; sample no_label gets no .cls, sample corrupt a truncated
 * PNG. */
static int write_tar(const char *path, int first, int n, int ch, int no_label,
                     int corrupt) {
  test_tar t = {0};
  uint8_t px[W * H * 3];
  dpm_bytes png = {0};
  dpm_err err = {0};
  for (int k = first; k < first + n; k++) {
    char name[32], cls[8];
    pixels(k, ch, px);
    if (dpm_encode_png(px, W, H, ch, &png, &err)) return -1;
    snprintf(name, sizeof name, "s%03d.png", k);
    test_tar_member(&t, name, png.data, k == corrupt ? png.len / 2 : png.len);
    if (k == no_label) continue;
    snprintf(name, sizeof name, "s%03d.cls", k);
    test_tar_member(&t, name, cls, (size_t)snprintf(cls, sizeof cls, "%d", k % 10));
  }
  test_tar_end(&t);
  int rc = test_write_file(path, t.b, t.n);
  free(t.b);
  dpm_bytes_free(&png);
  return rc;
}

/* Two shards of N / 2 samples each. */
static int write_set(scratch *s, int ch, int no_label, int corrupt) {
  for (int i = 0; i < 2; i++) {
    snprintf(paths_of[i], sizeof paths_of[i], "%s/set-%d.tar", s->d, i);
    if (write_tar(paths_of[i], i * N / 2, N / 2, ch, no_label, corrupt)) return -1;
  }
  return 0;
}

static dpm_reader_config tar_cfg(const scratch *s, int ch, int train, int batch) {
  dpm_reader_config c = {.kind = DPM_READER_TAR,
                         .shuffle = 1,
                         .seed = 9,
                         .batch = batch,
                         .num_shards = 1,
                         .prefetch = 2,
                         .repeat = 1,
                         .num_classes = 10,
                         .scale = 1};
  c.image = (dpm_reader_images){
      .paths = s->p, .n_paths = 2, .decode_threads = 1, .max_pixels = 1 << 20};
  dpm_augment_cfg *a = &c.image.aug;
  *a = dpm_augment_defaults();
  a->train = train;
  a->mirror = train;
  a->channels = ch;
  a->crop = train ? 9 : H;
  a->resize = H;
  for (int i = 0; i < 3; i++) a->mean[i] = 0, a->std[i] = 1;
  return c;
}

/* An IDX image file and label file of samples 0..N-1 (gray). */
static int write_idx(scratch *s) {
  uint8_t hdr[16] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, H, 0, 0, 0, W};
  uint8_t lh[8] = {0, 0, 8, 1, 0, 0, 0, N};
  uint8_t *img = malloc(sizeof hdr + N * W * H), lab[sizeof lh + N];
  memcpy(img, hdr, sizeof hdr);
  memcpy(lab, lh, sizeof lh);
  for (int k = 0; k < N; k++) {
    pixels(k, 1, img + sizeof hdr + k * W * H);
    lab[sizeof lh + k] = (uint8_t)(k % 10);
  }
  snprintf(paths_of[2], sizeof paths_of[2], "%s/img.idx", s->d);
  snprintf(paths_of[3], sizeof paths_of[3], "%s/lab.idx", s->d);
  int rc = test_write_file(paths_of[2], img, sizeof hdr + N * W * H) ||
           test_write_file(paths_of[3], lab, sizeof lab);
  free(img);
  return rc;
}

/* An identity crop (eval: resize = the short side = crop, square images
 * excepted: W > H, so the centre crop is H x H) reads the pixels the IDX
 * reader reads, as the same floats; the labels and the order agree. */
TEST(images_tar_identity_crop_matches_idx_reader) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(write_set(&s, 1, BAD_NONE, BAD_NONE) == 0 && write_idx(&s) == 0);
  dpm_reader_config tc = tar_cfg(&s, 1, 0, 8);
  dpm_reader_config ic = {.kind = DPM_READER_IDX,
                          .images = paths_of[2],
                          .labels = paths_of[3],
                          .scale = 1,
                          .shuffle = 1,
                          .seed = 9,
                          .batch = 8,
                          .num_shards = 1,
                          .prefetch = 2,
                          .repeat = 1};
  dpm_reader *tr = NULL, *ir = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&tc, &tr, &err), DPM_OK);
  CHECK_INT(dpm_reader_create(&ic, &ir, &err), DPM_OK);
  CHECK_INT(dpm_reader_size(tr), N);
  int x0 = (W - H + 1) / 2; /* torchvision's centre crop: round((W - H) / 2) */
  for (int step = 0; step < 7; step++) { /* across the first epoch's end */
    const dpm_batch *a, *b;
    CHECK_INT(dpm_reader_next(tr, &a, &err), DPM_OK);
    CHECK_INT(dpm_reader_next(ir, &b, &err), DPM_OK);
    CHECK(a->n == 8 && b->n == 8 && a->c == 1 && a->h == H && a->w == H);
    for (int k = 0; k < 8; k++) {
      CHECK_INT(a->label[k], b->label[k]);
      for (int y = 0; y < H; y++)
        for (int x = 0; x < H; x++)
          CHECK(a->data[(k * H + y) * H + x] == b->data[(k * H + y) * W + x0 + x]);
    }
  }
  dpm_reader_destroy(tr);
  dpm_reader_destroy(ir);
  scratch_rm(&s);
}

/* Reads `steps` batches of r into out (batch x chw floats each). */
static int read_batches(dpm_reader *r, int steps, float *out, int32_t *labels) {
  dpm_err err = {0};
  int c, h, w;
  dpm_reader_shape(r, &c, &h, &w);
  size_t off = 0;
  for (int i = 0; i < steps; i++) {
    const dpm_batch *b;
    if (dpm_reader_next(r, &b, &err) || !b) return -1;
    size_t chw = (size_t)c * (size_t)h * (size_t)w;
    memcpy(out + off * chw, b->data, (size_t)b->n * chw * sizeof(float));
    memcpy(labels + off, b->label, (size_t)b->n * sizeof(int32_t));
    off += (size_t)b->n;
  }
  return 0;
}

/* Random crops and mirrors: the same bits with 1 and 4 decode threads, and
 * two shards of 4, or four of 2, read together what one shard of 8 reads
 * (replicas slice a shard's batch the same way). */
TEST(images_batches_same_for_threads_and_shards) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(write_set(&s, 3, BAD_NONE, BAD_NONE) == 0);
  enum { STEPS = 12, CHW = 3 * 9 * 9 };
  float *one = malloc(sizeof(float) * STEPS * 8 * CHW);
  float *four = malloc(sizeof(float) * STEPS * 8 * CHW);
  float *sh[2] = {malloc(sizeof(float) * STEPS * 4 * CHW),
                  malloc(sizeof(float) * STEPS * 4 * CHW)};
  int32_t l1[STEPS * 8], l4[STEPS * 8], ls[2][STEPS * 4];
  dpm_err err = {0};
  dpm_reader *r;
  dpm_reader_config c = tar_cfg(&s, 3, 1, 8);
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  CHECK(read_batches(r, STEPS, one, l1) == 0);
  dpm_reader_destroy(r);
  c.image.decode_threads = 4;
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  CHECK(read_batches(r, STEPS, four, l4) == 0);
  dpm_reader_destroy(r);
  CHECK(memcmp(one, four, sizeof(float) * STEPS * 8 * CHW) == 0);
  CHECK(memcmp(l1, l4, sizeof l1) == 0);
  for (int shards = 2; shards <= 4; shards *= 2) { /* 2 x 4 and 4 x 2 */
    int per = 8 / shards;
    for (int k = 0; k < shards; k++) {
      c = tar_cfg(&s, 3, 1, per);
      c.num_shards = shards;
      c.shard_id = k;
      CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
      CHECK(read_batches(r, STEPS, sh[k % 2], ls[k % 2]) == 0);
      dpm_reader_destroy(r);
      for (int i = 0; i < STEPS; i++) {
        CHECK(memcmp(one + (size_t)(i * 8 + k * per) * CHW,
                     sh[k % 2] + (size_t)i * (size_t)per * CHW,
                     sizeof(float) * (size_t)per * CHW) == 0);
        CHECK(memcmp(l1 + i * 8 + k * per, ls[k % 2] + i * per,
                     (size_t)per * sizeof(int32_t)) == 0);
      }
    }
  }
  /* and the crops are random: two epochs of one example differ */
  CHECK(memcmp(one, one + (size_t)5 * 8 * CHW, sizeof(float) * CHW) != 0);
  free(one);
  free(four);
  free(sh[0]);
  free(sh[1]);
  scratch_rm(&s);
}

/* on_bad_sample: fail refuses a sample flagged at indexing (no label) at
 * create, and a corrupt image when its batch is read, naming it; skip
 * leaves the flagged one out, replaces the corrupt one and counts both. */
TEST(images_bad_samples_fail_or_skip) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(write_set(&s, 1, 3, BAD_NONE) == 0);
  dpm_reader_config c = tar_cfg(&s, 1, 0, 8);
  dpm_reader *r = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "s003");
  CHECK(write_set(&s, 1, BAD_NONE, 26) == 0);
  c.shuffle = 0;
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  const dpm_batch *b;
  dpm_status st = DPM_OK;
  for (int i = 0; i < 5 && !st; i++) st = dpm_reader_next(r, &b, &err);
  CHECK_INT(st, DPM_CORRUPT);
  CHECK_HAS(err.msg, "sample s026");
  CHECK_HAS(err.msg, "set-1.tar");
  CHECK_INT(dpm_reader_next(r, &b, &err), DPM_CORRUPT); /* until a seek */
  dpm_reader_destroy(r);
  CHECK(write_set(&s, 1, 3, 26) == 0);
  c.image.skip_bad = 1;
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  CHECK_INT(dpm_reader_size(r), N - 1);
  CHECK_INT(dpm_reader_skipped(r), 1);
  int seen27 = 0;
  for (int i = 0; i < 4; i++) { /* one epoch: 39 samples, 4 batches of 8 */
    CHECK_INT(dpm_reader_next(r, &b, &err), DPM_OK);
    for (int k = 0; k < 8; k++) seen27 += b->label[k] == 7 && i * 8 + k >= 24;
  }
  CHECK_INT(dpm_reader_skipped(r), 2); /* s026 replaced by s027 */
  CHECK_INT(seen27, 2);
  dpm_reader_destroy(r);
  scratch_rm(&s);
}

/* Shards that fit in the data cache are held there whole; the batches are
 * those of the preads. A cache too small for them holds nothing. */
TEST(images_cache_holds_shards_or_streams) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(write_set(&s, 3, BAD_NONE, BAD_NONE) == 0);
  struct stat st0, st1;
  CHECK(stat(paths_of[0], &st0) == 0 && stat(paths_of[1], &st1) == 0);
  enum { STEPS = 6, CHW = 3 * 9 * 9 };
  float *a = malloc(sizeof(float) * STEPS * 8 * CHW),
        *b = malloc(sizeof(float) * STEPS * 8 * CHW);
  int32_t la[STEPS * 8], lb[STEPS * 8];
  dpm_err err = {0};
  dpm_reader *r;
  dpm_reader_config c = tar_cfg(&s, 3, 1, 8);
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  CHECK(read_batches(r, STEPS, a, la) == 0);
  dpm_reader_destroy(r);
  dpm_data_cache *cache;
  CHECK_INT(dpm_data_cache_create(1 << 20, &cache, &err), DPM_OK);
  c.cache = cache;
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  dpm_data_cache_stats cs;
  dpm_data_cache_stats_of(cache, &cs);
  CHECK_INT(cs.held_entries, 2);
  CHECK_INT(cs.held_bytes, (uint64_t)st0.st_size + (uint64_t)st1.st_size);
  CHECK(read_batches(r, STEPS, b, lb) == 0);
  dpm_reader_destroy(r);
  CHECK(memcmp(a, b, sizeof(float) * STEPS * 8 * CHW) == 0 && !memcmp(la, lb, sizeof la));
  dpm_data_cache_destroy(cache);
  CHECK_INT(dpm_data_cache_create((uint64_t)st0.st_size, &cache, &err), DPM_OK);
  c.cache = cache;
  CHECK_INT(dpm_reader_create(&c, &r, &err), DPM_OK);
  dpm_data_cache_stats_of(cache, &cs);
  CHECK_INT(cs.entries, 0);
  dpm_reader_destroy(r);
  dpm_data_cache_destroy(cache);
  free(a);
  free(b);
  scratch_rm(&s);
}

/* The reader's bytes count each decode thread's buffers at the limits. */
TEST(images_reader_bytes_count_decode_threads) {
  scratch s;
  CHECK(scratch_make(&s));
  CHECK(write_set(&s, 3, BAD_NONE, BAD_NONE) == 0);
  dpm_reader_config c = tar_cfg(&s, 3, 1, 8);
  uint64_t one, four;
  dpm_err err = {0};
  CHECK_INT(dpm_reader_bytes(&c, &one, &err), DPM_OK);
  c.image.decode_threads = 4;
  CHECK_INT(dpm_reader_bytes(&c, &four, &err), DPM_OK);
  /* per thread: 16 MiB of encoded bytes, a decoder and an augmenter at
     their largest */
  dpm_image_limits lim = dpm_image_limits_default();
  lim.max_pixels = 1 << 20;
  uint64_t per = (16ull << 20) + dpm_image_decoder_max_bytes(&lim) +
                 dpm_augmenter_max_bytes(&c.image.aug, lim.max_width, lim.max_height);
  CHECK_INT(four - one, 3 * per);
  CHECK(per > 3ull * (1 << 20)); /* at least the decoded pixels */
  scratch_rm(&s);
}
