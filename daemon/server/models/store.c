/* dpmd's state directory: specs, checkpoint names, retention, removal. */
#include "server/models/store.h"
#include "server/sched.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/spec.h"
#include "common/validate.h"

#define MAX_SPEC_FILE (64u << 20)

static int fits(int r, size_t n) { return r >= 0 && (size_t)r < n ? 0 : -1; }

int dpmd_store_model_dir(const char *state_dir, const char *name, char *buf, size_t n) {
  return fits(snprintf(buf, n, "%s/models/%s", state_dir, name), n);
}

/* The file name dpmd gives iteration iter's checkpoint. */
#define CKPT_NAME_MAX 64
static void checkpoint_name(uint64_t iter, char name[CKPT_NAME_MAX]) {
  snprintf(name, CKPT_NAME_MAX, "ckpt-%012" PRIu64 ".dpmckpt", iter);
}

int dpmd_store_checkpoint_path(const char *dir, uint64_t iter, char *buf, size_t n) {
  char name[CKPT_NAME_MAX];
  checkpoint_name(iter, name);
  return fits(snprintf(buf, n, "%s/checkpoints/%s", dir, name), n);
}

static dpm_status io_err(dpm_err *err, const char *path, const char *what) {
  return dpm_errf(err, DPM_IO, "%s: %s: %s", path, what, strerror(errno));
}

