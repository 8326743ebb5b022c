/* Must not compile: device memory handed where host memory goes. */
#include <string.h>

#include "backend/device.h"

void copy_it(dpm_dev *dev, float *host) {
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, 4 * sizeof(float), &got);
  memcpy(host, d, 4 * sizeof(float));
}
