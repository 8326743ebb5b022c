/* PNG and JPEG encoders and the bilinear resize (pack/encode.h). */
#include "pack/encode.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* jpeglib.h needs size_t and FILE first */
#include <jpeglib.h>

#define MAX_SIDE 65535

void dpm_bytes_free(dpm_bytes *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

static int reserve(dpm_bytes *b, size_t need) {
  if (need <= b->cap) return 0;
  size_t c = b->cap ? b->cap : 4096;
  while (c < need) c *= 2;
  uint8_t *p = realloc(b->data, c);
  if (!p) return -1;
  b->data = p;
  b->cap = c;
  return 0;
}

static dpm_status check_shape(int w, int h, int channels, dpm_err *err) {
  if (w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE || (channels != 1 && channels != 3))
    return dpm_errf(err, DPM_INVALID, "cannot encode a %dx%dx%d image", w, h, channels);
  return DPM_OK;
}

/* ---- PNG ---------------------------------------------------------------------- */

typedef struct {
  dpm_bytes *out;
  int nomem;
  char msg[200];
} png_ctx;

static void png_write(png_structp png, png_bytep data, png_size_t n) {
  png_ctx *c = png_get_io_ptr(png);
  if (reserve(c->out, c->out->len + n)) {
    c->nomem = 1;
    png_error(png, "out of memory");
  }
  memcpy(c->out->data + c->out->len, data, n);
  c->out->len += n;
}

static void png_flush(png_structp png) { (void)png; }

static void png_fail(png_structp png, png_const_charp msg) {
  png_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

dpm_status dpm_encode_png(const uint8_t *px, int w, int h, int channels, dpm_bytes *out,
                          dpm_err *err) {
  dpm_status st = check_shape(w, h, channels, err);
  if (st) return st;
  out->len = 0;
  png_ctx c = {.out = out};
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &c, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_write_struct(&png, NULL);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return c.nomem ? dpm_errf(err, DPM_NOMEM, "out of memory")
                   : dpm_errf(err, DPM_INTERNAL, "libpng: %s", c.msg);
  }
  png_set_write_fn(png, &c, png_write, png_flush);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
               channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++)
    png_write_row(png, (png_const_bytep)(px + (size_t)y * (size_t)w * (size_t)channels));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return DPM_OK;
}

/* ---- JPEG --------------------------------------------------------------------- */

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
} jpeg_fail_mgr;

static void jpeg_fail(j_common_ptr cinfo) {
  jpeg_fail_mgr *m = (jpeg_fail_mgr *)cinfo->err;
  m->pub.format_message(cinfo, m->msg);
  longjmp(m->jmp, 1);
}

dpm_status dpm_encode_jpeg(const uint8_t *px, int w, int h, int channels, int quality,
                           dpm_bytes *out, dpm_err *err) {
  dpm_status st = check_shape(w, h, channels, err);
  if (st) return st;
  if (quality < 1 || quality > 100)
    return dpm_errf(err, DPM_INVALID, "JPEG quality %d outside 1..100", quality);
  struct jpeg_compress_struct cinfo;
  jpeg_fail_mgr jerr;
  unsigned char *mem = NULL;
  unsigned long mem_len = 0;
  cinfo.err = jpeg_std_error(&jerr.pub);
  jerr.pub.error_exit = jpeg_fail;
  if (setjmp(jerr.jmp)) {
    jpeg_destroy_compress(&cinfo);
    free(mem);
    return dpm_errf(err, DPM_INTERNAL, "libjpeg: %s", jerr.msg);
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &mem, &mem_len);
  cinfo.image_width = (JDIMENSION)w;
  cinfo.image_height = (JDIMENSION)h;
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        (JSAMPROW)(px + (size_t)cinfo.next_scanline * (size_t)w * (size_t)channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  st = reserve(out, mem_len) ? dpm_errf(err, DPM_NOMEM, "out of memory") : DPM_OK;
  if (!st) {
    memcpy(out->data, mem, mem_len);
    out->len = mem_len;
  }
  free(mem);
  return st;
}

/* ---- resize ------------------------------------------------------------------- */

void dpm_resize_bilinear(const uint8_t *src, int sw, int sh, int channels, uint8_t *dst,
                         int dw, int dh) {
  for (int y = 0; y < dh; y++) {
    double fy = ((double)y + 0.5) * sh / dh - 0.5;
    if (fy < 0) fy = 0;
    if (fy > sh - 1) fy = sh - 1;
    int y0 = (int)fy, y1 = y0 + 1 < sh ? y0 + 1 : y0;
    double wy = fy - y0;
    for (int x = 0; x < dw; x++) {
      double fx = ((double)x + 0.5) * sw / dw - 0.5;
      if (fx < 0) fx = 0;
      if (fx > sw - 1) fx = sw - 1;
      int x0 = (int)fx, x1 = x0 + 1 < sw ? x0 + 1 : x0;
      double wx = fx - x0;
      for (int c = 0; c < channels; c++) {
        double a = src[((size_t)y0 * sw + x0) * channels + c],
               b = src[((size_t)y0 * sw + x1) * channels + c],
               d = src[((size_t)y1 * sw + x0) * channels + c],
               e = src[((size_t)y1 * sw + x1) * channels + c];
        double v = (a * (1 - wx) + b * wx) * (1 - wy) + (d * (1 - wx) + e * wx) * wy;
        dst[((size_t)y * dw + x) * channels + c] = (uint8_t)lround(v);
      }
    }
  }
}
