/* The CUDA kernels of Conv and ConvGradient (ops/conv.c: 2-D
 * cross-correlation of NCHW float32, square kernels, one stride and one
 * padding for both sides, groups (cudnnSetConvolutionGroupCount), no
 * dilation: what the CPU supports),
 * through cuDNN's convolutions on the device's compute stream (dev->dnn
 * is bound to it).
 *
 * Conv: cudnnConvolutionForward, then the plugin's bias kernel adds b per
 * channel (none with no_bias) and applies the fused Relu (DPM_FUSE_RELU)
 * in the same pass.
 * ConvGradient: cudnnConvolutionBackwardFilter (dW), the plugin's
 * deterministic channel sum of dY (db, reduce.cu) and
 * cudnnConvolutionBackwardData (dX); each output may be NULL (not wanted),
 * as on the CPU. A batch too large for cuDNN's int-sized descriptors
 * (more than INT_MAX elements in X or Y) runs in slices of images, the
 * filter gradient accumulating (beta 1) after the first.
 *
 * Algorithms: chosen once per problem and device, then cached in the
 * device's cache (algo.h) under (direction, batch, C, H, W, M, kernel,
 * stride, pad, the math flags, the workspace limit, groups). The first choice
 * times the candidates with cudnnFind*AlgorithmEx on the op's own tensors
 * (outputs are overwritten, then computed again) when no graph capture is
 * open on the stream and DPM_MATH_DETERMINISTIC is not asked for, else (or
 * when Find fails) takes cuDNN's heuristics (Get*_v7): a choice by timing
 * may differ from run to run, and with it the bits of the results, so a
 * deterministic run takes the heuristics' choice, which depends on the
 * problem and the device only. A later slice of a sliced filter gradient
 * never runs Find, which would overwrite what dW has accumulated. A
 * candidate must have succeeded, fit the workspace limit,
 * min(CUDA_CONV_WORKSPACE_LIMIT, op->ctx->scratch_bytes), and have the
 * math type asked for; under
 * DPM_MATH_DETERMINISTIC it must report CUDNN_DETERMINISTIC (which rules
 * out the atomics of backward-filter algorithms 0 and 3 and backward-data
 * algorithm 0); under DPM_MATH_DIRECT it must not transform the sums (no
 * FFT or Winograd algorithm, whose rounding is furthest from a direct
 * sum's). The fastest such candidate wins; when none qualifies, the
 * first of a fixed list (implicit GEMM; backward algorithm 1, then 0 when
 * nondeterminism is allowed) whose workspace fits. Math: without
 * DPM_MATH_TF32 the descriptor asks for CUDNN_FMA_MATH, the only type
 * that excludes TF32 tensor cores on Ampere and later (CUDNN_DEFAULT_MATH
 * permits TF32 there), and only FMA candidates are taken; with it,
 * CUDNN_TENSOR_OP_MATH and any candidate's math type.
 *
 * Scratch (conv_scratch, from shapes alone): twice the largest of X, W
 * and Y in bytes, at least 16 MiB, at most CUDA_CONV_WORKSPACE_LIMIT
 * (ConvGradient: at least the channel sum's partials too, used after the
 * convolutions on the same stream). The workspace limit above is what
 * the net's scratch then offers, so a net whose largest kernel asks more
 * lets every convolution use it.
 *
 * Descriptors are created per call and destroyed before returning (host
 * objects, no device memory). cuDNN 9 declares the legacy convolution
 * API deprecated (replaced by its graph API) but still ships it, so its
 * deprecation warnings are silenced for this file.
 *
 * Threads: as any kernel (backend.h); the cache locks itself. Errors: a
 * failed call is recorded as the device's sticky error (cuda.h) and the
 * rest of the op is skipped. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* legacy cuDNN API, above */

#include <limits.h>
#include <string.h>

#include "backend/cuda/algo.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"
#include "backend/cuda/reduce_launch.h"
#include "ops/conv.h"

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER };

#define CONV_WS_MIN ((size_t)16 << 20)

/* A chosen algorithm (the cache's value). */
typedef struct conv_choice {
  int algo;
  int math; /* cudnnMathType_t to set on the descriptor */
  size_t ws;
} conv_choice;

/* A candidate as any of cuDNN's three perf structs reports it. */
typedef struct conv_perf {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t det;
  cudnnMathType_t math;
} conv_perf;

