/* Crop boxes (torchvision's arithmetic), DCT scale choice, and Pillow's
 * antialiased bilinear resample with flip and normalisation. */
#include "io/augment.h"

#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "engine/rng.h"

struct dpm_augmenter {
  dpm_augment_cfg cfg;
  int32_t *kx, *ky; /* fixed-point weights, out x ksize per axis */
  int *bx, *by;     /* per output pixel: first input pixel, count (2 x crop) */
  size_t kx_cap, ky_cap;
  double *w; /* one output pixel's weights before rounding */
  size_t w_cap;
  uint8_t *tmp; /* the horizontal pass: rows x crop x channels */
  size_t tmp_cap;
  int32_t *acc;      /* one output row of the vertical pass: crop x channels */
  float lut[3][256]; /* (pixel - mean[c]) / std[c] */
  int sse41;         /* 3 channels on a CPU with SSE4.1: horizontal_row3_sse41 */
};

dpm_augment_cfg dpm_augment_defaults(void) {
  return (dpm_augment_cfg){.train = 1,
                           .crop = 224,
                           .resize = 256,
                           .channels = 3,
                           .mirror = 1,
                           .area_min = 0.08,
                           .area_max = 1.0,
                           .aspect_min = 3.0 / 4.0,
                           .aspect_max = 4.0 / 3.0,
                           .mean = {0, 0, 0},
                           .std = {1, 1, 1}};
}

dpm_status dpm_augment_check(const dpm_augment_cfg *c, dpm_err *err) {
  if (c->crop < 1 || c->crop > DPM_AUGMENT_MAX_CROP)
    return dpm_errf(err, DPM_INVALID, "augment: crop %d out of range (1..%d)", c->crop,
                    DPM_AUGMENT_MAX_CROP);
  if (!c->train && (c->resize < c->crop || c->resize > DPM_IMAGE_MAX_SIDE))
    return dpm_errf(err, DPM_INVALID, "augment: resize %d out of range (crop %d..%d)",
                    c->resize, c->crop, DPM_IMAGE_MAX_SIDE);
  if (c->channels != 1 && c->channels != 3)
    return dpm_errf(err, DPM_INVALID, "augment: %d channels (1 or 3)", c->channels);
  if (!(c->area_min > 0 && c->area_min <= c->area_max && c->area_max <= 1))
    return dpm_errf(err, DPM_INVALID,
                    "augment: area range [%g, %g] (0 < min <= max <= 1)", c->area_min,
                    c->area_max);
  if (!(c->aspect_min > 0 && c->aspect_min <= c->aspect_max && isfinite(c->aspect_max)))
    return dpm_errf(err, DPM_INVALID,
                    "augment: aspect range [%g, %g] (0 < min <= max, finite)",
                    c->aspect_min, c->aspect_max);
  for (int i = 0; i < c->channels; i++)
    if (!isfinite(c->mean[i]) || !isfinite(c->std[i]) || c->std[i] == 0)
      return dpm_errf(err, DPM_INVALID,
                      "augment: channel %d: mean %g, std %g (finite, std not 0)", i,
                      (double)c->mean[i], (double)c->std[i]);
  return DPM_OK;
}

/* ---- boxes ------------------------------------------------------------------------ */

/* Python's round() of a non-negative value to an int: half to even. */
static int64_t round_even(double v) { return (int64_t)nearbyint(v); }

static void train_box(const dpm_augment_cfg *c, uint64_t s[2], int width, int height,
                      dpm_crop_box *box) {
  double area = (double)width * height;
  double lo = log(c->aspect_min), hi = log(c->aspect_max);
  for (int t = 0; t < 10; t++) {
    double target =
        area * (c->area_min + (c->area_max - c->area_min) * dpm_rng_uniform(s));
    double aspect = exp(lo + (hi - lo) * dpm_rng_uniform(s));
    int64_t w = round_even(sqrt(target * aspect)), h = round_even(sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      box->y = (double)dpm_rng_below(s, (uint64_t)(height - h + 1));
      box->x = (double)dpm_rng_below(s, (uint64_t)(width - w + 1));
      box->w = (double)w;
      box->h = (double)h;
      return;
    }
  }
  double ratio = (double)width / height;
  int64_t w = width, h = height;
  if (ratio < c->aspect_min)
    h = round_even(w / c->aspect_min);
  else if (ratio > c->aspect_max)
    w = round_even(h * c->aspect_max);
  if (h < 1) h = 1;
  if (w < 1) w = 1;
  box->x = (double)((width - w) / 2);
  box->y = (double)((height - h) / 2);
  box->w = (double)w;
  box->h = (double)h;
}

