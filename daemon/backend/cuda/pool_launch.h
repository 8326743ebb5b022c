/* Pooling kernels of the CUDA plugin (pool_kernels.cu), over NCHW float32
 * (or bf16 where `bf16`: widened, the f32 arithmetic, each output rounded
 * once, as the CPU runs them on bf16) seen as `planes` (N*C) planes of h x w, with square windows of side k, stride s
 * and padding p, output planes of ho x wo (ops/pool.h gives the sizes).
 * The semantics are ops/pool.c's: padding never takes part (a max over
 * the in-bounds elements, an average divided by their count), MaxPool's
 * argmax is the plane index of the first maximum in row-major order, and
 * MaxPoolGradient may mask dX by X > 0 (a fused ReluGradient).
 *
 * Gradients are gathers: each input element adds, in the order of the
 * outputs (row-major), what the windows covering it send it, which is the
 * order the CPU's scatter adds them in; no atomics.
 *
 * Launchers queue on stream s and return; nothing is launched for an
 * empty tensor. */
#ifndef DPM_BACKEND_CUDA_POOL_LAUNCH_H
#define DPM_BACKEND_CUDA_POOL_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_pool_geom {
  int64_t planes, h, w, k, s, p, ho, wo;
} cuda_pool_geom;

void cuda_max_pool(const cuda_pool_geom *g, const void *x, void *y, int32_t *idx,
                   int bf16, cudaStream_t s);
void cuda_max_pool_grad(const cuda_pool_geom *g, const void *x, const void *dy,
                        const int32_t *idx, void *dx, int relu_mask, int bf16,
                        cudaStream_t s);
void cuda_avg_pool(const cuda_pool_geom *g, const void *x, void *y, int bf16,
                   cudaStream_t s);
void cuda_avg_pool_grad(const cuda_pool_geom *g, const void *dy, void *dx, int bf16,
                        cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
