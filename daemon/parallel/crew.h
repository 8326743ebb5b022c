/* A crew: the warm threads of one device set, created once and shared by
 * every model (trainer) that runs on those devices. Crews own threads;
 * communicators belong to what needs them (each trainer makes its own,
 * comm/comm.h's factory).
 *
 * A crew of n ranks has n-1 persistent worker threads (ranks 1..n-1; rank 0
 * is whichever thread calls dpm_crew_run).
 *
 * Runs: dpm_crew_run(fn, arg) calls fn(arg, rank) once on every rank, in
 * lock-step, and returns when all have returned. Runs are serialised, one
 * at a time per crew, in the order the callers arrived (FIFO): two trainers
 * driving one crew from two threads take turns run by run. A waiting worker
 * spins briefly before sleeping (comm/spin.h), so runs that follow each
 * other within microseconds do not pay a wake-up.
 *
 * What fn must do: leave nothing in flight on any communicator it uses
 * when it returns, on any rank: every collective it started has been
 * waited for (after a failure too). Then no collective of one run can meet
 * one of the next. Between two runs no rank is inside fn, so the caller may
 * replace a broken communicator there (dpm_comm_renew). fn must not call
 * dpm_crew_run on its own crew.
 *
 * Threads: dpm_crew_run from any threads; dpm_crew_size anywhere; create
 * and destroy by the owner, destroy when nobody runs on the crew any more. */
#ifndef DPM_PARALLEL_CREW_H
#define DPM_PARALLEL_CREW_H

#include <sched.h>

#include "dpm/status.h"

typedef struct dpm_crew dpm_crew;

#define DPM_CREW_MAX_RANKS 1024

/* n ranks (1..DPM_CREW_MAX_RANKS). DPM_INVALID, DPM_NOMEM (also when a
 * thread cannot be started); *out is NULL on failure. */
dpm_status dpm_crew_create(int n, dpm_crew **out, dpm_err *err);
/* The same, with rank r's thread pinned to CPU cores[r] (cores: n entries,
 * -1 for "anywhere"): workers at start, and rank 0, the caller, at its
 * first run on this crew (the calling thread stays pinned afterwards: give
 * a crew with cores a thread of its own, as the daemon's model threads
 * and dpm-train's main thread are). Lock-step replicas run at the pace of
 * the slowest; pinned, none is migrated onto a core another replica is
 * using. Pinning is best effort (a core outside the process's CPU set is
 * ignored). */
dpm_status dpm_crew_create_pinned(int n, const int *cores, dpm_crew **out, dpm_err *err);

/* fn(arg, rank) on every rank: rank 0 on the calling thread, the others on
 * the crew's workers; returns when all have returned. */
void dpm_crew_run(dpm_crew *c, void (*fn)(void *arg, int rank), void *arg);

int dpm_crew_size(const dpm_crew *c);

/* The cores the crew's ranks are pinned to, into *set; returns how many
 * (0: no rank is pinned, *set empty). */
int dpm_crew_cpus(const dpm_crew *c, cpu_set_t *set);

/* Joins the workers. NULL is ignored. */
void dpm_crew_destroy(dpm_crew *c);

#endif
