/* image_tool: decode and augment image files as the data pipeline does
 * (io/image.h, io/augment.h), for the reference check against Pillow
 * (tests/e2e/image_vs_pil.sh).
 *
 *   image_tool [--eval] [--crop N] [--resize N] [--channels 1|3] [--seed S]
 *              [--epoch E] [--no-mirror] [--scale 0|1|2|4|8]
 *              [--mean M,M,M] [--std S,S,S] FILE...
 *
 * FILE number i is sample index i. --scale 0 (the default) decodes at the
 * scale dpm_augment_scale picks; another value forces it. For each file it
 * prints one line
 *   FILE W H SCALE DECODED_W DECODED_H X Y BW BH FLIP
 * (the box with %.17g) and writes the channels x crop x crop floats,
 * native float32, to FILE.f32. A file that fails prints
 *   FILE error STATUS MESSAGE
 * and the tool goes on; exit 1 if any failed, 2 on usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/augment.h"
#include "io/image.h"

static int usage(void) {
  fprintf(stderr, "usage: image_tool [--eval] [--crop N] [--resize N] [--channels 1|3] "
                  "[--seed S] [--epoch E] [--no-mirror] [--scale 0|1|2|4|8] "
                  "[--mean M,M,M] [--std S,S,S] FILE...\n");
  return 2;
}

static int read_file(const char *path, uint8_t **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(b, cap *= 2);
      if (!nb) free(b);
      b = nb;
    }
  }
  fclose(f);
  if (!b) return -1;
  *buf = b;
  *len = n;
  return 0;
}

static void parse3(const char *s, float v[3]) {
  if (sscanf(s, "%f,%f,%f", &v[0], &v[1], &v[2]) == 1) v[1] = v[2] = v[0];
}

int main(int argc, char **argv) {
  dpm_augment_cfg cfg = dpm_augment_defaults();
  unsigned long long seed = 1, epoch = 0;
  int force_scale = 0, i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--eval")) {
      cfg.train = 0;
      continue;
    }
    if (!strcmp(a, "--no-mirror")) {
      cfg.mirror = 0;
      continue;
    }
    if (!v) return usage();
    i++;
    if (!strcmp(a, "--crop"))
      cfg.crop = atoi(v);
    else if (!strcmp(a, "--resize"))
      cfg.resize = atoi(v);
    else if (!strcmp(a, "--channels"))
      cfg.channels = atoi(v);
    else if (!strcmp(a, "--seed"))
      seed = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--epoch"))
      epoch = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--scale"))
      force_scale = atoi(v);
    else if (!strcmp(a, "--mean"))
      parse3(v, cfg.mean);
    else if (!strcmp(a, "--std"))
      parse3(v, cfg.std);
    else
      return usage();
  }
  if (i >= argc) return usage();
  dpm_err err = {0};
  dpm_image_decoder *dec = dpm_image_decoder_create(NULL, &err);
  dpm_augmenter *aug = dec ? dpm_augmenter_create(&cfg, &err) : NULL;
  size_t n_out = (size_t)cfg.channels * cfg.crop * cfg.crop;
  float *out = malloc(n_out * sizeof *out), *whole = malloc(n_out * sizeof *whole);
  if (!aug || !out || !whole) {
    fprintf(stderr, "image_tool: %s\n", err.msg);
    return 2;
  }
  int failed = 0;
  for (int f = i; f < argc; f++) {
    const char *path = argv[f];
    uint8_t *buf = NULL;
    size_t len = 0;
    dpm_image_info info;
    dpm_image img;
    dpm_crop_box box;
    dpm_status st;
    if (read_file(path, &buf, &len)) {
      printf("%s error IO cannot read\n", path);
      failed = 1;
      continue;
    }
    memset(&err, 0, sizeof err);
    if (!(st = dpm_image_probe(buf, len, &info, &err))) {
      dpm_augment_box(&cfg, seed, epoch, (uint64_t)(f - i), info.width, info.height,
                      &box);
      int scale = force_scale ? force_scale : dpm_augment_scale(&cfg, &box);
      /* the whole image, then the region the box reads (the reader's way):
       * the same floats */
      dpm_image_region r;
      dpm_augment_region(&cfg, &box, scale, info.width, info.height, &r);
      if (!(st = dpm_image_decode(dec, buf, len, cfg.channels, scale, &img, &err)))
        st = dpm_augment_apply(aug, &img, &box, whole, &err);
      if (!st && !(st = dpm_image_decode_region(dec, buf, len, cfg.channels, scale, &r,
                                                &img, &err)))
        st = dpm_augment_apply(aug, &img, &box, out, &err);
      if (!st && memcmp(out, whole, n_out * sizeof *out))
        st = dpm_errf(&err, DPM_INTERNAL,
                      "the decode of columns %d..%d, rows %d..%d differs from the whole "
                      "one",
                      r.x0, r.x1, r.y0, r.y1);
    }
    free(buf);
    if (st) {
      printf("%s error %s %s\n", path, dpm_status_name(st), err.msg);
      failed = 1;
      continue;
    }
    printf("%s %d %d %d %d %d %.17g %.17g %.17g %.17g %d\n", path, img.full_width,
           img.full_height, img.scale_denom, img.width, img.height, box.x, box.y, box.w,
           box.h, box.flip);
    char o[4096];
    snprintf(o, sizeof o, "%s.f32", path);
    FILE *fo = fopen(o, "wb");
    if (!fo || fwrite(out, sizeof *out, n_out, fo) != n_out || fclose(fo)) {
      printf("%s error IO cannot write %s\n", path, o);
      failed = 1;
    }
  }
  free(out);
  free(whole);
  dpm_augmenter_destroy(aug);
  dpm_image_decoder_destroy(dec);
  return failed;
}
