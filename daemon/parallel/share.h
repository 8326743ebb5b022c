/* Work sharing between the device workers of one process: a replica that
 * reaches its step's gradient reduction early runs parts of a slower
 * replica's last backward op instead of waiting for it.
 *
 * Lock-step replicas run at the pace of the slowest. On a shared or
 * virtualised host one core often runs slower than the other for long
 * stretches, and the faster replica then waits at the all-reduce on
 * every step. The last op of backward (the first layer's weight gradient,
 * which needs no input gradient) is split into parts by its kernel
 * (dpm_kernel_def.parts, backend/backend.h); its owner takes parts one at a
 * time, and a waiting peer takes parts too, writing into the owner's
 * tensors. Each part is computed by the same code whichever thread runs it,
 * so results are bitwise those of the owner alone. This is a property of
 * replicas in one address space (the local backend); GPU and multi-host
 * replicas do not share.
 *
 * Rounds: in every round (training step) each rank calls dpm_share_run
 * once, with its copy of the same op, and then dpm_share_help once; all
 * ranks make the same calls in the same order (they run the same plan).
 * A rank's slot holds its round number and the next part to take in one
 * 64-bit word, so a part is claimed with one compare-and-swap, and a claim
 * for a round the owner has left can never succeed.
 *
 * Threads: rank r's calls come from rank r's worker, one at a time; peers
 * read its slot and run its parts concurrently. dpm_share_run returns only
 * when every part of its op is finished, whoever ran it, so the op's
 * tensors are the owner's again afterwards. create and destroy when no
 * rank is inside a call. */
#ifndef DPM_PARALLEL_SHARE_H
#define DPM_PARALLEL_SHARE_H

#include "engine/op.h"

typedef struct dpm_share dpm_share;

/* Slots for n ranks (2..DPM_COMM_MAX_RANKS). DPM_INVALID, DPM_NOMEM. */
dpm_status dpm_share_create(int n, dpm_share **out, dpm_err *err);
/* Run op (bound: its kernel has parts and run_part) with the peers' help:
 * runs its kernel's prepare (if any), takes parts until none is left, then
 * waits for those peers took. Every part runs through op->kernel, whoever
 * takes it. */
void dpm_share_run(dpm_share *s, int rank, const dpm_op *op);
/* Take parts of every peer's op of this round until all are taken,
 * spinning for a peer that has not reached its op yet; gives up on a
 * peer after wait_ms (the caller then meets it at a collective, which
 * sleeps and times out). Call after this round's dpm_share_run. */
void dpm_share_help(dpm_share *s, int rank, int wait_ms);
/* NULL is ignored. */
void dpm_share_destroy(dpm_share *s);

#endif
