/* The driver probe: how many CUDA devices the driver reports, or why none.
 * Built twice: into the plugin (its backend's probe), and alone into
 * build/libdpm_cuda_probe.so, which links cudart only (half a megabyte
 * resident), so that the loader (backend/cuda_load.c) learns at start
 * whether a GPU is there without mapping cuBLASLt and cuDNN (~150 MB
 * resident) on hosts that have none. Any thread. */
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>

#include "backend/cuda/plugin.h"

__attribute__((visibility("default"))) int dpm_cuda_probe(char *why, size_t n) {
  int count = 0; /* cudaGetDeviceCount leaves it untouched on failure */
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    snprintf(why, n, "no usable CUDA driver or device: %s (%s)", cudaGetErrorString(e),
             cudaGetErrorName(e));
    return 0;
  }
  if (!count) snprintf(why, n, "the CUDA driver reports no device");
  return count;
}
