/* dpmd's files under the state dir:
 *
 *   STATE/models/NAME/spec.pb                       the spec (ModelSpec, packed)
 *   STATE/models/NAME/checkpoints/ckpt-ITER.dpmckpt ITER zero-padded to 12 digits
 *   STATE/models/NAME/target                        where a run stopped by a
 *                                                   shutdown was headed (text)
 *   STATE/models/NAME/shard                         a fleet job's: the shard this
 *                                                   daemon runs (text; the shards
 *                                                   are the spec's parallel.shards)
 *   STATE/lock                                      the running dpmd's pid, flocked
 *
 * Every file is written through common/file.h (a temporary, fsynced, renamed,
 * the directory fsynced), so a crash leaves either the old or the new file;
 * leftover temporaries ("*.tmp*") are ignored and removed at start.
 *
 * Threads: no shared state; each model's thread touches only its own
 * directory. Errors: DPM_IO with the path and strerror text. */
#ifndef DPMD_STORE_H
#define DPMD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

#define DPMD_MAX_CHECKPOINTS 4096

/* Creates STATE/models if missing. */
dpm_status dpmd_store_init(const char *state_dir, dpm_err *err);
/* STATE/models/NAME into buf; -1 if it does not fit. */
int dpmd_store_model_dir(const char *state_dir, const char *name, char *buf, size_t n);
/* DIR/checkpoints/ckpt-ITER.dpmckpt into buf; -1 if it does not fit. */
int dpmd_store_checkpoint_path(const char *dir, uint64_t iter, char *buf, size_t n);
/* Creates DIR and DIR/checkpoints and writes DIR/spec.pb atomically. */
dpm_status dpmd_store_save_spec(const char *dir, const Dpm__ModelSpec *spec,
                                dpm_err *err);
/* Reads DIR/spec.pb (caller frees with dpm_spec_free). */
dpm_status dpmd_store_load_spec(const char *dir, Dpm__ModelSpec **out, dpm_err *err);
/* The iterations of DIR's checkpoints, newest first; returns how many
 * (at most max). A checkpoint is a regular file (not followed) named
 * exactly as dpmd names one; anything else there is ignored. Removes
 * leftover temporaries (regular files). */
int dpmd_store_checkpoints(const char *dir, uint64_t *iters, int max);
/* Whether iteration iter's checkpoint is in DIR, as a regular file. */
int dpmd_store_has_checkpoint(const char *dir, uint64_t iter);
/* Removes all but the newest `keep` checkpoints (keep 0: none removed),
 * never the one of iteration `written` (the checkpoint just written, which
 * may be older than others after a load). Removes only what
 * dpmd_store_checkpoints lists, by descriptor: never a directory, a symlink
 * or a file dpmd did not name. */
void dpmd_store_retain(const char *dir, int keep, uint64_t written);
/* DIR/target: the iteration an interrupted run was training to. save
 * writes it (atomically); take reads and removes it, returning 0 when there
 * is none or it is unreadable. */
dpm_status dpmd_store_save_target(const char *dir, uint64_t target, dpm_err *err);
uint64_t dpmd_store_take_target(const char *dir);
/* DIR/schedule: the model's schedule (server/sched.h) and whether it is
 * spilled (preempted to its newest checkpoint: a restart trains it on to
 * DIR/target). save writes it (atomically); load fills *sc and *spilled
 * and returns 0, or -1 (leaving them) when there is none or it does not
 * parse or holds a value out of bounds. */
struct dpmd_schedule;
dpm_status dpmd_store_save_schedule(const char *dir, const struct dpmd_schedule *sc,
                                    int spilled, dpm_err *err);
int dpmd_store_load_schedule(const char *dir, struct dpmd_schedule *sc, int *spilled);
/* DIR/shard: which shard of a fleet job (server/fleet/fleet.h) the model is.
 * save writes it (atomically); load returns it, or -1 when there is none or
 * it is unreadable. */
dpm_status dpmd_store_save_shard(const char *dir, int shard, dpm_err *err);
int dpmd_store_load_shard(const char *dir);
/* Removes DIR and everything in it. */
dpm_status dpmd_store_remove(const char *dir, dpm_err *err);
/* Names of the models under STATE/models (malloc'd array of malloc'd
 * strings, *n of them); NULL with *n = 0 when there are none. */
char **dpmd_store_models(const char *state_dir, int *n);
/* Takes STATE/lock (flock, held until the process exits; its pid written
 * in it) so that no second dpmd serves the same state dir: DPM_EXISTS naming
 * the holder's pid when one does. *fd stays open while the daemon runs. */
dpm_status dpmd_store_lock(const char *state_dir, int *fd, dpm_err *err);

#endif
