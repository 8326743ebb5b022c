/* Test helpers: encode images in memory with libjpeg and libpng, for the
 * image unit tests (tests/unit/image_test.c) and the fuzz seeds
 * (tests/fuzz/gen_seeds.c). Header-only (static): each includer links
 * libjpeg and libpng anyway. The buffers returned are malloc'd, the
 * caller's to free. libjpeg's default error handler exits the process, which
 * is what a test wants of an encoder that fails. */
#ifndef DPM_TESTS_IMAGE_ENC_H
#define DPM_TESTS_IMAGE_ENC_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

/* JPEG of w x h pixels, comps 1 (gray) or 3 (RGB, stored YCbCr with chroma
 * sampled 1/hs across and 1/vs down: 2, 2 is 4:2:0), HWC pixels. *out
 * malloc'd, *len its size. */
static inline void enc_jpeg_sampled(const uint8_t *px, int w, int h, int comps,
                                    int quality, int progressive, int hs, int vs,
                                    uint8_t **out, size_t *len) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char *buf = NULL;
  unsigned long n = 0;
  jpeg_mem_dest(&c, &buf, &n);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  if (comps == 3) c.comp_info[0].h_samp_factor = hs, c.comp_info[0].v_samp_factor = vs;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  /* jpeg_mem_dest's buffer is malloc'd by libjpeg-turbo: free() releases it. */
  *out = buf;
  *len = n;
}

/* enc_jpeg_sampled at 4:2:0, libjpeg's default. */
static inline void enc_jpeg(const uint8_t *px, int w, int h, int comps, int quality,
                            int progressive, uint8_t **out, size_t *len) {
  enc_jpeg_sampled(px, w, h, comps, quality, progressive, 2, 2, out, len);
}

typedef struct enc_png_sink {
  uint8_t *buf;
  size_t len, cap;
} enc_png_sink;

static inline void enc_png_write(png_structp png, png_bytep data, size_t n) {
  enc_png_sink *s = png_get_io_ptr(png);
  if (s->len + n > s->cap) {
    s->cap = (s->len + n) * 2;
    s->buf = realloc(s->buf, s->cap);
    if (!s->buf) png_error(png, "out of memory");
  }
  memcpy(s->buf + s->len, data, n);
  s->len += n;
}
static inline void enc_png_flush(png_structp png) { (void)png; }

/* PNG of w x h pixels of the given colour type and bit depth, from rows
 * already packed as PNG stores them (rowbytes each; 16-bit samples
 * big-endian). pal/npal: the palette (type 3); trns/ntrns: the tRNS chunk
 * (NULL for none). interlace: Adam7. */
static inline void enc_png(const uint8_t *rows, size_t rowbytes, int w, int h, int type,
                           int depth, int interlace, const png_color *pal, int npal,
                           const uint8_t *trns, int ntrns, uint8_t **out, size_t *len) {
  enc_png_sink s = {NULL, 0, 0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    fprintf(stderr, "enc_png: libpng failed\n");
    exit(1);
  }
  png_set_write_fn(png, &s, enc_png_write, enc_png_flush);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, type,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (pal) png_set_PLTE(png, info, pal, npal);
  if (trns) png_set_tRNS(png, info, trns, ntrns, NULL);
  png_write_info(png, info);
  int passes = interlace ? png_set_interlace_handling(png) : 1;
  for (int p = 0; p < passes; p++)
    for (int y = 0; y < h; y++) png_write_row(png, rows + (size_t)y * rowbytes);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  *out = s.buf;
  *len = s.len;
}

#endif
