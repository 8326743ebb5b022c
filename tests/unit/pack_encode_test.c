/* dpm-pack's encoders and resize (pack/encode.h): PNG round trips exactly
 * through libpng (grey and RGB), JPEG output is a JPEG whose size follows
 * the quality, the bilinear resize's values with half-pixel centres, and
 * bad shapes are refused. */
#include <png.h>
#include <stdlib.h>

#include "pack/encode.h"
#include "test.h"

static int png_round_trip(int w, int h, int ch) {
  size_t n = (size_t)w * h * ch;
  uint8_t *px = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) px[i] = (uint8_t)(i * 37 + i / 7);
  dpm_bytes b = {0};
  dpm_err err;
  int ok = dpm_encode_png(px, w, h, ch, &b, &err) == DPM_OK;
  png_image im = {.version = PNG_IMAGE_VERSION};
  ok = ok && png_image_begin_read_from_memory(&im, b.data, b.len) &&
       im.width == (png_uint_32)w && im.height == (png_uint_32)h;
  if (ok) {
    im.format = ch == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    ok = png_image_finish_read(&im, NULL, back, 0, NULL) && !memcmp(px, back, n);
  }
  png_image_free(&im);
  dpm_bytes_free(&b);
  free(px);
  free(back);
  return ok;
}

TEST(pack_png_round_trips_exactly) {
  CHECK(png_round_trip(28, 28, 1));
  CHECK(png_round_trip(5, 3, 3));
  CHECK(png_round_trip(1, 1, 1));
}

TEST(pack_jpeg_is_a_jpeg_sized_by_quality) {
  uint8_t px[32 * 32];
  for (int i = 0; i < 32 * 32; i++) px[i] = (uint8_t)((i % 32) * 8 ^ (i / 32) * 3);
  dpm_bytes lo = {0}, hi = {0};
  dpm_err err = {0};
  CHECK_INT(dpm_encode_jpeg(px, 32, 32, 1, 10, &lo, &err), DPM_OK);
  CHECK_INT(dpm_encode_jpeg(px, 32, 32, 1, 100, &hi, &err), DPM_OK);
  CHECK(lo.len > 3 && lo.data[0] == 0xff && lo.data[1] == 0xd8 && lo.data[2] == 0xff);
  CHECK(hi.len > lo.len);
  CHECK_INT(dpm_encode_jpeg(px, 32, 32, 1, 0, &lo, &err), DPM_INVALID);
  CHECK_INT(dpm_encode_png(px, 0, 32, 1, &lo, &err), DPM_INVALID);
  CHECK_INT(dpm_encode_png(px, 32, 32, 2, &lo, &err), DPM_INVALID);
  dpm_bytes_free(&lo);
  dpm_bytes_free(&hi);
}

TEST(pack_bilinear_resize_has_half_pixel_centres) {
  /* 1x2 -> 1x4: samples at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped) */
  const uint8_t row[2] = {0, 100};
  uint8_t out[4];
  dpm_resize_bilinear(row, 2, 1, 1, out, 4, 1);
  CHECK(out[0] == 0 && out[1] == 25 && out[2] == 75 && out[3] == 100);
  /* 2x2 -> 3x3: the centre averages all four */
  const uint8_t sq[4] = {0, 40, 80, 120};
  uint8_t o9[9];
  dpm_resize_bilinear(sq, 2, 2, 1, o9, 3, 3);
  CHECK_INT(o9[4], 60);
  CHECK(o9[0] == 0 && o9[8] == 120);
  /* the same size is the identity; channels stay apart */
  uint8_t rgb[2 * 2 * 3], same[2 * 2 * 3];
  for (int i = 0; i < 12; i++) rgb[i] = (uint8_t)(i * 20);
  dpm_resize_bilinear(rgb, 2, 2, 3, same, 2, 2);
  CHECK(!memcmp(rgb, same, sizeof rgb));
}
