/* Opening and atomically replacing files through descriptors (file.h). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/escape.h"

static const char *shown(const char *path, char *buf, size_t cap) {
  return dpm_escape(path, buf, cap);
}

static dpm_status io_err(dpm_err *err, const char *path, const char *what, int e) {
  char b[256];
  return dpm_errf(err, DPM_IO, "%s: %s: %s", shown(path, b, sizeof b), what, strerror(e));
}

int dpm_pwrite_all(int fd, const void *buf, size_t len, uint64_t off) {
  const char *p = buf;
  while (len) {
    ssize_t w = pwrite(fd, p, len, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    p += w;
    off += (uint64_t)w;
    len -= (size_t)w;
  }
  return 0;
}

dpm_status dpm_file_check_regular(int fd, const char *path, dpm_err *err) {
  struct stat st;
  int flags;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return io_err(err, path, "stat", e);
  }
  if (!S_ISREG(st.st_mode)) {
    char b[256];
    close(fd);
    return dpm_errf(err, DPM_IO, "%s: %s", shown(path, b, sizeof b),
                    S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  }
  if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(fd);
    return io_err(err, path, "fcntl", e);
  }
  return DPM_OK;
}

/* ---- the plain fs ------------------------------------------------------------ */

static dpm_status plain_open_read(const dpm_fs *fs, const char *path, int *fd,
                                  dpm_err *err) {
  (void)fs;
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (*fd < 0) return io_err(err, path, "cannot open", errno);
  dpm_status s = dpm_file_check_regular(*fd, path, err);
  if (s) *fd = -1;
  return s;
}

dpm_status dpm_mkdirs(const char *dir, mode_t mode, dpm_err *err) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return dpm_errf(err, DPM_INVALID, "path too long");
  for (char *c = p + 1;; c++) {
    if (*c && *c != '/') continue;
    char was = *c;
    *c = 0;
    if (mkdir(p, mode) && errno != EEXIST) return io_err(err, p, "cannot create", errno);
    if (!(*c = was)) return DPM_OK;
  }
}

static dpm_status plain_open_dir(const dpm_fs *fs, const char *path, int mkdirs,
                                 int *dirfd, char *base, size_t cap, dpm_err *err) {
  (void)fs;
  char dir[PATH_MAX], b[256];
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || strlen(name) >= cap)
    return dpm_errf(err, DPM_INVALID, "%s: not a file name", shown(path, b, sizeof b));
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else if (snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path) >=
           (int)sizeof dir)
    return dpm_errf(err, DPM_INVALID, "%s: path too long", shown(path, b, sizeof b));
  dpm_status s = mkdirs ? dpm_mkdirs(dir, 0755, err) : DPM_OK;
  if (s) return s;
  *dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*dirfd < 0) return io_err(err, dir, "cannot open directory", errno);
  snprintf(base, cap, "%s", name);
  return DPM_OK;
}

static dpm_status plain_open_read_dir(const dpm_fs *fs, const char *path, int *dirfd,
                                      dpm_err *err) {
  (void)fs;
  *dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return *dirfd < 0 ? io_err(err, path, "cannot open directory", errno) : DPM_OK;
}

const dpm_fs dpm_fs_plain = {.open_read = plain_open_read,
                             .open_dir = plain_open_dir,
                             .open_read_dir = plain_open_read_dir};

dpm_status dpm_file_open_dir_read(const dpm_fs *fs, const char *path, int *dirfd,
                                  dpm_err *err) {
  if (!fs) fs = &dpm_fs_plain;
  *dirfd = -1;
  if (!fs->open_read_dir) {
    char b[256];
    return dpm_errf(err, DPM_UNSUPPORTED, "%s: this file system lists no directories",
                    shown(path, b, sizeof b));
  }
  return fs->open_read_dir(fs, path, dirfd, err);
}

/* ---- reading and writing ----------------------------------------------------- */

dpm_status dpm_file_open_read(const dpm_fs *fs, const char *path, int *fd, dpm_err *err) {
  dpm_err local; /* implementations may rely on err */
  if (!err) err = &local;
  if (!fs) fs = &dpm_fs_plain;
  *fd = -1;
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "no file named");
  return fs->open_read(fs, path, fd, err);
}

dpm_status dpm_file_read_all(const dpm_fs *fs, const char *path, size_t max, void **data,
                             size_t *len, dpm_err *err) {
  int fd;
  char b[256];
  *data = NULL;
  *len = 0;
  dpm_status s = dpm_file_open_read(fs, path, &fd, err);
  if (s) return s;
  size_t cap = 0, n = 0;
  char *buf = NULL;
  while (!s) {
    if (n == cap) { /* grow, to at most max + 1: a byte past max means too large */
      size_t want = cap ? 2 * cap : 4096;
      if (want > max + 1) want = max + 1;
      char *g = realloc(buf, want + 1);
      if (!g) {
        s = dpm_nomem(err);
        break;
      }
      buf = g;
      cap = want;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) s = io_err(err, path, "read", errno);
    if (r <= 0) break;
    n += (size_t)r;
    if (n > max)
      s = dpm_errf(err, DPM_CORRUPT, "%s: larger than %zu bytes",
                   shown(path, b, sizeof b), max);
  }
  close(fd);
  if (s) {
    free(buf);
    return s;
  }
  if (!buf && !(buf = malloc(1))) return dpm_nomem(err);
  buf[n] = 0;
  *data = buf;
  *len = n;
  return DPM_OK;
}

