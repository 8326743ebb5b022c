/* ckpt_diff: a test tool that compares two checkpoints tensor by tensor.
 *
 *   ckpt_diff [--exact | --max REL] A B
 *
 * Both files are read and verified in full (io/checkpoint.h). They must
 * hold the same names with the same kinds and shapes (else exit 1). For
 * every float tensor of A it prints "NAME REL" with REL = max |a-b| / max
 * |a| over its elements (0 when both are all zeros; inf when a is all zeros
 * and b is not); integer tensors (counters) print their largest absolute
 * difference. A last line "max REL" holds the largest REL over the float
 * tensors, then a line with both files' metadata.
 *
 *   --exact    exit 1 unless every tensor is bitwise equal and the spec
 *              hash, iteration and reader position are the same (the
 *              creation time, devices and shards may differ)
 *   --max REL  exit 1 when a float tensor's REL is above REL, or an integer
 *              tensor differs
 *
 * Exit codes: 0 the files compare as asked, 1 they do not (or a file is
 * unreadable), 2 usage. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"

static int usage(void) {
  fprintf(stderr, "usage: ckpt_diff [--exact | --max REL] A B\n");
  return 2;
}

/* REL of float tensors a and b (same shape). */
static double rel_f32(const dpm_tensor *a, const dpm_tensor *b) {
  double diff = 0, mag = 0;
  for (int64_t k = 0; k < dpm_tensor_numel(a); k++) {
    diff = fmax(diff, fabs((double)dpm_f32(a)[k] - dpm_f32(b)[k]));
    mag = fmax(mag, fabs((double)dpm_f32(a)[k]));
  }
  if (diff == 0) return 0;
  return mag > 0 ? diff / mag : INFINITY;
}

/* The largest |a-b| of integer tensors a and b (same shape). */
static double diff_int(const dpm_tensor *a, const dpm_tensor *b) {
  double diff = 0;
  for (int64_t k = 0; k < dpm_tensor_numel(a); k++) {
    double x = a->shape.dtype == DPM_I64 ? (double)dpm_i64(a)[k] : ((int32_t *)a->data)[k];
    double y = a->shape.dtype == DPM_I64 ? (double)dpm_i64(b)[k] : ((int32_t *)b->data)[k];
    diff = fmax(diff, fabs(x - y));
  }
  return diff;
}

static void print_meta(const char *path, const dpm_ckpt_meta *m) {
  printf("%s: spec %016llx iter %llu reader %llu/%llu devices %u shards %u\n", path,
         (unsigned long long)m->spec_hash, (unsigned long long)m->iter,
         (unsigned long long)m->reader_epoch, (unsigned long long)m->reader_index,
         m->devices, m->shards);
}

int main(int argc, char **argv) {
  int exact = 0, i = 1;
  double max = INFINITY;
  if (i < argc && !strcmp(argv[i], "--exact")) {
    exact = 1;
    i++;
  } else if (i + 1 < argc && !strcmp(argv[i], "--max")) {
    char *end;
    max = strtod(argv[i + 1], &end);
    if (*end || !(max >= 0)) return usage();
    i += 2;
  }
  if (argc - i != 2) return usage();
  const char *pa = argv[i], *pb = argv[i + 1];
  dpm_ckpt a, b;
  dpm_err err = {0};
  if (dpm_ckpt_read(NULL, pa, &a, &err)) {
    fprintf(stderr, "ckpt_diff: %s\n", err.msg);
    return 1;
  }
  if (dpm_ckpt_read(NULL, pb, &b, &err)) {
    fprintf(stderr, "ckpt_diff: %s\n", err.msg);
    dpm_ckpt_fini(&a);
    return 1;
  }
  int same = 1, fits = a.n == b.n, ints_differ = 0;
  double worst = 0;
  if (!fits) fprintf(stderr, "ckpt_diff: %s holds %d tensors, %s %d\n", pa, a.n, pb, b.n);
  for (int k = 0; fits && k < a.n; k++) {
    dpm_blob_kind kind;
    const dpm_tensor *x = &a.tensors[k], *y = dpm_ckpt_find(&b, a.names[k], &kind);
    if (!y || kind != a.kinds[k] || !dpm_shape_equal(&x->shape, &y->shape)) {
      fprintf(stderr, "ckpt_diff: '%s' is not in %s with the same kind and shape\n",
              a.names[k], pb);
      fits = 0;
      break;
    }
    if (memcmp(x->data, y->data, dpm_shape_bytes(&x->shape))) same = 0;
    if (x->shape.dtype == DPM_F32) {
      double rel = rel_f32(x, y);
      printf("%s %.3g\n", a.names[k], rel);
      if (!(rel <= worst)) worst = rel;
    } else {
      double d = diff_int(x, y);
      printf("%s %.17g (integer)\n", a.names[k], d);
      ints_differ |= d != 0;
    }
  }
  if (fits) printf("max %.3g\n", worst);
  print_meta(pa, &a.meta);
  print_meta(pb, &b.meta);
  const dpm_ckpt_meta *ma = &a.meta, *mb = &b.meta;
  int meta_same = ma->spec_hash == mb->spec_hash && ma->iter == mb->iter &&
                  ma->reader_epoch == mb->reader_epoch && ma->reader_index == mb->reader_index;
  int ok = fits && (exact ? same && meta_same : worst <= max && !ints_differ);
  if (fits && exact) printf("%s\n", ok ? "identical" : "different");
  dpm_ckpt_fini(&a);
  dpm_ckpt_fini(&b);
  return ok ? 0 : 1;
}
