/* Must not compile: host code dereferencing device memory. */
#include "backend/device.h"

float deref(dpm_dev *dev) {
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, sizeof(float), &got);
  return *(float *)d;
}
