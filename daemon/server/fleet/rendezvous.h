/* Which rendezvous stores a fleet job may meet through on this daemon: the
 * spec's parallel.rendezvous.store against the config's rendezvous_stores.
 *
 *   daemon             the coordinator's own store (server/fleet/kv.h)
 *   file               file:///DIR, where DIR is a path a client's files may
 *                      take (server/paths.h: under the state dir or an
 *                      allowed path, not in the state dir's models/). The
 *                      store's directory and files are then opened through
 *                      the same confined file access (dpmd_rendezvous_fs)
 *                      wherever a trainer uses them.
 *   redis://HOST:PORT  that server only, written exactly as in the config.
 *
 * Any other store is DPM_DENIED, naming the store and the config key, and
 * nothing is contacted or created for it. Checked where the daemon takes a
 * submit or a join (commands.c) and again where a trainer is given its
 * store (fleet.c), so a config narrowed across a restart holds for the
 * models it brings back.
 *
 * Threads: reads the config and the paths only; any thread. */
#ifndef DPMD_RENDEZVOUS_H
#define DPMD_RENDEZVOUS_H

#include "proto/dpm.pb-c.h"
#include "server/dpmd.h"

/* The spec's rendezvous store: parallel.rendezvous.store, or "daemon". */
const char *dpmd_rendezvous_store(const Dpm__ModelSpec *spec);
/* DPM_OK when spec's store is allowed here; a spec
 * without shards names no store and passes. Touches no file. */
dpm_status dpmd_rendezvous_check(const dpmd *d, const Dpm__ModelSpec *spec, dpm_err *err);
/* The file access a file store of spec goes through (the daemon's confined
 * client paths). */
const struct dpm_fs *dpmd_rendezvous_fs(const dpmd *d);

#endif
