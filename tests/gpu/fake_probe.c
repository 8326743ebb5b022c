/* A driver probe that reports one GPU whatever the host has: the
 * rehearsal (tests/gpu/rehearsal.sh) puts it in place of the bundle's
 * libdpm_cuda_probe.so to check the verdict "a GPU was found but the
 * plugin does not load" on a host without a GPU. */
#include <stddef.h>

#include "backend/cuda/plugin.h"

__attribute__((visibility("default"))) int dpm_cuda_probe(char *why, size_t n) {
  (void)why, (void)n;
  return 1;
}
