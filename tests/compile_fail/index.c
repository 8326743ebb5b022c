/* Must not compile: indexing device memory. */
#include "backend/device.h"

void index_it(dpm_dev *dev) {
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, 4 * sizeof(float), &got);
  d[0] = 0;
}
