/* Writes the generated fuzz seeds with the project's own code:
 *   gen_seeds OUT        (make fuzz-seeds: OUT = tests/fuzz/corpus)
 * OUT/checkpoint/NAME.dpmckpt  small models' checkpoints (dpm_ckpt_write) and
 *                              hand-made edge cases (no entry, scalars, ints)
 * OUT/predictor/NAME.pb       predictors extracted from small models
 * OUT/idx/NAME[.gz]           a few Fashion-MNIST examples, raw and gzip
 * OUT/tar/NAME.tar            WebDataset shards (io/tar.h): good samples, and
 *                             one with no label, a bad label, no image
 * OUT/datum/NAME              Datum records: encoded, raw, negative label
 * OUT/image/NAME.{jpg,png}     small JPEGs (baseline, progressive, gray) and
 *                              PNGs (every colour type, 1- to 16-bit, Adam7)
 *                              encoded with libjpeg and libpng
 * Models are built from small specs and initialised (seeded fills), not
 * trained: the seeds exercise the formats, not the values. The config
 * seeds are written by hand (tests/fuzz/corpus/config/). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/idx.h"
#include "common/spec.h"
#include "engine/exec.h"
#include "engine/model.h"
#include "io/checkpoint.h"
#include "io/datum.h"
#include "io/tar.h"
#include "predictor/predictor_extract.h"
#include "tests/image_enc.h"

#define DATASET "/usr/share/datasets/fashion-mnist/"

static const char *out_dir;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "gen_seeds: %s: %s\n", what, msg);
  exit(1);
}

static void mkdirs(const char *sub) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", out_dir, sub);
  if (mkdir(out_dir, 0755) && errno != EEXIST) die(out_dir, strerror(errno));
  if (mkdir(p, 0755) && errno != EEXIST) die(p, strerror(errno));
}

static void write_file(const char *sub, const char *name, const void *buf, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s/%s", out_dir, sub, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) die(p, "cannot write");
  printf("%s (%zu bytes)\n", p, len);
}

#define HEAD(shape)                                                                      \
  "name: seed\n"                                                                         \
  "input: {reader: synthetic, batch_size: 2, num_examples: 8, shape: " shape             \
  ", num_classes: 3, outputs: [data, label]}\n"                                          \
  "forward:\n"
#define LOSS                                                                             \
  "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"                 \
  "losses: [loss]\n"

typedef struct model_seed {
  const char *name;
  int64_t chw[3];
  const char *yaml;
  const char *out; /* predictor output */
} model_seed;

static const model_seed models[] = {
    {"mlp",
     {1, 2, 3},
     HEAD("[1,2,3]") "  - {op: FC, in: [data], out: fc1, dim_out: 4}\n"
                     "  - {op: Relu, in: [fc1], out: fc1}\n"
                     "  - {op: FC, in: [fc1], out: pred, dim_out: 3}\n"
                     "  - {op: Softmax, in: [pred], out: prob}\n" LOSS
                     "update: {optimizer: momentum_sgd, lr: {base: 0.1}}\n",
     "prob"},
    {"cnn",
     {1, 4, 4},
     HEAD(
         "[1,4,4]") "  - {op: Conv, in: [data], out: c1, dim_out: 2, kernel: 3, pad: 1}\n"
                    "  - {op: SpatialBN, in: [c1], out: bn1}\n"
                    "  - {op: Relu, in: [bn1], out: bn1}\n"
                    "  - {op: MaxPool, in: [bn1], out: p1, kernel: 2, stride: 2}\n"
                    "  - {op: Dropout, in: [p1], out: d1, ratio: 0.5}\n"
                    "  - {op: FC, in: [d1], out: pred, dim_out: 3}\n"
                    "  - {op: Softmax, in: [pred], out: prob}\n" LOSS
                    "update: {optimizer: adam, lr: {base: 0.01}}\n",
     "prob"},
    {"mixed",
     {2, 2, 2},
     HEAD("[2,2,2]") "  - {op: AveragePool, in: [data], out: a1, kernel: 2}\n"
                     "  - {op: Conv, in: [data], out: c1, dim_out: 1, kernel: 1}\n"
                     "  - {op: MaxPool, in: [c1], out: m1, kernel: 2}\n"
                     "  - {op: Concat, in: [a1, m1], out: cat}\n"
                     "  - {op: Flatten, in: [cat], out: flat}\n"
                     "  - {op: Sigmoid, in: [flat], out: s1}\n"
                     "  - {op: Tanh, in: [flat], out: t1}\n"
                     "  - {op: Add, in: [s1, t1], out: st}\n"
                     "  - {op: Scale, in: [st], out: sc, scale: 0.5}\n"
                     "  - {op: Sum, in: [sc, s1, t1], out: sum}\n"
                     "  - {op: Reshape, in: [sum], out: r1, shape: [-1, 3]}\n"
                     "  - {op: Copy, in: [r1], out: r2}\n"
                     "  - {op: StopGradient, in: [r2], out: r3}\n"
                     "  - {op: FC, in: [r3], out: pred, dim_out: 3}\n"
                     "  - {op: Softmax, in: [pred], out: prob}\n" LOSS
                     "update: {optimizer: sgd, lr: {base: 0.1}}\n",
     "prob"},
};

