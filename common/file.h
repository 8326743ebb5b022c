/* Files through descriptors: how every module opens a file it reads and
 * replaces a file it writes.
 *
 * A dpm_fs says how a path someone named becomes a descriptor. Modules that
 * read or write files a user names (checkpoints, predictors, data sets)
 * take one and resolve the path when they use it, on the thread that uses
 * it: there is no check-then-use gap. dpm_fs_plain opens ordinary paths
 * (relative ones against the working directory), for dpm-train and tools;
 * dpmd passes one that confines a client's paths to its allowed roots
 * (server/paths.h).
 *
 * Reading: a file is opened O_NONBLOCK (a FIFO cannot block the open) and
 * must be a regular file (fstat), else DPM_IO "not a regular file"; then it
 * is made blocking. Writing: the new contents go to a temporary file created
 * O_EXCL | O_NOFOLLOW in the target's directory (held open as a descriptor),
 * which is fsynced, renamed over the target with renameat and followed by an
 * fsync of the directory; every failed fsync is reported. On failure the
 * temporary is removed and the old file stays.
 *
 * Errors name the path as given (escaped) and the reason (strerror); never
 * the contents of a file. Threads: no shared state; any thread. */
#ifndef DPM_IO_FILE_H
#define DPM_IO_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dpm/status.h"

typedef struct dpm_fs dpm_fs;
struct dpm_fs {
  /* A regular file at path, open for reading (blocking), into *fd. */
  dpm_status (*open_read)(const dpm_fs *fs, const char *path, int *fd, dpm_err *err);
  /* The directory that is to hold path, open (O_RDONLY | O_DIRECTORY), into
   * *dirfd, and the last component of path into base (cap bytes). mkdirs:
   * create missing directories (mode 0755) first. A target the fs refuses
   * to let anyone write is DPM_DENIED. */
  dpm_status (*open_dir)(const dpm_fs *fs, const char *path, int mkdirs, int *dirfd,
                         char *base, size_t cap, dpm_err *err);
  /* The directory at path, open for reading its entries (O_RDONLY |
   * O_DIRECTORY), into *dirfd: the image folder reader walks below it with
   * openat(O_NOFOLLOW). NULL: the fs lists no directories (DPM_UNSUPPORTED
   * from dpm_file_open_dir_read). */
  dpm_status (*open_read_dir)(const dpm_fs *fs, const char *path, int *dirfd,
                              dpm_err *err);
  void *ctx; /* the implementation's */
};

/* Ordinary paths, symlinks followed. */
extern const dpm_fs dpm_fs_plain;

/* Writes a file's contents to fd (the temporary); DPM_IO on failure. */
typedef dpm_status (*dpm_file_writer)(int fd, void *arg, dpm_err *err);

/* Replaces path (fs NULL: dpm_fs_plain) atomically with what fn writes;
 * mkdirs as for open_dir. */
dpm_status dpm_file_write(const dpm_fs *fs, const char *path, int mkdirs,
                          dpm_file_writer fn, void *arg, dpm_err *err);
/* dpm_file_write of a buffer. */
dpm_status dpm_file_write_buffer(const dpm_fs *fs, const char *path, int mkdirs,
                                 const void *data, size_t len, dpm_err *err);
/* Creates path (fs NULL: plain) holding the buffer, atomically, but never
 * replaces a file: the temporary is linked to path's name, and an existing
 * path is DPM_EXISTS ("PATH: exists"), left as it was. */
dpm_status dpm_file_create_buffer(const dpm_fs *fs, const char *path, int mkdirs,
                                  const void *data, size_t len, dpm_err *err);
/* Whether path (fs NULL: plain) names a regular file: *exists 1, or 0 when
 * nothing has its name; a directory, symlink or other file there is DPM_IO
 * "not a regular file"; the fs's refusals and a missing directory fail. */
dpm_status dpm_file_exists(const dpm_fs *fs, const char *path, int *exists, dpm_err *err);
/* Makes directory dir and its missing parents through fs (NULL: plain), as
 * open_dir with mkdirs does for a file inside it. */
dpm_status dpm_file_mkdirs(const dpm_fs *fs, const char *dir, dpm_err *err);
/* mkdir -p: makes directory dir and its missing parents by path, each new
 * one with mode (before the umask); one that exists already is fine. The
 * plain fs's open_dir uses it (0755), and dpmd for its own state directory,
 * which no client names (0750). DPM_INVALID for a path of PATH_MAX or more,
 * DPM_IO naming the directory that could not be made. */
dpm_status dpm_mkdirs(const char *dir, mode_t mode, dpm_err *err);
/* Opens path for reading through fs (NULL: plain) and reads it whole, at
 * most max bytes (larger: DPM_CORRUPT "larger than"). *data is malloc'd
 * (one spare NUL byte after the contents); free it. */
dpm_status dpm_file_read_all(const dpm_fs *fs, const char *path, size_t max, void **data,
                             size_t *len, dpm_err *err);
/* Opens path for reading through fs (NULL: plain). */
dpm_status dpm_file_open_read(const dpm_fs *fs, const char *path, int *fd, dpm_err *err);
/* Opens directory path for listing through fs (NULL: plain). */
dpm_status dpm_file_open_dir_read(const dpm_fs *fs, const char *path, int *dirfd,
                                  dpm_err *err);
/* For open_read implementations: an fd just opened O_NONBLOCK must be a
 * regular file; makes it blocking. Closes it and fails otherwise. */
dpm_status dpm_file_check_regular(int fd, const char *path, dpm_err *err);

/* Writes all len bytes of buf at offset off of fd (pwrite), retrying on
 * EINTR and after short writes; -1 with errno (EIO where a write wrote
 * nothing). */
int dpm_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

#endif
