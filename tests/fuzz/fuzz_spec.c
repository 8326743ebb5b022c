/* Fuzz target: the YAML spec front end through the engine's validation,
 * without tensors: dpm_spec_parse (YAML, schema, common/validate.h), then
 * dpm_model_build (ops, arguments, whole-net shape inference, autodiff,
 * fusion) for the spec's batch, on a 1x28x28 example (or the synthetic
 * reader's shape). Nothing is allocated for data: a spec asking for huge
 * tensors must be refused by the checked shape arithmetic, not run. */
#include "common/validate.h"
#include "engine/model.h"
#include "fuzz.h"
#include "common/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_status st = dpm_spec_parse((const char *)data, size, "fuzz.yaml", &spec, &err);
  if (st) {
    FUZZ_CHECK(spec == NULL && err.code == st);
    FUZZ_CHECK(st == DPM_NOMEM || !strncmp(err.msg, "fuzz.yaml", 9));
    return 0;
  }
  FUZZ_CHECK(dpm_spec_validate(spec, &err) == DPM_OK);
  const Dpm__InputSpec *in = spec->input;
  int64_t chw[3] = {1, 28, 28};
  for (int i = 0; in->n_shape == 3 && i < 3; i++) chw[i] = in->shape[i];
  dpm_model m;
  st = dpm_model_build(spec, chw, (int)in->batch_size, 0.5f, &m, &err);
  if (st == DPM_OK) {
    for (int i = 0; i < m.shapes.n; i++)
      FUZZ_CHECK(dpm_shape_check(&m.shapes.v[i].shape, NULL, NULL) == DPM_OK);
    dpm_model_fini(&m);
  } else {
    FUZZ_CHECK(err.code == st && err.msg[0]);
  }
  dpm_spec_free(spec);
  return 0;
}
