/* A file rendezvous store as key-value callbacks (comm.h: dpm_comm_store),
 * for communicators that meet through the caller's store (NCCL's unique
 * id): each key is one file in DIR, named after the key (letters, digits,
 * '_' and '-' as they are, any other byte as %XX, as the Gloo shim's file
 * store names them), created once and never replaced, and every file is
 * reached through the caller's file access (common/file.h: dpmd's
 * confined client paths), so the store never follows a symlink out of
 * where a client's files may go.
 *
 * Ownership: the caller's struct; init keeps fs (which must outlive it)
 * and copies DIR. Threads: set and get from one thread at a time. Errors:
 * DPM_INVALID (not file:///DIR, a path or key too long), DPM_EXISTS (a key
 * set before: a used prefix), DPM_TIMEOUT (get waited timeout_ms), and the
 * file access's own. */
#ifndef DPM_COMM_FILESTORE_H
#define DPM_COMM_FILESTORE_H

#include <limits.h>

#include "comm/comm.h"

typedef struct dpm_file_store {
  const struct dpm_fs *fs; /* NULL: plain paths */
  char dir[PATH_MAX];      /* DIR of file:///DIR */
  dpm_comm_store kv;       /* the callbacks, ctx = this store */
} dpm_file_store;

/* url "file:///DIR" through fs (NULL: plain paths). */
dpm_status dpm_file_store_init(dpm_file_store *s, const char *url,
                               const struct dpm_fs *fs, dpm_err *err);

#endif
