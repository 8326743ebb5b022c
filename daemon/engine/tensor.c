/* Tensor shapes and aligned storage. */
#include "engine/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {[DPM_F32] = {"f32", 4},
              [DPM_I32] = {"i32", 4},
              [DPM_I64] = {"i64", 8},
              [DPM_BF16] = {"bf16", 2},
              [DPM_F16] = {"f16", 2}};
_Static_assert(sizeof dtypes / sizeof *dtypes == DPM_DTYPE_COUNT, "dtype table");

const char *dpm_dtype_name(dpm_dtype t) { return dtypes[t].name; }
size_t dpm_dtype_size(dpm_dtype t) { return dtypes[t].size; }

dpm_shape dpm_shape_make(dpm_dtype t, int ndim, const int64_t *d) {
  dpm_shape s = {.dtype = t, .ndim = ndim};
  for (int i = 0; i < ndim; i++) s.d[i] = d[i];
  return s;
}

dpm_shape dpm_shape_scalar(dpm_dtype t) { return (dpm_shape){.dtype = t}; }

int64_t dpm_shape_span(const dpm_shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= s->d[i];
  return n;
}

int64_t dpm_shape_numel(const dpm_shape *s) { return dpm_shape_span(s, 0, s->ndim); }

size_t dpm_shape_bytes(const dpm_shape *s) {
  return (size_t)dpm_shape_numel(s) * dtypes[s->dtype].size;
}

dpm_status dpm_shape_check(const dpm_shape *s, uint64_t *bytes, dpm_err *err) {
  uint64_t n = 1;
  int ok =
      (unsigned)s->dtype < DPM_DTYPE_COUNT && s->ndim >= 0 && s->ndim <= DPM_MAX_DIMS;
  if (ok) n = dtypes[s->dtype].size;
  for (int i = 0; ok && i < s->ndim; i++)
    ok = s->d[i] >= 0 && !__builtin_mul_overflow(n, (uint64_t)s->d[i], &n) &&
         n <= DPM_MAX_TENSOR_BYTES;
  if (ok && n <= DPM_MAX_TENSOR_BYTES) {
    if (bytes) *bytes = n;
    return DPM_OK;
  }
  char dims[128];
  size_t k = 0;
  dims[0] = 0;
  for (int i = 0; i < s->ndim && i < DPM_MAX_DIMS && k < sizeof dims; i++)
    k += (size_t)snprintf(dims + k, sizeof dims - k, i ? ",%lld" : "%lld",
                          (long long)s->d[i]);
  return dpm_errf(err, DPM_SHAPE, "shape [%s] is larger than %llu bytes or malformed",
                  dims, (unsigned long long)DPM_MAX_TENSOR_BYTES);
}

int dpm_shape_equal(const dpm_shape *a, const dpm_shape *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

char *dpm_shape_str(const dpm_shape *s, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", dtypes[s->dtype].name);
  for (int i = 0; i < s->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)s->d[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

void *dpm_alloc(size_t bytes) {
  size_t rounded = (bytes + DPM_ALIGN - 1) / DPM_ALIGN * DPM_ALIGN;
  void *p = aligned_alloc(DPM_ALIGN, rounded ? rounded : DPM_ALIGN);
  if (p) memset(p, 0, rounded);
  return p;
}

void dpm_free(void *p) { free(p); }

/* t's memory back to where it came from. */
static void release(dpm_tensor *t) {
  if (!t->capacity) return;
  if (t->dev)
    dpm_dev_free(t->dev, dpm_dptr_wrap(t->data), t->capacity);
  else
    dpm_free(t->data);
}

dpm_status dpm_tensor_resize(dpm_tensor *t, const dpm_shape *s) {
  size_t bytes = dpm_shape_bytes(s), got = bytes ? bytes : DPM_ALIGN;
  if (bytes > t->capacity || !t->data) {
    /* dpm_alloc(0) takes one block: owned, so capacity is never 0 */
    void *p =
        t->dev ? dpm_dptr_raw(dpm_dev_alloc(t->dev, bytes, &got)) : dpm_alloc(bytes);
    if (!p) return DPM_NOMEM;
    release(t);
    t->data = p;
    t->capacity = got;
  }
  t->shape = *s;
  return DPM_OK;
}

void dpm_tensor_view(dpm_tensor *t, const dpm_shape *s, void *data) {
  release(t);
  t->shape = *s;
  t->data = data;
  t->capacity = 0;
}

void dpm_tensor_view_mem(dpm_tensor *t, const dpm_shape *s, dpm_dptr data) {
  dpm_tensor_view(t, s, dpm_dptr_raw(data));
}

void dpm_tensor_fini(dpm_tensor *t) {
  release(t);
  memset(t, 0, sizeof *t);
}

void dpm_tensor_read(const dpm_tensor *t, void *dst, size_t bytes) {
  if (t->dev)
    dpm_dev_to_host(t->dev, dst, dpm_tensor_mem(t), bytes);
  else if (bytes)
    memcpy(dst, t->data, bytes);
}

void dpm_tensor_write(dpm_tensor *t, const void *src, size_t bytes) {
  if (t->dev)
    dpm_dev_to_device(t->dev, dpm_tensor_mem(t), src, bytes);
  else if (bytes)
    memcpy(t->data, src, bytes);
}
