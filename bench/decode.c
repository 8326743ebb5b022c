/* Decode and augment throughput on one core: JPEGs of ImageNet's typical
 * size (500 x 375, quality 90, 4:2:0, made here: gradients, edges and
 * noise, about as large as ImageNet's files) through io/image.h and
 * io/augment.h as the data pipeline runs them, images per CPU second (the
 * process's CPU time: per core, whatever else runs on the machine):
 *   train      random-resized crop 224, mirror, normalise; DCT scale as
 *              dpm_augment_scale picks (always 1 here: a box of 448 pixels
 *              a side does not fit in 375)
 *   eval       resize 256, centre crop 224
 *   train-whole  train with the whole image decoded (the others decode
 *              only the region the box reads: dpm_image_decode_region)
 *   decode     the decode alone, full size
 *   small-*    train at crop 64 with and without DCT scaling (its gain
 *              where the target is much smaller than the image)
 * Then, with --pil PYTHON (a Python with Pillow and numpy: build/onnx-venv),
 * the same files, boxes' algorithm and output through bench/decode_pil.py in
 * that Python, one thread: Pillow with draft (dpm's pipeline) and without
 * (torchvision's transforms done with Pillow and numpy), and where the
 * Python has torch and torchvision (scripts/torch-venv.sh), PyTorch's
 * DataLoader with torchvision's transforms.
 *
 *   build/bench/decode [--images N] [--rounds R] [--pil PYTHON] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "engine/rng.h"
#include "io/augment.h"
#include "io/image.h"
#include "tests/image_enc.h"

#define W 500
#define H 375

typedef struct {
  uint8_t *buf;
  size_t len;
} file;

static uint8_t *picture(uint64_t seed) {
  uint8_t *p = malloc((size_t)W * H * 3);
  uint64_t s[2];
  dpm_rng_seed(s, seed);
  int cx = (int)dpm_rng_below(s, W), cy = (int)dpm_rng_below(s, H);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int edge = ((x - cx) * (x - cx) + (y - cy) * (y - cy) < 90 * 90) ? 60 : 0;
      int n = (int)(dpm_rng_next(s) % 25) - 12;
      int v[3] = {x * 200 / W + edge + n, y * 180 / H + 30 + n,
                  (x + y) * 120 / (W + H) + 60 - edge + n};
      for (int c = 0; c < 3; c++)
        p[((size_t)y * W + x) * 3 + c] = (uint8_t)(v[c] < 0     ? 0
                                                   : v[c] > 255 ? 255
                                                                : v[c]);
    }
  return p;
}

/* CPU time of this process in ms: the measure of work per core, whatever
 * else shares the machine (the benchmark is single-threaded). */
static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Images per CPU second of `rounds` passes over the files (median pass):
 * decode and augment (decode_only: decode alone), the whole image decoded
 * with whole (or decode_only), else the box's region. */
static double run(const dpm_augment_cfg *cfg, int force_scale, int decode_only, int whole,
                  file *f, int n, int rounds) {
  dpm_err err = {0};
  dpm_image_decoder *dec = dpm_image_decoder_create(NULL, &err);
  dpm_augmenter *aug = dpm_augmenter_create(cfg, &err);
  float *out = malloc(sizeof(float) * 3 * cfg->crop * cfg->crop);
  double *t = malloc(sizeof(double) * (size_t)rounds);
  if (!dec || !aug || !out || !t) {
    fprintf(stderr, "decode: %s\n", err.msg);
    exit(1);
  }
  for (int r = 0; r < rounds; r++) {
    double t0 = cpu_ms();
    for (int i = 0; i < n; i++) {
      dpm_image_info info;
      dpm_image img;
      dpm_crop_box box;
      if (dpm_image_probe(f[i].buf, f[i].len, &info, &err)) exit(1);
      dpm_augment_box(cfg, 1, (uint64_t)r, (uint64_t)i, info.width, info.height, &box);
      int s = force_scale ? force_scale : dpm_augment_scale(cfg, &box);
      dpm_image_region r = {0, 0, 0, 0}; /* empty: the whole image */
      if (!decode_only && !whole)
        dpm_augment_region(cfg, &box, s, info.width, info.height, &r);
      if (dpm_image_decode_region(dec, f[i].buf, f[i].len, 3, s, &r, &img, &err) ||
          (!decode_only && dpm_augment_apply(aug, &img, &box, out, &err))) {
        fprintf(stderr, "decode: %s\n", err.msg);
        exit(1);
      }
    }
    t[r] = cpu_ms() - t0;
  }
  double ms = bench_median(t, rounds);
  free(t);
  free(out);
  dpm_augmenter_destroy(aug);
  dpm_image_decoder_destroy(dec);
  return n / (ms / 1e3);
}

