/* Image decoding: JPEG through libjpeg-turbo (jpeglib.h), PNG through libpng,
 * from encoded bytes in memory to 8-bit HWC pixels.
 *
 * Formats, told apart by their magic bytes; anything else is refused:
 *   JPEG: baseline and progressive, 8-bit samples, gray or YCbCr/RGB
 *     (1 or 3 components). CMYK/YCCK (4 components) and 12-bit JPEGs are
 *     DPM_UNSUPPORTED. A JPEG can decode at 1/2, 1/4 or 1/8 of its size
 *     (libjpeg's DCT-domain scaling: scale_denom), to ceil(side / denom)
 *     pixels a side, as Pillow's Image.draft does.
 *   PNG: every colour type and bit depth, IHDR first as the format says
 *     (ancillary chunks are skipped unread); always at full size.
 * Channels asked for (1 or 3), from what the file holds:
 *   gray -> 3: the gray value in R, G and B (PIL's convert("RGB")).
 *   JPEG colour -> 1: the file's luma Y, as libjpeg decodes it (what PIL's
 *     draft("L") gives); PNG colour -> 1: PIL's convert("L") weights,
 *     (19595 R + 38470 G + 7471 B + 32768) >> 16.
 *   PNG alpha is dropped, not composited (PIL's convert("RGB") of RGBA and
 *     LA); a palette is looked up (its transparency dropped likewise);
 *     gray of 1, 2 or 4 bits is scaled to 0..255 (x 255, 85, 17).
 *   16-bit PNG samples keep their high byte (PIL's reading of 16-bit RGB;
 *     PIL opens 16-bit gray as mode "I;16" and clips it to 255 in
 *     convert("L") instead: there the two differ).
 *
 * Limits: a decoder refuses, from the header and before it allocates any
 * pixel buffer, an image wider than max_width, taller than max_height or of
 * more than max_pixels pixels (full size, whatever the scale): a
 * decompression bomb (a few bytes declaring 60000 x 60000) is DPM_CORRUPT.
 * A progressive JPEG of more than DPM_IMAGE_MAX_SCANS scans is DPM_CORRUPT
 * too (libjpeg-turbo's own advice against scan floods).
 *
 * Errors: bytes of no known format, a truncated or corrupt file, and one
 * past the limits are DPM_CORRUPT; libjpeg's warnings (a premature end of
 * data, a corrupt entropy segment, extraneous bytes) count as corruption,
 * so a damaged image never yields the grey that libjpeg fills in; only an
 * unknown JFIF revision number, which concerns no pixel, is let pass. The
 * messages name the format and what is wrong, never the file's bytes (the
 * caller prefixes its own name for the sample). Bad arguments are
 * DPM_INVALID; a failed allocation DPM_NOMEM.
 *
 * Threads: a decoder belongs to one thread at a time; any number of
 * decoders run at once (libjpeg and libpng keep no global state).
 * dpm_image_probe is pure.
 *
 * Memory: a decoder keeps its pixel buffer, its row pointers and libjpeg's
 * decompression object between calls, so that decoding images no larger
 * than those before allocates no pixel memory (libjpeg's per-image pools and
 * libpng's per-image read structure are the libraries' own). The pixel
 * buffer is at most max_pixels x 3 bytes; libjpeg is held to max_pixels x 6
 * bytes + 16 MiB (a progressive file's coefficients: past that the file is
 * DPM_CORRUPT, never swapped to disk), libpng to 8 MiB a chunk.
 * dpm_image_decoder_max_bytes is the sum, for a memory budget. */
#ifndef DPM_IO_IMAGE_H
#define DPM_IO_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

enum { DPM_IMAGE_JPEG = 1, DPM_IMAGE_PNG = 2 };

#define DPM_IMAGE_DEFAULT_MAX_SIDE 16384
#define DPM_IMAGE_DEFAULT_MAX_PIXELS (64ll << 20)
#define DPM_IMAGE_MAX_SIDE 65535 /* what either format can state */
#define DPM_IMAGE_MAX_SCANS 500

typedef struct dpm_image_limits {
  int max_width;      /* 1..DPM_IMAGE_MAX_SIDE */
  int max_height;     /* 1..DPM_IMAGE_MAX_SIDE */
  int64_t max_pixels; /* width x height, >= 1 */
} dpm_image_limits;

/* What the header says. */
typedef struct dpm_image_info {
  int format; /* DPM_IMAGE_JPEG or DPM_IMAGE_PNG */
  int width;  /* full size */
  int height;
  int channels; /* in the file: JPEG components (1, 3, 4); PNG 1 gray, 2 gray+alpha,
                   3 RGB or palette, 4 RGBA */
} dpm_image_info;

