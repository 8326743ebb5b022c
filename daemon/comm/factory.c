/* The communicator factory (comm.h): picks the backend for a config
 * (nccl is the cuda plugin's: backend/cuda_load.h). Its
 * own file so that what only dispatches (comm.c, as in the predictor
 * library) links no backend it does not use. Stateless. */
#include "comm/comm.h"

#include "backend/cuda_load.h"

dpm_status dpm_comm_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  *out = NULL;
  int world = cfg->world ? cfg->world : cfg->size;
  switch (cfg->kind) {
  case DPM_COMM_LOCAL:
    if (cfg->rank_base != 0 || world != cfg->size)
      return dpm_errf(err, DPM_UNSUPPORTED,
                      "a job of %d ranks over several hosts needs a communicator across "
                      "them (gloo); the %d local ranks alone would reduce only their "
                      "own gradients",
                      world, cfg->size);
    return dpm_comm_local_create(cfg->size, cfg->timeout_ms, out, err);
  case DPM_COMM_GLOO:
    return dpm_comm_gloo_create(cfg, out, err);
  case DPM_COMM_NCCL: {
    const dpm_cuda_plugin *p = dpm_cuda_plugin_get();
    if (!p) return dpm_errf(err, DPM_UNSUPPORTED, "the nccl communicator needs the cuda plugin");
    return p->comm_create(cfg, out, err);
  }
  }
  return dpm_errf(err, DPM_INVALID, "communicator kind %d", (int)cfg->kind);
}

dpm_status dpm_comm_renew(dpm_comm **c, const dpm_comm_config *cfg, dpm_err *err) {
  if (!*c || !dpm_comm_broken(*c)) return DPM_OK;
  dpm_comm *fresh;
  dpm_status s = dpm_comm_create(cfg, &fresh, err);
  if (s) return s;
  dpm_comm_destroy(*c);
  *c = fresh;
  return DPM_OK;
}
