/* Fuzz target: the checkpoint reader (daemon/io/checkpoint.h) on arbitrary
 * bytes, read from an in-memory file (fuzz_fs). A file that reads must give
 * entries consistent with the format's rules; one that does not must leave
 * the result empty with a message naming the file.
 *
 * Every header, index and tensor is CRC-checked, so almost any mutation
 * fails at the first CRC and the checks behind it would stay out of reach.
 * Each input is therefore read twice: as it is, and (when that changes
 * anything) with its CRCs recomputed where the format puts them, so that
 * the fuzzer explores the index and data checks too. */
#include <string.h>
#include <zlib.h>

#include "fuzz.h"
#include "io/checkpoint.h"

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
  return get32(p) | (uint64_t)get32(p + 4) << 32;
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static uint32_t crc(const uint8_t *p, uint64_t n) {
  return (uint32_t)crc32_z(0, p, (z_size_t)n);
}

/* Recompute, in b, each entry's data_crc (where its offset and size lie in
 * the file), the index CRC and the header CRC (format in checkpoint.h). */
static void fix_crcs(uint8_t *b, size_t size) {
  if (size < 96) return;
  uint64_t end = 96 + (uint64_t)get32(b + 68); /* index_bytes */
  if (end <= size) {
    for (uint64_t p = 96; p + 64 <= end;) {
      uint64_t off = get64(b + p + 40), n = get64(b + p + 48);
      if (off <= size && n <= size - off) put32(b + p + 56, crc(b + off, n));
      p += 64 + ((get32(b + p) & 0xffff) + 7) / 8 * 8; /* 64 + round_up(name_len, 8) */
    }
    put32(b + 88, crc(b + 96, end - 96));
  }
  put32(b + 92, crc(b, 92));
}

static void read_one(const uint8_t *data, size_t size) {
  static const char path[] = "fuzz.dpmckpt";
  fuzz_bytes in = {data, size};
  dpm_fs fs = fuzz_fs(&in);
  dpm_ckpt c;
  dpm_err err = {0};
  dpm_status st = dpm_ckpt_read(&fs, path, &c, &err);
  if (st != DPM_OK) {
    FUZZ_CHECK(c.n == 0 && !c.names && !c.kinds && !c.tensors);
    FUZZ_CHECK(err.code == st && !strncmp(err.msg, path, sizeof path - 1));
    dpm_ckpt_fini(&c); /* a no-op on the empty result */
    return;
  }
  FUZZ_CHECK(c.n >= 0 && c.n <= DPM_CKPT_MAX_ENTRIES);
  for (int i = 0; i < c.n; i++) {
    size_t len = strlen(c.names[i]);
    FUZZ_CHECK(len >= 1 && len <= DPM_CKPT_MAX_NAME);
    FUZZ_CHECK(c.kinds[i] == DPM_BLOB_PARAM || c.kinds[i] == DPM_BLOB_COMPUTED ||
               c.kinds[i] == DPM_BLOB_OPTIM || c.kinds[i] == DPM_BLOB_COUNTER);
    const dpm_tensor *t = &c.tensors[i];
    size_t bytes = dpm_shape_bytes(&t->shape);
    FUZZ_CHECK(t->data && (uintptr_t)t->data % 64 == 0 && bytes > 0 && bytes <= size);
    fuzz_touch(t->data, bytes);
    dpm_blob_kind kind = DPM_BLOB_ACT;
    FUZZ_CHECK(dpm_ckpt_find(&c, c.names[i], &kind) == t && kind == c.kinds[i]);
  }
  dpm_ckpt_fini(&c);
  FUZZ_CHECK(c.n == 0 && !c.names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  read_one(data, size);
  uint8_t *fixed = malloc(size ? size : 1);
  if (!fixed) return 0;
  memcpy(fixed, data, size);
  fix_crcs(fixed, size);
  if (memcmp(fixed, data, size)) read_one(fixed, size);
  free(fixed);
  return 0;
}