dpm_status dpmd_store_init(const char *state_dir, dpm_err *err) {
  char path[PATH_MAX];
  if (fits(snprintf(path, sizeof path, "%s/models", state_dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", state_dir);
  return dpm_mkdirs(path, 0750, err);
}

dpm_status dpmd_store_save_spec(const char *dir, const Dpm__ModelSpec *spec,
                                dpm_err *err) {
  char path[PATH_MAX];
  if (fits(snprintf(path, sizeof path, "%s/checkpoints", dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", dir);
  if (dpm_mkdirs(path, 0750, err)) return err->code;
  snprintf(path, sizeof path, "%s/spec.pb", dir);
  size_t len = dpm__model_spec__get_packed_size(spec);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return dpm_errf(err, DPM_NOMEM, "out of memory");
  dpm__model_spec__pack(spec, buf);
  dpm_status s = dpm_file_write_buffer(NULL, path, 0, buf, len, err);
  free(buf);
  return s;
}

dpm_status dpmd_store_load_spec(const char *dir, Dpm__ModelSpec **out, dpm_err *err) {
  char path[PATH_MAX];
  void *buf;
  size_t len;
  *out = NULL;
  if (fits(snprintf(path, sizeof path, "%s/spec.pb", dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", dir);
  if (dpm_file_read_all(NULL, path, MAX_SPEC_FILE, &buf, &len, err)) return err->code;
  *out = dpm__model_spec__unpack(NULL, len, buf);
  free(buf);
  if (!*out) return dpm_errf(err, DPM_CORRUPT, "%s: not a model spec", path);
  return DPM_OK;
}

dpm_status dpmd_store_lock(const char *state_dir, int *fd, dpm_err *err) {
  char path[PATH_MAX], text[32];
  *fd = -1;
  if (fits(snprintf(path, sizeof path, "%s/lock", state_dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", state_dir);
  int f = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (f < 0) return io_err(err, path, "open");
  if (flock(f, LOCK_EX | LOCK_NB)) {
    int e = errno;
    ssize_t n = pread(f, text, sizeof text - 1, 0);
    close(f);
    if (e != EWOULDBLOCK) {
      errno = e;
      return io_err(err, path, "lock");
    }
    long pid = n > 0 ? (text[n] = 0, strtol(text, NULL, 10)) : 0;
    return dpm_errf(err, DPM_EXISTS, "state dir %s is in use by another dpmd (pid %ld)",
                    state_dir, pid);
  }
  int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
  if (ftruncate(f, 0) || pwrite(f, text, (size_t)n, 0) != n) {
    dpm_status s = io_err(err, path, "write");
    close(f);
    return s;
  }
  *fd = f;
  return DPM_OK;
}

static int newest_first(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether name, in the directory at dfd, is a regular file (not followed). */
static int regular_at(int dfd, const char *name) {
  struct stat st;
  return !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
}

/* The checkpoints in DIR/checkpoints (open as dp): the regular files named
 * as dpmd names them, newest first, at most max. Removes leftover
 * temporaries (regular files only). */
static int list_checkpoints(DIR *dp, uint64_t *iters, int max) {
  int n = 0;
  for (struct dirent *e; (e = readdir(dp));) {
    unsigned long long it;
    char name[CKPT_NAME_MAX];
    if (!regular_at(dirfd(dp), e->d_name)) continue;
    if (strstr(e->d_name, ".tmp")) { /* a write cut short (NAME.tmp or NAME.tmp.PID) */
      unlinkat(dirfd(dp), e->d_name, 0);
      continue;
    }
    if (sscanf(e->d_name, "ckpt-%12llu", &it) != 1) continue;
    checkpoint_name(it, name);
    if (!strcmp(name, e->d_name) && n < max) iters[n++] = it;
  }
  qsort(iters, (size_t)n, sizeof *iters, newest_first);
  return n;
}

static DIR *open_checkpoints(const char *dir) {
  char path[PATH_MAX];
  if (fits(snprintf(path, sizeof path, "%s/checkpoints", dir), sizeof path)) return NULL;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *dp = fd < 0 ? NULL : fdopendir(fd);
  if (!dp && fd >= 0) close(fd);
  return dp;
}

int dpmd_store_checkpoints(const char *dir, uint64_t *iters, int max) {
  DIR *dp = open_checkpoints(dir);
  if (!dp) return 0;
  int n = list_checkpoints(dp, iters, max);
  closedir(dp);
  return n;
}

int dpmd_store_has_checkpoint(const char *dir, uint64_t iter) {
  char name[CKPT_NAME_MAX];
  DIR *dp = open_checkpoints(dir);
  if (!dp) return 0;
  checkpoint_name(iter, name);
  int has = regular_at(dirfd(dp), name);
  closedir(dp);
  return has;
}

void dpmd_store_retain(const char *dir, int keep, uint64_t written) {
  if (keep <= 0) return;
  uint64_t *it = malloc(DPMD_MAX_CHECKPOINTS * sizeof *it);
  DIR *dp = it ? open_checkpoints(dir) : NULL;
  if (!dp) {
    free(it);
    return;
  }
  int n = list_checkpoints(dp, it, DPMD_MAX_CHECKPOINTS);
  for (int i = keep; i < n; i++) {
    char name[CKPT_NAME_MAX];
    checkpoint_name(it[i], name);
    if (it[i] != written && regular_at(dirfd(dp), name)) unlinkat(dirfd(dp), name, 0);
  }
  closedir(dp);
  free(it);
}

dpm_status dpmd_store_save_target(const char *dir, uint64_t target, dpm_err *err) {
  char path[PATH_MAX], text[32];
  if (fits(snprintf(path, sizeof path, "%s/target", dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", dir);
  int n = snprintf(text, sizeof text, "%" PRIu64 "\n", target);
  return dpm_file_write_buffer(NULL, path, 0, text, (size_t)n, err);
}

uint64_t dpmd_store_take_target(const char *dir) {
  char path[PATH_MAX];
  unsigned long long t = 0;
  if (fits(snprintf(path, sizeof path, "%s/target", dir), sizeof path)) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%llu", &t) != 1) t = 0;
  fclose(f);
  unlink(path);
  return t;
}

dpm_status dpmd_store_save_schedule(const char *dir, const dpmd_schedule *sc, int spilled,
                                    dpm_err *err) {
  char path[PATH_MAX], text[160];
  if (fits(snprintf(path, sizeof path, "%s/schedule", dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", dir);
  int n = snprintf(text, sizeof text, "%d %.17g %d %" PRIu64 " %d\n", sc->priority,
                   sc->weight, sc->spill, sc->max_memory, spilled);
  return dpm_file_write_buffer(NULL, path, 0, text, (size_t)n, err);
}

int dpmd_store_load_schedule(const char *dir, dpmd_schedule *sc, int *spilled) {
  char path[PATH_MAX];
  if (fits(snprintf(path, sizeof path, "%s/schedule", dir), sizeof path)) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  dpmd_schedule v = {0};
  unsigned long long mem;
  int sp, ok = fscanf(f, "%d %lf %d %llu %d", &v.priority, &v.weight, &v.spill, &mem, &sp) == 5;
  fclose(f);
  v.max_memory = mem;
  if (!ok || v.priority < -DPMD_PRIORITY_MAX || v.priority > DPMD_PRIORITY_MAX ||
      !(v.weight > 0 && v.weight <= DPMD_WEIGHT_MAX) || (v.spill != 0 && v.spill != 1) ||
      (sp != 0 && sp != 1))
    return -1;
  *sc = v;
  *spilled = sp;
  return 0;
}

dpm_status dpmd_store_save_shard(const char *dir, int shard, dpm_err *err) {
  char path[PATH_MAX], text[32];
  if (fits(snprintf(path, sizeof path, "%s/shard", dir), sizeof path))
    return dpm_errf(err, DPM_INVALID, "path too long: %s", dir);
  int n = snprintf(text, sizeof text, "%d\n", shard);
  return dpm_file_write_buffer(NULL, path, 0, text, (size_t)n, err);
}

int dpmd_store_load_shard(const char *dir) {
  char path[PATH_MAX];
  int s = -1;
  if (fits(snprintf(path, sizeof path, "%s/shard", dir), sizeof path)) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  if (fscanf(f, "%d", &s) != 1 || s < 0 || s >= DPM_SPEC_MAX_SHARDS) s = -1;
  fclose(f);
  return s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

dpm_status dpmd_store_remove(const char *dir, dpm_err *err) {
  if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
    return io_err(err, dir, "remove");
  return DPM_OK;
}

char **dpmd_store_models(const char *state_dir, int *n) {
  char path[PATH_MAX];
  *n = 0;
  if (fits(snprintf(path, sizeof path, "%s/models", state_dir), sizeof path)) return NULL;
  DIR *dp = opendir(path);
  if (!dp) return NULL;
  char **names = NULL;
  for (struct dirent *e; (e = readdir(dp));) {
    if (!dpm_model_name_valid(e->d_name)) continue;
    char **grown = realloc(names, (size_t)(*n + 1) * sizeof *names);
    if (!grown) break;
    names = grown;
    if (!(names[*n] = strdup(e->d_name))) break;
    (*n)++;
  }
  closedir(dp);
  return names;
}
