/* Where a client's paths may lead: the file systems (common/file.h) dpmd hands
 * to the code that opens what a client named.
 *
 * A client path is absolute. It must lie, lexically, under a root: a spec's
 * data files under the state dir, allowed_paths or data_paths (read only);
 * the files a client has dpmd read or write (load, checkpoint --out,
 * extract-predictor --out) under the state dir or allowed_paths. The root is opened, then every component
 * below it is opened with openat(O_NOFOLLOW) from the descriptor of the one
 * before, on the thread that uses the file: a symlink anywhere below the
 * root, or "..", is refused (DPM_DENIED), and nothing can be swapped between
 * a check and the use, because there is no separate check. Reads refuse
 * anything but a regular file, without blocking on a FIFO. A write that
 * creates directories on its way (a predictor's folder) creates none
 * before the whole path has passed: its form (absolute, no "." or "..", no
 * component over NAME_MAX, under a root) and, at the deepest directory that
 * exists, the rule below; a refused path leaves nothing behind.
 *
 * The daemon's own files are never a client's target: a write into the
 * state dir's models/ tree (checked by descriptor, walking up with "..",
 * so no other root or path spelling reaches it) or over STATE/lock is
 * DPM_DENIED. Reading them is allowed (load a model's own checkpoint).
 *
 * Threads: created on the loop thread at start; the fs tables are
 * read-only afterwards and safe from any thread. Errors name the path
 * (escaped) and never a file's contents. */
#ifndef DPMD_PATHS_H
#define DPMD_PATHS_H

#include "common/file.h"
#include "server/config.h"

typedef struct dpmd_paths dpmd_paths;

/* cfg must outlive the result; the state dir and its models/ exist. */
dpm_status dpmd_paths_create(const dpmd_config *cfg, dpmd_paths **out, dpm_err *err);
/* Data files (reads only). */
const dpm_fs *dpmd_paths_data(const dpmd_paths *p);
/* Checkpoints and predictors, read and written. */
const dpm_fs *dpmd_paths_files(const dpmd_paths *p);
/* The form of a files path alone (absolute, no "." or "..", under a root),
 * without touching a file: refuses early, on the loop, what the fs would
 * refuse at use. Not a check to rely on (the fs is). */
dpm_status dpmd_paths_check(const dpmd_paths *p, const char *path, dpm_err *err);
void dpmd_paths_destroy(dpmd_paths *p);

#endif
