/* Files through descriptors (common/file.h) and dpmd's confinement of clients'
 * paths (server/paths.h), on a scratch tree:
 *
 *   D/state/models/m/checkpoints   the daemon's own files
 *   D/allowed                      allowed_paths
 *   D/data                         data_paths
 *   D/outside                      none of them
 *
 * plus symlinks, a FIFO and a directory swapped for a symlink between the
 * moment a directory is resolved and the write (the race a check-then-use
 * design lost). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/file.h"
#include "server/models/store.h"
#include "server/paths.h"
#include "server/request.h"
#include "test.h"
#include "testfile.h"

typedef struct {
  char d[64];
  dpmd_config cfg;
  dpmd_paths *p;
} tree;

static char *at(const tree *t, const char *rel) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", t->d, rel);
  return buf[k];
}

static int setup(tree *t) {
  memset(t, 0, sizeof *t);
  snprintf(t->d, sizeof t->d, "/tmp/dpm-paths-XXXXXX");
  if (!mkdtemp(t->d)) return 0;
  static const char *const dirs[] = {
      "state",   "state/models", "state/models/m", "state/models/m/checkpoints",
      "allowed", "data",         "outside"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
    if (mkdir(at(t, dirs[i]), 0755)) return 0;
  char text[1024];
  snprintf(text, sizeof text, "state_dir: %s\nallowed_paths: [%s]\ndata_paths: [%s]\n",
           at(t, "state"), at(t, "allowed"), at(t, "data"));
  dpm_err err = {0};
  if (dpmd_config_parse(text, strlen(text), "t", &t->cfg, &err) ||
      dpmd_paths_create(&t->cfg, &t->p, &err)) {
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return 0;
  }
  return 1;
}

static void teardown(tree *t) {
  dpmd_paths_destroy(t->p);
  dpmd_config_fini(&t->cfg);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", t->d);
  if (system(cmd)) {
  }
}

static dpm_status write_file(const dpm_fs *fs, const char *path, dpm_err *err) {
  return dpm_file_write_buffer(fs, path, 0, "new", 3, err);
}

static dpm_status read_file(const dpm_fs *fs, const char *path, dpm_err *err) {
  int fd;
  dpm_status s = dpm_file_open_read(fs, path, &fd, err);
  if (!s) close(fd);
  return s;
}

TEST(paths_confine_reads_and_writes_to_their_roots) {
  tree t;
  if (!setup(&t)) return;
  const dpm_fs *data = dpmd_paths_data(t.p), *files = dpmd_paths_files(t.p);
  dpm_err err = {0};
  CHECK(test_write_file(at(&t, "data/x.gz"), "x", 1) == 0);
  CHECK(test_write_file(at(&t, "outside/secret"), "root:x", 6) == 0);
  /* data: state, allowed and data roots; files: state and allowed only */
  CHECK_INT(read_file(data, at(&t, "data/x.gz"), &err), DPM_OK);
  CHECK_INT(read_file(files, at(&t, "data/x.gz"), &err), DPM_DENIED);
  CHECK_HAS(err.msg, "is not under the state dir or an allowed path");
  CHECK_INT(read_file(data, at(&t, "outside/secret"), &err), DPM_DENIED);
  CHECK_HAS(err.msg, "is not under the state dir, an allowed path or a data path");
  CHECK(!strstr(err.msg, "root:x"));
  CHECK_INT(write_file(files, at(&t, "allowed/c.ckpt"), &err), DPM_OK);
  CHECK_INT(write_file(files, at(&t, "state/mine.ckpt"), &err), DPM_OK);
  CHECK_INT(write_file(data, at(&t, "data/y"), &err), DPM_DENIED);
  CHECK_INT(write_file(files, at(&t, "outside/c.ckpt"), &err), DPM_DENIED);
  CHECK_INT(write_file(files, at(&t, "state/../outside/c.ckpt"), &err), DPM_DENIED);
  CHECK_HAS(err.msg, "'..'");
  CHECK_INT(write_file(files, "relative/c.ckpt", &err), DPM_DENIED);
  CHECK_INT(write_file(files, at(&t, "allowedX/c.ckpt"), &err), DPM_DENIED);
  CHECK(access(at(&t, "outside/c.ckpt"), F_OK) != 0);
  /* the lexical check dpmd makes on the loop agrees */
  CHECK_INT(dpmd_paths_check(t.p, at(&t, "allowed/a"), &err), DPM_OK);
  CHECK_INT(dpmd_paths_check(t.p, at(&t, "outside/a"), &err), DPM_DENIED);
  teardown(&t);
}