static void model_seeds(const model_seed *s) {
  Dpm__ModelSpec *spec = NULL;
  dpm_model m = {0};
  dpm_workspace ws = {0};
  dpm_ctx ctx = {0};
  dpm_exec init = {0};
  dpm_err err = {0};
  if (dpm_spec_parse(s->yaml, strlen(s->yaml), s->name, &spec, &err) ||
      dpm_model_build(spec, s->chw, 2, 1.0f, &m, &err) ||
      dpm_exec_bind(&init, &m.init, &m.shapes, &ws, &ctx, &err))
    die(s->name, err.msg);
  dpm_exec_run(&init);

  /* The checkpoint: what a trainer stores (params, computed params,
   * optimizer state, counters). */
  dpm_ckpt_entry *e = calloc((size_t)ws.n + 1, sizeof *e);
  int n = 0;
  for (int i = 0; i < ws.n; i++) {
    dpm_blob *b = ws.blobs[i];
    if (b->kind == DPM_BLOB_PARAM || b->kind == DPM_BLOB_COMPUTED ||
        b->kind == DPM_BLOB_OPTIM || b->kind == DPM_BLOB_COUNTER)
      e[n++] = (dpm_ckpt_entry){.name = b->name, .kind = b->kind, .t = &b->t};
  }
  dpm_ckpt_meta meta = {.spec_hash = 0x5eed,
                        .iter = 7,
                        .reader_epoch = 1,
                        .reader_index = 3,
                        .devices = 2,
                        .shards = 1,
                        .created_unix = 1700000000};
  char path[512];
  snprintf(path, sizeof path, "%s/checkpoint/%s.dpmckpt", out_dir, s->name);
  if (dpm_ckpt_write(NULL, path, &meta, e, n, &err)) die(path, err.msg);
  printf("%s (%d entries)\n", path, n);
  free(e);

  /* The predictor data -> out. */
  const char *in[] = {"data"}, *outs[] = {s->out};
  uint8_t *buf = NULL;
  size_t len = 0;
  if (dpm_predictor_extract(&m, &ws, in, 1, outs, 1, &buf, &len, &err))
    die(s->name, err.msg);
  char name[64];
  snprintf(name, sizeof name, "%s.pb", s->name);
  write_file("predictor", name, buf, len);
  free(buf);

  dpm_exec_fini(&init);
  dpm_ws_fini(&ws);
  dpm_ctx_fini(&ctx);
  dpm_model_fini(&m);
  dpm_spec_free(spec);
}

/* Checkpoints no model makes: no entry; scalars and every dtype and rank. */
static void edge_checkpoints(void) {
  char path[512];
  dpm_err err = {0};
  dpm_ckpt_meta meta = {.iter = 0, .devices = 1, .shards = 1};
  snprintf(path, sizeof path, "%s/checkpoint/empty.dpmckpt", out_dir);
  if (dpm_ckpt_write(NULL, path, &meta, NULL, 0, &err)) die(path, err.msg);

  dpm_tensor t[4] = {0};
  dpm_shape s[4] = {
      dpm_shape_scalar(DPM_I64),
      dpm_shape_make(DPM_I32, 1, (int64_t[]){3}),
      dpm_shape_make(DPM_F32, 4, (int64_t[]){1, 2, 1, 2}),
      dpm_shape_scalar(DPM_F32),
  };
  for (int i = 0; i < 4; i++) {
    if (dpm_tensor_resize(&t[i], &s[i])) die("tensor", "out of memory");
    memset(t[i].data, 0x11 * (i + 1), dpm_shape_bytes(&s[i]));
  }
  dpm_ckpt_entry e[4] = {
      {.name = "iter", .kind = DPM_BLOB_COUNTER, .t = &t[0]},
      {.name = "ints", .kind = DPM_BLOB_PARAM, .t = &t[1]},
      {.name = "bn1_rm", .kind = DPM_BLOB_COMPUTED, .t = &t[2]},
      {.name = "lr", .kind = DPM_BLOB_OPTIM, .t = &t[3]},
  };
  meta.iter = 123456789;
  snprintf(path, sizeof path, "%s/checkpoint/kinds.dpmckpt", out_dir);
  if (dpm_ckpt_write(NULL, path, &meta, e, 4, &err)) die(path, err.msg);
  for (int i = 0; i < 4; i++) dpm_tensor_fini(&t[i]);
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
  p[3] = (uint8_t)v;
}