/* dpm_file_write, or (exclusive) dpm_file_create: the temporary is linked
 * to the target's name instead of renamed over it, so an existing target is
 * DPM_EXISTS and stays as it was. */
static dpm_status put(const dpm_fs *fs, const char *path, int mkdirs, int exclusive,
                      dpm_file_writer fn, void *arg, dpm_err *err) {
  dpm_err local; /* implementations and writers may rely on err */
  if (!err) err = &local;
  if (!fs) fs = &dpm_fs_plain;
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "no file named");
  char base[NAME_MAX + 1], tmp[NAME_MAX + 32], b[256];
  int dfd, fd = -1;
  dpm_status s = fs->open_dir(fs, path, mkdirs, &dfd, base, sizeof base, err);
  if (s) return s;
  for (unsigned i = 0; fd < 0; i++) { /* a fresh name: never an existing file */
    snprintf(tmp, sizeof tmp, "%.*s.tmp.%ld.%u", NAME_MAX - 40, base, (long)getpid(), i);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd < 0 && (errno != EEXIST || i >= 100)) {
      s = io_err(err, path, "cannot create a temporary file", errno);
      break;
    }
  }
  if (!s) {
    s = fn(fd, arg, err);
    if (!s && fsync(fd)) s = io_err(err, path, "fsync", errno);
    if (close(fd) && !s) s = io_err(err, path, "close", errno);
    if (!s && exclusive && linkat(dfd, tmp, dfd, base, 0))
      s = errno == EEXIST
              ? dpm_errf(err, DPM_EXISTS, "%s: exists", shown(path, b, sizeof b))
              : io_err(err, path, "cannot link into place", errno);
    if (!s && !exclusive && renameat(dfd, tmp, dfd, base))
      s = io_err(err, path, "cannot rename into place", errno);
    if (s || exclusive) unlinkat(dfd, tmp, 0);
  }
  if (!s && fsync(dfd))
    s = dpm_errf(err, DPM_IO, "%s: written, but fsync of its directory failed: %s",
                 shown(path, b, sizeof b), strerror(errno));
  close(dfd);
  return s;
}

dpm_status dpm_file_write(const dpm_fs *fs, const char *path, int mkdirs,
                          dpm_file_writer fn, void *arg, dpm_err *err) {
  return put(fs, path, mkdirs, 0, fn, arg, err);
}

dpm_status dpm_file_exists(const dpm_fs *fs, const char *path, int *exists,
                           dpm_err *err) {
  dpm_err local;
  if (!err) err = &local;
  if (!fs) fs = &dpm_fs_plain;
  *exists = 0;
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "no file named");
  char base[NAME_MAX + 1], b[256];
  int dfd;
  struct stat st;
  dpm_status s = fs->open_dir(fs, path, 0, &dfd, base, sizeof base, err);
  if (s) return s;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW))
    s = errno == ENOENT ? DPM_OK : io_err(err, path, "stat", errno);
  else if (S_ISREG(st.st_mode))
    *exists = 1;
  else
    s = dpm_errf(err, DPM_IO, "%s: not a regular file", shown(path, b, sizeof b));
  close(dfd);
  return s;
}

dpm_status dpm_file_mkdirs(const dpm_fs *fs, const char *dir, dpm_err *err) {
  dpm_err local;
  if (!err) err = &local;
  if (!fs) fs = &dpm_fs_plain;
  char path[PATH_MAX], base[NAME_MAX + 1], b[256];
  if (!dir || !*dir) return dpm_errf(err, DPM_INVALID, "no directory named");
  if (snprintf(path, sizeof path, "%s/x", dir) >= (int)sizeof path)
    return dpm_errf(err, DPM_INVALID, "%s: path too long", shown(dir, b, sizeof b));
  int dfd;
  dpm_status s = fs->open_dir(fs, path, 1, &dfd, base, sizeof base, err);
  if (!s) close(dfd);
  return s;
}

typedef struct {
  const void *data;
  size_t len;
  const char *path;
} buffer_arg;

static dpm_status write_buffer(int fd, void *arg, dpm_err *err) {
  buffer_arg *a = arg;
  if (dpm_pwrite_all(fd, a->data, a->len, 0)) /* a new file */
    return io_err(err, a->path, "write", errno);
  return DPM_OK;
}

dpm_status dpm_file_write_buffer(const dpm_fs *fs, const char *path, int mkdirs,
                                 const void *data, size_t len, dpm_err *err) {
  buffer_arg a = {data, len, path};
  return put(fs, path, mkdirs, 0, write_buffer, &a, err);
}

dpm_status dpm_file_create_buffer(const dpm_fs *fs, const char *path, int mkdirs,
                                  const void *data, size_t len, dpm_err *err) {
  buffer_arg a = {data, len, path};
  return put(fs, path, mkdirs, 1, write_buffer, &a, err);
}
