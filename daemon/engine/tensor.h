/* Tensors: dense float32/bf16/f16/int32/int64 arrays of up to 4 dimensions (NCHW),
 * 64-byte aligned, on a device (backend/device.h) or in host memory.
 *
 * Device: a tensor with `dev` set lives in that device's memory, taken from
 * its caching allocator; only kernels and backend code touch its bytes, and
 * everything else crosses with dpm_tensor_read / dpm_tensor_write (copies
 * through the backend). dev NULL: plain host memory (the predictor runtime,
 * tests of single ops).
 *
 * Ownership: a dpm_tensor owns its data (capacity > 0) and dpm_tensor_fini
 * gives it back, or is a view of memory owned elsewhere (capacity 0: a
 * reader's batch buffer, a gradient arena), which fini leaves alone. A
 * tensor is not thread-safe; the executor gives each tensor one writer at a
 * time. */
#ifndef DPM_TENSOR_H
#define DPM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "backend/dptr.h"
#include "dpm/status.h"

#define DPM_MAX_DIMS 4
#define DPM_ALIGN 64
/* The largest tensor the engine accepts: 1 TiB. With every shape checked
 * against it (dpm_shape_check), products of a few dims and sums over a net's
 * blobs stay far inside 64 bits. */
#define DPM_MAX_TENSOR_BYTES ((uint64_t)1 << 40)

/* DPM_BF16 and DPM_F16 hold 16-bit patterns (engine/lowp.h): the working
 * copies and activations of a model whose precision.compute is bf16/fp16. */
typedef enum { DPM_F32, DPM_I32, DPM_I64, DPM_BF16, DPM_F16, DPM_DTYPE_COUNT } dpm_dtype;

/* 1 for the floating types (f32, bf16, f16): the ones gradients flow through. */
static inline int dpm_dtype_is_float(dpm_dtype t) {
  return t == DPM_F32 || t == DPM_BF16 || t == DPM_F16;
}
/* 1 for the 16-bit floating types. */
static inline int dpm_dtype_is_low(dpm_dtype t) { return t == DPM_BF16 || t == DPM_F16; }

/* Shape and element type; ndim 0 is a scalar (one element). */
typedef struct dpm_shape {
  dpm_dtype dtype;
  int ndim;
  int64_t d[DPM_MAX_DIMS];
} dpm_shape;

struct dpm_dev;

typedef struct dpm_tensor {
  dpm_shape shape;
  void *data;          /* 64-byte aligned, shape-sized; NULL before allocation */
  size_t capacity;     /* bytes allocated at data; 0 for a view */
  struct dpm_dev *dev; /* where data lives; NULL: host memory */
} dpm_tensor;

const char *dpm_dtype_name(dpm_dtype t);
size_t dpm_dtype_size(dpm_dtype t);

/* Shape constructors: dpm_shape_make(DPM_F32, 2, (int64_t[]){64, 784}). */
dpm_shape dpm_shape_make(dpm_dtype t, int ndim, const int64_t *d);
dpm_shape dpm_shape_scalar(dpm_dtype t);
/* Element and byte counts. Unchecked: only for shapes that passed
 * dpm_shape_check (every shape in a shape table, tensor or checkpoint). */
int64_t dpm_shape_numel(const dpm_shape *s);
size_t dpm_shape_bytes(const dpm_shape *s);
/* A shape computed from untrusted values (spec arguments, file headers):
 * a known dtype, 0..DPM_MAX_DIMS dims, each >= 0, and numel x dtype size
 * at most DPM_MAX_TENSOR_BYTES, computed with overflow checks. DPM_OK with
 * the byte count in *bytes (may be NULL), else DPM_SHAPE naming the shape
 * and the limit. */
dpm_status dpm_shape_check(const dpm_shape *s, uint64_t *bytes, dpm_err *err);
int dpm_shape_equal(const dpm_shape *a, const dpm_shape *b);
/* Writes "f32[64,784]" into buf; returns buf. */
char *dpm_shape_str(const dpm_shape *s, char *buf, size_t n);
/* Product of dims [from, to). */
int64_t dpm_shape_span(const dpm_shape *s, int from, int to);

/* Give t the shape s, reallocating (zeroed, on t->dev) only when capacity
 * is short. DPM_NOMEM on allocation failure (t unchanged). */
dpm_status dpm_tensor_resize(dpm_tensor *t, const dpm_shape *s);
/* The first `bytes` bytes of t's data to host memory dst, or from host
 * memory src into it: a backend copy for a device tensor, memcpy else. */
void dpm_tensor_read(const dpm_tensor *t, void *dst, size_t bytes);
void dpm_tensor_write(dpm_tensor *t, const void *src, size_t bytes);
void dpm_tensor_fini(dpm_tensor *t);
/* Make t a view of `data` (64-byte aligned, shape-sized, owned by the caller
 * and valid while t is used), freeing what t owned. */
void dpm_tensor_view(dpm_tensor *t, const dpm_shape *s, void *data);
/* The same for memory on t->dev (from dpm_dev_alloc; backend/dptr.h). */
void dpm_tensor_view_mem(dpm_tensor *t, const dpm_shape *s, dpm_dptr data);
/* t's data as the handle host code holds for device memory (dpm_dev_copy
 * and the like take it); never dereferenced. */
static inline dpm_dptr dpm_tensor_mem(const dpm_tensor *t) {
  return dpm_dptr_wrap(t->data);
}
static inline int64_t dpm_tensor_numel(const dpm_tensor *t) {
  return dpm_shape_numel(&t->shape);
}
static inline float *dpm_f32(const dpm_tensor *t) { return (float *)t->data; }
static inline int32_t *dpm_i32(const dpm_tensor *t) { return (int32_t *)t->data; }
static inline int64_t *dpm_i64(const dpm_tensor *t) { return (int64_t *)t->data; }
static inline uint16_t *dpm_u16(const dpm_tensor *t) { return (uint16_t *)t->data; }

/* 64-byte aligned allocation (zeroed); free with dpm_free. */
void *dpm_alloc(size_t bytes);
void dpm_free(void *p);

#endif
