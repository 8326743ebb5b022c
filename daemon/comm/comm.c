/* Communicator dispatch: checks what every backend would check the same way
 * (a group, a rank inside it) and calls the backend's ops table. Stateless;
 * thread safety is the backend's (see comm.h). */
#include "comm/comm.h"

static dpm_status check_rank(const dpm_comm *c, int rank, const char *op, dpm_err *err) {
  if (!c) return dpm_errf(err, DPM_INVALID, "%s: no communicator", op);
  if (rank < 0 || rank >= c->size)
    return dpm_errf(err, DPM_INVALID, "%s: rank %d outside the group of %d", op, rank,
                    c->size);
  return DPM_OK;
}

dpm_status dpm_comm_allreduce(dpm_comm *c, int rank, float *buf, size_t count,
                              dpm_err *err) {
  dpm_status s = check_rank(c, rank, "allreduce", err);
  return s ? s : c->ops->allreduce(c, rank, buf, count, err);
}

dpm_status dpm_comm_allreduce_start(dpm_comm *c, int rank, float *buf, size_t count,
                                    dpm_err *err) {
  dpm_status s = check_rank(c, rank, "allreduce start", err);
  return s ? s : c->ops->allreduce_start(c, rank, buf, count, err);
}

dpm_status dpm_comm_allreduce_wait(dpm_comm *c, int rank, dpm_err *err) {
  dpm_status s = check_rank(c, rank, "allreduce wait", err);
  return s ? s : c->ops->allreduce_wait(c, rank, err);
}

dpm_status dpm_comm_broadcast(dpm_comm *c, int rank, int root, void *buf, size_t bytes,
                              dpm_err *err) {
  dpm_status s = check_rank(c, rank, "broadcast", err);
  return s ? s : c->ops->broadcast(c, rank, root, buf, bytes, err);
}

dpm_status dpm_comm_barrier(dpm_comm *c, int rank, dpm_err *err) {
  dpm_status s = check_rank(c, rank, "barrier", err);
  return s ? s : c->ops->barrier(c, rank, err);
}

int dpm_comm_size(const dpm_comm *c) { return c ? c->size : 0; }

int dpm_comm_broken(dpm_comm *c) { return c ? c->ops->broken(c) : 0; }

const char *dpm_comm_backend(const dpm_comm *c) { return c ? c->ops->name : "none"; }

void dpm_comm_destroy(dpm_comm *c) {
  if (c) c->ops->destroy(c);
}

/* ---- the factory ------------------------------------------------------------ */

dpm_status dpm_comm_create(const dpm_comm_config *cfg, dpm_comm **out, dpm_err *err) {
  *out = NULL;
  int world = cfg->world ? cfg->world : cfg->size;
  switch (cfg->kind) {
  case DPM_COMM_LOCAL:
    if (cfg->rank_base != 0 || world != cfg->size)
      return dpm_errf(err, DPM_UNSUPPORTED,
                      "a job of %d ranks over several hosts needs a communicator across "
                      "them (gloo), which this build does not have; the %d local ranks "
                      "alone would reduce only their own gradients",
                      world, cfg->size);
    return dpm_comm_local_create(cfg->size, cfg->timeout_ms, out, err);
  case DPM_COMM_GLOO:
    return dpm_errf(err, DPM_UNSUPPORTED, "the gloo communicator is not in this build");
  case DPM_COMM_NCCL:
    return dpm_errf(err, DPM_UNSUPPORTED, "the nccl communicator is not in this build");
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