TEST(paths_refuse_symlinks_anywhere_below_a_root) {
  tree t;
  if (!setup(&t)) return;
  const dpm_fs *files = dpmd_paths_files(t.p);
  dpm_err err = {0};
  CHECK(symlink(at(&t, "outside"), at(&t, "allowed/dir")) == 0);
  CHECK(symlink(at(&t, "outside/passwd"), at(&t, "allowed/file")) == 0);
  CHECK(symlink("sub", at(&t, "allowed/inside")) == 0); /* even one staying inside */
  CHECK(mkdir(at(&t, "allowed/sub"), 0755) == 0);
  CHECK(test_write_file(at(&t, "outside/passwd"), "root", 4) == 0);
  CHECK_INT(write_file(files, at(&t, "allowed/dir/c.ckpt"), &err), DPM_DENIED);
  CHECK_HAS(err.msg, "crosses a symbolic link");
  CHECK_INT(write_file(files, at(&t, "allowed/file"), &err), DPM_DENIED);
  CHECK_INT(read_file(files, at(&t, "allowed/file"), &err), DPM_DENIED);
  CHECK_INT(read_file(files, at(&t, "allowed/inside/x"), &err), DPM_DENIED);
  CHECK_INT(
      dpm_file_write_buffer(files, at(&t, "allowed/dir/p/predictor.pb"), 1, "x", 1, &err),
      DPM_DENIED);
  CHECK(access(at(&t, "outside/c.ckpt"), F_OK) != 0 && access(at(&t, "outside/p"), F_OK));
  uint8_t *b;
  size_t n;
  CHECK((b = test_read_file(at(&t, "outside/passwd"), &n)) && n == 4);
  free(b);
  teardown(&t);
}

/* The state dir's models/ tree and lock are never a client's target, by any
 * root or spelling: an allowed path that contains the state dir reaches it
 * by descriptor too. */
TEST(paths_protect_the_daemons_own_files) {
  tree t;
  if (!setup(&t)) return;
  dpm_err err = {0};
  char text[1024];
  dpmd_config cfg;
  dpmd_paths *wide;
  snprintf(text, sizeof text, "state_dir: %s\nallowed_paths: [%s]\n", at(&t, "state"),
           t.d); /* an allowed path above the state dir */
  CHECK_INT(dpmd_config_parse(text, strlen(text), "t", &cfg, &err), DPM_OK);
  CHECK_INT(dpmd_paths_create(&cfg, &wide, &err), DPM_OK);
  const dpm_fs *fss[] = {dpmd_paths_files(t.p), dpmd_paths_files(wide)};
  for (int k = 0; k < 2; k++) {
    CHECK_INT(write_file(fss[k], at(&t, "state/models/m/spec.pb"), &err), DPM_DENIED);
    CHECK_HAS(err.msg, "one of dpmd's own files");
    CHECK_INT(write_file(fss[k],
                         at(&t, "state/models/m/checkpoints/ckpt-999999999999.dpmckpt"),
                         &err),
              DPM_DENIED);
    CHECK_INT(write_file(fss[k], at(&t, "state/lock"), &err), DPM_DENIED);
    CHECK_INT(dpm_file_write_buffer(fss[k], at(&t, "state/models/p/predictor.pb"), 1, "x",
                                    1, &err),
              DPM_DENIED);
  }
  CHECK(access(at(&t, "state/models/m/spec.pb"), F_OK) != 0);
  CHECK(access(at(&t, "state/lock"), F_OK) != 0);
  /* reading them is allowed (a model's own checkpoints load) */
  CHECK(test_write_file(at(&t, "state/models/m/checkpoints/ckpt-1.dpmckpt"), "c", 1) ==
        0);
  CHECK_INT(read_file(dpmd_paths_files(t.p),
                      at(&t, "state/models/m/checkpoints/ckpt-1.dpmckpt"), &err),
            DPM_OK);
  dpmd_paths_destroy(wide);
  dpmd_config_fini(&cfg);
  teardown(&t);
}

