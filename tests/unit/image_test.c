/* Image decode (io/image.h) and augment (io/augment.h): PNG decodes
 * exactly (every colour type, 1- to 16-bit, palette, alpha, Adam7), JPEG
 * within its quantisation, gray <-> RGB as documented, DCT-scaled sizes;
 * truncated, corrupt, bomb, CMYK and unknown inputs refused; a decoder
 * reused across sizes and failures; crop boxes pure, inside the image, in
 * range, torchvision's eval arithmetic and fallback; the DCT scale rule;
 * the resample's identity, mirror, normalisation and 2:1 average. Images are
 * encoded here with libjpeg and libpng (tests/image_enc.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>

#include "engine/rng.h"
#include "io/augment.h"
#include "io/image.h"
#include "test.h"
#include "tests/image_enc.h"

/* A w x h x ch test pattern: gradients in the first two channels, a
 * checkerboard of 4-pixel squares in the third (a diagonal ramp if smooth). */
static uint8_t *pattern_of(int w, int h, int ch, int smooth) {
  uint8_t *p = malloc((size_t)w * h * ch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) {
        int v = c == 0   ? x * 255 / (w > 1 ? w - 1 : 1)
                : c == 1 ? y * 255 / (h > 1 ? h - 1 : 1)
                : smooth ? (x + y) * 255 / (w + h)
                         : ((x / 4 + y / 4) % 2) * 160 + 40;
        p[((size_t)y * w + x) * ch + c] = (uint8_t)v;
      }
  return p;
}
static uint8_t *pattern(int w, int h, int ch) { return pattern_of(w, h, ch, 0); }

/* An image held whole: width x height of ch channels at 1/scale of full. */
static dpm_image whole(int width, int height, int ch, int scale, int full_width,
                       int full_height, const uint8_t *pixels) {
  return (dpm_image){.width = width,
                     .height = height,
                     .channels = ch,
                     .scale_denom = scale,
                     .full_width = full_width,
                     .full_height = full_height,
                     .pixels = pixels};
}

static dpm_image_decoder *decoder(void) { return dpm_image_decoder_create(NULL, NULL); }

TEST(image_png_decodes_exactly) {
  int w = 37, h = 23;
  uint8_t *rgb = pattern(w, h, 3), *png = NULL;
  size_t len;
  dpm_image_decoder *dec = decoder();
  dpm_image img;
  dpm_err err = {0};
  for (int interlace = 0; interlace < 2; interlace++) {
    enc_png(rgb, (size_t)w * 3, w, h, PNG_COLOR_TYPE_RGB, 8, interlace, NULL, 0, NULL, 0,
            &png, &len);
    CHECK_INT(dpm_image_decode(dec, png, len, 3, 4, &img, &err), DPM_OK);
    CHECK_INT(img.width, w);
    CHECK_INT(img.height, h);
    CHECK_INT(img.scale_denom, 1); /* PNG ignores the scale */
    CHECK(!memcmp(img.pixels, rgb, (size_t)w * h * 3));
    /* One channel: PIL's convert("L") weights. */
    CHECK_INT(dpm_image_decode(dec, png, len, 1, 1, &img, &err), DPM_OK);
    for (int i = 0; i < w * h; i++) {
      const uint8_t *q = rgb + 3 * i;
      CHECK_INT(img.pixels[i],
                (q[0] * 19595 + q[1] * 38470 + q[2] * 7471 + 0x8000) >> 16);
    }
    free(png);
  }
  /* RGBA, 16 bits: the high bytes, alpha dropped. */
  uint8_t *rgba16 = malloc((size_t)w * h * 8);
  for (int i = 0; i < w * h; i++)
    for (int c = 0; c < 4; c++) {
      rgba16[8 * i + 2 * c] = c < 3 ? rgb[3 * i + c] : 0x12;
      rgba16[8 * i + 2 * c + 1] = (uint8_t)(i * 7 + c);
    }
  enc_png(rgba16, (size_t)w * 8, w, h, PNG_COLOR_TYPE_RGBA, 16, 0, NULL, 0, NULL, 0, &png,
          &len);
  CHECK_INT(dpm_image_decode(dec, png, len, 3, 1, &img, &err), DPM_OK);
  CHECK(!memcmp(img.pixels, rgb, (size_t)w * h * 3));
  free(png);
  free(rgba16);
  /* Gray: replicated into three channels; gray + alpha drops the alpha. */
  uint8_t *gray = pattern(w, h, 1), *ga = malloc((size_t)w * h * 2);
  for (int i = 0; i < w * h; i++) ga[2 * i] = gray[i], ga[2 * i + 1] = (uint8_t)i;
  enc_png(ga, (size_t)w * 2, w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, NULL, 0, NULL, 0,
          &png, &len);
  CHECK_INT(dpm_image_decode(dec, png, len, 3, 1, &img, &err), DPM_OK);
  for (int i = 0; i < w * h; i++)
    CHECK(img.pixels[3 * i] == gray[i] && img.pixels[3 * i + 1] == gray[i] &&
          img.pixels[3 * i + 2] == gray[i]);
  CHECK_INT(dpm_image_decode(dec, png, len, 1, 1, &img, &err), DPM_OK);
  CHECK(!memcmp(img.pixels, gray, (size_t)w * h));
  free(png);
  free(ga);
  free(gray);
  /* 2-bit gray: scaled by 85. */
  uint8_t packed[4 * 2];
  for (int y = 0; y < 2; y++)
    for (int b = 0; b < 4; b++)
      packed[y * 4 + b] = (uint8_t)(0x1b ^ (y * 0xff)); /* 0 1 2 3 */
  enc_png(packed, 4, 16, 2, PNG_COLOR_TYPE_GRAY, 2, 0, NULL, 0, NULL, 0, &png, &len);
  CHECK_INT(dpm_image_decode(dec, png, len, 1, 1, &img, &err), DPM_OK);
  CHECK_INT(img.width, 16);
  for (int x = 0; x < 16; x++) {
    CHECK_INT(img.pixels[x], (x % 4) * 85);
    CHECK_INT(img.pixels[16 + x], (3 - x % 4) * 85);
  }
  free(png);
  /* Palette with transparency: looked up, the transparency dropped. */
  png_color pal[3] = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}};
  uint8_t trns[3] = {0, 128, 255}, idx[5 * 3];
  for (int i = 0; i < 15; i++) idx[i] = (uint8_t)(i % 3);
  enc_png(idx, 5, 5, 3, PNG_COLOR_TYPE_PALETTE, 8, 0, pal, 3, trns, 3, &png, &len);
  CHECK_INT(dpm_image_decode(dec, png, len, 3, 1, &img, &err), DPM_OK);
  for (int i = 0; i < 15; i++) {
    const png_color *c = &pal[i % 3];
    CHECK(img.pixels[3 * i] == c->red && img.pixels[3 * i + 1] == c->green &&
          img.pixels[3 * i + 2] == c->blue);
  }
  free(png);
  free(rgb);
  dpm_image_decoder_destroy(dec);
}

