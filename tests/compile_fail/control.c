/* Control: the ways across that host code may use compile (run.sh). */
#include "backend/device.h"

float control(dpm_dev *dev) {
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, 4 * sizeof(float), &got);
  float h[4] = {1, 2, 3, 4}, back[4];
  dpm_dev_to_device(dev, d, h, sizeof h);
  dpm_dev_copy(dev, dpm_dptr_at(d, 2 * sizeof(float)), d, 2 * sizeof(float));
  dpm_dev_to_host(dev, back, d, sizeof back);
  dpm_dev_free(dev, d, got);
  return back[3];
}
