/* Image folders: root/CLASS/FILE, the index walk and the per-sample read
 * (io/source.h, kind folder).
 *
 * The root comes from the source's fs as a directory descriptor
 * (dpm_file_open_dir_read); everything below it is reached with
 * openat(O_NOFOLLOW) from a descriptor, at index time and again at every
 * read, so no symbolic link inside the folder is followed and nothing is
 * resolved by path. Index: the root's entries that are directories (by
 * fstatat without following) are the classes, sorted bytewise; an entry
 * that is a symbolic link is refused (DPM_DENIED), other files at the top
 * are ignored. In each class, the entries whose extension is jpg, jpeg or
 * png (any case), sorted, are its samples, each its own shard: a regular
 * file has its size, mtime and inode recorded; anything else (a link, a
 * FIFO, a directory) is a bad sample (DPM_BAD_NOT_FILE). Names starting
 * with '.' are ignored everywhere.
 *
 * Read: opens CLASS then FILE again, O_NONBLOCK (a FIFO put there since
 * cannot block), checks it is a regular file and the one indexed
 * (io/source.c's pread), reads, closes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/file.h"
#include "io/source_index.h"

typedef struct name_list {
  char **v;
  size_t n, cap;
} name_list;

static void names_free(name_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int image_ext(const char *name, dpm_sample_encoding *enc) {
  const char *dot = strrchr(name, '.');
  if (!dot) return 0;
  if (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"))
    *enc = DPM_SAMPLE_JPEG;
  else if (!strcasecmp(dot, ".png"))
    *enc = DPM_SAMPLE_PNG;
  else
    return 0;
  return 1;
}

/* The entries of directory fd (not consumed) not starting with '.', sorted;
 * at most max of them. */
