/* JPEG (libjpeg-turbo) and PNG (libpng) decoding from memory. Both
 * libraries report errors by longjmp: every call into them sits behind a
 * setjmp in the function that owns what must be released. */
#include "io/image.h"

#include <limits.h>
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "common/err.h"

static const uint8_t JPEG_MAGIC[3] = {0xff, 0xd8, 0xff};
static const uint8_t PNG_MAGIC[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* ---- libjpeg's error manager ------------------------------------------------------ */

/* Why a JPEG decode stopped. */
enum { JSTOP_ERROR = 1, JSTOP_WARNING, JSTOP_SCANS };

typedef struct jpeg_errors {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  int why;      /* JSTOP_* */
  int msg_code; /* libjpeg's message, for JSTOP_ERROR and JSTOP_WARNING */
} jpeg_errors;

static void jpeg_stop(j_common_ptr c, int why) {
  jpeg_errors *e = (jpeg_errors *)c->err;
  e->why = why;
  e->msg_code = c->err->msg_code;
  longjmp(e->jump, 1);
}
static void jpeg_on_error(j_common_ptr c) { jpeg_stop(c, JSTOP_ERROR); }
/* Level -1 is a warning (corrupt data, premature end): a stop here, but
 * for an unknown JFIF revision, which says nothing of the pixels. Levels
 * >= 0 are trace messages. */
static void jpeg_on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code != JWRN_JFIF_MAJOR) jpeg_stop(c, JSTOP_WARNING);
}
static void jpeg_no_output(j_common_ptr c) { (void)c; }

static void jpeg_errors_init(jpeg_errors *e) {
  memset(e, 0, sizeof *e);
  jpeg_std_error(&e->pub);
  e->pub.error_exit = jpeg_on_error;
  e->pub.emit_message = jpeg_on_message;
  e->pub.output_message = jpeg_no_output;
}

/* libjpeg's message template for the stop, with every printf conversion
 * shown as '?': the arguments are values from the file. */
static void jpeg_template(const jpeg_errors *e, char *out, size_t cap) {
  const char *t = NULL;
  if (e->msg_code > 0 && e->msg_code <= e->pub.last_jpeg_message)
    t = e->pub.jpeg_message_table[e->msg_code];
  if (!t) t = "unknown libjpeg message";
  size_t n = 0;
  for (; *t && n + 1 < cap; t++) {
    if (*t != '%') {
      out[n++] = *t;
      continue;
    }
    while (t[1] && !strchr("diouxXscpfgeE%", t[1])) t++; /* flags, width, length */
    if (t[1]) t++;
    out[n++] = '?';
  }
  out[n] = 0;
}

static dpm_status jpeg_failure(const jpeg_errors *e, dpm_err *err) {
  if (e->why == JSTOP_SCANS)
    return dpm_errf(err, DPM_CORRUPT, "JPEG: more than %d progressive scans",
                    DPM_IMAGE_MAX_SCANS);
  if (e->why == JSTOP_ERROR && e->msg_code == JERR_OUT_OF_MEMORY) return dpm_nomem(err);
  /* libjpeg wants more than max_memory_to_use (a progressive file's
   * coefficients): with no backing store, that is the decoder's limit. */
  if (e->why == JSTOP_ERROR && e->msg_code == JERR_NO_BACKING_STORE)
    return dpm_errf(err, DPM_CORRUPT, "JPEG: needs more than the decoder's memory limit");
  char what[160];
  jpeg_template(e, what, sizeof what);
  if (e->why == JSTOP_ERROR && e->msg_code == JERR_BAD_PRECISION)
    return dpm_errf(err, DPM_UNSUPPORTED, "JPEG: %s (only 8-bit samples)", what);
  return dpm_errf(err, DPM_CORRUPT, "JPEG: corrupt or truncated data (%s)", what);
}

static void jpeg_on_progress(j_common_ptr c) {
  if (c->is_decompressor &&
      ((j_decompress_ptr)c)->input_scan_number > DPM_IMAGE_MAX_SCANS)
    jpeg_stop(c, JSTOP_SCANS);
}

/* ---- the decoder ------------------------------------------------------------------ */