/* The first `items` of x as an IDX file, raw as NAME and gzip as NAME.gz. */
static void idx_seed(const dpm_idx *x, int64_t items, const char *name) {
  size_t per = x->size / (size_t)x->dim[0], head = 4 + 4 * (size_t)x->ndim;
  size_t len = head + per * (size_t)items;
  uint8_t *buf = malloc(len);
  put_be32(buf, x->ndim == 1 ? DPM_IDX_MAGIC_LABELS : DPM_IDX_MAGIC_IMAGES);
  put_be32(buf + 4, (uint32_t)items);
  for (int i = 1; i < x->ndim; i++) put_be32(buf + 4 + 4 * i, (uint32_t)x->dim[i]);
  memcpy(buf + head, x->data, len - head);
  write_file("idx", name, buf, len);
  uLongf zlen = compressBound(len) + 64;
  uint8_t *z = malloc(zlen);
  z_stream zs = {0};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
    die(name, "deflateInit2");
  zs.next_in = buf, zs.avail_in = (uInt)len, zs.next_out = z, zs.avail_out = (uInt)zlen;
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) die(name, "deflate");
  char gz[64];
  snprintf(gz, sizeof gz, "%s.gz", name);
  write_file("idx", gz, z, zs.total_out);
  deflateEnd(&zs);
  free(z);
  free(buf);
}

static void idx_seeds(void) {
  dpm_idx img, lab;
  dpm_err err = {0};
  if (dpm_idx_load(NULL, DATASET "t10k-images-idx3-ubyte.gz", 3, &img, &err) ||
      dpm_idx_load(NULL, DATASET "t10k-labels-idx1-ubyte.gz", 1, &lab, &err))
    die("dataset", err.msg);
  idx_seed(&img, 2, "images-2");
  idx_seed(&lab, 8, "labels-8");
  idx_seed(&lab, 1, "labels-1");
  /* A 1x1 image (the smallest) and a 3x2 one (not square). */
  dpm_idx tiny = {.ndim = 3, .dim = {1, 1, 1}, .data = img.data + 300, .size = 1};
  idx_seed(&tiny, 1, "images-1x1");
  uint8_t px[12] = {0, 17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 255};
  dpm_idx rect = {.ndim = 3, .dim = {2, 3, 2}, .data = px, .size = 12};
  idx_seed(&rect, 2, "images-3x2");
  dpm_idx_fini(&img);
  dpm_idx_fini(&lab);
}

/* A tar of members (name, bytes) ending with the end-of-archive blocks,
 * after the mode byte fuzz_tar reads first (1: checksums fixed). A name
 * "L:..." or "x:..." makes a GNU long-name or pax header of that type. */
static void tar_seed(const char *name, const char *const *members, int n) {
  uint8_t buf[16384];
  size_t len = 1;
  buf[0] = 1;
  for (int i = 0; i < n; i++) {
    const char *body = members[2 * i + 1], *mname = members[2 * i];
    size_t bl = strlen(body);
    char type = mname[1] == ':' ? mname[0] : '0';
    if (dpm_tar_header(buf + len, type == '0' ? mname : "././@LongLink", bl, 1700000000))
      die(name, "header");
    if (type != '0') { /* retype it and redo the checksum */
      uint8_t *h = buf + len;
      unsigned sum = 0;
      h[156] = (uint8_t)type;
      memset(h + 148, ' ', 8);
      for (int k = 0; k < DPM_TAR_BLOCK; k++) sum += h[k];
      snprintf((char *)h + 148, 8, "%06o", sum);
      h[155] = ' ';
    }
    len += DPM_TAR_BLOCK;
    memcpy(buf + len, body, bl);
    memset(buf + len + bl, 0, dpm_tar_pad(bl));
    len += bl + dpm_tar_pad(bl);
  }
  memset(buf + len, 0, DPM_TAR_END);
  write_file("tar", name, buf, len + DPM_TAR_END);
}

