/* dpmd's config, log and notify: defaults; a full file; every kind of file
 * error at its exact line:column; flags over the file; the rule that a
 * non-loopback tcp:// listen address needs a token; the token file; the
 * installed default config; sd_notify datagrams; log line formats. Temporary files live
 * in a mkdtemp directory. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/config.h"
#include "server/log.h"
#include "server/notify.h"
#include "test.h"

static int STREQ(const char *a, const char *b) { return a && strcmp(a, b) == 0; }

/* Checks that err's message is exactly `want`. */
#define CHECK_MSG(err, want)                                                             \
  do {                                                                                   \
    if (strcmp((err).msg, (want)) != 0) {                                                \
      dpm_test_fail(__FILE__, __LINE__, "message \"%s\", expected \"%s\"", (err).msg,    \
                    (want));                                                             \
      return;                                                                            \
    }                                                                                    \
  } while (0)

static dpm_status parse(const char *text, dpmd_config *cfg, dpm_err *err) {
  return dpmd_config_parse(text, strlen(text), "t.yaml", cfg, err);
}

/* A fresh temporary directory (its real path), or NULL. */
static char *tmp_dir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/dpm-config-XXXXXX");
  if (!mkdtemp(buf)) return NULL;
  char *real = realpath(buf, NULL);
  if (!real) return NULL;
  snprintf(buf, cap, "%s", real);
  free(real);
  return buf;
}

static int write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n && fchmod(fd, mode) == 0;
  close(fd);
  return ok;
}

static void rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TEST(config_defaults) {
  static const char *const blank[] = {"", "# nothing but comments\n\n  # here\n", "---\n",
                                      "~\n"};
  for (size_t i = 0; i < sizeof blank / sizeof *blank; i++) {
    dpmd_config cfg;
    dpm_err err = {0};
    CHECK_INT(parse(blank[i], &cfg, &err), DPM_OK);
    CHECK_INT(cfg.n_listen, 1);
    CHECK(STREQ(cfg.listen[0], "ipc:///run/dpmd/dpmd.sock"));
    CHECK(STREQ(cfg.events, "ipc:///run/dpmd/dpmd.events.sock"));
    CHECK_INT(cfg.events_set, 0);
    CHECK(STREQ(cfg.state_dir, "/var/lib/dpmd"));
    CHECK(cfg.cpu_devices >= 1 && cfg.cpu_devices <= 1024); /* the cores we may use */
    CHECK(cfg.cpu_devices <= sysconf(_SC_NPROCESSORS_CONF));
    CHECK_INT(cfg.gpus, 1);
    CHECK_INT(cfg.max_models, 16);
    CHECK_INT(cfg.checkpoint_retention, 3);
    CHECK_INT(cfg.checkpoint_on_shutdown, 1);
    CHECK_INT(cfg.n_allowed_paths, 0);
    CHECK(cfg.n_data_paths == 1 && STREQ(cfg.data_paths[0], "/usr/share/datasets"));
    CHECK(cfg.checkpoint_every_s == 600 && cfg.checkpoint_every_iters == 0);
    CHECK(cfg.auth_token_file == NULL && cfg.token == NULL);
    CHECK_INT(cfg.log_level, DPMD_LOG_INFO);
    CHECK_INT(cfg.max_message_bytes, 64 << 20);
    CHECK(cfg.max_model_bytes == (uint64_t)8 << 30);
    CHECK(cfg.data_cache_bytes == (uint64_t)1 << 30);
    CHECK_INT(cfg.progress_every, 10);
    CHECK_INT(cfg.foreground, 0);
    CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_OK);
    dpmd_config_fini(&cfg);
    CHECK(cfg.listen == NULL); /* fini leaves it zeroed: a second fini is harmless */
    dpmd_config_fini(&cfg);
  }
}

/* clang-format off */
static const char FULL[] =
    "# every key\n"                                                   /* 1 */
    "listen:\n"                                                       /* 2 */
    "  - ipc:///tmp/d/ctl.sock\n"                                     /* 3 */
    "  - tcp://127.0.0.1:7000\n"                                      /* 4 */
    "events: tcp://[::1]:7001\n"                                      /* 5 */
    "state_dir: /srv/dpmd\n"                                          /* 6 */
    "devices:\n"                                                      /* 7 */
    "  cpu: 3\n"                                                      /* 8 */
    "  cuda: off\n"                                                   /* 9 */
    "max_models: 2\n"                                                 /* 10 */
    "checkpoint_retention: 0\n"                                       /* 11 */
    "checkpoint_on_shutdown: false\n"                                 /* 12 */
    "allowed_paths: [/data/ckpt, /srv/predictors]\n"                  /* 13 */
    "auth_token_file: /etc/dpmd/token\n"                              /* 14 */
    "log_level: debug\n"                                              /* 15 */
    "max_message_bytes: 1048576\n"                                    /* 16 */
    "max_model_bytes: 17179869184\n"                                  /* 17 */
    "progress_every: 1\n"                                             /* 18 */
    "data_cache_bytes: 0\n";                                          /* 19 */
