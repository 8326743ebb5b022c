/* Synthetic examples: a pure function of (seed, index), so any example can
 * be produced without storing the set. */
#include "engine/rng.h"
#include "io/reader.h"

void dpm_synthetic_example(uint64_t seed, int64_t i, int c, int h, int w, int num_classes,
                           uint8_t *pixels, int32_t *label) {
  uint64_t k = seed, st[2];
  uint64_t base = dpm_splitmix64(&k);
  dpm_rng_seed(st, base ^ ((uint64_t)i * 0xd1b54a32d192ed03ull));
  int32_t y = (int32_t)dpm_rng_below(st, (uint64_t)num_classes);
  *label = y;
  int64_t hw = (int64_t)h * w;
  for (int ch = 0; ch < c; ch++) {
    uint8_t *p = pixels + (int64_t)ch * hw;
    for (int64_t j = 0; j < hw; j++) {
      int band = (int)(j * num_classes / hw);
      uint8_t noise = (uint8_t)(dpm_rng_next(st) >> 57); /* [0, 128) */
      p[j] = (uint8_t)(noise + (band == y ? 127 : 0));
    }
  }
}
