/* Per-channel kernels of the CUDA plugin (reduce.cu), for the bias of FC
 * and Conv and their gradients: a tensor is seen as [outer, C, inner]
 * (FC's [N, M]: outer N, C M, inner 1; Conv's [N, M, Ho, Wo]: outer N,
 * C M, inner Ho*Wo).
 *
 * cuda_chan_sum is deterministic: each channel's elements are split into
 * cuda_chan_parts fixed ranges, each summed by one block in double in a
 * fixed tree order into the scratch, and the parts are added in order by
 * a second kernel; no atomics, the same bits on every run.
 *
 * Launchers queue on stream s and return; a launch failure shows in the
 * caller's cudaGetLastError. n == 0 (or C == 0) launches nothing. */
#ifndef DPM_BACKEND_CUDA_REDUCE_LAUNCH_H
#define DPM_BACKEND_CUDA_REDUCE_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ranges each channel's sum is split into (1 to 64): for inner == 1 the
 * rows are split in blocks of 64, otherwise a channel's outer * inner
 * elements in blocks of 4096. */
static inline int64_t cuda_chan_parts(int64_t outer, int64_t c, int64_t inner) {
  (void)c;
  int64_t p = inner == 1 ? outer / 64 : outer * inner / 4096;
  return p < 1 ? 1 : p > 64 ? 64 : p;
}

/* Scratch bytes cuda_chan_sum needs: one double per channel and part. */
static inline size_t cuda_chan_sum_scratch(int64_t outer, int64_t c, int64_t inner) {
  return (size_t)(cuda_chan_parts(outer, c, inner) * c) * sizeof(double);
}

/* out[c] = sum over o, i of x[(o * C + c) * inner + i]; 0 where outer or
 * inner is 0. scratch: cuda_chan_sum_scratch bytes on the device. */
void cuda_chan_sum(const float *x, int64_t outer, int64_t c, int64_t inner, float *out,
                   double *scratch, cudaStream_t s);

/* y[(o * C + c) * inner + i] += b[c] (b NULL: nothing added), then
 * max(., 0) when relu. */
void cuda_bias_act(float *y, const float *b, int64_t outer, int64_t c, int64_t inner,
                   int relu, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
