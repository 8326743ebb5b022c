/* Staged communicator: an inner group over host memory (gloo) run on host
 * copies of device buffers, for replicas on devices whose memory host code
 * cannot touch (the test build's fenced); contract
 * at dpm_comm_staged_create (comm.h).
 *
 * Each collective of rank r: the rank's device buffer is copied into a host
 * buffer of the rank's own (dpm_dev_to_host, which waits for the device's
 * queued work), inner runs the collective on that copy, and the result is
 * copied back (dpm_dev_to_device, ordered before the device's next work).
 * A buffer that does not point into devs[r]'s memory (host memory: the
 * trainer's own words, or NULL) goes to inner as it is. Started
 * allreduces: the start copies out and starts inner's on the copy; the
 * wait waits for inner's oldest and copies that one back. Each rank keeps
 * a FIFO of DPM_COMM_MAX_STARTED slots, each with its own host buffer, and
 * one buffer for the blocking calls; buffers are 64-byte aligned
 * (whole cache lines, as the local sums read them) and only grow, so once a step has run every buffer has the
 * capacity the next needs and nothing is allocated.
 *
 * Only dpm_dev_* copies touch a device's bytes; the host copies are the
 * device's bytes too, read and written here only by those copies and by
 * inner (backend.h).
 *
 * Ownership: the group owns inner and its buffers; devs are the caller's
 * open devices (the registry keeps them open). Threads: a rank's state
 * (its buffers, its FIFO) is touched by that rank's calls only, which are
 * sequential (comm.h); inner does its own locking. Errors: inner's, with
 * its messages; a rank that cannot allocate its host copy passes no buffer
 * to inner (so every rank of the collective fails alike, DPM_INVALID
 * there, instead of waiting for it) and gets DPM_NOMEM itself, naming the
 * collective. On any failure nothing is copied back. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/device.h"
#include "comm/comm.h"

/* A grow-only host buffer. */
typedef struct {
  void *p;
  size_t cap;
} host_buf;

/* A started allreduce not yet waited for. */
typedef struct {
  float *dev;   /* the device buffer to copy the sum back into; NULL: none (a host
                   buffer passed as it is) */
  size_t count; /* floats */
  int nomem;    /* the host copy could not be allocated: the wait fails */
  host_buf copy;
} started;

typedef struct {
  host_buf now;                       /* the blocking calls' copy */
  started fifo[DPM_COMM_MAX_STARTED]; /* ring, oldest at head */
  int head, n;
} rank_state;

typedef struct {
  dpm_comm base; /* first: handed out as dpm_comm */
  dpm_comm *inner;
  int rank_base;
  dpm_dev **devs;    /* [size] */
  rank_state *ranks; /* [size] */
} staged_comm;

static staged_comm *staged_of(dpm_comm *c) { return (staged_comm *)c; }

/* Whether rank r's buf is device memory to stage (else it goes to inner as
 * it is: host memory, NULL, or a count inner refuses as too large). */
static int staged_buf(staged_comm *g, int r, const void *buf, size_t bytes_per,
                      size_t n) {
  return n <= SIZE_MAX / bytes_per && dpm_dev_owns(g->devs[r], buf);
}

/* b with room for at least `bytes` bytes, 64-byte aligned, its old
 * contents not kept (every use copies in first); NULL when out of memory
 * (b kept). */
static void *room(host_buf *b, size_t bytes) {
  if (b->cap >= bytes && b->p) return b->p;
  if (bytes > SIZE_MAX - 63) return NULL;
  void *p = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
  if (!p) return NULL;
  free(b->p);
  b->p = p;
  b->cap = bytes;
  return p;
}

static dpm_status host_nomem(const char *op, int jrank, size_t bytes, dpm_err *err) {
  return dpm_errf(err, DPM_NOMEM,
                  "%s: rank %d: no host copy of %zu bytes (out of memory)", op, jrank,
                  bytes);
}

static dpm_status staged_allreduce(dpm_comm *c, int rank, dpm_comm_dtype t, void *buf,
                                   size_t count, dpm_err *err) {
  staged_comm *g = staged_of(c);
  dpm_dev *dev = g->devs[rank];
  size_t es = dpm_comm_dtype_size(t);
  if (!staged_buf(g, rank, buf, es, count))
    return g->inner->ops->allreduce(g->inner, rank, t, buf, count, err);
  size_t bytes = count * es;
  void *host = room(&g->ranks[rank].now, bytes);
  if (!host) {
    dpm_err ignored;
    g->inner->ops->allreduce(g->inner, rank, t, NULL, count, &ignored);
    return host_nomem("allreduce", g->rank_base + rank, bytes, err);
  }
  dpm_dev_to_host(dev, host, dpm_dptr_wrap(buf), bytes);
  dpm_status s = g->inner->ops->allreduce(g->inner, rank, t, host, count, err);
  if (!s) dpm_dev_to_device(dev, dpm_dptr_wrap(buf), host, bytes);
  return s;
}