struct dpm_image_decoder {
  dpm_image_limits lim;
  struct jpeg_decompress_struct jpeg; /* made afresh for each image (jpeg_fresh) */
  jpeg_errors jerr;
  struct jpeg_progress_mgr progress;
  uint8_t *pixels; /* pixel_cap bytes */
  size_t pixel_cap;
  uint8_t **rows; /* row_cap row pointers (PNG) */
  size_t row_cap;
};

dpm_image_limits dpm_image_limits_default(void) {
  return (dpm_image_limits){DPM_IMAGE_DEFAULT_MAX_SIDE, DPM_IMAGE_DEFAULT_MAX_SIDE,
                            DPM_IMAGE_DEFAULT_MAX_PIXELS};
}

/* libjpeg's own memory: a progressive image's coefficients (2 bytes a
 * sample, 3 samples a pixel at most) plus its working pools. */
#define JPEG_POOLS (16u << 20)
static size_t jpeg_memory(const dpm_image_limits *l) {
  return (size_t)l->max_pixels * 6 + JPEG_POOLS;
}
/* libpng's per image: the chunk limit, two rows of 16-bit RGBA, zlib. */
#define PNG_CHUNK_MAX (8u << 20)
static size_t png_memory(const dpm_image_limits *l) {
  return PNG_CHUNK_MAX + (size_t)l->max_width * 8 * 2 + (1u << 20);
}

size_t dpm_image_decoder_max_bytes(const dpm_image_limits *lim) {
  dpm_image_limits l = lim ? *lim : dpm_image_limits_default();
  size_t pixels = (size_t)l.max_pixels * 3 + (size_t)l.max_height * sizeof(uint8_t *);
  size_t lib = jpeg_memory(&l) > png_memory(&l) ? jpeg_memory(&l) : png_memory(&l);
  return sizeof(dpm_image_decoder) + pixels + lib;
}

size_t dpm_image_decoder_held(const dpm_image_decoder *dec) {
  return dec->pixel_cap + dec->row_cap * sizeof *dec->rows;
}

/* A new libjpeg decompressor in dec (the old one, if any, destroyed),
 * under dec's limits. Each JPEG gets one: libjpeg keeps a datastream's
 * Huffman and quantization tables for the next (abbreviated datastreams),
 * and a file without them would decode with the previous file's. Out of
 * memory longjmps (dec->jerr). */
static void jpeg_fresh(dpm_image_decoder *dec) {
  jpeg_destroy_decompress(&dec->jpeg);
  jpeg_create_decompress(&dec->jpeg);
  dec->jpeg.mem->max_memory_to_use = (long)jpeg_memory(&dec->lim);
  dec->jpeg.progress = &dec->progress;
}

dpm_image_decoder *dpm_image_decoder_create(const dpm_image_limits *lim, dpm_err *err) {
  dpm_image_limits l = lim ? *lim : dpm_image_limits_default();
  if (l.max_width < 1 || l.max_width > DPM_IMAGE_MAX_SIDE || l.max_height < 1 ||
      l.max_height > DPM_IMAGE_MAX_SIDE || l.max_pixels < 1) {
    dpm_errf(err, DPM_INVALID,
             "image limits out of range (sides 1..%d, pixels >= 1: got %d x %d, %lld)",
             DPM_IMAGE_MAX_SIDE, l.max_width, l.max_height, (long long)l.max_pixels);
    return NULL;
  }
  dpm_image_decoder *dec = calloc(1, sizeof *dec);
  if (!dec) {
    dpm_nomem(err);
    return NULL;
  }
  dec->lim = l;
  jpeg_errors_init(&dec->jerr);
  dec->jpeg.err = &dec->jerr.pub;
  if (setjmp(dec->jerr.jump)) { /* only out of memory can stop the creation */
    jpeg_destroy_decompress(&dec->jpeg);
    free(dec);
    dpm_nomem(err);
    return NULL;
  }
  dec->progress.progress_monitor = jpeg_on_progress;
  jpeg_fresh(dec);
  return dec;
}

void dpm_image_decoder_destroy(dpm_image_decoder *dec) {
  if (!dec) return;
  jpeg_destroy_decompress(&dec->jpeg);
  free(dec->pixels);
  free(dec->rows);
  free(dec);
}

/* Room for w x h x ch pixel bytes (and, with rows, h row pointers): w and h
 * are within the limits, so the products fit. */