int main(int argc, char **argv) {
  int n = 64, rounds = 5;
  const char *pil = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--images") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--pil") && i + 1 < argc)
      pil = argv[++i];
    else {
      fprintf(stderr, "usage: decode [--images N] [--rounds R] [--pil PYTHON]\n");
      return 2;
    }
  }
  if (n < 1 || rounds < 1) return 2;
  file *f = calloc((size_t)n, sizeof *f);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    uint8_t *p = picture((uint64_t)i + 1);
    enc_jpeg(p, W, H, 3, 90, 0, &f[i].buf, &f[i].len);
    total += f[i].len;
    free(p);
  }
  printf("decode: %d JPEGs %dx%d q90, %zu KB each on average, 1 thread, images per CPU "
         "second, median of %d rounds\n",
         n, W, H, total / n / 1024, rounds);
  dpm_augment_cfg train = dpm_augment_defaults(), eval = train, small = train;
  train.mean[0] = 123.675f, train.mean[1] = 116.28f, train.mean[2] = 103.53f;
  train.std[0] = 58.395f, train.std[1] = 57.12f, train.std[2] = 57.375f;
  eval = train, eval.train = 0;
  small = train, small.crop = 64;
  struct {
    const char *name;
    const dpm_augment_cfg *cfg;
    int scale, decode_only, whole;
  } cases[] = {{"train", &train, 0, 0, 0},        {"eval", &eval, 0, 0, 0},
               {"train-whole", &train, 0, 0, 1},  {"decode", &train, 1, 1, 0},
               {"small-crop64", &small, 0, 0, 0}, {"small-crop64-s1", &small, 1, 0, 0}};
  enum { NCASES = sizeof cases / sizeof *cases };
  double ips[NCASES];
  for (int c = 0; c < NCASES; c++) {
    ips[c] = run(cases[c].cfg, cases[c].scale, cases[c].decode_only, cases[c].whole, f, n,
                 rounds);
    printf("  dpm %-16s %8.1f images/s\n", cases[c].name, ips[c]);
  }
  printf("  only the box's region decoded, train: x%.2f\n", ips[0] / ips[2]);
  printf("  DCT scaling at crop 64: x%.2f\n", ips[4] / ips[5]);
  int rc = 0;
  if (pil) {
    char dir[] = "/tmp/dpm-bench-decode-XXXXXX", path[128], cmd[512];
    if (!mkdtemp(dir)) return 1;
    for (int i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%04d.jpg", dir, i);
      FILE *o = fopen(path, "wb");
      if (!o || fwrite(f[i].buf, 1, f[i].len, o) != f[i].len || fclose(o)) return 1;
    }
    snprintf(cmd, sizeof cmd, "'%s' bench/decode_pil.py %s %d %.1f %.1f", pil, dir,
             rounds, ips[0], ips[1]);
    fflush(stdout);
    rc = system(cmd) ? 1 : 0;
    for (int i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%04d.jpg", dir, i);
      unlink(path);
    }
    rmdir(dir);
  }
  for (int i = 0; i < n; i++) free(f[i].buf);
  free(f);
  return rc;
}