static void eval_box(const dpm_augment_cfg *c, int width, int height, dpm_crop_box *box) {
  int64_t nw = c->resize, nh = c->resize;
  if (width <= height)
    nh = (int64_t)((double)c->resize * height / width);
  else
    nw = (int64_t)((double)c->resize * width / height);
  double sx = (double)width / (double)nw, sy = (double)height / (double)nh;
  int64_t left = round_even((double)(nw - c->crop) / 2.0);
  int64_t top = round_even((double)(nh - c->crop) / 2.0);
  box->x = (double)left * sx;
  box->y = (double)top * sy;
  box->w = fmin((double)(left + c->crop) * sx, (double)width) - box->x;
  box->h = fmin((double)(top + c->crop) * sy, (double)height) - box->y;
}

void dpm_augment_box(const dpm_augment_cfg *cfg, uint64_t seed, uint64_t epoch,
                     uint64_t index, int width, int height, dpm_crop_box *box) {
  memset(box, 0, sizeof *box);
  if (width < 1 || height < 1) return; /* an empty box, which apply refuses */
  if (!cfg->train) {
    eval_box(cfg, width, height, box);
    return;
  }
  uint64_t x = seed, s[2];
  uint64_t h = dpm_splitmix64(&x) ^ epoch;
  x = h;
  h = dpm_splitmix64(&x) ^ index;
  dpm_rng_seed(s, h);
  train_box(cfg, s, width, height, box);
  box->flip = cfg->mirror && dpm_rng_uniform(s) < 0.5;
}

int dpm_augment_scale(const dpm_augment_cfg *cfg, const dpm_crop_box *box) {
  double fit = fmin(floor(box->w / cfg->crop), floor(box->h / cfg->crop));
  static const int denoms[] = {8, 4, 2};
  for (int i = 0; i < 3; i++)
    if (fit >= denoms[i]) return denoms[i];
  return 1;
}

/* ---- the augmenter ---------------------------------------------------------------- */

dpm_augmenter *dpm_augmenter_create(const dpm_augment_cfg *cfg, dpm_err *err) {
  if (dpm_augment_check(cfg, err)) return NULL;
  dpm_augmenter *a = calloc(1, sizeof *a);
  if (!a) {
    dpm_nomem(err);
    return NULL;
  }
  a->cfg = *cfg;
#if defined(__x86_64__) || defined(__i386__)
  a->sse41 = cfg->channels == 3 && __builtin_cpu_supports("sse4.1");
#endif
  a->bx = malloc(2 * (size_t)cfg->crop * sizeof *a->bx);
  a->by = malloc(2 * (size_t)cfg->crop * sizeof *a->by);
  a->acc = malloc(3 * (size_t)cfg->crop * sizeof *a->acc);
  for (int c = 0; c < cfg->channels; c++)
    for (int v = 0; v < 256; v++) a->lut[c][v] = ((float)v - cfg->mean[c]) / cfg->std[c];
  if (!a->bx || !a->by || !a->acc) {
    dpm_augmenter_destroy(a);
    dpm_nomem(err);
    return NULL;
  }
  return a;
}

size_t dpm_augmenter_max_bytes(const dpm_augment_cfg *cfg, int max_width,
                               int max_height) {
  size_t crop = (size_t)cfg->crop,
         side = (size_t)(max_width > max_height ? max_width : max_height);
  size_t weights = 2 * (2 * side + 3 * crop + 1) * sizeof(int32_t);
  size_t wbuf = (2 * side + 3) * sizeof(double);
  size_t tmp = crop * (size_t)max_height * 3;
  return sizeof(dpm_augmenter) + 4 * crop * sizeof(int) + 3 * crop * sizeof(int32_t) +
         weights + wbuf + tmp;
}