static dpm_status reserve(dpm_image_decoder *dec, int w, int h, int ch, int rows,
                          dpm_err *err) {
  size_t need = (size_t)w * (size_t)h * (size_t)ch;
  if (need > dec->pixel_cap) {
    free(dec->pixels);
    dec->pixel_cap = 0;
    if (!(dec->pixels = malloc(need))) return dpm_nomem(err);
    dec->pixel_cap = need;
  }
  if (rows && (size_t)h > dec->row_cap) {
    free(dec->rows);
    dec->row_cap = 0;
    if (!(dec->rows = malloc((size_t)h * sizeof *dec->rows))) return dpm_nomem(err);
    dec->row_cap = (size_t)h;
  }
  return DPM_OK;
}

static dpm_status check_limits(const dpm_image_limits *l, const char *fmt, int64_t w,
                               int64_t h, dpm_err *err) {
  if (w < 1 || h < 1)
    return dpm_errf(err, DPM_CORRUPT, "%s: the header declares an empty image", fmt);
  if (w > l->max_width || h > l->max_height || w * h > l->max_pixels)
    return dpm_errf(err, DPM_CORRUPT,
                    "%s: the header declares %lld x %lld pixels, over the limits "
                    "(%d x %d, %lld pixels)",
                    fmt, (long long)w, (long long)h, l->max_width, l->max_height,
                    (long long)l->max_pixels);
  return DPM_OK;
}

/* ---- JPEG ------------------------------------------------------------------------- */

/* Reads scanlines [c->output_scanline, y1) into rows of stride bytes from
 * out: DPM_CORRUPT when the data ends first. */
static dpm_status read_rows(struct jpeg_decompress_struct *c, JDIMENSION y1, uint8_t *out,
                            size_t stride, dpm_err *err) {
  JDIMENSION first = c->output_scanline;
  while (c->output_scanline < y1) {
    JSAMPROW rows[8];
    JDIMENSION y = c->output_scanline, n = 0;
    while (n < 8 && y + n < y1) {
      rows[n] = out + (size_t)(y + n - first) * stride;
      n++;
    }
    if (jpeg_read_scanlines(c, rows, n) == 0)
      return dpm_errf(err, DPM_CORRUPT, "JPEG: truncated data");
  }
  return DPM_OK;
}

/* Whether libjpeg-turbo 2.1's row skip and column crop give a whole
 * decode's pixels (away from the crop's edges) and verdict for this file's
 * sampling: gray, or colour with chroma at 1x1 and luma at 1 or 2 either
 * way (4:4:4, 4:2:2, 4:4:0, 4:2:0), the layouts the unit tests check at
 * every scale. Others are decoded whole: with luma 2x4 at 1/2 scale (files
 * the fuzzer found) the crop differs inside the crop, and a decode with
 * rows skipped missed a corrupt-data warning that the whole decode gives. */
static int jpeg_part_exact(const struct jpeg_decompress_struct *c) {
  if (c->num_components == 1) return 1;
  const jpeg_component_info *k = c->comp_info;
  for (int i = 1; i < 3; i++)
    if (k[i].h_samp_factor != 1 || k[i].v_samp_factor != 1) return 0;
  return k[0].h_samp_factor <= 2 && k[0].v_samp_factor <= 2;
}

/* The range [*lo, *hi) of an axis of size n that [a, b) asks for: clipped
 * to [0, n), or all of it when that is empty. */
static void axis_range(int a, int b, int n, int *lo, int *hi) {
  if (a < 0) a = 0;
  if (b > n) b = n;
  if (a >= b) a = 0, b = n;
  *lo = a, *hi = b;
}