/* Largest |a - b| over n bytes. */
static int max_diff(const uint8_t *a, const uint8_t *b, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    if (d > m) m = d;
  }
  return m;
}

TEST(image_jpeg_decodes_within_quantisation) {
  int w = 64, h = 48;
  uint8_t *rgb = pattern_of(w, h, 3, 1), *gray = pattern(w, h, 1), *jpg;
  size_t len;
  dpm_image_decoder *dec = decoder();
  dpm_image img;
  dpm_err err = {0};
  for (int prog = 0; prog < 2; prog++) {
    enc_jpeg(gray, w, h, 1, 100, prog, &jpg, &len);
    CHECK_INT(dpm_image_decode(dec, jpg, len, 1, 1, &img, &err), DPM_OK);
    CHECK_INT(img.channels, 1);
    CHECK(max_diff(img.pixels, gray, (size_t)w * h) <= 6);
    /* Gray to RGB: the same value in each channel. */
    uint8_t *one = malloc((size_t)w * h);
    memcpy(one, img.pixels, (size_t)w * h);
    CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 1, &img, &err), DPM_OK);
    for (int i = 0; i < w * h; i++)
      CHECK(img.pixels[3 * i] == one[i] && img.pixels[3 * i + 1] == one[i] &&
            img.pixels[3 * i + 2] == one[i]);
    free(one);
    free(jpg);
  }
  enc_jpeg(rgb, w, h, 3, 100, 0, &jpg, &len);
  CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 1, &img, &err), DPM_OK);
  double sum = 0;
  for (int i = 0; i < w * h * 3; i++) sum += abs((int)img.pixels[i] - (int)rgb[i]);
  CHECK_WITHIN(sum / (w * h * 3), 3.0);
  /* RGB to one channel: the file's luma, near PIL's weights. */
  CHECK_INT(dpm_image_decode(dec, jpg, len, 1, 1, &img, &err), DPM_OK);
  sum = 0;
  for (int i = 0; i < w * h; i++) {
    const uint8_t *q = rgb + 3 * i;
    sum += fabs(img.pixels[i] - (0.299 * q[0] + 0.587 * q[1] + 0.114 * q[2]));
  }
  CHECK_WITHIN(sum / (w * h), 3.0);
  free(jpg);
  free(rgb);
  free(gray);
  dpm_image_decoder_destroy(dec);
}