static dpm_status staged_broadcast(dpm_comm *c, int rank, int root, void *buf,
                                   size_t bytes, dpm_err *err) {
  staged_comm *g = staged_of(c);
  dpm_dev *dev = g->devs[rank];
  if (!staged_buf(g, rank, buf, 1, bytes))
    return dpm_comm_broadcast(g->inner, rank, root, buf, bytes, err);
  void *host = room(&g->ranks[rank].now, bytes);
  if (!host) {
    dpm_err ignored;
    dpm_comm_broadcast(g->inner, rank, root, NULL, bytes, &ignored);
    return host_nomem("broadcast", g->rank_base + rank, bytes, err);
  }
  int is_root = g->rank_base + rank == root;
  if (is_root)
    dpm_dev_to_host(dev, host, dpm_dptr_wrap(buf),
                    bytes); /* only the root's bytes matter */
  dpm_status s = dpm_comm_broadcast(g->inner, rank, root, host, bytes, err);
  if (!s && !is_root) dpm_dev_to_device(dev, dpm_dptr_wrap(buf), host, bytes);
  return s;
}

static dpm_status staged_barrier(dpm_comm *c, int rank, dpm_err *err) {
  return dpm_comm_barrier(staged_of(c)->inner, rank, err);
}

static dpm_status staged_start(dpm_comm *c, int rank, float *buf, size_t count,
                               dpm_err *err) {
  staged_comm *g = staged_of(c);
  rank_state *rs = &g->ranks[rank];
  if (rs->n == DPM_COMM_MAX_STARTED)
    return dpm_errf(err, DPM_INVALID,
                    "allreduce start: rank %d has %d started and not waited for",
                    g->rank_base + rank, DPM_COMM_MAX_STARTED);
  dpm_dev *dev = g->devs[rank];
  started *e = &rs->fifo[(rs->head + rs->n) % DPM_COMM_MAX_STARTED];
  size_t bytes = count * sizeof(float);
  float *pass = buf;
  e->dev = NULL;
  e->count = count;
  e->nomem = 0;
  if (staged_buf(g, rank, buf, sizeof(float), count)) {
    pass = room(&e->copy, bytes);
    if (pass) {
      dpm_dev_to_host(dev, pass, dpm_dptr_wrap(buf), bytes);
      e->dev = buf;
    } else {
      e->nomem = 1; /* inner refuses the missing buffer on every rank */
    }
  }
  dpm_err ignored;
  dpm_status s =
      dpm_comm_allreduce_start(g->inner, rank, pass, count, e->nomem ? &ignored : err);
  if (!s)
    rs->n++;
  else if (e->nomem)
    return host_nomem("allreduce start", g->rank_base + rank, bytes, err);
  return s;
}

static dpm_status staged_wait(dpm_comm *c, int rank, dpm_err *err) {
  staged_comm *g = staged_of(c);
  rank_state *rs = &g->ranks[rank];
  if (!rs->n)
    return dpm_errf(err, DPM_INVALID, "allreduce wait: rank %d has no allreduce started",
                    g->rank_base + rank);
  started *e = &rs->fifo[rs->head];
  rs->head = (rs->head + 1) % DPM_COMM_MAX_STARTED;
  rs->n--;
  dpm_err ignored;
  size_t bytes = e->count * sizeof(float);
  dpm_status s = dpm_comm_allreduce_wait(g->inner, rank, e->nomem ? &ignored : err);
  if (e->nomem) return host_nomem("allreduce wait", g->rank_base + rank, bytes, err);
  if (!s && e->dev)
    dpm_dev_to_device(g->devs[rank], dpm_dptr_wrap(e->dev), e->copy.p, bytes);
  return s;
}

static int staged_broken(dpm_comm *c) { return dpm_comm_broken(staged_of(c)->inner); }

static dpm_status staged_failure(dpm_comm *c, dpm_err *err) {
  return dpm_comm_failure(staged_of(c)->inner, err);
}

static void staged_destroy(dpm_comm *c) {
  staged_comm *g = staged_of(c);
  dpm_comm_destroy(g->inner);
  for (int r = 0; g->ranks && r < g->base.size; r++) {
    free(g->ranks[r].now.p);
    for (int k = 0; k < DPM_COMM_MAX_STARTED; k++) free(g->ranks[r].fifo[k].copy.p);
  }
  free(g->ranks);
  free(g->devs);
  free(g);
}

static const dpm_comm_ops staged_ops = {
    .name = "staged",
    .allreduce = staged_allreduce,
    .broadcast = staged_broadcast,
    .barrier = staged_barrier,
    .allreduce_start = staged_start,
    .allreduce_wait = staged_wait,
    .broken = staged_broken,
    .failure = staged_failure,
    .destroy = staged_destroy,
};

dpm_status dpm_comm_staged_create(dpm_comm *inner, struct dpm_dev *const *devs,
                                  int rank_base, dpm_comm **out, dpm_err *err) {
  *out = NULL;
  if (!inner) return dpm_errf(err, DPM_INVALID, "staged communicator: no inner group");
  int size = dpm_comm_size(inner);
  for (int r = 0; r < size; r++)
    if (!devs || !devs[r]) {
      dpm_comm_destroy(inner);
      return dpm_errf(err, DPM_INVALID, "staged communicator: no device for rank %d", r);
    }
  staged_comm *g = calloc(1, sizeof *g);
  if (g) {
    g->devs = malloc((size_t)size * sizeof *g->devs);
    g->ranks = calloc((size_t)size, sizeof *g->ranks);
  }
  if (!g || !g->devs || !g->ranks) {
    if (g) free(g->devs), free(g->ranks);
    free(g);
    dpm_comm_destroy(inner);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  for (int r = 0; r < size; r++) g->devs[r] = devs[r];
  g->base.ops = &staged_ops;
  g->base.size = size;
  g->inner = inner;
  g->rank_base = rank_base;
  *out = &g->base;
  return DPM_OK;
}