static dpm_status jpeg_decode(dpm_image_decoder *dec, const uint8_t *buf, size_t len,
                              int channels, int denom, const dpm_image_region *part,
                              dpm_image *img, dpm_err *err) {
  struct jpeg_decompress_struct *c = &dec->jpeg;
  volatile dpm_status st = DPM_OK;
  if (len > ULONG_MAX) return dpm_errf(err, DPM_CORRUPT, "JPEG: file too large");
  if (setjmp(dec->jerr.jump)) {
    jpeg_abort_decompress(c);
    return jpeg_failure(&dec->jerr, err);
  }
  jpeg_fresh(dec);
  jpeg_mem_src(c, buf, (unsigned long)len);
  jpeg_read_header(c, TRUE);
  if ((st = check_limits(&dec->lim, "JPEG", c->image_width, c->image_height, err)))
    goto out;
  if (c->num_components != 1 && c->num_components != 3) {
    st = dpm_errf(err, DPM_UNSUPPORTED,
                  "JPEG: %d colour components (only gray and colour: 1 or 3)",
                  c->num_components);
    goto out;
  }
  c->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  c->scale_num = 1;
  c->scale_denom = (unsigned)denom;
  jpeg_calc_output_dimensions(c);
  int w = (int)c->output_width, h = (int)c->output_height;
  if (c->output_components != channels) {
    st = dpm_errf(err, DPM_INTERNAL, "JPEG: libjpeg gives %d channels, not %d",
                  c->output_components, channels);
    goto out;
  }
  int top, end, left, right;
  const int exact = jpeg_part_exact(c);
  axis_range(exact ? part->y0 : 0, exact ? part->y1 : 0, h, &top, &end);
  axis_range(exact ? part->x0 : 0, exact ? part->x1 : 0, w, &left, &right);
  jpeg_start_decompress(c);
  /* The columns held: the region's and a margin, unless that is all. */
  left = left > DPM_IMAGE_CROP_MARGIN ? left - DPM_IMAGE_CROP_MARGIN : 0;
  right = right < w - DPM_IMAGE_CROP_MARGIN ? right + DPM_IMAGE_CROP_MARGIN : w;
  if (left > 0 || right < w) {
    JDIMENSION x = (JDIMENSION)left, cw = (JDIMENSION)(right - left);
    jpeg_crop_scanline(c, &x, &cw); /* widens to the iMCU boundary */
    left = (int)x, right = (int)(x + cw);
  }
  int rows = end - top, cols = right - left;
  size_t stride = (size_t)cols * (size_t)channels;
  if ((st = reserve(dec, cols, rows + (end < h), channels, 0, err)))
    goto out; /* + the last */
  if (top > 0 && jpeg_skip_scanlines(c, (JDIMENSION)top) != (JDIMENSION)top) {
    st = dpm_errf(err, DPM_CORRUPT, "JPEG: truncated data");
    goto out;
  }
  if ((st = read_rows(c, (JDIMENSION)end, dec->pixels, stride, err))) goto out;
  /* The rows below: skipped but the last, which is read (after the held
   * rows): a skip to the end would set the scan done without decoding it,
   * and a damaged end would go unseen. */
  JDIMENSION below = c->output_height - c->output_scanline;
  if (below > 1 && jpeg_skip_scanlines(c, below - 1) != below - 1) {
    st = dpm_errf(err, DPM_CORRUPT, "JPEG: truncated data");
    goto out;
  }
  if (below && (st = read_rows(c, c->output_height, dec->pixels + (size_t)rows * stride,
                               stride, err)))
    goto out;
  jpeg_finish_decompress(c);
  *img = (dpm_image){.width = w,
                     .height = h,
                     .channels = channels,
                     .scale_denom = denom,
                     .full_width = (int)c->image_width,
                     .full_height = (int)c->image_height,
                     .pixels = dec->pixels,
                     .x0 = left,
                     .cols = cols,
                     .y0 = top,
                     .rows = rows};
  return DPM_OK;
out:
  jpeg_abort_decompress(c);
  return st;
}

/* ---- PNG -------------------------------------------------------------------------- */

typedef struct png_source {
  const uint8_t *buf;
  size_t len, pos;
  int truncated;
} png_source;

static void png_on_read(png_structp png, png_bytep out, size_t n) {
  png_source *s = png_get_io_ptr(png);
  if (n > s->len - s->pos) {
    s->truncated = 1;
    png_error(png, "truncated");
  }
  memcpy(out, s->buf + s->pos, n);
  s->pos += n;
}
/* libpng's messages may quote chunk names, bytes of the file: they are not
 * kept. */