/* clang-format on */

TEST(config_full_file) {
  dpmd_config cfg;
  dpm_err err = {0};
  dpm_status st = parse(FULL, &cfg, &err);
  if (st != DPM_OK) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  CHECK_INT(st, DPM_OK);
  CHECK_INT(cfg.n_listen, 2);
  CHECK(STREQ(cfg.listen[0], "ipc:///tmp/d/ctl.sock"));
  CHECK(STREQ(cfg.listen[1], "tcp://127.0.0.1:7000"));
  CHECK(STREQ(cfg.events, "tcp://[::1]:7001"));
  CHECK_INT(cfg.events_set, 1);
  CHECK(STREQ(cfg.state_dir, "/srv/dpmd"));
  CHECK_INT(cfg.cpu_devices, 3);
  CHECK_INT(cfg.gpus, 0);
  CHECK_INT(cfg.max_models, 2);
  CHECK_INT(cfg.checkpoint_retention, 0);
  CHECK_INT(cfg.checkpoint_on_shutdown, 0);
  CHECK_INT(cfg.n_allowed_paths, 2);
  CHECK(STREQ(cfg.allowed_paths[0], "/data/ckpt"));
  CHECK(STREQ(cfg.allowed_paths[1], "/srv/predictors"));
  CHECK(STREQ(cfg.auth_token_file, "/etc/dpmd/token"));
  CHECK_INT(cfg.log_level, DPMD_LOG_DEBUG);
  CHECK_INT(cfg.max_message_bytes, 1048576);
  CHECK(cfg.max_model_bytes == 17179869184ull);
  CHECK(cfg.data_cache_bytes == 0);
  CHECK_INT(cfg.progress_every, 1);
  dpmd_config_fini(&cfg);

  /* data_paths and checkpoint_every (iterations, seconds, off) */
  CHECK_INT(parse("data_paths: [/d1, /d2]\ncheckpoint_every: 5000\n", &cfg, &err),
            DPM_OK);
  CHECK(cfg.n_data_paths == 2 && STREQ(cfg.data_paths[1], "/d2"));
  CHECK(cfg.checkpoint_every_iters == 5000 && cfg.checkpoint_every_s == 0);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("data_paths: null\ncheckpoint_every: 90s\n", &cfg, &err), DPM_OK);
  CHECK(cfg.n_data_paths == 0 && cfg.checkpoint_every_s == 90 &&
        !cfg.checkpoint_every_iters);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("checkpoint_every: 0\n", &cfg, &err), DPM_OK);
  CHECK(!cfg.checkpoint_every_s && !cfg.checkpoint_every_iters);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("checkpoint_every: 10m\n", &cfg, &err), DPM_SPEC);
  CHECK_MSG(err, "t.yaml:1:19: 'checkpoint_every' must be iterations (1000) or seconds "
                 "(600s), got '10m'");
  CHECK_INT(parse("data_paths: [rel]\n", &cfg, &err), DPM_SPEC);

  /* one string for a list; null events; events derived beside listen */
  CHECK_INT(
      parse("listen: ipc:///x/y/a.sock\nevents: null\nallowed_paths: /p\n", &cfg, &err),
      DPM_OK);
  CHECK_INT(cfg.n_listen, 1);
  CHECK(cfg.events == NULL && cfg.events_set);
  CHECK_INT(cfg.n_allowed_paths, 1);
  CHECK(STREQ(cfg.allowed_paths[0], "/p"));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_OK);
  CHECK(cfg.events == NULL);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("listen: [ipc:///x/y/a.sock]\ndevices: {cpu: auto}\n", &cfg, &err),
            DPM_OK);
  CHECK(STREQ(cfg.events, "ipc:///x/y/a.events.sock"));
  CHECK_INT(cfg.gpus, 1);
  CHECK(cfg.cpu_devices >= 1);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("listen: [ipc://rel.sock]\n", &cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.events, "ipc://rel.events.sock"));
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("listen: tcp://localhost:7000\n", &cfg, &err), DPM_OK);
  CHECK(cfg.events == NULL); /* no ipc:// listen address: no events by default */
  dpmd_config_fini(&cfg);
}

