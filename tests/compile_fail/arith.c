/* Must not compile: pointer arithmetic on device memory (dpm_dptr_at is
 * the way). */
#include "backend/device.h"

void arith(dpm_dev *dev) {
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, 4 * sizeof(float), &got);
  dpm_dptr e = d + 1;
  (void)e;
}
