/* The arithmetic of the CUDA element-wise, dropout and loss kernels, one
 * body per element or per slice of a row, shared by the device code
 * (elementwise_kernels.cu, loss_kernels.cu: nvcc) and the host unit test
 * (tests/unit/cuda_elem_test.c: gcc), which checks every body here against
 * the CPU kernel of the same op (daemon/backend/cpu/).
 *
 * Exactness: each body does the CPU kernel's float operations in the CPU
 * kernel's order. In device code the products, sums and quotients go
 * through the round-to-nearest intrinsics (dpm_fmul ...), which nvcc never
 * contracts into fused multiply-adds, so they round as the CPU's do; only
 * expf, tanhf and log are the device library's (within 2 ulp of glibc).
 *
 * Rows (Softmax, SoftmaxWithLoss, Accuracy and gradients): a row of d
 * values is shared by `lanes` threads, lane l taking the elements l,
 * l + lanes, l + 2 lanes ... in order (the *_part bodies); the lanes'
 * partial results are then combined by one thread in the fixed order of
 * dpm_tree_sum / dpm_tree_max. The result depends on the lane count only,
 * never on timing: reductions are deterministic, with no atomics.
 *
 * Dropout draws from a counter-based generator: element i's uniform is a
 * hash of (k0, k1, i), so any thread computes any element's draw and a
 * launch repeats bit for bit for the same keys.
 *
 * Plain C11 and C++17, no engine or CUDA header; every function is
 * static inline and pure (the row parts write only their own elements). */
#ifndef DPM_BACKEND_CUDA_ELEM_H
#define DPM_BACKEND_CUDA_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DPM_HD __host__ __device__
#else
#define DPM_HD
#endif

/* ---- exact float operations ---------------------------------------------- */

DPM_HD static inline float dpm_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

DPM_HD static inline float dpm_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

DPM_HD static inline float dpm_fsub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

DPM_HD static inline float dpm_fdiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/* ---- 16-bit patterns: bf16 and f16 (engine/lowp.h's conversions) ---------
 * The same integer arithmetic as engine/lowp.c, one value at a time: round
 * to nearest even, a NaN stays a quiet NaN (its payload's high bits kept),
 * +-inf stay, f16 overflows to +-inf and underflows through its
 * subnormals. tests/unit/cuda_elem_test.c checks every bf16 and f16
 * pattern and a few million f32 ones against engine/lowp.h, bit for bit.
 * Device code reinterprets with the intrinsics, host code with memcpy. */

