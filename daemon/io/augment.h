/* Per-image augmentation: the crop box and mirror bit of a sample, the DCT
 * scale to decode it at, and the resample of the box to a square NCHW float
 * tensor, normalised.
 *
 * Training (train = 1) follows torchvision's RandomResizedCrop.get_params:
 * up to 10 tries of an area uniform in [area_min, area_max] of the image and
 * an aspect ratio log-uniform in [aspect_min, aspect_max], w = round(sqrt(area
 * x aspect)), h = round(sqrt(area / aspect)) (round half to even, as Python's
 * round), kept when 0 < w <= width and 0 < h <= height, placed at a uniform
 * row, then column; else the centre crop of the whole image clamped to the
 * aspect range. Then a mirror with probability 1/2 when mirror is on. The
 * random numbers are dpm's (engine/rng.h), one stream per sample seeded
 * from (seed, epoch, index): a box depends on nothing else, not the thread,
 * replica or shard that computes it.
 * Evaluation (train = 0) follows torchvision's Resize(resize) then
 * CenterCrop(crop): the short side scaled to resize, the long one to
 * int(resize x long / short), the crop's corner at round((side - crop) / 2)
 * of the resized image; the box is that crop in full-size pixels
 * (fractional). No mirror.
 *
 * Resampling is Pillow's Image.resize((crop, crop), BILINEAR, box) of the
 * box (ImagingResample): a horizontal pass over the rows the vertical one
 * needs, then the vertical pass, each with a triangle filter whose support
 * grows with the downscale factor, its weights normalised and rounded to 22
 * fractional bits, each pass rounded and clamped to uint8. The integer
 * arithmetic is Pillow's, so the resampled pixels equal Pillow's bit for
 * bit (and the box is converted to float, as Pillow's argument parsing
 * does). Unlike torchvision's crop-then-resize, pixels just outside the box
 * weigh in at its edges (Pillow's box semantics). Then the mirror, then
 * out = (pixel - mean[c]) / std[c] in float (Caffe2 ImageInput's mean and
 * std in pixel units), written NCHW: out[c][y][x], channels x crop x crop.
 *
 * DCT scale: the largest of 8, 4, 2, 1 that is at most floor(box side /
 * crop) on both sides, so the box decoded at 1/scale is still at least crop
 * pixels a side (Pillow's Image.draft rule, applied to the box). A JPEG
 * decoded at that scale (io/image.h) is resampled from the scaled pixels
 * with the box divided by the scale, as Pillow's draft then resize does.
 *
 * Threads: dpm_augment_box, dpm_augment_scale and dpm_augment_check are
 * pure. An augmenter (scratch buffers and a copy of the config) belongs to
 * one thread at a time.
 *
 * Memory: an augmenter keeps its buffers between calls: the filter weights
 * (at most 2 x image side + 3 x crop per axis) and the horizontal pass's
 * output (crop x rows of the box plus the filter's reach x channels bytes),
 * grown when an image needs more; dpm_augmenter_max_bytes bounds the total
 * for images up to a size.
 *
 * Errors: a config out of range is DPM_INVALID naming the field; a box not
 * inside the image, or an image whose channels differ from the config's, is
 * DPM_INVALID; an allocation failure DPM_NOMEM. */
#ifndef DPM_IO_AUGMENT_H
#define DPM_IO_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "io/image.h"

#define DPM_AUGMENT_MAX_CROP 2048

typedef struct dpm_augment_cfg {
  int train;                     /* 1: random-resized crop (+ mirror); 0: eval */
  int crop;                      /* output side, 1..DPM_AUGMENT_MAX_CROP */
  int resize;                    /* eval: short side before the centre crop, >= crop */
  int channels;                  /* 1 or 3 */
  int mirror;                    /* train: mirror with probability 1/2 */
  double area_min, area_max;     /* train: fraction of the image, 0 < min <= max <= 1 */
  double aspect_min, aspect_max; /* train: width / height, 0 < min <= max */
  float mean[3], std[3];         /* per channel, pixel units; std != 0 */
} dpm_augment_cfg;

/* The crop box in full-size pixels: [x, x + w) x [y, y + h). */
typedef struct dpm_crop_box {
  double x, y, w, h;
  int flip; /* mirror the output */
} dpm_crop_box;

typedef struct dpm_augmenter dpm_augmenter;

/* torchvision's defaults: train, crop 224, resize 256, 3 channels, mirror,
 * area 0.08..1, aspect 3/4..4/3, mean 0, std 1. */
dpm_augment_cfg dpm_augment_defaults(void);
/* DPM_OK or DPM_INVALID naming the first field out of range. */
dpm_status dpm_augment_check(const dpm_augment_cfg *cfg, dpm_err *err);

/* The box and mirror bit of sample `index` in `epoch` for an image of
 * width x height (full size; an empty image gets an empty box, which
 * dpm_augment_apply refuses). cfg must have passed the check. */
void dpm_augment_box(const dpm_augment_cfg *cfg, uint64_t seed, uint64_t epoch,
                     uint64_t index, int width, int height, dpm_crop_box *box);
/* The DCT scale denominator (1, 2, 4 or 8) to decode box at. */
int dpm_augment_scale(const dpm_augment_cfg *cfg, const dpm_crop_box *box);
/* The part of an image full_width x full_height decoded at 1/denom
 * (ceil(full / denom) a side, as libjpeg rounds) that dpm_augment_apply
 * reads of box: the region to decode (dpm_image_decode_region). Pure. */
void dpm_augment_region(const dpm_augment_cfg *cfg, const dpm_crop_box *box, int denom,
                        int full_width, int full_height, dpm_image_region *part);

/* An augmenter for cfg (checked here); NULL with err set on failure. */
dpm_augmenter *dpm_augmenter_create(const dpm_augment_cfg *cfg, dpm_err *err);
void dpm_augmenter_destroy(dpm_augmenter *aug);
/* The most memory an augmenter for cfg holds for (decoded) images of at most
 * max_width x max_height, and what aug holds now. */
size_t dpm_augmenter_max_bytes(const dpm_augment_cfg *cfg, int max_width, int max_height);
size_t dpm_augmenter_held(const dpm_augmenter *aug);

/* Resample box of img (full-size coordinates; img may be a scaled decode) to
 * crop x crop, mirror, normalise, write channels x crop x crop floats to
 * out. */
dpm_status dpm_augment_apply(dpm_augmenter *aug, const dpm_image *img,
                             const dpm_crop_box *box, float *out, dpm_err *err);

#endif
