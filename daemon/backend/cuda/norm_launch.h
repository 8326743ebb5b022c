/* SpatialBN kernels of the CUDA plugin (norm_kernels.cu), over X seen as
 * [n, c, hw] (NCHW with hw = H*W, or [N, C] with hw = 1). The semantics
 * are ops/norm.c's and the arithmetic backend/cpu/norm.c's; see
 * norm_kernels.cu.
 *
 * Each channel's sums are split into cuda_bn_parts fixed ranges, summed by
 * one block each in double in a fixed tree order and added in order by a
 * per-channel kernel: deterministic, no atomics. Scratch (device memory,
 * cuda_bn_scratch bytes) holds those partial sums and the per-channel
 * coefficients of the elementwise pass.
 *
 * Launchers queue on stream s and return; nothing is launched for c == 0. */
#ifndef DPM_BACKEND_CUDA_NORM_LAUNCH_H
#define DPM_BACKEND_CUDA_NORM_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ranges each channel's n * hw elements are split into: blocks of 4096,
 * 1 to 64 of them. */
static inline int64_t cuda_bn_parts(int64_t n, int64_t hw) {
  int64_t p = n * hw / 4096;
  return p < 1 ? 1 : p > 64 ? 64 : p;
}

/* Two doubles per (channel, part), then three floats per channel. */
static inline size_t cuda_bn_scratch(int64_t n, int64_t c, int64_t hw) {
  return (size_t)(2 * c * cuda_bn_parts(n, hw)) * sizeof(double) +
         (size_t)(3 * c) * sizeof(float);
}

/* SpatialBN: y from x, scale s and bias b; train (is_test 0): batch
 * statistics (or, with gsum, those of the combined sums, 2c + 1 doubles,
 * shifted by rm), rm and rv updated in place with momentum; test: rm and rv used as
 * they are. sm and siv get the mean and 1/sqrt(var + eps) used. */
void cuda_bn_forward(const float *x, const float *s, const float *b, float *rm, float *rv,
                     float *y, float *sm, float *siv, int64_t n, int64_t c, int64_t hw,
                     double eps, double momentum, int is_test, const double *gsum,
                     void *scratch, cudaStream_t st);

/* SpatialBNGradient: dx, ds, db (each may be NULL) from x, s, the saved
 * mean sm and inverse std siv, and dy; with gsum, dx from the combined sums
 * (2c + 1 doubles; ds and db stay the batch's). */
void cuda_bn_backward(const float *x, const float *s, const float *sm, const float *siv,
                      const float *dy, float *dx, float *ds, float *db, int64_t n,
                      int64_t c, int64_t hw, int is_test, const double *gsum,
                      void *scratch, cudaStream_t st);

/* SpatialBNStats (dy NULL: sum(x - shift), sum((x - shift)^2)) and
 * SpatialBNGradientStats (sum(dy), sum(dy * (x - shift))): out, 2c + 1
 * doubles, gets the per-channel sums, then the count n * hw. */
void cuda_bn_sums(const float *x, const float *dy, const float *shift, int64_t n,
                  int64_t c, int64_t hw, double *out, void *scratch, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