TEST(image_jpeg_scaled_decode_sizes) {
  int w = 101, h = 75;
  uint8_t *rgb = pattern(w, h, 3), *jpg;
  size_t len;
  enc_jpeg(rgb, w, h, 3, 95, 0, &jpg, &len);
  dpm_image_decoder *dec = decoder();
  dpm_image img;
  dpm_err err = {0};
  dpm_image_info info;
  CHECK_INT(dpm_image_probe(jpg, len, &info, &err), DPM_OK);
  CHECK(info.format == DPM_IMAGE_JPEG && info.width == w && info.height == h &&
        info.channels == 3);
  for (int s = 1; s <= 8; s *= 2) {
    CHECK_INT(dpm_image_decode(dec, jpg, len, 3, s, &img, &err), DPM_OK);
    CHECK_INT(img.width, (w + s - 1) / s);
    CHECK_INT(img.height, (h + s - 1) / s);
    CHECK(img.scale_denom == s && img.full_width == w && img.full_height == h);
  }
  /* At 1/2, each pixel is about the mean of its 2x2 block (green: the
   * vertical ramp, luma-sampled at full resolution). */
  CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 2, &img, &err), DPM_OK);
  double sum = 0;
  int n = 0;
  for (int y = 0; y + 1 < h / 2; y++)
    for (int x = 0; x + 1 < w / 2; x++, n++) {
      int m = 0;
      for (int k = 0; k < 4; k++)
        m += rgb[((size_t)(2 * y + k / 2) * w + 2 * x + k % 2) * 3 + 1];
      sum += fabs(img.pixels[((size_t)y * img.width + x) * 3 + 1] - m / 4.0);
    }
  CHECK_WITHIN(sum / n, 4.0);
  CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 3, &img, &err), DPM_INVALID);
  CHECK_INT(dpm_image_decode(dec, jpg, len, 2, 1, &img, &err), DPM_INVALID);
  free(jpg);
  free(rgb);
  dpm_image_decoder_destroy(dec);
}

/* A region's decode holds the region's pixels exactly as the whole decode
 * gives them, for every sampling, progressive files (block smoothing) and
 * each scale: the crop's edge columns, which differ, stay in the margin.
 * Noise makes every column's chroma differ from its neighbours', so an
 * edge effect inside the region shows. And a narrow region in a wide image
 * is decoded cropped (fewer columns held). */
TEST(image_region_decode_equals_whole) {
  int w = 300, h = 70;
  uint8_t *rgb = malloc((size_t)w * h * 3), *jpg;
  uint64_t s = 88172645463325252ull;
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    rgb[i] = (uint8_t)(s >> 56);
  }
  static const int samp[][2] = {{2, 2}, {2, 1}, {1, 1}, {1, 2}};
  dpm_image_decoder *dec = decoder(), *whole_dec = decoder();
  dpm_image img, all;
  dpm_err err = {0};
  size_t len, checked = 0;
  int cropped = 0;
  for (int f = 0; f < 8; f++) {
    enc_jpeg_sampled(rgb, w, h, 3, 75, f / 4, samp[f % 4][0], samp[f % 4][1], &jpg, &len);
    for (int ch = 1; ch <= 3; ch += 2)
      for (int sc = 1; sc <= 8; sc *= 2) {
        CHECK_INT(dpm_image_decode(whole_dec, jpg, len, ch, sc, &all, &err), DPM_OK);
        for (int x0 = 0; x0 < all.width; x0 += 1 + all.width / 23)
          for (int cw = 1; cw <= 61; cw += 30) {
            dpm_image_region r = {x0, x0 + cw, x0 % 9, x0 % 9 + 5};
            CHECK_INT(dpm_image_decode_region(dec, jpg, len, ch, sc, &r, &img, &err),
                      DPM_OK);
            int x1 = r.x1 < all.width ? r.x1 : all.width,
                y1 = r.y1 < all.height ? r.y1 : all.height;
            CHECK(img.x0 <= r.x0 && img.x0 + img.cols >= x1 && img.y0 <= r.y0 &&
                  img.y0 + img.rows >= y1);
            cropped += img.cols < img.width;
            for (int y = r.y0; y < y1; y++) {
              const uint8_t *a = all.pixels + ((size_t)y * all.width + r.x0) * ch,
                            *b = img.pixels +
                                 (size_t)(y - img.y0) * dpm_image_stride(&img) +
                                 (size_t)(r.x0 - img.x0) * ch;
              CHECK(!memcmp(a, b, (size_t)(x1 - r.x0) * ch));
              checked++;
            }
          }
      }
    free(jpg);
  }
  CHECK(checked > 1000 && cropped > 100);
  free(rgb);
  dpm_image_decoder_destroy(dec);
  dpm_image_decoder_destroy(whole_dec);
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
  p[3] = (uint8_t)v;
}

/* Offset of the JPEG's SOF0 marker's length field; 0 if none. */
static size_t sof0(const uint8_t *b, size_t len) {
  for (size_t i = 2; i + 9 < len; i++)
    if (b[i] == 0xff && b[i + 1] == 0xc0) return i + 2;
  return 0;
}

/* buf without its marker segments of type m (0xdb: DQT) before the scan,
 * into out; the new length. */
static size_t strip_segments(const uint8_t *buf, size_t len, uint8_t m, uint8_t *out) {
  size_t i = 2, o = 2;
  memcpy(out, buf, 2);
  while (i + 4 <= len && buf[i] == 0xff && buf[i + 1] != 0xda) {
    size_t seg = 2 + ((size_t)buf[i + 2] << 8 | buf[i + 3]);
    if (buf[i + 1] != m) memcpy(out + o, buf + i, seg), o += seg;
    i += seg;
  }
  memcpy(out + o, buf + i, len - i);
  return o + len - i;
}