/* One slice of the problem: descriptors for nb images. */
typedef struct conv_call {
  cuda_dev *dev;
  const dpm_op *op;
  const conv_geom *g;
  cudnnDataType_t dt; /* of X, W and Y: CUDNN_DATA_FLOAT or CUDNN_DATA_BFLOAT16 */
  size_t es;          /* their element size */
  int64_t nb;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  void *ws;
  size_t limit;
} conv_call;

static size_t conv_ws_rule(const conv_geom *g) {
  int64_t big = g->n * g->ct * g->h * g->w;
  int64_t wn = g->mt * g->c * g->k * g->k, yn = g->n * g->mt * g->ho * g->wo;
  if (wn > big) big = wn;
  if (yn > big) big = yn;
  size_t ws = 2 * (size_t)big * sizeof(float);
  if (ws < CONV_WS_MIN) ws = CONV_WS_MIN;
  return ws < CUDA_CONV_WORKSPACE_LIMIT ? ws : CUDA_CONV_WORKSPACE_LIMIT;
}

static size_t conv_scratch(const dpm_node *nd, const dpm_shape *in) {
  conv_geom g = conv_geom_of(nd, &in[0]);
  return conv_ws_rule(&g);
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* After the convolutions, db's partial sums; in bf16 first dY widened (its
 * n m ho wo floats) and db in f32 (m floats), each 256-aligned. SIZE_MAX
 * when the sizes overflow (the reservation then fails: out of memory). */
static size_t conv_grad_scratch(const dpm_node *nd, const dpm_shape *in) {
  conv_geom g = conv_geom_of(nd, &in[0]);
  size_t ws = conv_ws_rule(&g), sum = cuda_chan_sum_scratch(g.n, g.mt, g.ho * g.wo);
  if (in[2].dtype == DPM_BF16) {
    size_t dy, db;
    size_t ny = (size_t)g.n;
    if (__builtin_mul_overflow(ny, (size_t)(g.mt * g.ho * g.wo), &ny) ||
        __builtin_mul_overflow(ny, sizeof(float), &dy) ||
        dy > SIZE_MAX - 512 || __builtin_mul_overflow((size_t)g.mt, sizeof(float), &db) ||
        db > SIZE_MAX - 512 || __builtin_add_overflow(align256(dy), align256(db), &db) ||
        __builtin_add_overflow(db, sum, &sum))
      return SIZE_MAX;
  }
  return ws > sum ? ws : sum;
}

static void call_fini(conv_call *c) {
  if (c->x) cudnnDestroyTensorDescriptor(c->x);
  if (c->y) cudnnDestroyTensorDescriptor(c->y);
  if (c->w) cudnnDestroyFilterDescriptor(c->w);
  if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
  c->x = c->y = NULL;
  c->w = NULL;
  c->conv = NULL;
}

/* Descriptors for nb images; 0 (error recorded) on failure. */
static int call_init(conv_call *c, int64_t nb) {
  cuda_dev *dev = c->dev;
  const conv_geom *g = c->g;
  c->nb = nb;
  if (!CUDNN_OK(dev, cudnnCreateTensorDescriptor(&c->x)) ||
      !CUDNN_OK(dev, cudnnCreateTensorDescriptor(&c->y)) ||
      !CUDNN_OK(dev, cudnnCreateFilterDescriptor(&c->w)) ||
      !CUDNN_OK(dev, cudnnCreateConvolutionDescriptor(&c->conv)) ||
      !CUDNN_OK(dev, cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, c->dt, (int)nb,
                                                (int)g->ct, (int)g->h, (int)g->w)) ||
      !CUDNN_OK(dev, cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, c->dt, (int)nb,
                                                (int)g->mt, (int)g->ho, (int)g->wo)) ||
      !CUDNN_OK(dev, cudnnSetFilter4dDescriptor(c->w, c->dt, CUDNN_TENSOR_NCHW, (int)g->mt,
                                                (int)g->c, (int)g->k, (int)g->k)) ||
      !CUDNN_OK(dev, cudnnSetConvolution2dDescriptor(
                         c->conv, (int)g->p, (int)g->p, (int)g->s, (int)g->s, 1, 1,
                         CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
      !CUDNN_OK(dev, cudnnSetConvolutionGroupCount(c->conv, (int)g->grp))) {
    call_fini(c);
    return 0;
  }
  return 1;
}

static int want_tf32(const conv_call *c) {
  return (c->op->ctx->math & DPM_MATH_TF32) != 0;
}
static int want_det(const conv_call *c) {
  return (c->op->ctx->math & DPM_MATH_DETERMINISTIC) != 0;
}
/* bf16 data: tensor-core products of bf16 pairs, exact, summed in f32 (no
 * TF32 rounding applies), so any math type is taken. */