static dpm_status list(int fd, const char *path, int64_t max, name_list *out,
                       dpm_err *err) {
  char b[256];
  memset(out, 0, sizeof *out);
  int d = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = d >= 0 ? fdopendir(d) : NULL;
  if (!dir) {
    if (d >= 0) close(d);
    return dpm_errf(err, DPM_IO, "%s: cannot list: %s", dpm_escape(path, b, sizeof b),
                    strerror(errno));
  }
  dpm_status st = DPM_OK;
  struct dirent *e;
  while (!st && (errno = 0, e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    if ((int64_t)out->n >= max) {
      st = dpm_errf(err, DPM_CORRUPT, "%s: more than %lld entries",
                    dpm_escape(path, b, sizeof b), (long long)max);
      break;
    }
    if (out->n == out->cap) {
      size_t c = out->cap ? out->cap * 2 : 64;
      char **v = realloc(out->v, c * sizeof *v);
      if (!v) {
        st = dpm_errf(err, DPM_NOMEM, "out of memory");
        break;
      }
      out->v = v;
      out->cap = c;
    }
    if (!(out->v[out->n] = strdup(e->d_name)))
      st = dpm_errf(err, DPM_NOMEM, "out of memory");
    else
      out->n++;
  }
  if (!st && errno)
    st = dpm_errf(err, DPM_IO, "%s: cannot list: %s", dpm_escape(path, b, sizeof b),
                  strerror(errno));
  closedir(dir);
  if (st)
    names_free(out);
  else if (out->n)
    qsort(out->v, out->n, sizeof *out->v, by_name);
  return st;
}

static dpm_status one_class(dpm_source *s, const char *root, const char *cls, int label,
                            dpm_err *err) {
  char b[256], path[8192];
  snprintf(path, sizeof path, "%s/%s", root, cls);
  int cfd = openat(s->root_fd, cls, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (cfd < 0)
    return dpm_errf(err, DPM_IO, "%s: cannot open: %s", dpm_escape(path, b, sizeof b),
                    strerror(errno));
  name_list files;
  dpm_status st = list(cfd, path, s->max_samples - s->n, &files, err);
  for (size_t i = 0; !st && i < files.n; i++) {
    dpm_sample_encoding enc;
    if (!image_ext(files.v[i], &enc)) continue;
    int n = snprintf(path, sizeof path, "%s/%s/%s", root, cls, files.v[i]);
    if (n >= (int)sizeof path) {
      st = dpm_errf(err, DPM_INVALID, "%s: a path too long",
                    dpm_escape(root, b, sizeof b));
      break;
    }
    struct stat sb;
    src_item it = {.label = label, .enc = (uint8_t)enc};
    if (fstatat(cfd, files.v[i], &sb, AT_SYMLINK_NOFOLLOW)) {
      st =
          dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(path, b, sizeof b), strerror(errno));
      break;
    }
    if (!S_ISREG(sb.st_mode)) {
      it.bad = DPM_BAD_NOT_FILE;
      sb.st_size = 0;
    }
    it.len = (uint64_t)sb.st_size;
    int rel = (int)strlen(root) + 1;
    if ((st = dpm_src_add_shard(s, path, -1, &sb, rel, err)) ||
        (st = dpm_src_add_item(s, path + rel, strlen(path + rel), it, err)))
      break;
  }
  names_free(&files);
  close(cfd);
  return st;
}

dpm_status dpm_folder_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err) {
  const char *root = cfg->paths[0];
  char b[256];
  dpm_status st = dpm_file_open_dir_read(s->fs, root, &s->root_fd, err);
  if (st) return st;
  name_list all, classes = {0};
  if ((st = list(s->root_fd, root, s->max_samples, &all, err))) return st;
  if (!(classes.v = calloc(all.n + 1, sizeof *classes.v))) {
    names_free(&all);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < all.n && !st; i++) {
    struct stat sb;
    if (fstatat(s->root_fd, all.v[i], &sb, AT_SYMLINK_NOFOLLOW))
      st = dpm_errf(err, DPM_IO, "%s/%s: %s", dpm_escape(root, b, sizeof b), all.v[i],
                    strerror(errno));
    else if (S_ISLNK(sb.st_mode))
      st = dpm_errf(err, DPM_DENIED,
                    "%s: class folder %s is a symbolic link (not followed)",
                    dpm_escape(root, b, sizeof b), all.v[i]);
    else if (S_ISDIR(sb.st_mode))
      classes.v[classes.n++] = all.v[i];
  }
  if (!st && !classes.n)
    st = dpm_errf(err, DPM_CORRUPT, "%s: no class sub-folders",
                  dpm_escape(root, b, sizeof b));
  for (size_t k = 0; k < classes.n && !st; k++)
    st = one_class(s, root, classes.v[k], k > INT32_MAX ? -1 : (int)k, err);
  free(classes.v); /* its names are all's */
  names_free(&all);
  return st;
}

dpm_status dpm_folder_read(const dpm_source *s, const src_shard *sh, uint64_t off,
                           void *dst, size_t len, dpm_err *err) {
  char cls[NAME_MAX + 1], b[256];
  const char *slash = strchr(sh->rel, '/');
  size_t cl = (size_t)(slash - sh->rel);
  memcpy(cls, sh->rel, cl);
  cls[cl] = 0;
  int cfd = openat(s->root_fd, cls, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int fd = cfd < 0 ? -1
                   : openat(cfd, slash + 1,
                            O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  int e = errno;
  if (cfd >= 0) close(cfd);
  if (fd < 0) {
    if (e == ENOENT || e == ELOOP || e == ENOTDIR) return dpm_src_changed(sh, err);
    return dpm_errf(err, DPM_IO, "%s: cannot open: %s", dpm_escape(sh->path, b, sizeof b),
                    strerror(e));
  }
  dpm_status st = dpm_file_check_regular(fd, sh->path, err);
  if (st) return st; /* fd closed */
  st = dpm_src_pread(sh, fd, off, dst, len, err);
  close(fd);
  return st;
}
