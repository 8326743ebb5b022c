/* Image encoding for the packing tool (dpm-pack): 8-bit grey or RGB pixels
 * to PNG (libpng, lossless) or JPEG (libjpeg, baseline, 4:2:0 for RGB as
 * libjpeg's defaults), into a growable memory buffer; and the bilinear
 * resize that dpm-pack --resize applies to IDX images before encoding.
 *
 * Resize: half-pixel centres (as torch's interpolate(mode="bilinear",
 * align_corners=False), meant for upscaling): output pixel x samples the
 * input at (x + 0.5) * in_w / out_w - 0.5, clamped to [0, in_w - 1], the
 * same for y; the weighted sum is rounded to nearest.
 *
 * Ownership: a dpm_bytes is the caller's (zero-initialise; free with
 * dpm_bytes_free); encoders overwrite its contents and grow it. Threads:
 * no shared state; one buffer per thread. Errors: DPM_INVALID for a bad
 * shape or quality, DPM_NOMEM, DPM_INTERNAL with libpng's or libjpeg's
 * message. */
#ifndef DPM_PACK_ENCODE_H
#define DPM_PACK_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

typedef struct dpm_bytes {
  uint8_t *data;
  size_t len, cap;
} dpm_bytes;

void dpm_bytes_free(dpm_bytes *b);

/* px: h rows of w * channels bytes (channels 1: grey, 3: RGB). */
dpm_status dpm_encode_png(const uint8_t *px, int w, int h, int channels, dpm_bytes *out,
                          dpm_err *err);
/* quality 1..100 */
dpm_status dpm_encode_jpeg(const uint8_t *px, int w, int h, int channels, int quality,
                           dpm_bytes *out, dpm_err *err);
/* src (sw x sh x channels) resized into dst (dw x dh x channels). */
void dpm_resize_bilinear(const uint8_t *src, int sw, int sh, int channels, uint8_t *dst,
                         int dw, int dh);

#endif
