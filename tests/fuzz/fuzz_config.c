/* Fuzz target: dpmd's configuration parser (daemon/server/config.h) on
 * arbitrary text, parse only: defaults, then the YAML, never a file or the
 * token. The text is not NUL-terminated, as dpmd_config_parse allows. */
#include <string.h>

#include "fuzz.h"
#include "server/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dpmd_config cfg;
  dpm_err err = {0};
  dpm_status st = dpmd_config_parse((const char *)data, size, "fuzz", &cfg, &err);
  if (st == DPM_OK) {
    FUZZ_CHECK(cfg.n_listen >= 0 && cfg.n_allowed_paths >= 0 && cfg.state_dir);
    for (int i = 0; i < cfg.n_listen; i++) FUZZ_CHECK(strlen(cfg.listen[i]) > 0);
    for (int i = 0; i < cfg.n_allowed_paths; i++) fuzz_touch(cfg.allowed_paths[i], 1);
    if (cfg.events) fuzz_touch(cfg.events, strlen(cfg.events) + 1);
  } else {
    FUZZ_CHECK(err.code == st && cfg.listen == NULL && cfg.state_dir == NULL);
    /* Errors name the source ("fuzz:LINE:COL: ..."). */
    FUZZ_CHECK(st == DPM_NOMEM || !strncmp(err.msg, "fuzz", 4));
  }
  dpmd_config_fini(&cfg);
  dpmd_config_fini(&cfg); /* harmless twice: fini leaves it zeroed */
  return 0;
}