static int bf16_data(const conv_call *c) { return c->dt == CUDNN_DATA_BFLOAT16; }

/* Whether algorithm algo of direction dir transforms the sums (FFT,
 * Winograd): excluded under DPM_MATH_DIRECT. */
static int transforms(int dir, int algo) {
  switch (dir) {
  case DIR_FWD:
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  case DIR_BWD_DATA:
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  default:
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
}

/* Whether candidate p of direction dir qualifies (see the head of the
 * file). */
static int acceptable(const conv_call *c, int dir, const conv_perf *p) {
  return p->status == CUDNN_STATUS_SUCCESS && p->memory <= c->limit &&
         (!want_det(c) || p->det == CUDNN_DETERMINISTIC) &&
         (want_tf32(c) || bf16_data(c) || p->math == CUDNN_FMA_MATH) &&
         (!(c->op->ctx->math & DPM_MATH_DIRECT) || !transforms(dir, p->algo));
}

#define TAKE_PERFS(arr, n, out)                                                          \
  for (int i_ = 0; i_ < (n); i_++) (out)[i_] = (conv_perf) {                             \
      (int)(arr)[i_].algo, (arr)[i_].status, (arr)[i_].memory, (arr)[i_].determinism,    \
          (arr)[i_].mathType                                                             \
    }

/* cuDNN's candidates for direction dir, fastest first; their number, 0
 * (error recorded) on failure. find: timed on the op's tensors by
 * cudnnFind*AlgorithmEx; where that fails (nothing recorded), and without
 * find, cuDNN's heuristics. */
static int candidates(conv_call *c, int dir, int find, const void *x, const void *w,
                      const void *y, conv_perf *out) {
  cuda_dev *dev = c->dev;
  cudnnHandle_t h = dev->dnn;
  int n = 0;
  if (dir == DIR_FWD) {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    const int want = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    if (!(find && cudnnFindConvolutionForwardAlgorithmEx(
                      h, c->x, x, c->w, w, c->conv, c->y, (void *)y, want, &n, p, c->ws,
                      c->limit) == CUDNN_STATUS_SUCCESS) &&
        !CUDNN_OK(dev, cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv,
                                                              c->y, want, &n, p)))
      return 0;
    TAKE_PERFS(p, n, out);
  } else if (dir == DIR_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    const int want = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    if (!(find && cudnnFindConvolutionBackwardDataAlgorithmEx(
                      h, c->w, w, c->y, y, c->conv, c->x, (void *)x, want, &n, p, c->ws,
                      c->limit) == CUDNN_STATUS_SUCCESS) &&
        !CUDNN_OK(dev, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w, c->y, c->conv,
                                                                   c->x, want, &n, p)))
      return 0;
    TAKE_PERFS(p, n, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const int want = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    if (!(find && cudnnFindConvolutionBackwardFilterAlgorithmEx(
                      h, c->x, x, c->y, y, c->conv, c->w, (void *)w, want, &n, p, c->ws,
                      c->limit) == CUDNN_STATUS_SUCCESS) &&
        !CUDNN_OK(dev, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                           h, c->x, c->y, c->conv, c->w, want, &n, p)))
      return 0;
    TAKE_PERFS(p, n, out);
  }
  return n;
}

/* Workspace of algorithm algo in direction dir; 0 (no error recorded:
 * the algorithm does not apply) on failure. */
static int ws_of(conv_call *c, int dir, int algo, size_t *ws) {
  cudnnHandle_t h = c->dev->dnn;
  cudnnStatus_t st;
  if (dir == DIR_FWD)
    st = cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y,
                                                 (cudnnConvolutionFwdAlgo_t)algo, ws);
  else if (dir == DIR_BWD_DATA)
    st = cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, c->w, c->y, c->conv, c->x, (cudnnConvolutionBwdDataAlgo_t)algo, ws);
  else
    st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, c->x, c->y, c->conv, c->w, (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
  return st == CUDNN_STATUS_SUCCESS;
}

/* The fixed fallback list: the first algorithm that applies and fits. */
static int fallback(conv_call *c, int dir, cudnnMathType_t math, conv_choice *ch) {
  static const int fwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                            CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM};
  static const int data[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
  static const int filter[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0};
  const int *list = dir == DIR_FWD ? fwd : dir == DIR_BWD_DATA ? data : filter;
  /* the second backward entries use atomics: nondeterministic */
  const int n = dir != DIR_FWD && want_det(c) ? 1 : 2;
  for (int i = 0; i < n; i++) {
    size_t ws;
    if (ws_of(c, dir, list[i], &ws) && ws <= c->limit) {
      *ch = (conv_choice){list[i], math, ws};
      return 1;
    }
  }
  return 0;
}