size_t dpm_augmenter_held(const dpm_augmenter *a) {
  return sizeof *a + 4 * (size_t)a->cfg.crop * sizeof(int) +
         3 * (size_t)a->cfg.crop * sizeof(int32_t) +
         (a->kx_cap + a->ky_cap) * sizeof(int32_t) + a->w_cap * sizeof(double) +
         a->tmp_cap;
}

void dpm_augmenter_destroy(dpm_augmenter *a) {
  if (!a) return;
  free(a->kx);
  free(a->ky);
  free(a->bx);
  free(a->by);
  free(a->w);
  free(a->tmp);
  free(a->acc);
  free(a);
}

/* Grow *p to hold n elements of size sz (contents not kept). */
static int grow(void *pp, size_t *cap, size_t n, size_t sz) {
  void **p = pp;
  if (n <= *cap) return 0;
  free(*p);
  *cap = 0;
  if (!(*p = malloc(n * sz))) return -1;
  *cap = n;
  return 0;
}

#define PRECISION_BITS 22 /* Pillow's 8-bit resample: 32 - 8 - 2 */

static double triangle(double x) {
  if (x < 0) x = -x;
  return x < 1 ? 1 - x : 0;
}

/* The scale of the window [in0, in1) onto out_size pixels, and the
 * filter's (at least 1). */
static void axis_scale(float in0, float in1, int out_size, double *scale,
                       double *filterscale) {
  *scale = (double)(in1 - in0) / out_size;
  *filterscale = *scale < 1.0 ? 1.0 : *scale;
}

/* The input pixels [*lo, *hi) of in_size that an output centred at
 * center reads with this support (Pillow's bounds). */
static void window(int in_size, double center, double support, int *lo, int *hi) {
  int a = (int)(center - support + 0.5), b = (int)(center + support + 0.5);
  *lo = a < 0 ? 0 : a;
  *hi = b > in_size ? in_size : b;
}

/* The box's window on the vertical axis of an image decoded at 1/denom
 * (and on the horizontal one, with x0 and x1). */
static void box_axes(const dpm_crop_box *box, int denom, float *y0, float *y1, float *x0,
                     float *x1) {
  double s = denom;
  *y0 = (float)(box->y / s), *y1 = (float)((box->y + box->h) / s);
  if (x0) *x0 = (float)(box->x / s), *x1 = (float)((box->x + box->w) / s);
}

/* The input pixels [*lo, *hi) of an axis of in_size that the window
 * [in0, in1) resampled onto out_size pixels reads. */
static void axis_reach(float in0, float in1, int out_size, int in_size, int *lo,
                       int *hi) {
  double scale, filterscale;
  int unused;
  axis_scale(in0, in1, out_size, &scale, &filterscale);
  window(in_size, in0 + 0.5 * scale, filterscale, lo, &unused);
  window(in_size, in0 + (out_size - 0.5) * scale, filterscale, &unused, hi);
}

void dpm_augment_region(const dpm_augment_cfg *cfg, const dpm_crop_box *box, int denom,
                        int full_width, int full_height, dpm_image_region *part) {
  float y0, y1, x0, x1;
  box_axes(box, denom, &y0, &y1, &x0, &x1);
  axis_reach(y0, y1, cfg->crop, (full_height + denom - 1) / denom, &part->y0, &part->y1);
  axis_reach(x0, x1, cfg->crop, (full_width + denom - 1) / denom, &part->x0, &part->x1);
}

/* Pillow's precompute_coeffs and normalize_coeffs_8bpc for one axis: the
 * window [in0, in1) of in_size pixels onto out_size. Fills bounds (first,
 * count) and k (out_size x ksize); returns ksize, or -1 on allocation
 * failure. */
static int axis_weights(dpm_augmenter *a, int in_size, float in0, float in1, int out_size,
                        int32_t **k, size_t *k_cap, int *bounds) {
  double scale, filterscale;
  axis_scale(in0, in1, out_size, &scale, &filterscale);
  double support = 1.0 * filterscale;
  int ksize = (int)ceil(support) * 2 + 1;
  size_t n = (size_t)out_size * (size_t)ksize;
  if (grow(k, k_cap, n, sizeof **k)) return -1;
  if (grow(&a->w, &a->w_cap, (size_t)ksize, sizeof *a->w)) return -1;
  double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; xx++) {
    double center = in0 + (xx + 0.5) * scale, ww = 0;
    int xmin, xmax;
    window(in_size, center, support, &xmin, &xmax);
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) {
      a->w[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += a->w[x];
    }
    int32_t *kk = *k + (size_t)xx * ksize;
    for (int x = 0; x < ksize; x++) {
      double v = x < xmax ? (ww != 0.0 ? a->w[x] / ww : a->w[x]) : 0;
      kk[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS)
                              : 0.5 + v * (1 << PRECISION_BITS));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax < 0 ? 0 : xmax;
  }
  return ksize;
}

