/* The communicator factory (comm.h): which backend a job's replicas need,
 * and the group made for a config, with the rendezvous store it meets
 * through opened for the create (comm/store.h; nccl is a backend's own:
 * backend.h, comm_create). Its own file so that what only dispatches (comm.c,
 * as in the predictor library) links no backend it does not use.
 * Stateless. */
#include "comm/comm.h"

#include <stdlib.h>

#include "backend/backend.h"
#include "comm/store.h"

static const char *const kind_names[DPM_COMM_KIND_COUNT] = {
    [DPM_COMM_LOCAL] = "local",   [DPM_COMM_GLOO] = "gloo", [DPM_COMM_NCCL] = "nccl",
    [DPM_COMM_STAGED] = "staged", [DPM_COMM_LOOP] = "loop",
};

const char *dpm_comm_kind_name(dpm_comm_kind kind) {
  return kind >= 0 && kind < DPM_COMM_KIND_COUNT ? kind_names[kind] : "?";
}

dpm_comm_kind dpm_comm_choose(dpm_device_kind device, int shards) {
  if (dpm_backend_brings_comm(device)) return DPM_COMM_NCCL;
  if (shards <= 1) return DPM_COMM_LOCAL;
  const dpm_backend *b = dpm_backend_of(device);
  return b && !b->host_visible ? DPM_COMM_STAGED : DPM_COMM_GLOO;
}

static dpm_status make_local(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  int world = cfg->world ? cfg->world : cfg->size;
  if (cfg->rank_base != 0 || world != cfg->size)
    return dpm_errf(err, DPM_UNSUPPORTED,
                    "a job of %d ranks over several hosts needs a communicator across "
                    "them (gloo); the %d local ranks alone would reduce only their "
                    "own gradients",
                    world, cfg->size);
  return dpm_comm_local_create(cfg->size, cfg->timeout_ms, out, err);
}

static dpm_status make_nccl(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  for (int k = 0; k < DPM_DEVICE_KIND_COUNT; k++) {
    const dpm_backend *be = dpm_backend_of((dpm_device_kind)k);
    if (be && be->comm_create) return be->comm_create(cfg, out, err);
  }
  return dpm_errf(err, DPM_UNSUPPORTED, "the nccl communicator needs the cuda plugin");
}

/* A gloo group wrapped to run on host copies of cfg->devs's buffers. */
static dpm_status make_staged(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  if (!cfg->devs)
    return dpm_errf(err, DPM_INVALID, "staged comm: no devices for its %d ranks",
                    cfg->size);
  dpm_comm *inner;
  dpm_status s = dpm_comm_gloo_create(cfg, &inner, err);
  if (s) return s;
  return dpm_comm_staged_create(inner, cfg->devs, cfg->rank_base, out, err);
}

static const struct {
  dpm_status (*make)(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err);
  int meets; /* across processes, the group meets through the rendezvous store */
  int bf16;  /* takes DPM_COMM_WIRE_BF16 (rounds what crosses processes, or nothing
                crosses) */
} kinds[DPM_COMM_KIND_COUNT] = {
    [DPM_COMM_LOCAL] = {make_local, 0, 1},
    [DPM_COMM_GLOO] = {dpm_comm_gloo_create, 1, 1},
    [DPM_COMM_NCCL] = {make_nccl, 1, 0},
    [DPM_COMM_STAGED] = {make_staged, 1, 1},
#ifdef DPM_TEST_BUILD
    [DPM_COMM_LOOP] = {dpm_comm_loop_create, 0, 1},
#endif
};

dpm_status dpm_comm_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  *out = NULL;
  if (cfg->kind < 0 || cfg->kind >= DPM_COMM_KIND_COUNT || !kinds[cfg->kind].make)
    return dpm_errf(err, DPM_INVALID, "communicator kind %d", (int)cfg->kind);
  if (cfg->wire == DPM_COMM_WIRE_BF16 && !kinds[cfg->kind].bf16)
    return dpm_errf(err, DPM_UNSUPPORTED,
                    "precision.allreduce bf16: the %s communicator sums and sends fp32 "
                    "only (bf16 transfer is gloo's, for CPU devices)",
                    dpm_comm_kind_name(cfg->kind));
  dpm_comm_config c = *cfg;
  c.store = NULL;
  int world = cfg->world ? cfg->world : cfg->size;
  if (kinds[c.kind].meets && world > cfg->size &&
      dpm_store_open(&cfg->rendezvous, cfg->timeout_ms, &c.store, err))
    return err->code;
  dpm_status s = kinds[c.kind].make(&c, out, err);
  dpm_store_close(c.store);
  return s;
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