static void tar_seeds(void) {
  static const char *const good[] = {
      "a/000.jpg", "\xff\xd8\xff\xe0JFIF", "a/000.cls", "3\n", "a/000.json", "{}",
      "a/001.png", "\x89PNG\r\n\x1a\n",    "a/001.cls", "9"};
  tar_seed("good.tar", good, 5);
  static const char *const bad[] = {"x/nolabel.png",  "p",     "x/badlabel.jpg", "j",
                                    "x/badlabel.cls", "seven", "x/noimage.cls",  "1",
                                    "x/big.cls",      "12"};
  tar_seed("bad.tar", bad, 5);
  static const char *const ext[] = {
      "L:",    "a/a-very-long-directory-name/key.png",
      "x.png", "\x89PNG\r\n\x1a\n",
      "x:",    "45 path=a/a-very-long-directory-name/key.cls\n10 size=1\n",
      "y.cls", "4"};
  tar_seed("long-and-pax.tar", ext, 4);
}

static void datum_seeds(void) {
  uint8_t rec[256];
  static const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 'J', 'F', 'I', 'F'};
  size_t n = dpm_datum_write(rec, sizeof rec, 3, 256, 256, jpeg, sizeof jpeg, 7, 1);
  write_file("datum", "encoded", rec, n);
  uint8_t px[24];
  for (int i = 0; i < 24; i++) px[i] = (uint8_t)(i * 10);
  n = dpm_datum_write(rec, sizeof rec, 2, 3, 4, px, sizeof px, 1, 0);
  write_file("datum", "raw-2x3x4", rec, n);
  n = dpm_datum_write(rec, sizeof rec, 0, 0, 0, px, 0, -1, 0);
  write_file("datum", "negative-label", rec, n);
}

static void image_seeds(void) {
  enum { W = 24, H = 17 };
  uint8_t px[W * H * 8];
  for (int i = 0; i < W * H * 8; i++) px[i] = (uint8_t)((i * 37) ^ (i >> 3));
  uint8_t *buf;
  size_t len;
  struct {
    const char *name;
    int w, h, comps, quality, progressive;
  } jpegs[] = {{"rgb.jpg", W, H, 3, 75, 0},
               {"rgb-prog.jpg", W, H, 3, 90, 1},
               {"gray.jpg", 17, 9, 1, 80, 0},
               {"gray-prog.jpg", 9, 20, 1, 50, 1},
               {"1x1.jpg", 1, 1, 3, 90, 0}};
  for (size_t i = 0; i < sizeof jpegs / sizeof *jpegs; i++) {
    enc_jpeg(px, jpegs[i].w, jpegs[i].h, jpegs[i].comps, jpegs[i].quality,
             jpegs[i].progressive, &buf, &len);
    write_file("image", jpegs[i].name, buf, len);
    free(buf);
  }
  static const png_color pal[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {9, 9, 255}};
  static const uint8_t trns[2] = {0, 128};
  struct {
    const char *name;
    int w, h, type, depth, interlace, channels;
  } pngs[] = {{"rgb.png", W, H, PNG_COLOR_TYPE_RGB, 8, 0, 3},
              {"rgb-adam7.png", W, H, PNG_COLOR_TYPE_RGB, 8, 1, 3},
              {"gray1.png", 13, 5, PNG_COLOR_TYPE_GRAY, 1, 0, 1},
              {"gray4-adam7.png", 11, 9, PNG_COLOR_TYPE_GRAY, 4, 1, 1},
              {"ga.png", 9, 7, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 2},
              {"rgba16.png", 6, 4, PNG_COLOR_TYPE_RGBA, 16, 0, 4},
              {"palette2.png", 8, 8, PNG_COLOR_TYPE_PALETTE, 2, 0, 1}};
  for (size_t i = 0; i < sizeof pngs / sizeof *pngs; i++) {
    size_t rowbytes = ((size_t)pngs[i].w * pngs[i].channels * pngs[i].depth + 7) / 8;
    int palette = pngs[i].type == PNG_COLOR_TYPE_PALETTE;
    enc_png(px, rowbytes, pngs[i].w, pngs[i].h, pngs[i].type, pngs[i].depth,
            pngs[i].interlace, palette ? pal : NULL, palette ? 4 : 0,
            palette ? trns : NULL, palette ? 2 : 0, &buf, &len);
    write_file("image", pngs[i].name, buf, len);
    free(buf);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  mkdirs("checkpoint");
  mkdirs("predictor");
  mkdirs("idx");
  mkdirs("tar");
  mkdirs("datum");
  tar_seeds();
  datum_seeds();
  mkdirs("image");
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) model_seeds(&models[i]);
  edge_checkpoints();
  idx_seeds();
  image_seeds();
  return 0;
}
