/* pack_check: checks what dpm-pack wrote against the IDX set it came from,
 * through dpm's own readers (io/source.h), decoding each PNG with libpng:
 *
 *   pack_check tar|lmdb IMAGES LABELS PATH...
 *
 * Opens the tar shards (or the LMDB directory) PATH..., and requires the
 * same number of samples as the IDX set, none bad, sample i's label the
 * IDX label i, and its PNG decoding to exactly IDX image i's pixels (grey,
 * 8-bit, same size). Prints the index time, the index's memory, the
 * encoded bytes and the samples checked; exits 1 on the first difference. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/idx.h"
#include "io/source.h"

static int fail(const char *msg) {
  fprintf(stderr, "pack_check: %s\n", msg);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 5) return fail("usage: pack_check tar|lmdb IMAGES LABELS PATH...");
  dpm_source_kind kind;
  if (dpm_source_kind_parse(argv[1], &kind)) return fail("kind is tar or lmdb");
  dpm_idx_dataset d;
  dpm_err err = {0};
  if (dpm_idx_dataset_load(NULL, argv[2], argv[3], 256, &d, &err)) return fail(err.msg);
  dpm_source_config cfg = {.kind = kind,
                           .paths = (const char *const *)argv + 4,
                           .n_paths = argc - 4,
                           .num_classes = 10};
  dpm_source *src;
  double t0 = dpm_mono_s();
  if (dpm_source_open(&cfg, &src, &err)) return fail(err.msg);
  double index_s = dpm_mono_s() - t0;
  int rc = 0;
  char msg[600];
  if (dpm_source_size(src) != d.n || dpm_source_num_bad(src)) {
    snprintf(msg, sizeof msg, "%lld samples (%lld bad), expected %lld",
             (long long)dpm_source_size(src), (long long)dpm_source_num_bad(src),
             (long long)d.n);
    rc = fail(msg);
  }
  size_t px = (size_t)d.rows * (size_t)d.cols;
  uint8_t *img = malloc(px);
  dpm_source_buf buf = {0};
  for (int64_t i = 0; !rc && i < d.n; i++) {
    dpm_sample smp;
    if (dpm_source_read(src, i, &buf, &smp, &err)) {
      rc = fail(err.msg);
      break;
    }
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (smp.encoding != DPM_SAMPLE_PNG || smp.label != d.labels.data[i] ||
        !png_image_begin_read_from_memory(&im, smp.data, smp.len) ||
        im.width != (png_uint_32)d.cols || im.height != (png_uint_32)d.rows ||
        (im.format = PNG_FORMAT_GRAY, !png_image_finish_read(&im, NULL, img, 0, NULL)) ||
        memcmp(img, d.images.data + (size_t)i * px, px)) {
      png_image_free(&im);
      snprintf(msg, sizeof msg, "sample %lld (%s) differs from the IDX set", (long long)i,
               dpm_source_key(src, i));
      rc = fail(msg);
      break;
    }
  }
  if (!rc)
    printf("index_s: %.3f\nindex_bytes: %llu\nimage_bytes: %llu\nchecked: %lld\n",
           index_s, (unsigned long long)dpm_source_index_bytes(src),
           (unsigned long long)dpm_source_bytes(src), (long long)d.n);
  free(img);
  dpm_source_buf_free(&buf);
  dpm_source_close(src);
  dpm_idx_dataset_fini(&d);
  return rc;
}
