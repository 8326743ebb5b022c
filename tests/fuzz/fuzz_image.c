/* Fuzz target: image decode and augment (io/image.h, io/augment.h) on
 * arbitrary bytes: dpm_image_probe, dpm_image_decode at a channel count
 * and DCT scale, then the crop box of the decoded size and its resample,
 * as the data pipeline runs them. The options are a hash of the input's
 * length, so that the seeds stay plain JPEG and PNG files: bit 0 one
 * channel or three, bit 1 training or evaluation boxes, bits 2-3 the scale
 * (0: the one dpm_augment_scale picks, else 2, 4 or 8 forced).
 *
 * Also, first, the decode of only the region the box reads, as the reader
 * runs it (dpm_image_decode_region): it fails exactly where the whole
 * decode does, and its resample equals the whole one's bit for bit.
 *
 * Checks: a failed probe or decode leaves its output zeroed and says why;
 * a decode succeeds only where the probe does, with the probe's size, at
 * ceil(size / scale) for a JPEG; the box lies inside the image; the
 * resample succeeds and every value lies in [0, 255] (mean 0, std 1).
 * The decoder's limits are 4096 x 4096 and 4 Mpx, so one input allocates at
 * most 12 MiB of pixels (plus libjpeg's coefficient buffers for a
 * progressive file, 2 bytes a sample). */
#include <string.h>

#include "fuzz.h"
#include "io/augment.h"
#include "io/image.h"

#define CROP 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static dpm_image_decoder *dec;
  static dpm_augmenter *aug[2][2]; /* [train][one channel] */
  static float out[3 * CROP * CROP], out_rows[3 * CROP * CROP];
  if (!dec) {
    dpm_image_limits lim = {4096, 4096, 4 << 20};
    dec = dpm_image_decoder_create(&lim, NULL);
    FUZZ_CHECK(dec);
    for (int t = 0; t < 2; t++)
      for (int g = 0; g < 2; g++) {
        dpm_augment_cfg cfg = dpm_augment_defaults();
        cfg.train = t;
        cfg.channels = g ? 1 : 3;
        cfg.crop = CROP;
        cfg.resize = CROP + 2;
        aug[t][g] = dpm_augmenter_create(&cfg, NULL);
        FUZZ_CHECK(aug[t][g]);
      }
  }
  unsigned opt = (unsigned)((uint32_t)size * 2654435761u) >> 28;
  int gray = opt & 1, train = (opt >> 1) & 1, forced = (int)(opt >> 2);
  dpm_err err = {0};
  dpm_image_info info;
  dpm_status probed = dpm_image_probe(data, size, &info, &err);
  if (probed) {
    FUZZ_CHECK(info.format == 0 && info.width == 0 && err.msg[0]);
  } else {
    FUZZ_CHECK(info.format == DPM_IMAGE_JPEG || info.format == DPM_IMAGE_PNG);
    FUZZ_CHECK(info.width >= 1 && info.height >= 1 && info.channels >= 1 &&
               info.channels <= 4);
  }
  int scale = forced ? 1 << forced : 1;
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.train = train, cfg.crop = CROP, cfg.resize = CROP + 2;
  dpm_crop_box box;
  if (!probed) {
    dpm_augment_box(&cfg, 1, 0, size, info.width, info.height, &box);
    if (!forced) scale = dpm_augment_scale(&cfg, &box);
  }
  /* as the reader decodes: only the region the box reads */
  dpm_image_region r = {0, 0, 0, 0};
  if (!probed) dpm_augment_region(&cfg, &box, scale, info.width, info.height, &r);
  memset(&err, 0, sizeof err);
  dpm_image part;
  dpm_status rows_st =
      dpm_image_decode_region(dec, data, size, gray ? 1 : 3, scale, &r, &part, &err);
  if (!rows_st) {
    FUZZ_CHECK(part.rows >= 1 && part.y0 >= 0 && part.y0 + part.rows <= part.height);
    FUZZ_CHECK(part.cols >= 1 && part.x0 >= 0 && part.x0 + part.cols <= part.width);
    FUZZ_CHECK(dpm_augment_apply(aug[train][gray], &part, &box, out_rows, &err) ==
               DPM_OK);
  }
  memset(&err, 0, sizeof err);
  dpm_image img;
  dpm_status st = dpm_image_decode(dec, data, size, gray ? 1 : 3, scale, &img, &err);
  FUZZ_CHECK(!st == !rows_st); /* the rows skipped are read and checked */
  if (st) {
    FUZZ_CHECK(img.pixels == NULL && img.width == 0 && err.msg[0]);
    FUZZ_CHECK(st == DPM_CORRUPT || st == DPM_UNSUPPORTED || st == DPM_NOMEM);
    return 0;
  }
  FUZZ_CHECK(!probed && img.full_width == info.width && img.full_height == info.height);
  FUZZ_CHECK(img.channels == (gray ? 1 : 3) && img.pixels);
  int s = info.format == DPM_IMAGE_JPEG ? scale : 1;
  FUZZ_CHECK(img.scale_denom == s && img.width == (info.width + s - 1) / s &&
             img.height == (info.height + s - 1) / s);
  fuzz_touch(img.pixels, (size_t)img.width * img.height * img.channels);
  FUZZ_CHECK(box.x >= 0 && box.y >= 0 && box.w > 0 && box.h > 0 &&
             box.x + box.w <= info.width && box.y + box.h <= info.height);
  st = dpm_augment_apply(aug[train][gray], &img, &box, out, &err);
  FUZZ_CHECK(st == DPM_OK);
  FUZZ_CHECK(!memcmp(out, out_rows, sizeof(float) * (gray ? 1 : 3) * CROP * CROP));
  for (int i = 0; i < (gray ? 1 : 3) * CROP * CROP; i++)
    FUZZ_CHECK(out[i] >= 0 && out[i] <= 255);
  return 0;
}