DPM_HD static inline uint32_t dpm_bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DPM_HD static inline float dpm_float_of(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

DPM_HD static inline uint16_t dpm_to_bf16(float f) {
  uint32_t u = dpm_bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

DPM_HD static inline float dpm_from_bf16(uint16_t h) {
  return dpm_float_of((uint32_t)h << 16);
}

DPM_HD static inline uint16_t dpm_to_f16(float f) {
  uint32_t u = dpm_bits_of(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* f16 subnormal or zero: the f32 adder rounds */
    float r = dpm_fadd(dpm_float_of(a), 0.5f);
    return (uint16_t)(sign | (uint16_t)(dpm_bits_of(r) - 0x3f000000u));
  }
  uint32_t m = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return (uint16_t)(sign | (uint16_t)(m >> 13));
}

DPM_HD static inline float dpm_from_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return dpm_float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) return dpm_float_of(sign | dpm_bits_of(dpm_fmul((float)m, 0x1p-24f)));
  return dpm_float_of(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- activations and their gradients (backend/cpu/elementwise.c) --------- */

DPM_HD static inline float dpm_relu(float x) { return x > 0.f ? x : 0.f; }

/* dX from the Relu output y and dY. */
DPM_HD static inline float dpm_relu_grad(float y, float dy) { return y > 0.f ? dy : 0.f; }

/* Relu and ReluGradient on bf16 patterns: widened, the f32 body, rounded
 * once, as the CPU's low-precision wrapper runs them
 * (backend/cpu/lowp_run.h). */
DPM_HD static inline uint16_t dpm_relu_bf16(uint16_t x) {
  return dpm_to_bf16(dpm_relu(dpm_from_bf16(x)));
}

DPM_HD static inline uint16_t dpm_relu_grad_bf16(uint16_t y, uint16_t dy) {
  return dpm_to_bf16(dpm_relu_grad(dpm_from_bf16(y), dpm_from_bf16(dy)));
}

/* A bf16 convolution output y (cuDNN's, rounded) plus the bias b (has_b),
 * through Relu (relu), rounded again: the CPU rounds the f32 sum once, so
 * the two differ by at most this second rounding. */
DPM_HD static inline uint16_t dpm_bias_act_bf16(uint16_t y, uint16_t b, int has_b,
                                                int relu) {
  float v = dpm_from_bf16(y);
  if (has_b) v = dpm_fadd(v, dpm_from_bf16(b));
  return dpm_to_bf16(relu ? dpm_relu(v) : v);
}

DPM_HD static inline float dpm_sigmoid(float x) {
  return dpm_fdiv(1.f, dpm_fadd(1.f, expf(-x)));
}

/* dX = dY * y * (1 - y), left to right. */
DPM_HD static inline float dpm_sigmoid_grad(float y, float dy) {
  return dpm_fmul(dpm_fmul(dy, y), dpm_fsub(1.f, y));
}

DPM_HD static inline float dpm_tanh(float x) { return tanhf(x); }

/* dX = dY * (1 - y^2). */
DPM_HD static inline float dpm_tanh_grad(float y, float dy) {
  return dpm_fmul(dy, dpm_fsub(1.f, dpm_fmul(y, y)));
}

/* Scale: y = s * x. */
DPM_HD static inline float dpm_scale(float s, float x) { return dpm_fmul(s, x); }

/* Sum and Add: x[0][i] + x[1][i] + ... left to right, as the CPU's block
 * accumulation adds them. */
DPM_HD static inline float dpm_sum_at(const float *const *x, int n_in, int64_t i) {
  float acc = x[0][i];
  for (int k = 1; k < n_in; k++) acc = dpm_fadd(acc, x[k][i]);
  return acc;
}

/* ---- dropout (backend/cpu/dropout.c) -------------------------------------- */

/* splitmix64's output function. */
DPM_HD static inline uint64_t dpm_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Element i's draw, uniform in [0, 1) with 53 random bits: splitmix64's
 * i-th output from seed k0, xored with k1 and mixed again. */
DPM_HD static inline double dpm_dropout_uniform(uint64_t k0, uint64_t k1, uint64_t i) {
  uint64_t z = dpm_mix64(k0 + (i + 1) * 0x9e3779b97f4a7c15ull);
  z = dpm_mix64(z ^ k1);
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The mask value of a draw: 0 (dropped, probability ratio) or keep,
 * 1 / (1 - ratio) as a float. */
DPM_HD static inline float dpm_dropout_factor(double u, double ratio, float keep) {
  return u < ratio ? 0.f : keep;
}

/* Y = X * mask; DropoutGradient: dX = dY * mask. */
DPM_HD static inline float dpm_dropout_apply(float x, float mask) {
  return dpm_fmul(x, mask);
}

/* ---- lane combination ------------------------------------------------------ */

/* The sum of v[0..lanes) (lanes a power of two) as a halving tree: v[i] +=
 * v[i + half] for half = lanes/2, lanes/4 ... 1. Overwrites v. */
DPM_HD static inline float dpm_tree_sum(float *v, int lanes) {
  for (int half = lanes / 2; half > 0; half /= 2)
    for (int i = 0; i < half; i++) v[i] = dpm_fadd(v[i], v[i + half]);
  return v[0];
}

DPM_HD static inline double dpm_tree_sum_d(double *v, int lanes) {
  for (int half = lanes / 2; half > 0; half /= 2)
    for (int i = 0; i < half; i++) v[i] += v[i + half];
  return v[0];
}

/* The largest of v[0..lanes) (NaN ignored unless all are), as above. */
DPM_HD static inline float dpm_tree_max(float *v, int lanes) {
  for (int half = lanes / 2; half > 0; half /= 2)
    for (int i = 0; i < half; i++) v[i] = v[i + half] > v[i] ? v[i + half] : v[i];
  return v[0];
}

/* ---- softmax rows (backend/cpu/loss.c) ------------------------------------- */

/* Max of lane's elements of the row x[0..d); -INFINITY when it has none.
 * NaN elements are passed over, as the CPU's running maximum passes over
 * them after x[0]; a NaN anywhere in the row makes the row's sum, so every
 * output, NaN in both. */
DPM_HD static inline float dpm_softmax_max_part(const float *x, int64_t d, int lane,
                                                int lanes) {
  float m = -INFINITY;
  for (int64_t j = lane; j < d; j += lanes) m = x[j] > m ? x[j] : m;
  return m;
}

/* y[j] = expf(x[j] - mx) for lane's elements (y may be x); returns their
 * sum, in order. */
DPM_HD static inline float dpm_softmax_exp_part(const float *x, float *y, int64_t d,
                                                float mx, int lane, int lanes) {
  float s = 0.f;
  for (int64_t j = lane; j < d; j += lanes) {
    float e = expf(dpm_fsub(x[j], mx));
    y[j] = e;
    s = dpm_fadd(s, e);
  }
  return s;
}

/* y[j] *= inv (inv = 1 / the row's sum) for lane's elements. */
DPM_HD static inline void dpm_softmax_scale_part(float *y, int64_t d, float inv, int lane,
                                                 int lanes) {
  for (int64_t j = lane; j < d; j += lanes) y[j] = dpm_fmul(y[j], inv);
}

/* <y, dy> over lane's elements, in order. */
DPM_HD static inline float dpm_softmax_dot_part(const float *y, const float *dy,
                                                int64_t d, int lane, int lanes) {
  float s = 0.f;
  for (int64_t j = lane; j < d; j += lanes) s = dpm_fadd(s, dpm_fmul(y[j], dy[j]));
  return s;
}

/* SoftmaxGradient: dx = y * (dy - <y, dy>). */
DPM_HD static inline float dpm_softmax_grad(float y, float dy, float dot) {
  return dpm_fmul(y, dpm_fsub(dy, dot));
}

/* ---- SoftmaxWithLoss, Accuracy (backend/cpu/loss.c, ops/loss.c) ------------ */

#define DPM_PROB_FLOOR 1e-20 /* probabilities are clamped here before the log */

/* The scale of a row of SoftmaxWithLossGradient: dloss / n where the
 * label is a class of the row, 0 where it is out of range. */
DPM_HD static inline float dpm_swl_row_scale(float dloss, int64_t n, int32_t label,
                                             int64_t d) {
  return label >= 0 && label < d ? dpm_fdiv(dloss, (float)n) : 0.f;
}

/* SoftmaxWithLossGradient at column j of a row: y * s, less s at the
 * label, plus SoftmaxGradient of the softmax's own gradient dy (dot: the
 * row's <y, dy>) where has_dy. With label smoothing eps > 0 (d classes) the
 * target is q = (1 - eps) onehot + eps / d, and the first part (y - q) * s. */
DPM_HD static inline float dpm_swl_grad(float y, int64_t j, int32_t label, float s,
                                        float eps, int64_t d, int has_dy, float dy,
                                        float dot) {
  float t;
  if (eps == 0.f) {
    t = dpm_fmul(y, s);
    if (s != 0.f && j == label) t = dpm_fsub(t, s);
  } else {
    float off = dpm_fdiv(eps, (float)d);
    float q = j == label ? dpm_fadd(dpm_fsub(1.f, eps), off) : off;
    t = dpm_fmul(dpm_fsub(y, q), s);
  }
  if (has_dy) t = dpm_fadd(t, dpm_softmax_grad(y, dy, dot));
  return t;
}

/* -log(max(p, 1e-20)); a NaN p gives NaN. */
DPM_HD static inline double dpm_swl_nlog(double p) {
  return -log(p > DPM_PROB_FLOOR || isnan(p) ? p : DPM_PROB_FLOOR);
}

/* A row's loss term -log(max(y[label], 1e-20)), in double; a label out of
 * [0, d) is a class of probability 0 (the floor), a NaN probability gives
 * NaN. With label smoothing eps > 0 and the label in range:
 * (1 - eps) (-log y[label]) + eps / d * sum over j of -log y[j], each
 * probability floored alike. */
DPM_HD static inline double dpm_swl_row_loss(const float *y, int32_t label, int64_t d,
                                             float eps) {
  int in = label >= 0 && label < d;
  double p = in ? (double)y[label] : 0.0;
  if (eps == 0.f || !in) return dpm_swl_nlog(p);
  double all = 0;
  for (int64_t j = 0; j < d; j++) all += dpm_swl_nlog((double)y[j]);
  return (1.0 - (double)eps) * dpm_swl_nlog(p) + (double)eps / (double)d * all;
}

/* Sum of the loss terms of rows lane, lane + lanes ... < n, in order. */
DPM_HD static inline double dpm_swl_loss_part(const float *y, const int32_t *label,
                                              int64_t n, int64_t d, float eps, int lane,
                                              int lanes) {
  double s = 0;
  for (int64_t i = lane; i < n; i += lanes)
    s += dpm_swl_row_loss(y + i * d, label[i], d, eps);
  return s;
}

/* 1 when the row's label is among its top k classes, else 0. k == 1: the
 * row's first maximum (the CPU's scan: x[j] > x[best]) is at the label.
 * k > 1: Caffe2's count, fewer than k classes j rank above the label
 * (x[j] > x[label], or equal with j < label); a label out of [0, d) is
 * wrong. */
DPM_HD static inline int dpm_accuracy_row(const float *x, int32_t label, int64_t d,
                                          int64_t k) {
  if (k == 1) {
    int64_t best = 0;
    for (int64_t j = 1; j < d; j++) best = x[j] > x[best] ? j : best;
    return best == label;
  }
  if (label < 0 || label >= d) return 0;
  const float xl = x[label];
  int64_t above = 0;
  for (int64_t j = 0; j < d && above < k; j++)
    above += x[j] > xl || (x[j] == xl && j < label);
  return above < k;
}

/* Correct rows among lane, lane + lanes ... < n. */
DPM_HD static inline int64_t dpm_accuracy_part(const float *x, const int32_t *label,
                                               int64_t n, int64_t d, int64_t k, int lane,
                                               int lanes) {
  int64_t c = 0;
  for (int64_t i = lane; i < n; i += lanes)
    c += dpm_accuracy_row(x + i * d, label[i], d, k);
  return c;
}

#endif
