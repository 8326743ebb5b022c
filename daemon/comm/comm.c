/* Communicator dispatch: checks what every backend would check the same way
 * (a group, a rank inside it) and calls the backend's ops table. Stateless;
 * thread safety is the backend's (see comm.h). The factory is factory.c's
 * (so that the predictor library, which dispatches, links no network). */
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
  return s ? s : c->ops->allreduce(c, rank, DPM_COMM_F32, buf, count, err);
}

dpm_status dpm_comm_allreduce_f64(dpm_comm *c, int rank, double *buf, size_t count,
                                  dpm_err *err) {
  dpm_status s = check_rank(c, rank, "allreduce", err);
  return s ? s : c->ops->allreduce(c, rank, DPM_COMM_F64, buf, count, err);
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

dpm_status dpm_comm_failure(dpm_comm *c, dpm_err *err) {
  if (!dpm_comm_broken(c)) return DPM_OK;
  if (c->ops->failure) return c->ops->failure(c, err);
  return dpm_errf(err, DPM_STATE, "the %s communicator failed in an earlier collective",
                  c->ops->name);
}

const char *dpm_comm_backend(const dpm_comm *c) { return c ? c->ops->name : "none"; }

void dpm_comm_destroy(dpm_comm *c) {
  if (c) c->ops->destroy(c);
}
