/* The fold at the end of a dot tile (4 rows against 6, each sum left in
 * 16 f32 lanes): the fp32 tiles of gemm.c and the bf16 ones of
 * gemm_bf16.c. Lane sums are added in one fixed tree, so a total depends
 * only on its lanes. Header-only, AVX-512F; include after immintrin.h. */
#ifndef DPM_BACKEND_CPU_DOT_REDUCE_H
#define DPM_BACKEND_CPU_DOT_REDUCE_H

#define DOT_FN __attribute__((target("avx512f"), always_inline)) static inline

/* acc[0..3][j] (16 partial sums each) -> q whose 128-bit lane i holds four
 * partials of acc[i][j]. */
DOT_FN __m512 dot_gather(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  __m512 p01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44),
                             _mm512_shuffle_f32x4(a0, a1, 0xEE));
  __m512 p23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44),
                             _mm512_shuffle_f32x4(a2, a3, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(p01, p23, 0x88),
                       _mm512_shuffle_f32x4(p01, p23, 0xDD));
}

/* Totals of acc[i][j]: lane i of out[0] holds j = 0..3, elements 0 and 1 of
 * lane i of out[1] hold j = 4, 5. */
DOT_FN void dot_reduce(__m512 acc[4][6], __m512 out[2]) {
  __m512 q[6];
  _Pragma("GCC unroll 8")
  for (int j = 0; j < 6; j++)
    q[j] = dot_gather(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
  __m512 u[3]; /* per lane: [q2h 0+2, q2h+1 0+2, q2h 1+3, q2h+1 1+3] */
  _Pragma("GCC unroll 8")
  for (int h = 0; h < 3; h++)
    u[h] = _mm512_add_ps(_mm512_unpacklo_ps(q[2 * h], q[2 * h + 1]),
                         _mm512_unpackhi_ps(q[2 * h], q[2 * h + 1]));
  __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u[0]), _mm512_castps_pd(u[1]));
  __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u[0]), _mm512_castps_pd(u[1]));
  out[0] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  /* for q4, q5: add the upper pair of each lane to the lower */
  __m512d swapped = _mm512_permute_pd(_mm512_castps_pd(u[2]), 0x55);
  out[1] = _mm512_add_ps(u[2], _mm512_castpd_ps(swapped));
}

#endif