static void png_on_error(png_structp png, png_const_charp msg) {
  (void)msg;
  png_longjmp(png, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

/* PIL's convert("L") of 3-channel pixels, in place. */
static void rgb_to_luma(uint8_t *p, size_t pixels) {
  for (size_t i = 0; i < pixels; i++) {
    const uint8_t *q = p + 3 * i;
    p[i] = (uint8_t)((q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16);
  }
}

static dpm_status png_probe(const uint8_t *b, size_t len, dpm_image_info *info,
                            dpm_err *err);

static dpm_status png_decode(dpm_image_decoder *dec, const uint8_t *buf, size_t len,
                             int channels, dpm_image *img, dpm_err *err) {
  /* The header as the probe reads it, first (libpng would skip ancillary
   * chunks before it, which the format does not allow). */
  dpm_image_info head;
  dpm_status hs = png_probe(buf, len, &head, err);
  if (hs) return hs;
  png_source src = {buf, len, 0, 0};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_on_error, png_on_warning);
  if (!png) return dpm_nomem(err);
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return dpm_nomem(err);
  }
  volatile dpm_status st = DPM_OK;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    if (st) return st;
    int truncated = ((volatile png_source *)&src)->truncated;
    return dpm_errf(err, DPM_CORRUPT, "PNG: %s",
                    truncated ? "truncated data" : "corrupt data");
  }
  png_set_read_fn(png, &src, png_on_read);
  /* The sides libpng accepts: dpm's own limits are checked after the header,
   * with their own message. */
  png_set_user_limits(png, DPM_IMAGE_MAX_SIDE, DPM_IMAGE_MAX_SIDE);
  png_set_chunk_malloc_max(png, PNG_CHUNK_MAX);
  /* Ancillary chunks (text, colour profiles, gamma) are skipped unread. */
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if ((st = check_limits(&dec->lim, "PNG", w, h, err))) png_longjmp(png, 1);
  int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  int gray = !(type & PNG_COLOR_MASK_COLOR);
  if (depth == 16) png_set_strip_16(png);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (gray && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_strip_alpha(png);
  if (gray && channels == 3) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int got = png_get_channels(png, info);
  if ((got != 1 && got != 3) || (gray && got != channels) ||
      png_get_rowbytes(png, info) != (size_t)w * (size_t)got) {
    st = dpm_errf(err, DPM_INTERNAL, "PNG: libpng gives %d channels", got);
    png_longjmp(png, 1);
  }
  if ((st = reserve(dec, (int)w, (int)h, got, 1, err))) png_longjmp(png, 1);
  for (png_uint_32 y = 0; y < h; y++) dec->rows[y] = dec->pixels + (size_t)y * w * got;
  png_read_image(png, dec->rows);
  png_destroy_read_struct(&png, &info, NULL);
  if (got == 3 && channels == 1) rgb_to_luma(dec->pixels, (size_t)w * h);
  *img = (dpm_image){.width = (int)w,
                     .height = (int)h,
                     .channels = channels,
                     .scale_denom = 1,
                     .full_width = (int)w,
                     .full_height = (int)h,
                     .pixels = dec->pixels,
                     .cols = (int)w,
                     .rows = (int)h};
  return DPM_OK;
}

/* ---- probe and dispatch ----------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The IHDR chunk, which must come first: length 13, "IHDR", width, height,
 * depth, colour type, compression, filter, interlace. */
static dpm_status png_probe(const uint8_t *b, size_t len, dpm_image_info *info,
                            dpm_err *err) {
  if (len < 8 + 8 + 13) return dpm_errf(err, DPM_CORRUPT, "PNG: truncated header");
  const uint8_t *h = b + 8;
  if (be32(h) != 13 || memcmp(h + 4, "IHDR", 4))
    return dpm_errf(err, DPM_CORRUPT, "PNG: the first chunk is not a header (IHDR)");
  uint32_t w = be32(h + 8), ht = be32(h + 12);
  int depth = h[16], type = h[17];
  static const int type_channels[7] = {1, 0, 3, 3, 2, 0, 4};
  int ch = type <= 6 ? type_channels[type] : 0;
  int depth_ok = depth == 8 || (depth == 16 && type != 3) ||
                 ((depth == 1 || depth == 2 || depth == 4) && (type == 0 || type == 3));
  if (!ch || !depth_ok)
    return dpm_errf(err, DPM_CORRUPT, "PNG: bad colour type %d or bit depth %d", type,
                    depth);
  if (w < 1 || ht < 1 || w > DPM_IMAGE_MAX_SIDE || ht > DPM_IMAGE_MAX_SIDE)
    return dpm_errf(err, DPM_CORRUPT, "PNG: size %lu x %lu out of range (1..%d)",
                    (unsigned long)w, (unsigned long)ht, DPM_IMAGE_MAX_SIDE);
  *info = (dpm_image_info){DPM_IMAGE_PNG, (int)w, (int)ht, ch};
  return DPM_OK;
}

/* libjpeg's own reading of the markers up to the first scan, so that the
 * probe accepts exactly the headers the decoder does. */
static dpm_status jpeg_probe(const uint8_t *b, size_t len, dpm_image_info *info,
                             dpm_err *err) {
  struct jpeg_decompress_struct c;
  jpeg_errors e;
  jpeg_errors_init(&e);
  c.err = &e.pub;
  if (len > ULONG_MAX) return dpm_errf(err, DPM_CORRUPT, "JPEG: file too large");
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&c);
    return jpeg_failure(&e, err);
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, b, (unsigned long)len);
  jpeg_read_header(&c, TRUE);
  *info = (dpm_image_info){DPM_IMAGE_JPEG, (int)c.image_width, (int)c.image_height,
                           c.num_components};
  jpeg_destroy_decompress(&c);
  return DPM_OK;
}

