/* Fuzz target: the WebDataset tar source (io/source.h, io/tar.c) on
 * arbitrary bytes as one shard, from an in-memory file (fuzz_fs): index it,
 * then read every sample and the whole shard.
 *
 * The first byte picks a mode: odd, the rest of the input gets a valid
 * header checksum written into every 512-byte block that is not all zeros
 * before it is indexed, so that mutations of header fields get past the
 * checksum and reach the walk behind it; even, the rest is indexed as it is.
 *
 * Invariants: open either fails naming the shard, or every sample lies
 * inside the shard, a bad sample's read fails with DPM_CORRUPT naming the
 * shard, and a good one's read gives exactly its located bytes of the shard
 * with a label below num_classes. The sample bound is kept small so that
 * inputs of many tiny members stay fast. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/source.h"

/* Writes each non-zero block's checksum as a tar writer would. */
static void fix_checksums(uint8_t *b, size_t n) {
  for (size_t off = 0; off + 512 <= n; off += 512) {
    uint8_t *h = b + off;
    unsigned sum = 0, any = 0;
    for (int i = 0; i < 512; i++) any |= h[i];
    if (!any) continue;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
    h[155] = ' ';
  }
}

static int run(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  if (!(data[0] & 1)) return run(data + 1, size - 1);
  uint8_t *copy = malloc(size);
  FUZZ_CHECK(copy);
  memcpy(copy, data + 1, size - 1);
  fix_checksums(copy, size - 1);
  run(copy, size - 1);
  free(copy);
  return 0;
}

static int run(const uint8_t *data, size_t size) {
  static const char path[] = "fuzz.tar";
  const char *paths[] = {path};
  fuzz_bytes in = {data, size};
  dpm_fs fs = fuzz_fs(&in);
  dpm_source_config cfg = {.kind = DPM_SOURCE_TAR,
                           .paths = paths,
                           .n_paths = 1,
                           .fs = &fs,
                           .num_classes = 10,
                           .max_samples = 4096,
                           .max_sample_bytes = 1 << 20,
                           .max_index_bytes = 1 << 22};
  dpm_source *src;
  dpm_err err = {0};
  if (dpm_source_open(&cfg, &src, &err)) {
    FUZZ_CHECK(src == NULL && !strncmp(err.msg, path, sizeof path - 1));
    return 0;
  }
  FUZZ_CHECK(dpm_source_num_shards(src) == 1);
  dpm_source_shard_info info;
  FUZZ_CHECK(dpm_source_shard(src, 0, &info, &err) == DPM_OK && info.size == size);
  FUZZ_CHECK(info.first == 0 && info.count == dpm_source_size(src));
  uint8_t *whole = malloc(size ? size : 1);
  FUZZ_CHECK(whole && dpm_source_shard_read(src, 0, whole, size, &err) == DPM_OK);
  FUZZ_CHECK(!memcmp(whole, data, size));
  dpm_source_buf buf = {0};
  int64_t bad = 0;
  uint64_t bytes = 0;
  for (int64_t i = 0; i < dpm_source_size(src); i++) {
    int64_t shard;
    uint64_t off, len;
    FUZZ_CHECK(dpm_source_locate(src, i, &shard, &off, &len, &err) == DPM_OK);
    FUZZ_CHECK(shard == 0 && off <= size && len <= size - off);
    dpm_sample smp;
    dpm_status st = dpm_source_read(src, i, &buf, &smp, &err);
    if (dpm_source_bad(src, i)) {
      bad++;
      FUZZ_CHECK(st == DPM_CORRUPT && !strncmp(err.msg, path, sizeof path - 1));
      continue;
    }
    FUZZ_CHECK(st == DPM_OK && smp.len == len && !memcmp(smp.data, data + off, len));
    FUZZ_CHECK(smp.label >= 0 && smp.label < 10 && smp.label == dpm_source_label(src, i));
    FUZZ_CHECK(smp.encoding == DPM_SAMPLE_JPEG || smp.encoding == DPM_SAMPLE_PNG);
    fuzz_touch(dpm_source_key(src, i), strlen(dpm_source_key(src, i)));
    bytes += len;
  }
  FUZZ_CHECK(bad == dpm_source_num_bad(src) && bytes == dpm_source_bytes(src));
  dpm_source_buf_free(&buf);
  free(whole);
  dpm_source_close(src);
  return 0;
}