static void on_alarm(int sig) { (void)sig; }

/* A FIFO would block an open for reading until a writer comes, and the
 * daemon would never exit: it is refused at once, through every fs. */
TEST(paths_refuse_fifos_without_blocking) {
  tree t;
  if (!setup(&t)) return;
  CHECK(mkfifo(at(&t, "data/fifo.gz"), 0600) == 0);
  struct sigaction sa = {.sa_handler = on_alarm}, old;
  sigaction(SIGALRM, &sa, &old);
  alarm(5); /* a blocked open would return EINTR instead of hanging the run */
  dpm_err err = {0};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  dpm_status s1 = read_file(dpmd_paths_data(t.p), at(&t, "data/fifo.gz"), &err);
  dpm_status s2 = read_file(NULL, at(&t, "data/fifo.gz"), &err);
  clock_gettime(CLOCK_MONOTONIC, &b);
  alarm(0);
  sigaction(SIGALRM, &old, NULL);
  CHECK_INT(s1, DPM_IO);
  CHECK_INT(s2, DPM_IO);
  CHECK_HAS(err.msg, "not a regular file");
  CHECK(b.tv_sec - a.tv_sec < 2);
  teardown(&t);
}

/* The check-then-use race: a directory that passes is swapped for a symlink
 * to elsewhere before the write. Here the writer holds the directory's
 * descriptor from the walk, so the swap comes after resolution: the file
 * lands in the directory that was checked (now renamed away), never in the
 * symlink's target. A swap before resolution is refused as a symlink. */
typedef struct {
  tree *t;
  int swapped;
} swap_arg;

static dpm_status swap_then_write(int fd, void *arg, dpm_err *err) {
  swap_arg *a = arg;
  (void)err;
  a->swapped = rename(at(a->t, "allowed/d"), at(a->t, "allowed/d.old")) == 0 &&
               symlink(at(a->t, "outside"), at(a->t, "allowed/d")) == 0;
  return write(fd, "ckpt", 4) == 4 ? DPM_OK : DPM_IO;
}

TEST(paths_symlink_swap_cannot_redirect_a_write) {
  tree t;
  if (!setup(&t)) return;
  CHECK(mkdir(at(&t, "allowed/d"), 0755) == 0);
  dpm_err err = {0};
  swap_arg a = {&t, 0};
  CHECK_INT(dpm_file_write(dpmd_paths_files(t.p), at(&t, "allowed/d/c.ckpt"), 0,
                           swap_then_write, &a, &err),
            DPM_OK);
  CHECK(a.swapped);
  CHECK(access(at(&t, "outside/c.ckpt"), F_OK) != 0);
  CHECK(access(at(&t, "allowed/d.old/c.ckpt"), F_OK) == 0);
  /* the next write meets the symlink while resolving: refused */
  CHECK_INT(write_file(dpmd_paths_files(t.p), at(&t, "allowed/d/c.ckpt"), &err),
            DPM_DENIED);
  CHECK(access(at(&t, "outside/c.ckpt"), F_OK) != 0);
  teardown(&t);
}

TEST(state_dir_lock_names_the_holder) {
  tree t;
  if (!setup(&t)) return;
  int fd, fd2 = -1;
  dpm_err err = {0};
  CHECK_INT(dpmd_store_lock(at(&t, "state"), &fd, &err), DPM_OK);
  /* flock is per open file description: a second open in this process
   * conflicts as a second dpmd would */
  CHECK_INT(dpmd_store_lock(at(&t, "state"), &fd2, &err), DPM_EXISTS);
  char want[64];
  snprintf(want, sizeof want, "in use by another dpmd (pid %ld)", (long)getpid());
  CHECK_HAS(err.msg, want);
  close(fd);
  CHECK_INT(dpmd_store_lock(at(&t, "state"), &fd2, &err), DPM_OK);
  close(fd2);
  teardown(&t);
}

/* Request bytes: a NUL inside any string is refused, not truncated; the
 * unpacked form may take DPMD_DECODE_FACTOR x its size, no more. */
