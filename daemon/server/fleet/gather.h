/* The status of fleet jobs' shards, asked off the loop thread: `status
 * NAME` and `list` at a job's coordinator answer with every shard's state
 * and iteration (ModelInfo.shards), which only the shards' daemons know.
 *
 * The loop builds the answer as it would for a job of one daemon, with a
 * ShardInfo per shard (shard 0's filled in from its own snapshot, the
 * others' endpoints only), and posts it here; a worker thread asks each
 * other shard (a forwarded status for the job's name), fills in its state,
 * iteration, target and error, and sends the answer. Every call is bounded
 * (DPMD_GATHER_CALL_MS), and so is a whole answer (DPMD_GATHER_TOTAL_MS): a
 * shard that could not be reached, refused, or was not asked in time has
 * no state and says why in its error; the answer goes out regardless. What
 * a shard says is text from the network: strings are bounded and escaped.
 *
 * Bounds: at most DPMD_GATHER_MAX_TASKS answers wait; more are refused at
 * once (DPM_DENIED, "try again").
 *
 * Threads: start, post and stop on the loop thread; the worker answers
 * through dpmd_reply (dpmd.h). stop ends the worker once the call in
 * flight returns (the loop waits for it, at most DPMD_GATHER_CALL_MS) and
 * answers the tasks left with DPM_STATE; the loop calls it before the
 * core stops sending. */
#ifndef DPMD_GATHER_H
#define DPMD_GATHER_H

#include "proto/dpm.pb-c.h"
#include "server/dpmd.h"

#define DPMD_GATHER_CALL_MS 2000
#define DPMD_GATHER_TOTAL_MS 5000
#define DPMD_GATHER_MAX_TASKS 16

typedef struct dpmd_gather dpmd_gather;

dpm_status dpmd_gather_start(dpmd *d, dpmd_gather **out, dpm_err *err);
/* Stops the worker (see Threads) and frees g. NULL is ignored. */
void dpmd_gather_stop(dpmd_gather *g);
/* Answers `to` with resp (a Response with a ModelInfo or a ModelList,
 * copied here) once the shards of each ModelInfo that has ShardInfo have
 * been asked; ShardInfo with a state is left as it is. */
void dpmd_gather_post(dpmd_gather *g, const Dpm__Response *resp, dpmd_reply_to *to);

#endif