/* The algorithm for direction dir of this slice, set up on its descriptor;
 * 0 (error recorded) when none. find: time candidates on x, w, y. */
static int choose(conv_call *c, int dir, int find, const void *x, const void *w,
                  const void *y, conv_choice *ch) {
  cuda_dev *dev = c->dev;
  const conv_geom *g = c->g;
  const cudnnMathType_t math =
      want_tf32(c) || bf16_data(c) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  if (!CUDNN_OK(dev, cudnnSetConvolutionMathType(c->conv, math))) return 0;
  cuda_algo_key key = {.kind = CUDA_ALGO_CONV_FWD + dir,
                       .v = {c->nb, g->ct, g->h, g->w, g->mt, g->k, g->s, g->p,
                             (int64_t)c->op->ctx->math, (int64_t)c->limit, g->grp, c->dt}};
  if (!cuda_algo_get(dev->algos, &key, ch, sizeof *ch)) {
    conv_perf p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT + CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT +
                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    /* no timing under determinism: the choice itself must repeat (above) */
    int n = candidates(c, dir, find && !dev->capturing && !want_det(c), x, w, y, p),
        got = 0;
    for (int i = 0; i < n && !got; i++)
      if (acceptable(c, dir, &p[i])) {
        *ch = (conv_choice){p[i].algo, p[i].math, p[i].memory};
        got = 1;
      }
    if (!got && !fallback(c, dir, math, ch))
      return cuda_check(dev, 0, CUDNN_STATUS_NOT_SUPPORTED,
                        "cuDNN convolution: no algorithm within the workspace limit");
    cuda_algo_put(dev->algos, &key, ch, sizeof *ch);
  }
  return CUDNN_OK(dev, cudnnSetConvolutionMathType(c->conv, (cudnnMathType_t)ch->math));
}

/* Images per slice: as many as keep X and Y within int-sized counts. */
static int64_t slice_images(const conv_geom *g) {
  int64_t per = g->ct * g->h * g->w, yper = g->mt * g->ho * g->wo;
  if (yper > per) per = yper;
  int64_t nb = per > 0 ? INT_MAX / per : g->n;
  if (nb < 1) nb = 1;
  return nb < g->n ? nb : g->n;
}

static void call_start(conv_call *c, const dpm_op *op, const conv_geom *g) {
  memset(c, 0, sizeof *c);
  c->dev = cuda_dev_of(op);
  c->op = op;
  c->g = g;
  c->dt = op->in[0]->shape.dtype == DPM_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  c->es = c->dt == CUDNN_DATA_BFLOAT16 ? 2 : 4;
  c->ws = op->ctx->scratch;
  c->limit = op->ctx->scratch_bytes < CUDA_CONV_WORKSPACE_LIMIT
                 ? op->ctx->scratch_bytes
                 : CUDA_CONV_WORKSPACE_LIMIT;
  if (!c->ws) c->limit = 0;
}