TEST(request_decode_is_bounded) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = "abc";
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.version = 1;
  rq.command_case = DPM__REQUEST__COMMAND_STATUS;
  rq.status = &nr;
  uint8_t buf[64];
  size_t n = dpm__request__pack(&rq, buf);
  Dpm__Request *out;
  dpm_err err = {0};
  CHECK_INT(dpmd_request_decode(buf, n, 1024, &out, &err), DPM_OK);
  CHECK(!strcmp(out->status->name, "abc"));
  dpm__request__free_unpacked(out, NULL);
  CHECK_INT(dpmd_request_decode(buf, n, n - 1, &out, &err), DPM_DENIED);
  buf[n - 2] = 0; /* "a\0c" */
  CHECK_INT(dpmd_request_decode(buf, n, 1024, &out, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "'status.name' holds a NUL byte");
  CHECK(out == NULL);
  /* 1 MiB of empty repeated strings (2 bytes each on the wire, a pointer and
   * a malloc'd byte each unpacked): over the bound */
  size_t big = 1 << 20, k = 0;
  uint8_t *b = malloc(big + 16);
  CHECK(b);
  b[k++] = 0x08, b[k++] = 1;    /* version 1 */
  b[k++] = 0x62, b[k++] = 0x80; /* submit (field 12), length 2^20 - ... */
  size_t body = big - 8;
  b[k - 1] = (uint8_t)(0x80 | (body & 0x7f));
  b[k++] = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
  b[k++] = (uint8_t)(body >> 14);
  size_t start = k;
  while (k - start + 2 <= body) b[k++] = 0x1a, b[k++] = 0; /* devices (field 3): "" */
  CHECK_INT(dpmd_request_decode(b, k, 64u << 20, &out, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "decoded");
  free(b);
}

/* A path refused for where it leads creates nothing on the way: directories
 * named like a model's checkpoints, made under models/ by a refused
 * predictor, would otherwise stay and mislead retention. */
TEST(paths_refused_write_creates_nothing) {
  tree t;
  if (!setup(&t)) return;
  const dpm_fs *files = dpmd_paths_files(t.p);
  dpm_err err = {0};
  const char *ck = "state/models/m/checkpoints/ckpt-000000000999.dpmckpt";
  char path[600], name[300];
  snprintf(path, sizeof path, "%s/predictor.pb", at(&t, ck));
  CHECK_INT(dpm_file_write_buffer(files, path, 1, "x", 1, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "one of dpmd's own files");
  CHECK(access(at(&t, ck), F_OK) != 0);
  snprintf(path, sizeof path, "%s/a/b/predictor.pb", at(&t, "state/models/new"));
  CHECK_INT(dpm_file_write_buffer(files, path, 1, "x", 1, &err), DPM_DENIED);
  CHECK(access(at(&t, "state/models/new"), F_OK) != 0);
  /* a component too long further down: refused before the first mkdir */
  memset(name, 'n', 260);
  name[260] = 0;
  snprintf(path, sizeof path, "%s/%s/predictor.pb", at(&t, "allowed/made"), name);
  CHECK_INT(dpm_file_write_buffer(files, path, 1, "x", 1, &err), DPM_DENIED);
  CHECK_HAS(err.msg, "has a component too long");
  CHECK(access(at(&t, "allowed/made"), F_OK) != 0);
  /* a root alone names no file */
  CHECK_INT(write_file(files, at(&t, "allowed/"), &err), DPM_DENIED);
  CHECK_HAS(err.msg, "names no file");
  /* allowed: directories made below an allowed root */
  snprintf(path, sizeof path, "%s/predictor.pb", at(&t, "allowed/p/q"));
  CHECK_INT(dpm_file_write_buffer(files, path, 1, "x", 1, &err), DPM_OK);
  CHECK(access(path, F_OK) == 0);
  teardown(&t);
}

/* Retention removes only the checkpoints dpmd wrote: regular files named as
 * it names them. Directories, symlinks and other names numbered above the
 * model's iteration are not counted and stay; the checkpoint just written
 * stays even when older than the ones kept. */
TEST(store_retention_removes_only_its_own_checkpoints) {
  tree t;
  if (!setup(&t)) return;
  const char *m = at(&t, "state/models/m");
  char p[600];
  for (int i = 0; i < 3; i++) { /* planted: a directory, a symlink, a near name */
    static const char *const planted[] = {"ckpt-000000000997.dpmckpt",
                                          "ckpt-000000000998.dpmckpt",
                                          "ckpt-+00000000999.dpmckpt"};
    snprintf(p, sizeof p, "%s/checkpoints/%s", m, planted[i]);
    CHECK(i == 0   ? mkdir(p, 0755) == 0
          : i == 1 ? symlink(at(&t, "outside/x"), p) == 0
                   : test_write_file(p, "c", 1) == 0);
  }
  CHECK(test_write_file(at(&t, "outside/x"), "keep", 4) == 0);
  uint64_t its[] = {10, 20, 30, 40}, got[8];
  for (int i = 0; i < 4; i++) {
    CHECK(!dpmd_store_checkpoint_path(m, its[i], p, sizeof p));
    CHECK(test_write_file(p, "c", 1) == 0);
    dpmd_store_retain(m, 3, its[i]);
    CHECK(dpmd_store_has_checkpoint(m, its[i]));
  }
  CHECK_INT(dpmd_store_checkpoints(m, got, 8), 3);
  CHECK(got[0] == 40 && got[1] == 30 && got[2] == 20);
  /* after a load of iteration 5, its checkpoint is the one just written */
  CHECK(!dpmd_store_checkpoint_path(m, 5, p, sizeof p));
  CHECK(test_write_file(p, "c", 1) == 0);
  dpmd_store_retain(m, 3, 5);
  CHECK(dpmd_store_has_checkpoint(m, 5));
  CHECK(!dpmd_store_has_checkpoint(m, 997) && !dpmd_store_has_checkpoint(m, 998));
  snprintf(p, sizeof p, "%s/checkpoints/ckpt-000000000997.dpmckpt", m);
  struct stat st;
  CHECK(lstat(p, &st) == 0 && S_ISDIR(st.st_mode));
  snprintf(p, sizeof p, "%s/checkpoints/ckpt-000000000998.dpmckpt", m);
  CHECK(lstat(p, &st) == 0 && S_ISLNK(st.st_mode));
  snprintf(p, sizeof p, "%s/checkpoints/ckpt-+00000000999.dpmckpt", m);
  CHECK(access(p, F_OK) == 0);
  CHECK(access(at(&t, "outside/x"), F_OK) == 0);
  teardown(&t);
}

/* A gloo file store opened through dpmd's files fs: its directory is made
 * only where a client's files may go, never through a symlink nor in
 * models/; where it may, process 0 of 2 publishes its key there and waits
 * for process 1 (which never comes: a timeout). */
TEST(paths_confine_a_gloo_file_store) {
  tree t;
  if (!setup(&t)) return;
  CHECK(symlink(at(&t, "outside"), at(&t, "allowed/ln")) == 0);
  static const struct {
    const char *dir;
    dpm_status want;
    const char *says;
  } cases[] = {
      {"allowed/ln/store", DPM_DENIED, "crosses a symbolic link"},
      {"outside/store", DPM_DENIED, "is not under the state dir or an allowed path"},
      {"state/models/m/store", DPM_DENIED, "one of dpmd's own files"},
      {"allowed/rdv/store", DPM_TIMEOUT, "process 1 (job rank 1) has not arrived"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char url[600];
    snprintf(url, sizeof url, "file://%s", at(&t, cases[i].dir));
    dpm_comm_config cfg = {.kind = DPM_COMM_GLOO,
                           .size = 1,
                           .world = 2,
                           .timeout_ms = 200,
                           .rendezvous = {.store = url,
                                          .prefix = "unit/p",
                                          .iface = "lo",
                                          .fs = dpmd_paths_files(t.p)}};
    dpm_comm *comm = NULL;
    dpm_err err = {0};
    dpm_status s = dpm_comm_create(&cfg, &comm, &err);
    if (s != cases[i].want) printf("    %s: %s\n", cases[i].dir, err.msg);
    CHECK_INT(s, cases[i].want);
    CHECK_HAS(err.msg, cases[i].says);
    if (comm) dpm_comm_destroy(comm);
  }
  CHECK(access(at(&t, "outside/store"), F_OK) != 0);
  CHECK(access(at(&t, "state/models/m/store"), F_OK) != 0);
  CHECK(access(at(&t, "allowed/rdv/store/unit%2Fp%2F0"), F_OK) == 0);
  teardown(&t);
}
