/* dpmd's loop: binds the sockets, brings back the models in the state dir,
 * then serves requests (decoded, request.h; dispatched through the command
 * table, commands.h) until a shutdown request, SIGTERM or SIGINT, after
 * which every model ends (one with progress since its last checkpoint is
 * checkpointed, when configured: model.h) and the loop closes.
 *
 * The loop owns the nanomsg sockets, the libuv handles, the dpmd handed to
 * handlers and model threads (dpmd.h) and the model registry (registry.h).
 *
 * Threads: dpmd_serve runs the loop on the calling thread. */
#ifndef DPMD_SERVER_H
#define DPMD_SERVER_H

#include "dpm/status.h"
#include "server/config.h"

struct dpmd_devices;
struct dpmd_paths;

/* Serves until shut down. cfg, devices and paths are the caller's and must
 * outlive the call. DPM_OK once stopped, with shutdown_failed (cap bytes)
 * naming the models that could not be checkpointed at shutdown (dpmd then
 * exits 1; "" when none); else the reason it could not serve (a socket
 * that does not bind: DPM_IO). */
dpm_status dpmd_serve(const dpmd_config *cfg, struct dpmd_devices *devices,
                      const struct dpmd_paths *paths, char *shutdown_failed, size_t cap,
                      dpm_err *err);

#endif
