/* Fuzz target: what dpmd does with a client's bytes before a request reaches
 * a handler (daemon/server/request.h): the bounded decoder (size, NUL bytes
 * in strings, the unpacked form's memory), then the argument checks that
 * need no model (paths' form against a real dpmd_paths, overrides moved
 * into a submitted spec, the model name), then, for a submit, the spec's
 * validation (common/validate.h). No file is opened. */
#include <stdlib.h>
#include <sys/stat.h>

#include "common/validate.h"
#include "fuzz.h"
#include "server/commands.h"
#include "server/paths.h"
#include "server/request.h"

/* A state dir and its paths, made once (read-only afterwards). */
static const dpmd_paths *paths(void) {
  static dpmd_config cfg;
  static dpmd_paths *p;
  if (p) return p;
  char dir[] = "/tmp/dpm-fuzz-XXXXXX", models[64], text[256];
  FUZZ_CHECK(mkdtemp(dir));
  snprintf(models, sizeof models, "%s/models", dir);
  FUZZ_CHECK(mkdir(models, 0700) == 0);
  snprintf(text, sizeof text, "state_dir: %s\nallowed_paths: [/tmp/allowed]\n", dir);
  dpm_err err = {0};
  FUZZ_CHECK(!dpmd_config_parse(text, strlen(text), "fuzz", &cfg, &err));
  FUZZ_CHECK(!dpmd_paths_create(&cfg, &p, &err));
  return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Dpm__Request *rq = NULL;
  dpm_err err = {0};
  dpm_status st = dpmd_request_decode(data, size, 1u << 20, &rq, &err);
  if (st) {
    FUZZ_CHECK(rq == NULL && err.code == st && err.msg[0]);
    return 0;
  }
  st = dpmd_command_check(paths(), rq, &err);
  if (!st && rq->command_case == DPM__REQUEST__COMMAND_SUBMIT) {
    const Dpm__ModelSpec *s = rq->submit->spec;
    FUZZ_CHECK(s->parallel && s->parallel->n_devices >= 1 && dpm_model_name_valid(s->name));
    st = dpm_spec_validate(s, &err);
  }
  if (st) FUZZ_CHECK(err.code == st && err.msg[0]);
  dpm__request__free_unpacked(rq, NULL);
  return 0;
}
