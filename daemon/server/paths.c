/* Confining clients' paths to the allowed roots by descriptor (paths.h). */
#include "server/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/escape.h"

#define MAX_DEPTH 4096 /* directories walked up from a target */

typedef struct root_set {
  const char *const *v; /* absolute paths from the config */
  int n;
  const char *what; /* for messages: "the state dir or an allowed path" */
} root_set;

struct dpmd_paths {
  dpm_fs data, files;                    /* ctx: this */
  const char **data_roots, **file_roots; /* the config's strings */
  root_set data_set, file_set;
  struct stat state, models; /* the state dir and STATE/models */
};

static dpm_status denied(dpm_err *err, const char *path, const char *why) {
  char b[256];
  return dpm_errf(err, DPM_DENIED, "path '%s' %s", dpm_escape(path, b, sizeof b), why);
}

/* Length of root's prefix of path when path lies under root (whole
 * components, root's trailing slashes ignored); else 0. */
static size_t under(const char *path, const char *root) {
  size_t n = strlen(root);
  while (n > 1 && root[n - 1] == '/') n--;
  if (n == 1 && root[0] == '/') return 1;
  return strncmp(path, root, n) == 0 && (path[n] == '/' || !path[n]) ? n : 0;
}

/* The root path lies under (the longest; -1: none) and, in *rest, what
 * follows it; or a refusal of the path's form: relative, too long, control
 * bytes, "." or ".." components. No file is touched. */
static dpm_status find_root(const root_set *rs, const char *path, int *at,
                            const char **rest, dpm_err *err) {
  if (!path || path[0] != '/') return denied(err, path ? path : "", "is not absolute");
  if (strlen(path) >= PATH_MAX) return denied(err, path, "is too long");
  if (dpm_has_control(path)) return denied(err, path, "holds control bytes");
  for (const char *c = path; *c;) {
    while (*c == '/') c++;
    size_t n = strcspn(c, "/");
    if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      return denied(err, path, "has a '.' or '..' component");
    if (n > NAME_MAX) return denied(err, path, "has a component too long");
    c += n;
  }
  size_t best = 0;
  *at = -1;
  for (int i = 0; i < rs->n; i++) {
    size_t k = under(path, rs->v[i]);
    if (k > best) best = k, *at = i;
  }
  if (*at < 0) {
    char why[160];
    snprintf(why, sizeof why, "is not under %s", rs->what);
    return denied(err, path, why);
  }
  *rest = path + best;
  return DPM_OK;
}

/* The failure of openat(dir, name, O_NOFOLLOW ...) while resolving path. */
static dpm_status step_failed(dpm_err *err, const char *path, int dir, const char *name,
                              int e) {
  struct stat st;
  if (e == ELOOP || (e == ENOTDIR && !fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) &&
                     S_ISLNK(st.st_mode)))
    return denied(err, path, "crosses a symbolic link");
  char b[256];
  return dpm_errf(err, DPM_IO, "%s: cannot open: %s", dpm_escape(path, b, sizeof b),
                  strerror(e));
}

static int in_models(const dpmd_paths *p, int dir);

static dpm_status own_file(dpm_err *err, const char *path) {
  return denied(err, path,
                "is one of dpmd's own files (the state dir's models/ and lock)");
}

/* Walks path from its root to the directory holding its last component,
 * one O_NOFOLLOW openat per component. mkdirs: missing directories are
 * created, but only once the whole path's form has passed (find_root) and,
 * for a write, the deepest existing directory has been found outside
 * STATE/models (what is created below it is outside too): a refused path
 * creates nothing. On success *dirfd is that directory and base its last
 * component. */
