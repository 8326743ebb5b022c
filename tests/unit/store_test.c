/* The rendezvous store (comm/store.h), each kind through the same checks:
 * a key is set once (a second set is DPM_EXISTS), get and wait find what
 * was set, a wait for a key nobody sets times out within its bound and
 * names the key, delete removes a key; bad URLs are refused with the form
 * expected; a file store opened through dpmd's confined paths
 * (server/paths.h) refuses a directory outside the roots and makes
 * nothing there. The redis kind runs against a redis-server of its own
 * when one is installed (skipped otherwise), and against a server that
 * answers something else. The callback kind runs on dpmd's in-process
 * store (server/fleet/kv.h), as the coordinator's shard uses it. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/store.h"
#include "server/config.h"
#include "server/fleet/kv.h"
#include "server/paths.h"
#include "test.h"

#define TIMEOUT_MS 100

static double clock_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The checks every kind passes; 1 when all held (failures printed). */
static int exercise(dpm_store *s, int can_delete) {
  dpm_err err = {0};
  static const char id[] = "an nccl id";
  int ok = 1;
#define EXPECT(c)                                                                        \
  do {                                                                                   \
    if (!(c)) {                                                                          \
      printf("    %s: failed: %s (%s)\n", dpm_store_kind(s), #c, err.msg);               \
      ok = 0;                                                                            \
    }                                                                                    \
  } while (0)
  EXPECT(dpm_store_set(s, "job/f1/0", id, sizeof id, &err) == DPM_OK);
  EXPECT(dpm_store_set(s, "job/f1/0", "other", 5, &err) == DPM_EXISTS);
  EXPECT(strstr(err.msg, "'job/f1/0'")); /* callbacks: the caller's own words */
  void *v = NULL;
  size_t n = 0;
  EXPECT(dpm_store_get(s, "job/f1/0", TIMEOUT_MS, &v, &n, &err) == DPM_OK);
  EXPECT(v && n == sizeof id && !memcmp(v, id, n));
  free(v);
  const char *both[] = {"job/f1/0", "job/f1/1"};
  EXPECT(dpm_store_set(s, "job/f1/1", "", 0, &err) == DPM_OK);
  EXPECT(dpm_store_wait(s, both, 2, TIMEOUT_MS, &err) == DPM_OK);
  const char *missing[] = {"job/f1/0", "job/f1/2"};
  double t0 = clock_now();
  dpm_status st = dpm_store_wait(s, missing, 2, TIMEOUT_MS, &err);
  double waited = clock_now() - t0;
  EXPECT(st == DPM_TIMEOUT);
  EXPECT(strstr(err.msg, "timed out after 100 ms waiting for store key 'job/f1/2'"));
  EXPECT(waited >= TIMEOUT_MS && waited < TIMEOUT_MS + 5000);
  v = NULL;
  EXPECT(dpm_store_get(s, "job/f1/3", TIMEOUT_MS, &v, &n, &err) == DPM_TIMEOUT && !v);
  EXPECT(strstr(err.msg, "waiting for store key 'job/f1/3'"));
  EXPECT(dpm_store_get(s, "job/f1/3", 0, &v, &n, &err) == DPM_NOT_FOUND && !v);
  if (can_delete) {
    EXPECT(dpm_store_delete(s, "job/f1/0", &err) == DPM_OK);
    EXPECT(dpm_store_get(s, "job/f1/0", 0, &v, &n, &err) == DPM_NOT_FOUND);
    EXPECT(dpm_store_delete(s, "job/f1/0", &err) == DPM_OK); /* gone already */
    EXPECT(dpm_store_set(s, "job/f1/0", id, sizeof id, &err) == DPM_OK);
  } else {
    EXPECT(dpm_store_delete(s, "job/f1/0", &err) == DPM_UNSUPPORTED);
  }
#undef EXPECT
  return ok;
}

static dpm_status open_url(const char *url, const dpm_fs *fs, dpm_store **s,
                           dpm_err *err) {
  dpm_comm_rendezvous rv = {.store = url, .fs = fs};
  return dpm_store_open(&rv, TIMEOUT_MS, s, err);
}

TEST(store_file_sets_once_waits_and_names_the_missing_key) {
  char dir[64] = "/tmp/dpm-store-XXXXXX", url[128], path[256];
  CHECK(mkdtemp(dir));
  snprintf(url, sizeof url, "file://%s/sub/store", dir); /* made at the first use */
  dpm_store *s = NULL;
  dpm_err err = {0};
  CHECK_INT(open_url(url, NULL, &s, &err), DPM_OK);
  CHECK(!strcmp(dpm_store_kind(s), "file"));
  snprintf(path, sizeof path, "%s/sub", dir);
  CHECK(access(path, F_OK) != 0); /* opening made nothing */
  int ok = exercise(s, 1);
  snprintf(path, sizeof path, "%s/sub/store/job%%2Ff1%%2F0", dir); /* named by escaping */
  CHECK(access(path, F_OK) == 0);
  CHECK_INT(dpm_store_set(s, "", "x", 1, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "its file name would be empty");
  char long_key[300];
  memset(long_key, '/', sizeof long_key - 1), long_key[sizeof long_key - 1] = 0;
  CHECK_INT(dpm_store_set(s, long_key, "x", 1, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "its file name would be longer");
  dpm_store_close(s);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  CHECK(ok);
}

/* Through dpmd's confined client paths: a directory outside the roots, or
 * behind a symlink, is refused at the first use and nothing is made. */
TEST(store_file_confined_refuses_a_path_outside_the_roots) {
  char d[64] = "/tmp/dpm-store-XXXXXX", text[512], url[256], p[256];
  CHECK(mkdtemp(d));
  static const char *const dirs[] = {"state", "state/models", "allowed", "outside"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    snprintf(p, sizeof p, "%s/%s", d, dirs[i]);
    CHECK(mkdir(p, 0755) == 0);
  }
  snprintf(p, sizeof p, "%s/allowed/ln", d);
  snprintf(url, sizeof url, "%s/outside", d);
  CHECK(symlink(url, p) == 0);
  snprintf(text, sizeof text, "state_dir: %s/state\nallowed_paths: [%s/allowed]\n", d, d);
  dpmd_config cfg;
  dpmd_paths *paths = NULL;
  dpm_err err = {0};
  CHECK_INT(dpmd_config_parse(text, strlen(text), "t", &cfg, &err), DPM_OK);
  dpm_status made = dpmd_paths_create(&cfg, &paths, &err);
  if (made) {
    printf("    %s\n", err.msg);
    dpmd_config_fini(&cfg);
  }
  CHECK_INT(made, DPM_OK);
  static const struct {
    const char *dir;
    dpm_status want;
    const char *says;
  } cases[] = {
      {"outside/store", DPM_DENIED, "is not under the state dir or an allowed path"},
      {"allowed/ln/store", DPM_DENIED, "crosses a symbolic link"},
      {"allowed/rdv", DPM_OK, ""},
  };
  int ok = 1;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    snprintf(url, sizeof url, "file://%s/%s", d, cases[i].dir);
    dpm_store *s = NULL;
    CHECK_INT(open_url(url, dpmd_paths_files(paths), &s, &err), DPM_OK);
    dpm_status st = dpm_store_set(s, "k", "v", 1, &err);
    if (st != cases[i].want || !strstr(err.msg, cases[i].says)) {
      printf("    %s: %s: %s\n", cases[i].dir, dpm_status_name(st), err.msg);
      ok = 0;
    }
    if (!st) ok &= exercise(s, 1);
    dpm_store_close(s);
  }
  snprintf(p, sizeof p, "%s/outside/store", d);
  CHECK(access(p, F_OK) != 0);
  snprintf(p, sizeof p, "%s/allowed/rdv/k", d);
  CHECK(access(p, F_OK) == 0);
  dpmd_paths_destroy(paths);
  dpmd_config_fini(&cfg);
  snprintf(text, sizeof text, "rm -rf %s", d);
  CHECK(system(text) == 0);
  CHECK(ok);
}

TEST(store_refuses_bad_urls_clearly) {
  static const struct {
    const char *url;
    const char *says;
  } bad[] = {
      {"ftp://x",
       "rendezvous store 'ftp://x': expected file:///DIR or redis://HOST:PORT"},
      {"file://relative", "expected file:///DIR (an absolute path"},
      {"file:///", "expected file:///DIR"},
      {"redis://host", "rendezvous store 'redis://host': expected redis://HOST:PORT"},
      {"redis://host:99999", "expected redis://HOST:PORT"},
      {"redis://:6379", "expected redis://HOST:PORT"},
      {"redis://a b:1", "expected redis://HOST:PORT"},
      {"file:///tmp/a\nb", "'file:///tmp/a\\nb'"}, /* escaped, never raw */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dpm_store *s = (dpm_store *)&bad;
    dpm_err err = {0};
    dpm_status st = open_url(bad[i].url, NULL, &s, &err);
    if (st != DPM_INVALID || !strstr(err.msg, bad[i].says))
      printf("    case %zu: %s: %s\n", i, dpm_status_name(st), err.msg);
    CHECK_INT(st, DPM_INVALID);
    CHECK_HAS(err.msg, bad[i].says);
    CHECK(s == NULL);
  }
  dpm_comm_rendezvous none = {0};
  dpm_store *s = NULL;
  dpm_err err = {0};
  CHECK_INT(dpm_store_open(&none, TIMEOUT_MS, &s, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "neither a store URL nor key-value callbacks");
  none.store = "file:///tmp/x";
  CHECK_INT(dpm_store_open(&none, 0, &s, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "timeout 0 ms must be positive");
}

/* dpmd's own store ("daemon") as the coordinator's shard reaches it. */
TEST(store_callback_on_the_daemons_kv) {
  dpmd_kv *kv = NULL;
  dpm_err err = {0};
  CHECK_INT(dpmd_kv_create(&kv, &err), DPM_OK);
  CHECK_INT(dpmd_kv_open(kv, "job/f1", &err), DPM_OK);
  dpmd_kv_local local;
  dpmd_kv_local_init(&local, kv, "job/f1");
  dpm_comm_rendezvous rv = {.store = "daemon", .kv = &local.store};
  dpm_store *s = NULL;
  CHECK_INT(dpm_store_open(&rv, TIMEOUT_MS, &s, &err), DPM_OK);
  CHECK(!strcmp(dpm_store_kind(s), "callback"));
  int ok = exercise(s, 0);
  dpm_store_close(s);
  dpmd_kv_destroy(kv);
  CHECK(ok);
}

/* A port nobody listens on now (bound to 0, read back, closed). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
      !getsockname(fd, (struct sockaddr *)&a, &len))
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static int accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a);
  if (fd >= 0) close(fd);
  return ok;
}

TEST(store_redis_sets_once_waits_and_names_the_missing_key) {
  if (system("command -v redis-server >/dev/null 2>&1") != 0) {
    printf("    skipped: no redis-server (apt-get install redis-server)\n");
    return;
  }
  int port = free_port();
  CHECK(port > 0);
  char ps[16], url[64];
  snprintf(ps, sizeof ps, "%d", port);
  fflush(stdout);
  pid_t redis = fork();
  CHECK(redis >= 0);
  if (redis == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int nul = open("/dev/null", O_RDWR);
    dup2(nul, 1), dup2(nul, 2);
    execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save",
           "", "--daemonize", "no", (char *)NULL);
    _exit(127);
  }
  double t0 = clock_now();
  while (!accepts(port) && clock_now() - t0 < 5000) usleep(5000);
  int up = accepts(port), ok = 0;
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  dpm_store *s = NULL;
  dpm_err err = {0};
  if (up && !open_url(url, NULL, &s, &err)) ok = exercise(s, 1);
  kill(redis, SIGTERM);
  waitpid(redis, NULL, 0);
  int down = 0;
  if (s) { /* the server gone: the one message, not a hang */
    down = dpm_store_set(s, "job/f1/9", "x", 1, &err) == DPM_IO &&
           strstr(err.msg, "no usable Redis server there");
    if (!down) printf("    redis down: %s\n", err.msg);
  }
  dpm_store_close(s);
  CHECK(up);
  CHECK(ok);
  CHECK(down);
}

/* A server that answers something else, and a closed port: one message,
 * which never quotes the answer. */
TEST(store_redis_errors_do_not_reveal_the_peer) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 4) &&
        !getsockname(fd, (struct sockaddr *)&a, &n));
  int talk = ntohs(a.sin_port), closed = free_port();
  char url[64], msg[2][1100];
  for (int k = 0; k < 2; k++) {
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", k ? closed : talk);
    dpm_store *s = NULL;
    dpm_err err = {0};
    CHECK_INT(open_url(url, NULL, &s, &err), DPM_OK);
    if (!k) { /* the banner goes out once the client connected */
      pid_t child = fork();
      CHECK(child >= 0);
      if (child == 0) {
        int c = accept(fd, NULL, NULL);
        if (c >= 0 && write(c, "Xsecret-banner 2.4\r\n", 20) < 0) _exit(1);
        _exit(0);
      }
      CHECK_INT(dpm_store_set(s, "k", "v", 1, &err), DPM_IO);
      waitpid(child, NULL, 0);
    } else {
      CHECK_INT(dpm_store_set(s, "k", "v", 1, &err), DPM_IO);
    }
    char *p = strstr(err.msg, url + 18); /* the port, as PORT */
    snprintf(msg[k], sizeof msg[k], "%.*sPORT%s", p ? (int)(p - err.msg) : 0, err.msg,
             p ? p + strlen(url + 18) : err.msg);
    /* sticky: a later call fails alike without trying again */
    CHECK_INT(dpm_store_wait(s, (const char *[]){"k"}, 1, TIMEOUT_MS, &err), DPM_IO);
    dpm_store_close(s);
  }
  close(fd);
  printf("    talking: %s\n    closed: %s\n", msg[0], msg[1]);
  CHECK(!strcmp(msg[0], msg[1]));
  CHECK_HAS(msg[0], "no usable Redis server there");
  CHECK(!strstr(msg[0], "secret") && !strstr(msg[1], "refused"));
}