TEST(config_file_errors) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"max_models: 4\nlisten_on: x\n",
       "t.yaml:2:1: unknown key 'listen_on' (expected one of: listen, events, state_dir, "
       "devices, max_models, checkpoint_retention, checkpoint_on_shutdown, "
       "allowed_paths, data_paths, rendezvous_stores, checkpoint_every, "
       "auth_token_file, log_level, max_message_bytes, max_model_bytes, "
       "max_total_bytes, device_memory_bytes, data_cache_bytes, progress_every)"},
      {"devices:\n  cpu: 2\n  gpu: 1\n",
       "t.yaml:3:3: unknown key 'gpu' in devices (expected one of: cpu, cuda, fenced)"},
      {"max_models: 4\nstate_dir: /a\nmax_models: 5\n",
       "t.yaml:3:1: duplicate key 'max_models'"},
      {"max_models: [1]\n", "t.yaml:1:13: 'max_models' must be an integer, got a list"},
      {"max_models: 1.5\n", "t.yaml:1:13: 'max_models' must be an integer, got '1.5'"},
      {"max_models: '4'\n",
       "t.yaml:1:13: 'max_models' must be an integer, got '4' (a quoted string)"},
      {"max_models:\n", "t.yaml:1:12: 'max_models' must have a value, got null"},
      {"state_dir: {a: 1}\n", "t.yaml:1:12: 'state_dir' must be a string, got a mapping"},
      {"checkpoint_on_shutdown: yes\n",
       "t.yaml:1:25: 'checkpoint_on_shutdown' must be true or false, got 'yes'"},
      {"devices: [cpu]\n", "t.yaml:1:10: 'devices' must be a mapping, got a list"},
      {"listen: {a: b}\n", "t.yaml:1:9: 'listen' must be a list, got a mapping"},
      {"listen: []\n", "t.yaml:1:9: 'listen' must list at least one endpoint"},
      {"max_models: 0\n",
       "t.yaml:1:13: 'max_models' must be between 1 and 100000, got '0'"},
      {"max_models: 100001\n",
       "t.yaml:1:13: 'max_models' must be between 1 and 100000, got '100001'"},
      {"checkpoint_retention: -1\n",
       "t.yaml:1:23: 'checkpoint_retention' must be between 0 and 1000000, got '-1'"},
      {"max_model_bytes: 99999999999999999999999\n",
       "t.yaml:1:18: 'max_model_bytes' must be between 1048576 and 1125899906842624, got "
       "'99999999999999999999999'"},
      {"devices: {cpu: 0}\n",
       "t.yaml:1:16: 'devices.cpu' must be between 1 and 1024, got '0'"},
      {"devices: {cpu: many}\n",
       "t.yaml:1:16: 'devices.cpu' must be an integer or auto, got 'many'"},
      {"devices: {cuda: on}\n",
       "t.yaml:1:17: 'devices.cuda' must be one of: off, auto, got 'on'"},
      {"log_level: verbose\n", "t.yaml:1:12: 'log_level' must be one of: error, warning, "
                               "info, debug, got 'verbose'"},
      {"listen:\n  - ipc:///a.sock\n  - http://host:80\n",
       "t.yaml:3:5: 'listen' must start with ipc:// or tcp://, got 'http://host:80'"},
      {"events: udp://x:1\n",
       "t.yaml:1:9: 'events' must start with ipc:// or tcp://, got "
       "'udp://x:1'"},
      {"listen: tcp://host\n", "t.yaml:1:9: 'listen' needs a host and a port "
                               "(tcp://HOST:PORT), got 'tcp://host'"},
      {"listen: tcp://host:99999\n",
       "t.yaml:1:9: 'listen' needs a port in 1..65535 (tcp://HOST:PORT), got "
       "'tcp://host:99999'"},
      {"listen: 'ipc://'\n",
       "t.yaml:1:9: 'listen' needs a socket path after ipc://, got 'ipc://' (a quoted "
       "string)"},
      {"state_dir: var/lib/dpmd\n",
       "t.yaml:1:12: 'state_dir' must be an absolute path, got 'var/lib/dpmd'"},
      {"allowed_paths: [/ok, rel/dir]\n",
       "t.yaml:1:22: 'allowed_paths' must be an absolute path, got 'rel/dir'"},
      {"allowed_paths: [[/a]]\n",
       "t.yaml:1:17: 'allowed_paths' must be a string, got a list"},
      {"- listen\n", "t.yaml:1:1: the config must be a mapping of keys"},
      {"listen: [a\n", NULL}, /* a YAML syntax error: any position */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpmd_config cfg;
    dpm_err err = {0};
    dpm_status st = parse(cases[i].text, &cfg, &err);
    if (st != DPM_SPEC)
      dpm_test_fail(__FILE__, __LINE__, "case %zu: %s", i, cases[i].text);
    CHECK_INT(st, DPM_SPEC);
    if (cases[i].msg) {
      if (strcmp(err.msg, cases[i].msg) != 0)
        dpm_test_fail(__FILE__, __LINE__, "case %zu", i);
      CHECK_MSG(err, cases[i].msg);
    } else {
      CHECK(strncmp(err.msg, "t.yaml:", 7) == 0);
    }
    CHECK(cfg.listen == NULL && cfg.state_dir == NULL); /* left zeroed */
    dpmd_config_fini(&cfg);
  }
}