static int format_of(const uint8_t *b, size_t len) {
  if (len >= sizeof JPEG_MAGIC && !memcmp(b, JPEG_MAGIC, sizeof JPEG_MAGIC))
    return DPM_IMAGE_JPEG;
  if (len >= sizeof PNG_MAGIC && !memcmp(b, PNG_MAGIC, sizeof PNG_MAGIC))
    return DPM_IMAGE_PNG;
  return 0;
}

static dpm_status unknown_format(dpm_err *err) {
  return dpm_errf(err, DPM_CORRUPT, "not a JPEG or PNG image (unknown magic bytes)");
}

dpm_status dpm_image_probe(const void *buf, size_t len, dpm_image_info *info,
                           dpm_err *err) {
  memset(info, 0, sizeof *info);
  if (!buf && len) return dpm_errf(err, DPM_INVALID, "image probe: no buffer");
  const uint8_t *b = buf;
  dpm_status st;
  switch (format_of(b, len)) {
  case DPM_IMAGE_JPEG:
    st = jpeg_probe(b, len, info, err);
    break;
  case DPM_IMAGE_PNG:
    st = png_probe(b, len, info, err);
    break;
  default:
    return unknown_format(err);
  }
  if (st) memset(info, 0, sizeof *info);
  return st;
}

dpm_status dpm_image_decode(dpm_image_decoder *dec, const void *buf, size_t len,
                            int channels, int scale_denom, dpm_image *img, dpm_err *err) {
  return dpm_image_decode_region(dec, buf, len, channels, scale_denom, NULL, img, err);
}

dpm_status dpm_image_decode_region(dpm_image_decoder *dec, const void *buf, size_t len,
                                   int channels, int scale_denom,
                                   const dpm_image_region *part, dpm_image *img,
                                   dpm_err *err) {
  memset(img, 0, sizeof *img);
  if (!dec || (!buf && len))
    return dpm_errf(err, DPM_INVALID, "image decode: no decoder or buffer");
  if (channels != 1 && channels != 3)
    return dpm_errf(err, DPM_INVALID, "image decode: %d channels (1 or 3)", channels);
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
    return dpm_errf(err, DPM_INVALID, "image decode: scale 1/%d (1, 2, 4 or 8)",
                    scale_denom);
  static const dpm_image_region whole = {0, 0, 0, 0}; /* empty ranges: all */
  dpm_status st;
  switch (format_of(buf, len)) {
  case DPM_IMAGE_JPEG:
    if (!part) part = &whole;
    st = jpeg_decode(dec, buf, len, channels, scale_denom, part, img, err);
    break;
  case DPM_IMAGE_PNG:
    st = png_decode(dec, buf, len, channels, img, err);
    break;
  default:
    return unknown_format(err);
  }
  if (st) memset(img, 0, sizeof *img);
  return st;
}