static void conv_run(const dpm_op *op) {
  conv_geom g = conv_geom_of(op->node, &op->in[0]->shape);
  conv_call c;
  call_start(&c, op, &g);
  cuda_dev *dev = c.dev;
  const char *x = op->in[0]->data, *w = op->in[1]->data;
  char *y = op->out[0]->data;
  /* per image, in bytes */
  const int64_t xper = g.ct * g.h * g.w * (int64_t)c.es, yper = g.mt * g.ho * g.wo * (int64_t)c.es,
                step = slice_images(&g);
  const float one = 1.f, zero = 0.f;
  for (int64_t n0 = 0; n0 < g.n; n0 += step) {
    const int64_t nb = g.n - n0 < step ? g.n - n0 : step;
    conv_choice ch;
    if (!call_init(&c, nb)) return;
    const char *xs = x + n0 * xper;
    char *ys = y + n0 * yper;
    int ok =
        choose(&c, DIR_FWD, 1, xs, w, ys, &ch) &&
        CUDNN_OK(dev, cudnnConvolutionForward(dev->dnn, &one, c.x, xs, c.w, w, c.conv,
                                              (cudnnConvolutionFwdAlgo_t)ch.algo, c.ws,
                                              ch.ws, &zero, c.y, ys));
    call_fini(&c);
    if (!ok) return;
  }
  const void *b = conv_has_bias(op->node) ? op->in[2]->data : NULL;
  const int relu = (op->node->fuse & DPM_FUSE_RELU) != 0;
  if (bf16_data(&c))
    dpm_cuda_bias_act_nchw_bf16((uint16_t *)y, b, g.n, g.mt, g.ho * g.wo, relu,
                                dev->compute);
  else
    cuda_bias_act((float *)y, b, g.n, g.mt, g.ho * g.wo, relu, dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

static void conv_grad_run(const dpm_op *op) {
  conv_geom g = conv_geom_of(op->node, &op->in[0]->shape);
  conv_call c;
  call_start(&c, op, &g);
  cuda_dev *dev = c.dev;
  const char *x = op->in[0]->data, *w = op->in[1]->data, *dy = op->in[2]->data;
  char *dw = op->out[0] ? op->out[0]->data : NULL;
  void *db = op->out[1] ? op->out[1]->data : NULL;
  char *dx = op->out[2] ? op->out[2]->data : NULL;
  /* per image, in bytes */
  const int64_t xper = g.ct * g.h * g.w * (int64_t)c.es, yper = g.mt * g.ho * g.wo * (int64_t)c.es,
                step = slice_images(&g);
  const float one = 1.f, zero = 0.f;
  if (dw && g.n == 0)
    CUDA_OK(dev, cudaMemsetAsync(dw, 0, cuda_bytes(op->out[0]), dev->compute));
  for (int64_t n0 = 0; n0 < g.n && (dw || dx); n0 += step) {
    const int64_t nb = g.n - n0 < step ? g.n - n0 : step;
    conv_choice ch;
    if (!call_init(&c, nb)) return;
    const char *xs = x + n0 * xper, *dys = dy + n0 * yper;
    int ok = 1;
    if (dw)
      ok = choose(&c, DIR_BWD_FILTER, n0 == 0, xs, dw, dys, &ch) &&
           CUDNN_OK(dev, cudnnConvolutionBackwardFilter(
                             dev->dnn, &one, c.x, xs, c.y, dys, c.conv,
                             (cudnnConvolutionBwdFilterAlgo_t)ch.algo, c.ws, ch.ws,
                             n0 ? &one : &zero, c.w, dw));
    if (ok && dx) {
      char *dxs = dx + n0 * xper;
      ok = choose(&c, DIR_BWD_DATA, 1, dxs, w, dys, &ch) &&
           CUDNN_OK(dev,
                    cudnnConvolutionBackwardData(dev->dnn, &one, c.w, w, c.y, dys, c.conv,
                                                 (cudnnConvolutionBwdDataAlgo_t)ch.algo,
                                                 c.ws, ch.ws, &zero, c.x, dxs));
    }
    call_fini(&c);
    if (!ok) return;
  }
  if (db && !bf16_data(&c)) {
    cuda_chan_sum((const float *)dy, g.n, g.mt, g.ho * g.wo, db, op->ctx->scratch,
                  dev->compute);
    CUDA_OK(dev, cudaGetLastError());
  } else if (db) { /* scratch: dY in f32, db in f32, the partial sums */
    const int64_t ny = g.n * g.mt * g.ho * g.wo;
    char *s = op->ctx->scratch;
    float *dy32 = (float *)s;
    float *db32 = (float *)(s + align256((size_t)ny * sizeof(float)));
    double *part = (double *)((char *)db32 + align256((size_t)g.mt * sizeof(float)));
    dpm_cuda_cast(DPM_CUDA_T_BF16, DPM_CUDA_T_F32, dy, dy32, ny, dev->compute);
    cuda_chan_sum(dy32, g.n, g.mt, g.ho * g.wo, db32, part, dev->compute);
    dpm_cuda_cast(DPM_CUDA_T_F32, DPM_CUDA_T_BF16, db32, db, g.mt, dev->compute);
    CUDA_OK(dev, cudaGetLastError());
  }
}

/* Both also on bf16 tensors (every float tensor of the op bf16). */
const dpm_kernel_def DPM_CUDA_KERNEL(CONV) = {
    .run = conv_run, .scratch = conv_scratch, .lowp = DPM_LOWP_BIT(DPM_BF16)};
const dpm_kernel_def DPM_CUDA_KERNEL(CONV_GRADIENT) = {
    .run = conv_grad_run, .scratch = conv_grad_scratch, .lowp = DPM_LOWP_BIT(DPM_BF16)};