/* A decoded image, or the part of one that a decode held
 * (dpm_image_decode_region): columns [x0, x0 + cols) of rows [y0, y0 + rows),
 * pixel (x, y) at pixels[((y - y0) * cols + (x - x0)) * channels + c].
 * cols 0 and rows 0 (an image filled in by hand) hold every column and row:
 * pixels[(y * width + x) * channels + c]. */
typedef struct dpm_image {
  int width, height;           /* as decoded: ceil(full / scale_denom) */
  int channels;                /* 1 or 3, as asked */
  int scale_denom;             /* 1, 2, 4 or 8 (PNG: 1) */
  int full_width, full_height; /* the header's size */
  const uint8_t *pixels;       /* owned by the decoder */
  int x0, cols;                /* the columns held (above) */
  int y0, rows;                /* the rows held (above) */
} dpm_image;

/* Of an image: the first column held, how many, and a held row's bytes. */
static inline int dpm_image_first_col(const dpm_image *im) {
  return im->cols ? im->x0 : 0;
}
static inline int dpm_image_cols(const dpm_image *im) {
  return im->cols ? im->cols : im->width;
}
static inline size_t dpm_image_stride(const dpm_image *im) {
  return (size_t)dpm_image_cols(im) * (size_t)im->channels;
}

/* A part of a decoded (scaled) image: columns [x0, x1) and rows [y0, y1),
 * each clipped to the image; an empty range on an axis (x1 <= x0, or
 * outside the image) asks for the whole axis. */
typedef struct dpm_image_region {
  int x0, x1, y0, y1;
} dpm_image_region;

typedef struct dpm_image_decoder dpm_image_decoder;

/* The default limits (DPM_IMAGE_DEFAULT_*). */
dpm_image_limits dpm_image_limits_default(void);

/* A decoder with these limits (NULL: the defaults). NULL when memory runs
 * out or the limits are out of range (err says which). */
dpm_image_decoder *dpm_image_decoder_create(const dpm_image_limits *lim, dpm_err *err);
/* The most memory a decoder with these limits (NULL: the defaults) holds at
 * once, its libraries' included. */
size_t dpm_image_decoder_max_bytes(const dpm_image_limits *lim);
/* The bytes of pixel buffer and row pointers dec holds now. */
size_t dpm_image_decoder_held(const dpm_image_decoder *dec);
/* Frees everything the decoder holds; NULL is a no-op. */
void dpm_image_decoder_destroy(dpm_image_decoder *dec);

/* Format and size from the header alone (libjpeg's reading of the JPEG
 * markers up to the first scan, which allocates a few KiB and no pixels;
 * the PNG IHDR chunk). Checks no limit: the decoder does. *info is zeroed on
 * failure. */
dpm_status dpm_image_probe(const void *buf, size_t len, dpm_image_info *info,
                           dpm_err *err);

/* Decode buf into channels (1 or 3) channels, a JPEG at 1/scale_denom
 * (1, 2, 4 or 8; PNG ignores it and decodes at full size). On success *img
 * describes pixels owned by dec, valid until dec's next decode or destroy;
 * on failure *img is zeroed. */
dpm_status dpm_image_decode(dpm_image_decoder *dec, const void *buf, size_t len,
                            int channels, int scale_denom, dpm_image *img, dpm_err *err);
/* dpm_image_decode keeping at least the region part of the decoded image
 * (NULL: all of it), and those pixels exactly as a whole decode gives them,
 * bit for bit. A JPEG's rows outside the region are skipped
 * (libjpeg-turbo's jpeg_skip_scanlines: no IDCT, upsampling or colour
 * conversion there, yet every byte of the scan is still decoded and
 * checked, so a damaged file fails as a whole decode does), and its columns
 * are cropped (jpeg_crop_scanline) to the region widened by
 * DPM_IMAGE_CROP_MARGIN on each side and out to libjpeg's iMCU boundary: a
 * cropped row's edge columns differ from a whole decode's (fancy
 * upsampling and a progressive file's block smoothing read past them), and
 * the margin keeps those columns out of the region. PNG decodes the whole
 * image, and so is a JPEG of a sampling layout other than gray or colour
 * with 1x1 chroma and luma at 1 or 2 either way: there libjpeg-turbo 2.1's
 * skip and crop differ from a whole decode. */
#define DPM_IMAGE_CROP_MARGIN 32
dpm_status dpm_image_decode_region(dpm_image_decoder *dec, const void *buf, size_t len,
                                   int channels, int scale_denom,
                                   const dpm_image_region *part, dpm_image *img,
                                   dpm_err *err);

#endif
