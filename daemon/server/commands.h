/* The command table: how dpmd handles each request of the command list
 * (common/commands.h, where a command's name, oneof case and flags are
 * declared: names an existing model; mutating, so refused once the daemon
 * is stopping; sent to a fleet's shards by their coordinator only). Each
 * row, keyed by the list, holds the check of the command's arguments that
 * needs no model, how to read the model name from the request, and its
 * handler: a function run on the loop thread, or a job run on the model's
 * thread (model.h; a job's model must be named).
 *
 * Dispatch (dpmd_handle) goes through a row in this order, and the first
 * refusal is the answer: unknown command (DPM_UNSUPPORTED), a mutating
 * command while stopping (DPM_STATE), a model named but not registered or
 * ending (DPM_NOT_FOUND), for a model that is a shard of a job over several
 * daemons (server/fleet/fleet.h) the command's fleet flag (one the coordinator
 * sends the whole job, sent to another shard by anyone but the
 * coordinator: DPM_STATE, naming the coordinator; forwarded without the
 * job's secret: DPM_DENIED), the argument check (its status and message);
 * then the loop handler runs, or the job is posted to the model's queue.
 *
 * Fleet jobs: status and list at a job's coordinator are answered through
 * the gatherer (server/fleet/gather.h), which asks every other shard first;
 * join, kv-set, kv-get and kv-fail are the daemons' own commands (fleet.h,
 * kv.h).
 *
 * Threads: the loop thread only (dpmd_command_name, dpmd_command_handled
 * and dpmd_command_check use no shared state: any thread). */
#ifndef DPMD_COMMANDS_H
#define DPMD_COMMANDS_H

#include "server/dpmd.h"
#include "server/models/registry.h"

#define DPMD_MAX_ITERS                                                                   \
  (1ull << 40) /* train --iters, and --epochs once turned into steps */

/* Dispatches one decoded request; takes ownership of rq and answers `to`
 * exactly once (now, or later from the model's thread). */
void dpmd_handle(dpmd *d, dpmd_registry *models, Dpm__Request *rq, dpmd_reply_to *to);

/* Begins stopping (the shutdown command, SIGTERM, SIGINT): mutating
 * commands are refused from now on, and every model is asked to end
 * (checkpointing those that train, when the config says so). The loop
 * closes once the registry is empty. A second call does nothing. */
void dpmd_shutdown(dpmd *d, dpmd_registry *models);

/* The command's name in the list ("get-blob"); "unknown" for a oneof case
 * dpmd does not handle. */
const char *dpmd_command_name(int command);
/* Whether dpmd has a handler for the Request's oneof case `command`. */
int dpmd_command_handled(int command);

/* The row's argument check alone, for the command rq carries: what can be
 * judged without a model (train's iters, extract's format, inputs and
 * outputs, the form of client paths: dpmd_paths_check, they are confined
 * when used) and, for a submit, the overrides it moves into the spec (name,
 * devices, checkpoint policy, shards; cpu:0 when no devices) and the model
 * name; for a join, the model name, its devices and its shard (fleet.h). The
 * spec itself is validated by the submit handler, once the daemon's devices
 * have been checked. DPM_OK for a command without a check or a row;
 * else DPM_INVALID, DPM_UNSUPPORTED, DPM_DENIED, DPM_SPEC or DPM_NOMEM
 * with the message to send back. */
dpm_status dpmd_command_check(const struct dpmd_paths *paths, Dpm__Request *rq,
                              dpm_err *err);

#endif