static inline uint8_t clip8(int32_t v) {
  if (v >= (1 << PRECISION_BITS << 8)) return 255;
  if (v <= 0) return 0;
  return (uint8_t)(v >> PRECISION_BITS);
}

/* One output pixel of 3 channels: xn taps k over the pixels at p. */
static inline void sum3(const uint8_t *p, const int32_t *k, int xn, uint8_t *dst) {
  int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
  for (int x = 0; x < xn; x++) {
    s0 += p[3 * x] * k[x];
    s1 += p[3 * x + 1] * k[x];
    s2 += p[3 * x + 2] * k[x];
  }
  dst[0] = clip8(s0);
  dst[1] = clip8(s1);
  dst[2] = clip8(s2);
}

/* The passes' inner loops, also built for AVX2 (integer arithmetic: the
 * same results either way), chosen at load time by an ifunc resolver. Not
 * in ThreadSanitizer builds: there the resolver, instrumented, runs during
 * relocation, before TSan's runtime exists, and crashes the program. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DPM_NO_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(DPM_NO_CLONES)
#define AVX2_CLONE
#else
#define AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#endif

/* One row of the horizontal pass: crop outputs from src, the row's pixels
 * from column x0 on, into dst. */
AVX2_CLONE static void horizontal_row(const dpm_augmenter *a, const uint8_t *src, int x0,
                                      uint8_t *dst, int kxs) {
  int C = a->cfg.channels, crop = a->cfg.crop;
  for (int xx = 0; xx < crop; xx++) {
    const int32_t *k = a->kx + (size_t)xx * kxs;
    int xmin = a->bx[2 * xx], xn = a->bx[2 * xx + 1];
    const uint8_t *p = src + (size_t)(xmin - x0) * C;
    if (C == 3) {
      sum3(p, k, xn, dst + 3 * xx);
    } else {
      int32_t s0 = 1 << (PRECISION_BITS - 1);
      for (int x = 0; x < xn; x++) s0 += p[x] * k[x];
      dst[xx] = clip8(s0);
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
/* horizontal_row for 3 channels with SSE4.1, the same integer arithmetic:
 * a pixel's 3 bytes and the next pixel's first, widened to 4 lanes, times
 * the tap's weight (the fourth lane is dropped). An output whose window
 * ends at the last pixel held, where that fourth byte may lie past the
 * image, takes the scalar path. */
__attribute__((target("sse4.1"))) static void
horizontal_row3_sse41(const dpm_augmenter *a, const uint8_t *src, int x0, int x1,
                      uint8_t *dst, int kxs) {
  int crop = a->cfg.crop;
  for (int xx = 0; xx < crop; xx++) {
    const int32_t *k = a->kx + (size_t)xx * kxs;
    int xmin = a->bx[2 * xx], xn = a->bx[2 * xx + 1];
    const uint8_t *p = src + (size_t)(xmin - x0) * 3;
    if (xmin + xn >= x1) {
      sum3(p, k, xn, dst + 3 * xx);
      continue;
    }
    __m128i s = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    for (int x = 0; x < xn; x++) {
      int32_t v;
      memcpy(&v, p + 3 * x, sizeof v);
      __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v));
      s = _mm_add_epi32(s, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
    }
    dst[3 * xx] = clip8(_mm_cvtsi128_si32(s));
    dst[3 * xx + 1] = clip8(_mm_extract_epi32(s, 1));
    dst[3 * xx + 2] = clip8(_mm_extract_epi32(s, 2));
  }
}
#endif

/* A row of the horizontal pass, by the fastest path this CPU has: src
 * holds the row's columns [x0, x1). */
static void horizontal(const dpm_augmenter *a, const uint8_t *src, int x0, int x1,
                       uint8_t *dst, int kxs) {
#if defined(__x86_64__) || defined(__i386__)
  if (a->sse41) return horizontal_row3_sse41(a, src, x0, x1, dst, kxs);
#endif
  (void)x1;
  horizontal_row(a, src, x0, dst, kxs);
}

/* acc[i] += row[i] * w over n values: one input row of the vertical pass. */
AVX2_CLONE static void accumulate(int32_t *restrict acc, const uint8_t *restrict row,
                                  int32_t w, size_t n) {
  for (size_t i = 0; i < n; i++) acc[i] += row[i] * w;
}

dpm_status dpm_augment_apply(dpm_augmenter *a, const dpm_image *img,
                             const dpm_crop_box *box, float *out, dpm_err *err) {
  const dpm_augment_cfg *c = &a->cfg;
  int C = c->channels, crop = c->crop;
  if (img->channels != C)
    return dpm_errf(err, DPM_INVALID, "augment: the image has %d channels, not %d",
                    img->channels, C);
  if (!(box->x >= 0 && box->y >= 0 && box->w > 0 && box->h > 0 &&
        box->x + box->w <= img->full_width && box->y + box->h <= img->full_height))
    return dpm_errf(err, DPM_INVALID, "augment: the box is not inside the %d x %d image",
                    img->full_width, img->full_height);
  float x0, x1, y0, y1;
  box_axes(box, img->scale_denom, &y0, &y1, &x0, &x1);
  int kxs = axis_weights(a, img->width, x0, x1, crop, &a->kx, &a->kx_cap, a->bx);
  int kys = kxs < 0
                ? -1
                : axis_weights(a, img->height, y0, y1, crop, &a->ky, &a->ky_cap, a->by);
  if (kys < 0) return dpm_nomem(err);
  int first = a->by[0], last = a->by[2 * (crop - 1)] + a->by[2 * (crop - 1) + 1];
  int rows = last - first;
  if (rows < 1) return dpm_errf(err, DPM_INVALID, "augment: the box covers no row");
  int held0 = img->rows ? img->y0 : 0,
      held1 = img->rows ? img->y0 + img->rows : img->height;
  int col0 = dpm_image_first_col(img), col1 = col0 + dpm_image_cols(img);
  int left = a->bx[0], right = a->bx[2 * (crop - 1)] + a->bx[2 * (crop - 1) + 1];
  if (first < held0 || last > held1 || left < col0 || right > col1)
    return dpm_errf(err, DPM_INTERNAL,
                    "augment: the box reads columns %d..%d of rows %d..%d, the image "
                    "holds %d..%d of %d..%d",
                    left, right, first, last, col0, col1, held0, held1);
  if (grow(&a->tmp, &a->tmp_cap, (size_t)rows * crop * C, 1)) return dpm_nomem(err);
  /* Horizontal pass: rows [first, last) of the image, crop columns each. */
  size_t stride = dpm_image_stride(img);
  for (int y = 0; y < rows; y++)
    horizontal(a, img->pixels + (size_t)(first + y - held0) * stride, col0, col1,
               a->tmp + (size_t)y * crop * C, kxs);
  /* Vertical pass, a row at a time, then mirror and normalise into NCHW. */
  size_t plane = (size_t)crop * crop, t_stride = (size_t)crop * C;
  int32_t *acc = a->acc;
  for (int yy = 0; yy < crop; yy++) {
    const int32_t *k = a->ky + (size_t)yy * kys;
    int ymin = a->by[2 * yy] - first, yn = a->by[2 * yy + 1];
    for (size_t i = 0; i < t_stride; i++) acc[i] = 1 << (PRECISION_BITS - 1);
    for (int y = 0; y < yn; y++)
      accumulate(acc, a->tmp + (size_t)(ymin + y) * t_stride, k[y], t_stride);
    for (int ch = 0; ch < C; ch++) {
      float *dst = out + ch * plane + (size_t)yy * crop;
      const float *lut = a->lut[ch];
      const int32_t *v = acc + ch;
      if (box->flip)
        for (int xx = 0; xx < crop; xx++) dst[crop - 1 - xx] = lut[clip8(v[xx * C])];
      else
        for (int xx = 0; xx < crop; xx++) dst[xx] = lut[clip8(v[xx * C])];
    }
  }
  return DPM_OK;
}
