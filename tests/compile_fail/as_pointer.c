/* Must not compile: device memory taken as a host pointer. */
#include "backend/device.h"

float as_pointer(dpm_dev *dev) {
  size_t got;
  float *p = dpm_dev_alloc(dev, 4 * sizeof(float), &got);
  return p[1];
}