/* rendezvous_stores: daemon and file by default; entries are daemon, file
 * or one Redis server; null or [] allows none. */
TEST(config_rendezvous_stores) {
  dpmd_config cfg;
  dpm_err err = {0};
  CHECK_INT(parse("", &cfg, &err), DPM_OK);
  CHECK(cfg.n_rendezvous_stores == 2 && STREQ(cfg.rendezvous_stores[0], "daemon") &&
        STREQ(cfg.rendezvous_stores[1], "file"));
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("rendezvous_stores: [daemon, 'redis://10.0.0.5:6379', "
                  "'redis://[fe80::1]:7000']\n",
                  &cfg, &err),
            DPM_OK);
  CHECK(cfg.n_rendezvous_stores == 3 &&
        STREQ(cfg.rendezvous_stores[1], "redis://10.0.0.5:6379"));
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("rendezvous_stores: null\n", &cfg, &err), DPM_OK);
  CHECK_INT(cfg.n_rendezvous_stores, 0);
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("rendezvous_stores: []\n", &cfg, &err), DPM_OK);
  CHECK_INT(cfg.n_rendezvous_stores, 0);
  dpmd_config_fini(&cfg);
  static const char *const bad[] = {"redis",         "redis://h", "redis://h:0",
                                    "file:///tmp/x", "Daemon",    "tcp://h:1",
                                    "redis://a b:1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[128], want[256];
    snprintf(text, sizeof text, "rendezvous_stores: [daemon, '%s']\n", bad[i]);
    CHECK_INT(parse(text, &cfg, &err), DPM_SPEC);
    snprintf(
        want, sizeof want,
        "t.yaml:1:29: 'rendezvous_stores' must be daemon, file or redis://HOST:PORT, "
        "got '%s' (a quoted string)",
        bad[i]);
    CHECK_MSG(err, want);
    dpmd_config_fini(&cfg);
  }
}

TEST(config_load_files) {
  char dir[256], path[400];
  CHECK(tmp_dir(dir, sizeof dir));
  dpmd_config cfg;
  dpm_err err = {0};
  snprintf(path, sizeof path, "%s/missing.yaml", dir);
  CHECK_INT(dpmd_config_load(path, &cfg, &err), DPM_IO);
  CHECK_HAS(err.msg, path);
  CHECK_HAS(err.msg, "No such file");
  dpmd_config_fini(&cfg);
  CHECK_INT(dpmd_config_load(dir, &cfg, &err), DPM_IO); /* a directory */
  CHECK_HAS(err.msg, "Is a directory");
  CHECK_INT(dpmd_config_load("/dev/null", &cfg, &err), DPM_OK); /* empty: defaults */
  CHECK_INT(cfg.max_models, 16);
  dpmd_config_fini(&cfg);
  snprintf(path, sizeof path, "%s/big.yaml", dir);
  {
    static char big[(1 << 20) + 2];
    memset(big, '#', sizeof big - 1);
    CHECK(write_file(path, big, 0644));
  }
  CHECK_INT(dpmd_config_load(path, &cfg, &err), DPM_IO);
  CHECK_HAS(err.msg, "File too large");
  snprintf(path, sizeof path, "%s/d.yaml", dir);
  CHECK(write_file(path, "max_models: 7\nprogress_every: x\n", 0644));
  CHECK_INT(dpmd_config_load(path, &cfg, &err), DPM_SPEC);
  char want[600];
  snprintf(want, sizeof want, "%s:2:17: 'progress_every' must be an integer, got 'x'",
           path);
  CHECK_MSG(err, want);
  CHECK(write_file(path, "max_models: 7\n", 0644));
  CHECK_INT(dpmd_config_load(path, &cfg, &err), DPM_OK);
  CHECK_INT(cfg.max_models, 7);
  dpmd_config_fini(&cfg);
  rm_rf(dir);

  /* the shipped default config holds exactly the defaults */
  dpmd_config def, shipped;
  CHECK_INT(parse("", &def, &err), DPM_OK);
  dpm_status st = dpmd_config_load("systemd/dpmd.yaml", &shipped, &err);
  if (st != DPM_OK) dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  CHECK_INT(st, DPM_OK);
  CHECK_INT(shipped.n_listen, def.n_listen);
  CHECK(STREQ(shipped.listen[0], def.listen[0]));
  CHECK(STREQ(shipped.events, def.events));
  CHECK(STREQ(shipped.state_dir, def.state_dir));
  CHECK_INT(shipped.cpu_devices, def.cpu_devices);
  CHECK_INT(shipped.gpus, def.gpus);
  CHECK_INT(shipped.max_models, def.max_models);
  CHECK_INT(shipped.checkpoint_retention, def.checkpoint_retention);
  CHECK_INT(shipped.checkpoint_on_shutdown, def.checkpoint_on_shutdown);
  CHECK_INT(shipped.n_allowed_paths, def.n_allowed_paths);
  CHECK_INT(shipped.n_data_paths, def.n_data_paths);
  CHECK(STREQ(shipped.data_paths[0], def.data_paths[0]));
  CHECK(shipped.checkpoint_every_iters == def.checkpoint_every_iters &&
        shipped.checkpoint_every_s == def.checkpoint_every_s);
  CHECK(shipped.auth_token_file == NULL);
  CHECK_INT(shipped.log_level, def.log_level);
  CHECK_INT(shipped.max_message_bytes, def.max_message_bytes);
  CHECK(shipped.max_model_bytes == def.max_model_bytes);
  CHECK(shipped.data_cache_bytes == def.data_cache_bytes);
  CHECK(shipped.max_total_bytes == def.max_total_bytes);
  CHECK(shipped.device_memory_bytes == def.device_memory_bytes);
  CHECK_INT(shipped.progress_every, def.progress_every);
  CHECK_INT(shipped.n_rendezvous_stores, def.n_rendezvous_stores);
  for (int i = 0; i < def.n_rendezvous_stores; i++)
    CHECK(STREQ(shipped.rendezvous_stores[i], def.rendezvous_stores[i]));
  dpmd_config_fini(&def);
  dpmd_config_fini(&shipped);
}