static dpm_status walk(const dpmd_paths *paths, const root_set *rs, const char *path,
                       int mkdirs, int write, int *dirfd, char *base, size_t cap,
                       dpm_err *err) {
  *dirfd = -1;
  int fd, at, outside = 0; /* outside: fd is known to lie outside STATE/models */
  const char *p;
  if (find_root(rs, path, &at, &p, err)) return err->code;
  if ((fd = open(rs->v[at], O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    char b[256];
    return dpm_errf(err, DPM_IO, "%s: cannot open: %s",
                    dpm_escape(rs->v[at], b, sizeof b), strerror(errno));
  }
  for (;;) {
    while (*p == '/') p++;
    size_t n = strcspn(p, "/");
    const char *next = p + n;
    while (*next == '/') next++;
    if (n == 0 || n >= cap) {
      close(fd);
      return denied(err, path, n ? "has a component too long" : "names no file");
    }
    memcpy(base, p, n);
    base[n] = 0;
    if (!*next) break; /* base is the last component */
    int sub = openat(fd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0 && errno == ENOENT && mkdirs) {
      if (write && !outside) { /* the first directory to make: its parent decides */
        if (in_models(paths, fd)) {
          close(fd);
          return own_file(err, path);
        }
        outside = 1;
      }
      if (mkdirat(fd, base, 0755) == 0 || errno == EEXIST)
        sub = openat(fd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (sub < 0) {
      dpm_status st = step_failed(err, path, fd, base, errno);
      close(fd);
      return st;
    }
    close(fd);
    fd = sub;
    p = next;
  }
  *dirfd = fd;
  return DPM_OK;
}

static int same(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* 1 when dir is STATE/models or below it (walking up by ".."). */
static int in_models(const dpmd_paths *p, int dir) {
  int fd = dup(dir), hit = 0;
  for (int depth = 0; fd >= 0 && depth < MAX_DEPTH; depth++) {
    struct stat st, up;
    if (fstat(fd, &st) || (hit = same(&st, &p->models))) break;
    int parent = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    fd = parent;
    if (fd < 0 || fstat(fd, &up) || same(&up, &st)) break; /* the file system's root */
  }
  if (fd >= 0) close(fd);
  return hit;
}

/* A regular file under one of the roots rs. */
static dpm_status read_under(const dpmd_paths *paths, const root_set *rs,
                             const char *path, int *out, dpm_err *err) {
  char base[NAME_MAX + 1];
  int dir;
  *out = -1;
  if (walk(paths, rs, path, 0, 0, &dir, base, sizeof base, err)) return err->code;
  int fd = openat(dir, base, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) step_failed(err, path, dir, base, errno);
  close(dir);
  if (fd < 0 || dpm_file_check_regular(fd, path, err)) return err->code;
  *out = fd;
  return DPM_OK;
}

/* A directory under one of the roots rs, open for listing. */
static dpm_status read_dir_under(const dpmd_paths *paths, const root_set *rs,
                                 const char *path, int *out, dpm_err *err) {
  char base[NAME_MAX + 1];
  int dir;
  *out = -1;
  if (walk(paths, rs, path, 0, 0, &dir, base, sizeof base, err)) return err->code;
  int fd = openat(dir, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) step_failed(err, path, dir, base, errno);
  close(dir);
  if (fd < 0) return err->code;
  *out = fd;
  return DPM_OK;
}

static dpm_status data_read_dir(const dpm_fs *fs, const char *path, int *out,
                                dpm_err *err) {
  const dpmd_paths *p = fs->ctx;
  return read_dir_under(p, &p->data_set, path, out, err);
}

static dpm_status files_read_dir(const dpm_fs *fs, const char *path, int *out,
                                 dpm_err *err) {
  const dpmd_paths *p = fs->ctx;
  return read_dir_under(p, &p->file_set, path, out, err);
}

static dpm_status data_read(const dpm_fs *fs, const char *path, int *out, dpm_err *err) {
  const dpmd_paths *p = fs->ctx;
  return read_under(p, &p->data_set, path, out, err);
}

static dpm_status files_read(const dpm_fs *fs, const char *path, int *out, dpm_err *err) {
  const dpmd_paths *p = fs->ctx;
  return read_under(p, &p->file_set, path, out, err);
}

static dpm_status files_dir(const dpm_fs *fs, const char *path, int mkdirs, int *out,
                            char *base, size_t cap, dpm_err *err) {
  const dpmd_paths *p = fs->ctx;
  int dir;
  *out = -1;
  if (walk(p, &p->file_set, path, mkdirs, 1, &dir, base, cap, err)) return err->code;
  struct stat st;
  if (!fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) && S_ISLNK(st.st_mode)) {
    close(dir); /* replacing it would be safe (rename never follows it), but surprising */
    return denied(err, path, "crosses a symbolic link");
  }
  if (in_models(p, dir) ||
      (!fstat(dir, &st) && same(&st, &p->state) && !strcmp(base, "lock"))) {
    close(dir);
    return own_file(err, path);
  }
  *out = dir;
  return DPM_OK;
}

static dpm_status data_dir(const dpm_fs *fs, const char *path, int mkdirs, int *out,
                           char *base, size_t cap, dpm_err *err) {
  (void)fs, (void)mkdirs, (void)out, (void)base, (void)cap;
  return denied(err, path, "is a data path: dpmd writes no data files");
}

dpm_status dpmd_paths_create(const dpmd_config *cfg, dpmd_paths **out, dpm_err *err) {
  *out = NULL;
  dpmd_paths *p = calloc(1, sizeof *p);
  int n = 1 + cfg->n_allowed_paths + cfg->n_data_paths;
  if (!p || !(p->data_roots = calloc((size_t)n, sizeof *p->data_roots)) ||
      !(p->file_roots = calloc((size_t)n, sizeof *p->file_roots))) {
    dpmd_paths_destroy(p);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  p->data_roots[0] = p->file_roots[0] = cfg->state_dir;
  int r = 1, w = 1;
  for (int i = 0; i < cfg->n_allowed_paths; i++)
    p->data_roots[r++] = p->file_roots[w++] = cfg->allowed_paths[i];
  for (int i = 0; i < cfg->n_data_paths; i++) p->data_roots[r++] = cfg->data_paths[i];
  p->data_set =
      (root_set){p->data_roots, r,
                 "the state dir, an allowed path or a data path (allowed_paths, "
                 "data_paths in the config, or dpmd --allow-path DIR)"};
  p->file_set =
      (root_set){p->file_roots, w,
                 "the state dir or an allowed path (allowed_paths in the config, "
                 "or dpmd --allow-path DIR)"};
  char models[PATH_MAX];
  snprintf(models, sizeof models, "%s/models", cfg->state_dir);
  if (stat(cfg->state_dir, &p->state) || stat(models, &p->models)) {
    dpm_status s = dpm_errf(err, DPM_IO, "%s: %s", models, strerror(errno));
    dpmd_paths_destroy(p);
    return s;
  }
  p->data = (dpm_fs){.open_read = data_read,
                     .open_dir = data_dir,
                     .open_read_dir = data_read_dir,
                     .ctx = p};
  p->files = (dpm_fs){.open_read = files_read,
                      .open_dir = files_dir,
                      .open_read_dir = files_read_dir,
                      .ctx = p};
  *out = p;
  return DPM_OK;
}

dpm_status dpmd_paths_check(const dpmd_paths *p, const char *path, dpm_err *err) {
  int at;
  const char *rest;
  return find_root(&p->file_set, path, &at, &rest, err);
}

const dpm_fs *dpmd_paths_data(const dpmd_paths *p) { return &p->data; }
const dpm_fs *dpmd_paths_files(const dpmd_paths *p) { return &p->files; }

void dpmd_paths_destroy(dpmd_paths *p) {
  if (!p) return;
  free(p->data_roots);
  free(p->file_roots);
  free(p);
}