/* libjpeg keeps a file's Huffman and quantization tables for the next one
 * (abbreviated datastreams); the decoder must not: a file without its
 * quantization tables fails, whatever was decoded before. (One without
 * Huffman tables gets libjpeg-turbo's standard ones, not the last file's.) */
TEST(image_jpeg_tables_do_not_carry_over) {
  int w = 24, h = 16;
  uint8_t *rgb = pattern(w, h, 3), *jpg, *cut;
  size_t jlen;
  enc_jpeg(rgb, w, h, 3, 90, 0, &jpg, &jlen);
  cut = malloc(jlen);
  dpm_image_decoder *dec = decoder();
  dpm_image img;
  dpm_err err = {0};
  size_t n = strip_segments(jpg, jlen, 0xdb, cut); /* no DQT */
  CHECK(n < jlen);
  CHECK_INT(dpm_image_decode(dec, cut, n, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_INT(dpm_image_decode(dec, jpg, jlen, 3, 1, &img, &err), DPM_OK);
  CHECK_INT(dpm_image_decode(dec, cut, n, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "not defined");
  dpm_image_decoder_destroy(dec);
  free(cut);
  free(jpg);
  free(rgb);
}

TEST(image_refuses_bad_input) {
  int w = 40, h = 30;
  uint8_t *rgb = pattern(w, h, 3), *jpg, *png;
  size_t jlen, plen;
  enc_jpeg(rgb, w, h, 3, 90, 0, &jpg, &jlen);
  enc_png(rgb, (size_t)w * 3, w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0, &png,
          &plen);
  dpm_image_decoder *dec = decoder();
  dpm_image img;
  dpm_image_info info;
  dpm_err err = {0};
  /* Truncated: half the entropy data; a JPEG missing only its end marker. */
  CHECK_INT(dpm_image_decode(dec, jpg, jlen / 2, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "JPEG: corrupt or truncated data");
  CHECK(img.pixels == NULL && img.width == 0);
  CHECK_INT(dpm_image_decode(dec, jpg, jlen - 2, 3, 1, &img, &err), DPM_CORRUPT);
  /* ... also when only the rows above the damage are kept: the rows
   * skipped are still read and checked */
  dpm_image_region top = {0, 0, 0, 4};
  CHECK_INT(dpm_image_decode_region(dec, jpg, jlen / 2, 3, 1, &top, &img, &err),
            DPM_CORRUPT);
  CHECK_INT(dpm_image_decode_region(dec, jpg, jlen - 2, 3, 1, &top, &img, &err),
            DPM_CORRUPT);
  CHECK_INT(dpm_image_decode_region(dec, jpg, jlen, 3, 1, &top, &img, &err), DPM_OK);
  CHECK(img.y0 == 0 && img.rows == 4 && img.height == h);
  CHECK_INT(dpm_image_decode(dec, png, plen / 2, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "PNG: truncated");
  /* A flipped bit in the PNG's image data fails its CRC. */
  uint8_t *bad = malloc(plen);
  memcpy(bad, png, plen);
  bad[plen - 20] ^= 0x40;
  CHECK_INT(dpm_image_decode(dec, bad, plen, 3, 1, &img, &err), DPM_CORRUPT);
  free(bad);
  /* Not an image, or nothing. */
  static const uint8_t gif[] = "GIF89a\x01\x00\x01\x00";
  CHECK_INT(dpm_image_decode(dec, gif, sizeof gif, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "not a JPEG or PNG");
  CHECK_INT(dpm_image_probe(gif, sizeof gif, &info, &err), DPM_CORRUPT);
  CHECK_INT(dpm_image_decode(dec, "", 0, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_INT(dpm_image_probe(jpg, 20, &info, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "JPEG: corrupt or truncated data");
  /* Bombs: headers declaring 60000 x 60000, refused from the header. */
  size_t s = sof0(jpg, jlen);
  CHECK(s);
  uint8_t *bomb = malloc(jlen);
  memcpy(bomb, jpg, jlen);
  bomb[s + 3] = 60000 >> 8, bomb[s + 4] = 60000 & 0xff; /* height */
  bomb[s + 5] = 60000 >> 8, bomb[s + 6] = 60000 & 0xff; /* width */
  CHECK_INT(dpm_image_probe(bomb, jlen, &info, &err), DPM_OK);
  CHECK(info.width == 60000 && info.height == 60000);
  CHECK_INT(dpm_image_decode(dec, bomb, jlen, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "over the limits");
  free(bomb);
  bomb = malloc(plen);
  memcpy(bomb, png, plen);
  put_be32(bomb + 16, 60000);
  put_be32(bomb + 20, 60000);
  put_be32(bomb + 29, (uint32_t)crc32(0, bomb + 12, 17)); /* a valid IHDR */
  CHECK_INT(dpm_image_decode(dec, bomb, plen, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "over the limits");
  CHECK(be32(bomb + 16) == 60000);
  free(bomb);
  /* Tighter limits refuse what the defaults take. */
  dpm_image_limits lim = {40, 40, 1000};
  dpm_image_decoder *small = dpm_image_decoder_create(&lim, &err);
  CHECK_INT(dpm_image_decode(small, png, plen, 3, 1, &img, &err), DPM_CORRUPT);
  lim.max_pixels = 1200;
  dpm_image_decoder_destroy(small);
  small = dpm_image_decoder_create(&lim, &err);
  CHECK_INT(dpm_image_decode(small, png, plen, 3, 1, &img, &err), DPM_OK);
  dpm_image_decoder_destroy(small);
  lim.max_width = 0;
  CHECK(dpm_image_decoder_create(&lim, &err) == NULL && err.code == DPM_INVALID);
  /* CMYK JPEG: not supported. */
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char *cmyk = NULL;
  unsigned long clen = 0;
  jpeg_mem_dest(&c, &cmyk, &clen);
  c.image_width = 8, c.image_height = 8, c.input_components = 4;
  c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_start_compress(&c, TRUE);
  uint8_t row[32] = {0};
  while (c.next_scanline < 8) {
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  CHECK_INT(dpm_image_probe(cmyk, clen, &info, &err), DPM_OK);
  CHECK_INT(info.channels, 4);
  CHECK_INT(dpm_image_decode(dec, cmyk, clen, 3, 1, &img, &err), DPM_UNSUPPORTED);
  free(cmyk);
  /* A JFIF revision 2.1 (unknown to libjpeg, a warning) still decodes; a byte
   * of garbage before a marker (a warning too) does not. */
  uint8_t *odd = malloc(jlen + 1);
  memcpy(odd, jpg, jlen);
  CHECK(!memcmp(odd + 6, "JFIF", 5));
  odd[11] = 2;
  CHECK_INT(dpm_image_decode(dec, odd, jlen, 3, 1, &img, &err), DPM_OK);
  CHECK(jpg[4] == 0 && jpg[5] == 16 && jpg[20] == 0xff); /* APP0 of 16, then a marker */
  memcpy(odd, jpg, 20);
  odd[20] = 0x00;
  memcpy(odd + 21, jpg + 20, jlen - 20);
  CHECK_INT(dpm_image_decode(dec, odd, jlen + 1, 3, 1, &img, &err), DPM_CORRUPT);
  CHECK_HAS(err.msg, "extraneous bytes");
  CHECK_INT(dpm_image_probe(odd, jlen + 1, &info, &err), DPM_CORRUPT);
  free(odd);
  /* After every failure the decoder still decodes. */
  CHECK_INT(dpm_image_decode(dec, png, plen, 3, 1, &img, &err), DPM_OK);
  CHECK(!memcmp(img.pixels, rgb, (size_t)w * h * 3));
  CHECK_INT(dpm_image_decode(dec, jpg, jlen, 3, 1, &img, &err), DPM_OK);
  free(jpg);
  free(png);
  free(rgb);
  dpm_image_decoder_destroy(dec);
}

TEST(image_decoder_reused_across_sizes) {
  dpm_image_decoder *dec = decoder(), *fresh = decoder();
  dpm_image a, b;
  dpm_err err = {0};
  int sizes[][2] = {{120, 90}, {16, 16}, {200, 33}, {7, 300}};
  for (int i = 0; i < 4; i++) {
    int w = sizes[i][0], h = sizes[i][1];
    uint8_t *rgb = pattern(w, h, 3), *jpg;
    size_t len;
    enc_jpeg(rgb, w, h, 3, 90, i % 2, &jpg, &len);
    CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 1, &a, &err), DPM_OK);
    CHECK_INT(dpm_image_decode(fresh, jpg, len, 3, 1, &b, &err), DPM_OK);
    CHECK(a.width == w && a.height == h);
    CHECK(!memcmp(a.pixels, b.pixels, (size_t)w * h * 3));
    dpm_image_decoder_destroy(fresh);
    fresh = decoder();
    free(jpg);
    free(rgb);
  }
  dpm_image_decoder_destroy(fresh);
  dpm_image_decoder_destroy(dec);
}

/* ---- augment ---------------------------------------------------------------------- */

TEST(augment_boxes_pure_inside_and_in_range) {
  dpm_augment_cfg cfg = dpm_augment_defaults();
  int sizes[][2] = {{500, 375}, {375, 500}, {224, 224}, {1000, 40}, {31, 29}};
  int flips = 0, n = 0;
  for (int s = 0; s < 5; s++) {
    int W = sizes[s][0], H = sizes[s][1];
    for (uint64_t i = 0; i < 400; i++) {
      dpm_crop_box a, b, c;
      dpm_augment_box(&cfg, 42, 3, i, W, H, &a);
      dpm_augment_box(&cfg, 42, 3, i, W, H, &b);
      CHECK(!memcmp(&a, &b, sizeof a));
      CHECK(a.x >= 0 && a.y >= 0 && a.w >= 1 && a.h >= 1 && a.x + a.w <= W &&
            a.y + a.h <= H);
      CHECK(a.x == floor(a.x) && a.w == floor(a.w) && a.y == floor(a.y) &&
            a.h == floor(a.h));
      double frac = a.w * a.h / ((double)W * H), asp = a.w / a.h;
      int fallback = (a.w == W || a.h == H) && a.x == floor((W - a.w) / 2) &&
                     a.y == floor((H - a.h) / 2);
      /* w and h are rounded: the aspect within half a pixel either way. */
      CHECK(fallback || (frac >= 0.08 * 0.97 && frac <= 1 &&
                         asp >= 0.75 * (a.h - 0.5) / a.h - 0.5 / a.h &&
                         asp <= (4.0 / 3 * (a.h + 0.5) + 0.5) / a.h));
      flips += a.flip;
      n++;
      /* Another epoch, seed or index: another box (almost always). */
      dpm_augment_box(&cfg, 42, 4, i, W, H, &c);
      if (s < 2) CHECK(memcmp(&a, &c, sizeof a) || i % 97 == 0);
    }
  }
  CHECK(flips > n * 45 / 100 && flips < n * 55 / 100);
  /* A strip: no try fits, the fallback is the centre crop at aspect 4/3. */
  dpm_crop_box f;
  cfg.area_min = 0.9;
  dpm_augment_box(&cfg, 1, 0, 0, 1000, 10, &f);
  CHECK(f.w == 13 && f.h == 10 && f.x == 493 && f.y == 0);
  cfg.mirror = 0;
  for (uint64_t i = 0; i < 50; i++) {
    dpm_augment_box(&cfg, 1, 0, i, 300, 200, &f);
    CHECK(!f.flip);
  }
}

typedef struct box_job {
  const dpm_augment_cfg *cfg;
  uint64_t first, step;
  dpm_crop_box *out;
} box_job;

static void *box_thread(void *p) {
  box_job *j = p;
  for (uint64_t i = j->first; i < 256; i += j->step)
    dpm_augment_box(j->cfg, 7, 1, i, 640, 480, &j->out[i]);
  return NULL;
}

TEST(augment_boxes_independent_of_threads) {
  dpm_augment_cfg cfg = dpm_augment_defaults();
  dpm_crop_box one[256], four[256];
  box_job j = {&cfg, 0, 1, one};
  box_thread(&j);
  pthread_t t[4];
  box_job jobs[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (box_job){&cfg, (uint64_t)i, 4, four};
    CHECK(!pthread_create(&t[i], NULL, box_thread, &jobs[i]));
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK(!memcmp(one, four, sizeof one));
}

TEST(augment_eval_box_is_torchvision_arithmetic) {
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.train = 0;
  dpm_crop_box b;
  /* 500 x 375 -> Resize(256): 341 x 256; CenterCrop(224): left round(58.5) = 58
   * (half to even), top 16. */
  dpm_augment_box(&cfg, 1, 0, 0, 500, 375, &b);
  CHECK_NEAR(b.x, 58 * 500.0 / 341, 1e-12);
  CHECK_NEAR(b.y, 16 * 375.0 / 256, 1e-12);
  CHECK_NEAR(b.w, 224 * 500.0 / 341, 1e-9);
  CHECK_NEAR(b.h, 224 * 375.0 / 256, 1e-9);
  CHECK(!b.flip);
  /* Portrait: 333 x 517 -> 256 x 397; left 16, top round(86.5) = 86. */
  dpm_augment_box(&cfg, 1, 0, 0, 333, 517, &b);
  CHECK_NEAR(b.x, 16 * 333.0 / 256, 1e-12);
  CHECK_NEAR(b.y, 86 * 517.0 / 397, 1e-12);
  /* Already at the crop: the whole image. */
  cfg.resize = 224;
  dpm_augment_box(&cfg, 1, 0, 0, 224, 224, &b);
  CHECK(b.x == 0 && b.y == 0 && b.w == 224 && b.h == 224);
}

TEST(augment_scale_rule) {
  dpm_augment_cfg cfg = dpm_augment_defaults();
  struct {
    double w, h;
    int s;
  } cases[] = {{1792, 1792, 8}, {1791, 5000, 4}, {896, 900, 4}, {895, 900, 2},
               {448, 448, 2},   {447, 2000, 1},  {224, 224, 1}, {100, 100, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpm_crop_box b = {0, 0, cases[i].w, cases[i].h, 0};
    CHECK_INT(dpm_augment_scale(&cfg, &b), cases[i].s);
  }
}

TEST(augment_resample_identity_mirror_normalise) {
  int n = 24;
  uint8_t *rgb = pattern(n, n, 3);
  dpm_image img = whole(n, n, 3, 1, n, n, rgb);
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.crop = n;
  cfg.mean[0] = 100, cfg.mean[1] = 50, cfg.mean[2] = 0;
  cfg.std[0] = 2, cfg.std[1] = 4, cfg.std[2] = 0.5f;
  dpm_err err = {0};
  dpm_augmenter *aug = dpm_augmenter_create(&cfg, &err);
  CHECK(aug);
  float *out = malloc(sizeof(float) * 3 * n * n);
  dpm_crop_box box = {0, 0, n, n, 0};
  CHECK_INT(dpm_augment_apply(aug, &img, &box, out, &err), DPM_OK);
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < n; y++)
      for (int x = 0; x < n; x++)
        CHECK(out[(c * n + y) * n + x] ==
              ((float)rgb[(y * n + x) * 3 + c] - cfg.mean[c]) / cfg.std[c]);
  box.flip = 1;
  CHECK_INT(dpm_augment_apply(aug, &img, &box, out, &err), DPM_OK);
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < n; y++)
      for (int x = 0; x < n; x++)
        CHECK(out[(c * n + y) * n + (n - 1 - x)] ==
              ((float)rgb[(y * n + x) * 3 + c] - cfg.mean[c]) / cfg.std[c]);
  /* Outside the image, or the wrong channel count: refused. */
  dpm_crop_box outside = {1, 0, n, n, 0};
  CHECK_INT(dpm_augment_apply(aug, &img, &outside, out, &err), DPM_INVALID);
  dpm_image gray = whole(n, n, 1, 1, n, n, rgb);
  CHECK_INT(dpm_augment_apply(aug, &gray, &box, out, &err), DPM_INVALID);
  dpm_augmenter_destroy(aug);
  free(out);
  free(rgb);
}

TEST(augment_resample_halves_by_averaging) {
  /* A 2:1 downscale with the triangle filter of support 2 weighs each
   * output's two centre pixels 3/8 and the outer two 1/8: on columns
   * alternating a, b it gives (a + b) / 2 away from the edges. */
  int w = 32, h = 32, crop = 16;
  uint8_t *g = malloc((size_t)w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) g[y * w + x] = x % 2 ? 200 : 100;
  dpm_image img = whole(w, h, 1, 1, w, h, g);
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.crop = crop;
  cfg.channels = 1;
  dpm_err err = {0};
  dpm_augmenter *aug = dpm_augmenter_create(&cfg, &err);
  float out[16 * 16];
  dpm_crop_box box = {0, 0, w, h, 0};
  CHECK_INT(dpm_augment_apply(aug, &img, &box, out, &err), DPM_OK);
  for (int y = 0; y < crop; y++)
    for (int x = 1; x < crop - 1; x++) CHECK(out[y * crop + x] == 150);
  /* The same through a 1/2-scale image and the box in full-size pixels. */
  uint8_t *half = malloc(16 * 16);
  memset(half, 77, 16 * 16);
  dpm_image scaled = whole(16, 16, 1, 2, w, h, half);
  CHECK_INT(dpm_augment_apply(aug, &scaled, &box, out, &err), DPM_OK);
  for (int i = 0; i < crop * crop; i++) CHECK(out[i] == 77);
  dpm_augmenter_destroy(aug);
  free(half);
  free(g);
}

TEST(augment_three_channels_equal_three_single_channel_resamples) {
  /* 3 channels take their own horizontal pass (SSE4.1 where the CPU has
   * it), 1 channel the plain one: the same integer arithmetic, so each
   * channel of a 3-channel resample equals that channel alone, for boxes
   * anywhere, those that end at the image's right edge included. */
  int w = 61, h = 47, crop = 20;
  uint8_t *rgb = malloc((size_t)w * h * 3), *plane[3];
  uint64_t s[2];
  dpm_rng_seed(s, 7);
  for (size_t i = 0; i < (size_t)w * h * 3; i++) rgb[i] = (uint8_t)dpm_rng_next(s);
  for (int c = 0; c < 3; c++) {
    plane[c] = malloc((size_t)w * h);
    for (int i = 0; i < w * h; i++) plane[c][i] = rgb[(size_t)i * 3 + c];
  }
  dpm_augment_cfg c3 = dpm_augment_defaults(), c1;
  c3.crop = crop;
  c1 = c3;
  c1.channels = 1;
  dpm_err err = {0};
  dpm_augmenter *a3 = dpm_augmenter_create(&c3, &err), *a1[3];
  float *o3 = malloc(sizeof(float) * 3 * crop * crop),
        *o1 = malloc(sizeof(float) * crop * crop);
  for (int c = 0; c < 3; c++) {
    c1.mean[0] = c3.mean[c], c1.std[0] = c3.std[c];
    a1[c] = dpm_augmenter_create(&c1, &err);
  }
  const dpm_crop_box boxes[] = {{0, 0, w, h, 0},   {w - 9, 3, 9, 40, 1},
                                {2, 5, 50, 11, 0}, {30, 0, 31, 47, 1},
                                {0, 0, 5, 5, 0},   {13, 17, 48, 30, 0}};
  for (size_t b = 0; b < sizeof boxes / sizeof *boxes; b++) {
    dpm_image img = whole(w, h, 3, 1, w, h, rgb);
    CHECK_INT(dpm_augment_apply(a3, &img, &boxes[b], o3, &err), DPM_OK);
    for (int c = 0; c < 3; c++) {
      dpm_image one = whole(w, h, 1, 1, w, h, plane[c]);
      CHECK_INT(dpm_augment_apply(a1[c], &one, &boxes[b], o1, &err), DPM_OK);
      CHECK(!memcmp(o1, o3 + (size_t)c * crop * crop, sizeof(float) * crop * crop));
    }
  }
  for (int c = 0; c < 3; c++) {
    dpm_augmenter_destroy(a1[c]);
    free(plane[c]);
  }
  dpm_augmenter_destroy(a3);
  free(o1);
  free(o3);
  free(rgb);
}

TEST(augment_config_checked) {
  dpm_augment_cfg ok = dpm_augment_defaults(), c;
  dpm_err err = {0};
  CHECK_INT(dpm_augment_check(&ok, &err), DPM_OK);
  c = ok, c.crop = 0;
  CHECK_INT(dpm_augment_check(&c, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "crop");
  c = ok, c.train = 0, c.resize = 100;
  CHECK_INT(dpm_augment_check(&c, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "resize");
  c = ok, c.area_min = 0;
  CHECK_INT(dpm_augment_check(&c, &err), DPM_INVALID);
  c = ok, c.aspect_min = 2;
  CHECK_INT(dpm_augment_check(&c, &err), DPM_INVALID);
  c = ok, c.std[1] = 0;
  CHECK_INT(dpm_augment_check(&c, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "channel 1");
  c = ok, c.channels = 2;
  CHECK(dpm_augmenter_create(&c, &err) == NULL && err.code == DPM_INVALID);
}

/* A JPEG decoded at 1/4 and resampled from the scaled box stays close to
 * the full decode resampled from the full box. */
TEST(augment_scaled_decode_close_to_full) {
  int w = 960, h = 720;
  uint8_t *rgb = pattern_of(w, h, 3, 1), *jpg;
  size_t len;
  enc_jpeg(rgb, w, h, 3, 90, 0, &jpg, &len);
  dpm_image_decoder *dec = decoder();
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.train = 0;
  cfg.resize = 224;
  dpm_err err = {0};
  dpm_augmenter *aug = dpm_augmenter_create(&cfg, &err);
  dpm_crop_box box;
  dpm_augment_box(&cfg, 1, 0, 0, w, h, &box);
  CHECK_INT(dpm_augment_scale(&cfg, &box), 2); /* 720 / 224 = 3.2 */
  size_t n = 3 * 224 * 224;
  float *full = malloc(n * sizeof *full), *scaled = malloc(n * sizeof *scaled);
  dpm_image img;
  CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 1, &img, &err), DPM_OK);
  CHECK_INT(dpm_augment_apply(aug, &img, &box, full, &err), DPM_OK);
  CHECK_INT(dpm_image_decode(dec, jpg, len, 3, 2, &img, &err), DPM_OK);
  CHECK_INT(dpm_augment_apply(aug, &img, &box, scaled, &err), DPM_OK);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += fabs(full[i] - scaled[i]);
  CHECK_WITHIN(sum / n, 3.0);
  free(full);
  free(scaled);
  free(jpg);
  free(rgb);
  dpm_augmenter_destroy(aug);
  dpm_image_decoder_destroy(dec);
}

/* What a decoder and an augmenter hold stays within their documented
 * bounds, and decoding smaller images after a large one allocates no more. */
TEST(image_memory_within_bounds) {
  dpm_image_limits lim = {300, 200, 300 * 200};
  dpm_image_decoder *dec = dpm_image_decoder_create(&lim, NULL);
  dpm_augment_cfg cfg = dpm_augment_defaults();
  cfg.crop = 32;
  dpm_augmenter *aug = dpm_augmenter_create(&cfg, NULL);
  float out[3 * 32 * 32];
  dpm_err err = {0};
  size_t held = 0;
  int sizes[][2] = {{300, 200}, {120, 90}, {40, 200}, {300, 7}};
  for (int i = 0; i < 4; i++) {
    int w = sizes[i][0], h = sizes[i][1];
    uint8_t *rgb = pattern(w, h, 3), *png;
    size_t len;
    enc_png(rgb, (size_t)w * 3, w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0, &png,
            &len);
    dpm_image img;
    CHECK_INT(dpm_image_decode(dec, png, len, 3, 1, &img, &err), DPM_OK);
    for (uint64_t k = 0; k < 20; k++) {
      dpm_crop_box box;
      dpm_augment_box(&cfg, 3, 0, k, w, h, &box);
      CHECK_INT(dpm_augment_apply(aug, &img, &box, out, &err), DPM_OK);
    }
    if (i == 0) held = dpm_image_decoder_held(dec);
    CHECK(dpm_image_decoder_held(dec) == held);
    CHECK(dpm_image_decoder_held(dec) <= dpm_image_decoder_max_bytes(&lim));
    CHECK(dpm_augmenter_held(aug) <= dpm_augmenter_max_bytes(&cfg, 300, 200));
    free(png);
    free(rgb);
  }
  CHECK(held >= 300 * 200 * 3);
  dpm_augmenter_destroy(aug);
  dpm_image_decoder_destroy(dec);
}
