/* The C side of Gloo (gloo_shim.cc, C++17): one Gloo context per process
 * over TCP, formed through a rendezvous store, and the few collectives the
 * gloo communicator (gloo.c) needs. Plain C; nothing here throws: every
 * Gloo or C++ exception becomes a dpm_status and a message.
 *
 * Ranks here are Gloo ranks, one per process of the job ("process p"); the
 * messages also name the job-wide ranks a process runs (local_ranks per
 * process) and, once connected, the peer's address.
 *
 * Threads: a dpm_gloo is used by one thread at a time (created on one
 * thread, driven by another is fine). Calls block; each wait in them is
 * bounded by the timeout given at creation. Gloo writes to the peers from
 * the calling thread and from its own I/O thread: SIGPIPE is blocked in
 * both while they do (a peer gone mid-write is DPM_IO, never a signal), and
 * the calling thread's mask is as it was when a call returns.
 *
 * Errors: DPM_INVALID for bad arguments (checked before anything is sent),
 * DPM_TIMEOUT when peers did not answer within the timeout, DPM_IO for a
 * lost peer or a network or store failure, DPM_EXISTS for a rendezvous
 * prefix that was used before, DPM_NOMEM, DPM_INTERNAL for a Gloo failure
 * that is none of these. After any failure of a collective the context is
 * spent (Gloo closes its connections): every later call fails with
 * DPM_STATE; destroy it and form a new one under a new prefix. */
#ifndef DPM_COMM_GLOO_SHIM_H
#define DPM_COMM_GLOO_SHIM_H

#include <stddef.h>

/* comm.h and status.h are C headers: C linkage for C++ includers too. */
#ifdef __cplusplus
extern "C" {
#endif

#include "comm/comm.h"
#include "dpm/status.h"

typedef struct dpm_gloo dpm_gloo;

typedef struct dpm_gloo_config {
  int rank;                /* this process's Gloo rank, 0..size-1 */
  int size;                /* processes in the job, 1..DPM_COMM_MAX_RANKS */
  int local_ranks;         /* job-wide ranks per process (process p runs p*local_ranks
                              onwards), for messages only; >= 1 */
  int timeout_ms;          /* bound on every wait: each store wait, connecting, and
                              each collective's waits; > 0 */
  struct dpm_store *store; /* the rendezvous store (comm/store.h), the
                              caller's: used only during dpm_gloo_create */
  const char *prefix;      /* the formation's keys: "JOB/FORMATION", unique */
  const char *iface;       /* network interface to bind; NULL: the host name's */
} dpm_gloo_config;

/* Form the context: every process of the formation calls it with the same
 * store, prefix and size, and its own rank. Each process publishes its
 * address under the prefix, waits for the others' (timeout_ms per key: a
 * missing process fails the others after about timeout_ms), connects to
 * every other process, then exchanges the connections' addresses (so a
 * later failure can name its peer). *out is NULL on failure. The store is
 * used from this thread only, during this call. */
dpm_status dpm_gloo_create(const dpm_gloo_config *cfg, dpm_gloo **out, dpm_err *err);

/* Every process contributes `bytes` bytes (the same on every process and in
 * every call on this context: the first call fixes it; another size is
 * DPM_INVALID) from mine; all (size * bytes bytes) receives process p's at
 * p * bytes, this process's included. Each process sends to and receives
 * from every other one directly, so it also serves as a barrier; the
 * receives of the next call are posted as each call ends, so that a peer's
 * next contribution goes out at once. On a timeout the message names the
 * processes not heard from. `op` heads every message. */
dpm_status dpm_gloo_exchange(dpm_gloo *g, const char *op, const void *mine, size_t bytes,
                             void *all, dpm_err *err);

/* Sum count elements of type t (floats or doubles) across the processes,
 * in place (Gloo's ring algorithm: each segment is summed around the ring,
 * then passed on whole, so every process ends with the same bits). t,
 * count and the order of calls must be the same on every process (the
 * caller checks; Gloo cannot). */
dpm_status dpm_gloo_allreduce(dpm_gloo *g, const char *op, dpm_comm_dtype t, void *buf,
                              size_t count, dpm_err *err);

/* Sum count floats across the processes, in place, sending bf16 where
 * dpm_gloo_allreduce sends floats, and summing in fp32: each process
 * rounds its buf to bf16 (engine/lowp.h, to nearest even), and every
 * element of the result is those bf16 values widened (exactly) and summed
 * in fp32 in process order, ((x0 + x1) + x2) + ..., the same bits on every
 * process. Up to 3 processes every process gets every bf16 copy (an
 * allgather: (P-1) x 2 bytes per element sent) and sums them all; beyond,
 * the vector is cut into one segment per process (process p owns elements
 * [p*count/P, (p+1)*count/P), as evenly as whole elements allow), an
 * alltoallv hands each owner every copy of its segment, the owner sums
 * them, and an allgatherv of the fp32 segments gives every process the
 * result ((P-1)/P x 6 bytes per element). The ring sends 2 (P-1)/P x 4.
 * Scratch (the bf16 copies) is kept on the context and only grows. Same
 * rules as dpm_gloo_allreduce. */
dpm_status dpm_gloo_allreduce_bf16(dpm_gloo *g, const char *op, float *buf, size_t count,
                                   dpm_err *err);

/* Copy bytes from process root's buf into every other process's buf. */
dpm_status dpm_gloo_broadcast(dpm_gloo *g, const char *op, int root, void *buf,
                              size_t bytes, dpm_err *err);

/* Return once every process has called it. */
dpm_status dpm_gloo_barrier(dpm_gloo *g, const char *op, dpm_err *err);

/* "process P (job rank R, ADDRESS)" or "(job ranks A-B, ADDRESS)" into
 * buf (cap bytes, truncated): how messages name a process. */
void dpm_gloo_describe(const dpm_gloo *g, int process, char *buf, size_t cap);

/* Close the connections and free everything. NULL is ignored. */
void dpm_gloo_destroy(dpm_gloo *g);

#ifdef __cplusplus
}
#endif

#endif