TEST(config_flags_override) {
  dpmd_config cfg;
  dpm_err err = {0};
  CHECK_INT(parse("listen: [ipc:///a/x.sock, tcp://127.0.0.1:1]\nstate_dir: /s\n"
                  "log_level: error\ndevices: {cpu: 2}\n",
                  &cfg, &err),
            DPM_OK);
  char *argv[] = {"--config",
                  "/etc/x.yaml",
                  "--listen",
                  "ipc:///run/b/y.sock",
                  "--listen=tcp://[::1]:9",
                  "--state-dir=/var/s",
                  "--devices",
                  "5",
                  "--log-level",
                  "debug",
                  "--foreground",
                  "--token-file",
                  "/t"};
  int argc = (int)(sizeof argv / sizeof *argv);
  CHECK(STREQ(dpmd_config_flag_path(argc, argv), "/etc/x.yaml"));
  CHECK_INT(dpmd_config_flags(&cfg, argc, argv, &err), DPM_OK);
  CHECK_INT(cfg.n_listen, 2); /* the file's list replaced, then appended to */
  CHECK(STREQ(cfg.listen[0], "ipc:///run/b/y.sock"));
  CHECK(STREQ(cfg.listen[1], "tcp://[::1]:9"));
  CHECK(STREQ(cfg.events, "ipc:///run/b/y.events.sock")); /* follows the new listen */
  CHECK(STREQ(cfg.state_dir, "/var/s"));
  CHECK_INT(cfg.cpu_devices, 5);
  CHECK_INT(cfg.log_level, DPMD_LOG_DEBUG);
  CHECK_INT(cfg.foreground, 1);
  CHECK(STREQ(cfg.auth_token_file, "/t"));

  char *ev[] = {"--events", "none", "--token-file", "none", "--devices=auto"};
  CHECK_INT(dpmd_config_flags(&cfg, 5, ev, &err), DPM_OK);
  CHECK(cfg.events == NULL && cfg.events_set);
  CHECK(cfg.auth_token_file == NULL);
  CHECK(cfg.cpu_devices >= 1);
  char *ev2[] = {"--events", "tcp://127.0.0.1:5"};
  CHECK_INT(dpmd_config_flags(&cfg, 2, ev2, &err), DPM_OK);
  CHECK(STREQ(cfg.events, "tcp://127.0.0.1:5"));

  static const struct {
    const char *a, *b, *msg;
  } bad[] = {
      {"--verbose", NULL, "unknown flag '--verbose'"},
      {"--verbose=1", NULL, "unknown flag '--verbose'"},
      {"--help", NULL, "unknown flag '--help'"},
      {"extra", NULL, "unexpected argument 'extra'"},
      {"--listen", NULL, "--listen needs a value"},
      {"--listen", "udp://x:1",
       "--listen must start with ipc:// or tcp://, got 'udp://x:1'"},
      {"--state-dir", "rel", "--state-dir must be an absolute path, got 'rel'"},
      {"--devices", "0", "--devices must be between 1 and 1024, got '0'"},
      {"--devices", "two", "--devices must be an integer or auto, got 'two'"},
      {"--log-level", "loud",
       "--log-level must be one of: error, warning, info, debug, got 'loud'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *av[] = {(char *)bad[i].a, (char *)bad[i].b};
    CHECK_INT(dpmd_config_flags(&cfg, bad[i].b ? 2 : 1, av, &err), DPM_INVALID);
    CHECK_MSG(err, bad[i].msg);
  }
  CHECK(dpmd_config_flag_path(0, NULL) == NULL);
  char *cp[] = {"--config=/a.yaml"};
  CHECK(STREQ(dpmd_config_flag_path(1, cp), "/a.yaml"));
  dpmd_config_fini(&cfg);
}

TEST(config_nonloopback_tcp_needs_token) {
  static const struct {
    const char *listen;
    int loopback;
  } cases[] = {
      {"tcp://0.0.0.0:7000", 0}, {"tcp://*:7000", 0},         {"tcp://10.1.2.3:7000", 0},
      {"tcp://[::]:7000", 0},    {"tcp://127.0.0.1:7000", 1}, {"tcp://127.9.8.7:7000", 1},
      {"tcp://[::1]:7000", 1},   {"ipc:///tmp/a/b.sock", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dpmd_config cfg;
    dpm_err err = {0};
    char text[200];
    snprintf(text, sizeof text, "listen: ['ipc:///r/a.sock', '%s']\n", cases[i].listen);
    CHECK_INT(parse(text, &cfg, &err), DPM_OK);
    dpm_status st = dpmd_config_finish(&cfg, &err);
    if (st != (cases[i].loopback ? DPM_OK : DPM_INVALID))
      dpm_test_fail(__FILE__, __LINE__, "%s", cases[i].listen);
    CHECK_INT(st, cases[i].loopback ? DPM_OK : DPM_INVALID);
    if (!cases[i].loopback) {
      char want[200];
      snprintf(want, sizeof want, "listen %s is not loopback: set auth_token_file",
               cases[i].listen);
      CHECK_MSG(err, want);
    }
    dpmd_config_fini(&cfg);
  }
  /* a host or interface name: nanomsg fails to bind it ("No such device"),
   * so it is refused up front, with a token too, and the advice is an
   * address nanomsg binds */
  static const char *const names[] = {"localhost",    "lo",  "host0",
                                      "lo;127.0.0.1", "::1", "[lo]"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    dpmd_config c2;
    dpm_err e2 = {0};
    char text[200], want[300];
    snprintf(text, sizeof text,
             "listen: 'tcp://%s:7000'\nauth_token_file: /nonexistent\n", names[i]);
    CHECK_INT(parse(text, &c2, &e2), DPM_OK);
    CHECK_INT(dpmd_config_finish(&c2, &e2), DPM_INVALID);
    snprintf(want, sizeof want,
             "listen tcp://%s:7000: dpmd binds IP addresses, not host names or interface "
             "names (use 127.0.0.1, [::1], 0.0.0.0 or *)",
             names[i]);
    CHECK_MSG(e2, want);
    dpmd_config_fini(&c2);
  }
  /* flags: the same rule; relative state dir from a flag; events == listen */
  dpmd_config cfg;
  dpm_err err = {0};
  CHECK_INT(parse("", &cfg, &err), DPM_OK);
  char *av[] = {"--listen", "tcp://0.0.0.0:7000"};
  CHECK_INT(dpmd_config_flags(&cfg, 2, av, &err), DPM_OK);
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  CHECK_MSG(err, "listen tcp://0.0.0.0:7000 is not loopback: set auth_token_file");
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("listen: [ipc:///r/a.sock, ipc:///r/a.events.sock]\n", &cfg, &err),
            DPM_OK);
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  CHECK_MSG(err, "events ipc:///r/a.events.sock is also a listen address");
  dpmd_config_fini(&cfg);
  /* two daemons in one folder: events sockets of their own */
  CHECK_INT(parse("listen: ipc:///r/one.sock\n", &cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.events, "ipc:///r/one.events.sock"));
  dpmd_config_fini(&cfg);
  CHECK_INT(parse("listen: ipc:///r/two\n", &cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.events, "ipc:///r/two.events.sock"));
  dpmd_config_fini(&cfg);
}

/* --allow-path adds to the file's allowed_paths (repeatable), checked as
 * the file's entries are. */
TEST(config_allow_path_flag) {
  dpmd_config cfg;
  dpm_err err = {0};
  CHECK_INT(parse("allowed_paths: [/a]\n", &cfg, &err), DPM_OK);
  char *av[] = {"--allow-path", "/b", "--allow-path=/c"};
  CHECK_INT(dpmd_config_flags(&cfg, 3, av, &err), DPM_OK);
  CHECK_INT(cfg.n_allowed_paths, 3);
  CHECK(STREQ(cfg.allowed_paths[0], "/a") && STREQ(cfg.allowed_paths[1], "/b") &&
        STREQ(cfg.allowed_paths[2], "/c"));
  char *bad[] = {"--allow-path", "rel/dir"};
  CHECK_INT(dpmd_config_flags(&cfg, 2, bad, &err), DPM_INVALID);
  CHECK_MSG(err, "--allow-path must be an absolute path, got 'rel/dir'");
  dpmd_config_fini(&cfg);
}

TEST(config_token_file) {
  char dir[256], path[400], text[600];
  CHECK(tmp_dir(dir, sizeof dir));
  dpmd_config cfg;
  dpm_err err = {0};
  snprintf(path, sizeof path, "%s/token", dir);
  snprintf(text, sizeof text, "listen: [tcp://0.0.0.0:7000]\nauth_token_file: %s\n",
           path);

  /* missing */
  CHECK_INT(parse(text, &cfg, &err), DPM_OK);
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_IO);
  char want[900];
  snprintf(want, sizeof want, "cannot read auth_token_file %s: No such file or directory",
           path);
  CHECK_MSG(err, want);
  CHECK(cfg.token == NULL);
  /* empty, or only whitespace */
  CHECK(write_file(path, "", 0600));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  snprintf(want, sizeof want, "auth_token_file %s is empty", path);
  CHECK_MSG(err, want);
  CHECK(write_file(path, " \n\n", 0600));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  CHECK_MSG(err, want);
  /* readable by other users */
  CHECK(write_file(path, "s3cret\n", 0644));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  snprintf(want, sizeof want,
           "auth_token_file %s is readable by other users (mode 0644): run chmod o-r %s",
           path, path);
  CHECK_MSG(err, want);
  CHECK(cfg.token == NULL);
  /* not a regular file */
  dpmd_config_fini(&cfg);
  snprintf(text, sizeof text, "listen: [tcp://0.0.0.0:7000]\nauth_token_file: %s\n", dir);
  CHECK_INT(parse(text, &cfg, &err), DPM_OK);
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "is not a regular file");
  dpmd_config_fini(&cfg);
  /* too large */
  snprintf(text, sizeof text, "listen: [tcp://0.0.0.0:7000]\nauth_token_file: %s\n",
           path);
  CHECK_INT(parse(text, &cfg, &err), DPM_OK);
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK(write_file(path, big, 0600));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "is larger than 4096 bytes");
  /* good: group-readable is fine; trailing whitespace stripped, inner kept */
  CHECK(write_file(path, "s3 cret\r\n", 0640));
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.token, "s3 cret"));
  CHECK(write_file(path, "other\n", 0400)); /* finish again replaces the token */
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.token, "other"));
  dpmd_config_fini(&cfg);
  CHECK(cfg.token == NULL);
  /* a token with loopback-only addresses is still read (then required) */
  snprintf(text, sizeof text, "auth_token_file: %s\n", path);
  CHECK_INT(parse(text, &cfg, &err), DPM_OK);
  CHECK_INT(dpmd_config_finish(&cfg, &err), DPM_OK);
  CHECK(STREQ(cfg.token, "other"));
  dpmd_config_fini(&cfg);
  rm_rf(dir);
}

