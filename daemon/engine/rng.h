/* Seeded random numbers: splitmix64 for seeding, xoroshiro128+ streams.
 * A stream (uint64_t[2]) belongs to one thread; the functions are pure. */
#ifndef DPM_RNG_H
#define DPM_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t dpm_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void dpm_rng_seed(uint64_t s[2], uint64_t seed) {
  s[0] = dpm_splitmix64(&seed);
  s[1] = dpm_splitmix64(&seed);
}

static inline uint64_t dpm_rng_next(uint64_t s[2]) {
  uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
  s1 ^= s0;
  s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
  s[1] = (s1 << 37) | (s1 >> 27);
  return r;
}

/* Uniform in [0, 1). */
static inline double dpm_rng_uniform(uint64_t s[2]) {
  return (double)(dpm_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n). */
static inline uint64_t dpm_rng_below(uint64_t s[2], uint64_t n) {
  return (uint64_t)(dpm_rng_uniform(s) * (double)n);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double dpm_rng_normal(uint64_t s[2]) {
  double u = dpm_rng_uniform(s), v = dpm_rng_uniform(s);
  return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

#endif
