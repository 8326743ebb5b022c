/* The rendezvous stores a spec may name here (rendezvous.h). */
#include "server/fleet/rendezvous.h"

#include <stdio.h>
#include <string.h>

#include "common/escape.h"
#include "server/config.h"
#include "server/paths.h"

/* The config's entry that allows store: "daemon", "file" for file:///...,
 * or the store itself. */
static int allowed(const dpmd_config *cfg, const char *store) {
  const char *kind = !strncmp(store, "file://", 7) ? "file" : store;
  for (int i = 0; i < cfg->n_rendezvous_stores; i++)
    if (!strcmp(cfg->rendezvous_stores[i], kind)) return 1;
  return 0;
}

const char *dpmd_rendezvous_store(const Dpm__ModelSpec *spec) {
  const Dpm__Rendezvous *rv = spec->parallel ? spec->parallel->rendezvous : NULL;
  return rv && rv->store && *rv->store ? rv->store : "daemon";
}

dpm_status dpmd_rendezvous_check(const dpmd *d, const Dpm__ModelSpec *spec,
                                 dpm_err *err) {
  if (!spec->parallel || !spec->parallel->n_shards) return DPM_OK; /* meets no one */
  const char *store = dpmd_rendezvous_store(spec);
  char b[256], list[512];
  if (!allowed(d->cfg, store)) {
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < d->cfg->n_rendezvous_stores && o < sizeof list; i++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "",
                            d->cfg->rendezvous_stores[i]);
    return dpm_errf(err, DPM_DENIED,
                    "parallel.rendezvous.store '%s' is not allowed on this dpmd "
                    "(rendezvous_stores in its config: %s)",
                    dpm_escape(store, b, sizeof b), o ? list : "none");
  }
  if (strncmp(store, "file://", 7) != 0) return DPM_OK;
  if (dpmd_paths_check(d->paths, store + 7, err))
    return dpm_err_prefix(
        err, "parallel.rendezvous.store '%s': ", dpm_escape(store, b, sizeof b));
  return DPM_OK;
}

const struct dpm_fs *dpmd_rendezvous_fs(const dpmd *d) {
  return dpmd_paths_files(d->paths);
}