TEST(notify_datagram) {
  char dir[256];
  CHECK(tmp_dir(dir, sizeof dir));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  CHECK(strlen(dir) + 8 < sizeof sa.sun_path);
  memcpy(sa.sun_path, dir, strlen(dir));
  memcpy(sa.sun_path + strlen(dir), "/notify", 8);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  char buf[256];
  const char *old = getenv("NOTIFY_SOCKET");
  char *saved = old ? strdup(old) : NULL;

  setenv("NOTIFY_SOCKET", sa.sun_path, 1);
  dpmd_notify("READY=1");
  ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  CHECK_INT(n, 7);
  buf[n] = '\0';
  CHECK(STREQ(buf, "READY=1"));
  dpmd_notifyf("STATUS=serving %d models\nREADY=1", 2);
  n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  CHECK(n > 0);
  buf[n] = '\0';
  CHECK(STREQ(buf, "STATUS=serving 2 models\nREADY=1"));

  unsetenv("NOTIFY_SOCKET"); /* not under systemd: nothing sent */
  dpmd_notify("STOPPING=1");
  dpmd_notifyf("STATUS=%s", "x");
  errno = 0;
  CHECK(recv(fd, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
  setenv("NOTIFY_SOCKET", "relative/path", 1); /* neither '/' nor '@': ignored */
  dpmd_notify("STOPPING=1");
  CHECK(recv(fd, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
  close(fd);

  /* the abstract namespace: '@' stands for a leading NUL, exact length */
  char name[64];
  snprintf(name, sizeof name, "@dpm-notify-test-%ld", (long)getpid());
  struct sockaddr_un ab = {.sun_family = AF_UNIX};
  size_t nl = strlen(name);
  memcpy(ab.sun_path, name, nl);
  ab.sun_path[0] = '\0';
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  CHECK(bind(fd, (struct sockaddr *)&ab,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + nl)) == 0);
  setenv("NOTIFY_SOCKET", name, 1);
  dpmd_notify("STOPPING=1");
  n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  CHECK_INT(n, 10);
  buf[n] = '\0';
  CHECK(STREQ(buf, "STOPPING=1"));
  close(fd);

  if (saved)
    setenv("NOTIFY_SOCKET", saved, 1);
  else
    unsetenv("NOTIFY_SOCKET");
  free(saved);
  rm_rf(dir);
}

/* Runs fn with stderr sent into a pipe; returns what was written. */
static size_t capture_stderr(void (*fn)(void), char *buf, size_t cap, int journal) {
  int pfd[2], saved = dup(STDERR_FILENO);
  size_t n = 0;
  if (saved < 0 || pipe(pfd) != 0) return 0;
  dup2(pfd[1], STDERR_FILENO);
  close(pfd[1]);
  const char *old = getenv("JOURNAL_STREAM");
  char *old_js = old ? strdup(old) : NULL;
  if (journal) {
    struct stat sb;
    char js[64];
    fstat(STDERR_FILENO, &sb);
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)sb.st_dev,
             (unsigned long long)sb.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
  } else {
    unsetenv("JOURNAL_STREAM");
  }
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  ssize_t r;
  while (n + 1 < cap && (r = read(pfd[0], buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = '\0';
  close(pfd[0]);
  if (old_js)
    setenv("JOURNAL_STREAM", old_js, 1);
  else
    unsetenv("JOURNAL_STREAM");
  free(old_js);
  dpmd_log_init(DPMD_LOG_INFO); /* re-detect the (restored) stderr */
  return n;
}

static void log_some(void) {
  dpmd_log_init(DPMD_LOG_INFO);
  dpmd_debug("hidden %d", 1);
  errno = 42;
  dpmd_info("two\nlines");
  int e = errno;
  dpmd_warn("errno kept: %d", e);
  dpmd_error("bell\a");
}

static void log_long(void) {
  dpmd_log_init(DPMD_LOG_DEBUG);
  char big[6000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  dpmd_debug("%s", big);
}

TEST(log_lines) {
  char out[16384];
  capture_stderr(log_some, out, sizeof out, 0);
  /* "2026-11-29T23:50:01.123Z info: two\nlines" */
  char *l1 = out, *l2 = strchr(l1, '\n');
  CHECK(l2 != NULL);
  *l2++ = '\0';
  CHECK(strlen(l1) == 24 + strlen(" info: two\\nlines"));
  CHECK(l1[4] == '-' && l1[7] == '-' && l1[10] == 'T' && l1[13] == ':' && l1[16] == ':' &&
        l1[19] == '.' && l1[23] == 'Z');
  for (int i = 0; i < 23; i++)
    if (i != 4 && i != 7 && i != 10 && i != 13 && i != 16 && i != 19)
      CHECK(l1[i] >= '0' && l1[i] <= '9');
  CHECK(STREQ(l1 + 24, " info: two\\nlines"));
  CHECK(strstr(l2, "Z warning: errno kept: 42\n") != NULL);
  CHECK(strstr(out + (l2 - out), "Z error: bell?\n") != NULL);
  CHECK(strstr(l2, "hidden") == NULL);

  capture_stderr(log_some, out, sizeof out, 1);
  CHECK(STREQ(out, "<6>two\\nlines\n<4>errno kept: 42\n<3>bell?\n"));

  size_t n = capture_stderr(log_long, out, sizeof out, 1);
  CHECK(n > 4000 && n < 4200);
  CHECK(strncmp(out, "<7>xxx", 6) == 0);
  CHECK(strcmp(out + n - 5, "x...\n") == 0);
  CHECK(strchr(out, '\n') == out + n - 1);
}
