/* The model registry (server/models/registry.h) as a container: the models are
 * stand-in pointers, never dereferenced. */
#include <stdint.h>

#include "server/models/registry.h"
#include "test.h"

static struct dpmd_model *fake(int i) {
  return (struct dpmd_model *)(uintptr_t)(0x1000 + 16 * i);
}

TEST(registry_find_add_remove_iterate) {
  dpmd_registry *r;
  dpm_err err = {0};
  CHECK_INT(dpmd_registry_create(&r, &err), DPM_OK);
  static const char *const names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  for (int i = 0; i < 10; i++) { /* past the first allocation */
    CHECK_INT(dpmd_registry_reserve(r, &err), DPM_OK);
    dpmd_registry_add(r, names[i], fake(i));
  }
  CHECK_INT(dpmd_registry_count(r), 10);
  int ok = 1;
  for (int i = 0; i < 10; i++) ok &= dpmd_registry_find(r, names[i]) == fake(i);
  ok &= dpmd_registry_find(r, "x") == NULL && dpmd_registry_find(r, NULL) == NULL &&
        dpmd_registry_find(r, "") == NULL;
  /* removing moves the last one into the place */
  dpmd_registry_remove(r, fake(2));
  ok &= dpmd_registry_count(r) == 9 && dpmd_registry_at(r, 2) == fake(9) &&
        dpmd_registry_find(r, "c") == NULL && dpmd_registry_find(r, "j") == fake(9);
  dpmd_registry_remove(r, fake(2)); /* not registered: nothing */
  ok &= dpmd_registry_count(r) == 9;
  for (int i = 0; i < 10; i++) dpmd_registry_remove(r, fake(i));
  ok &= dpmd_registry_count(r) == 0 && dpmd_registry_find(r, "a") == NULL;
  dpmd_registry_destroy(r);
  CHECK(ok);
}
