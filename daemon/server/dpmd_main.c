/* dpmd: the resident training daemon.
 *
 *   dpmd [--config FILE] [--listen ADDR]... [--state-dir DIR] [--foreground]
 *        [--events ADDR] [--devices N] [--log-level L] [--token-file FILE]
 *        [--allow-path DIR]...
 *   dpmd --help | --version | --man
 *
 * --help and --man (server/help.h) are written from the config's key table.
 * Reads the config (server/config.h), discovers its devices, binds its
 * sockets, brings back the models in the state dir and serves until
 * SIGTERM, SIGINT or a shutdown request, after which it finishes the steps
 * in flight, checkpoints training models and exits 0. Exit status 1: it
 * could not start (the reason is logged: another dpmd holds the state dir,
 * ...), or a model could not be checkpointed at shutdown (its previous
 * checkpoint and target stay); 2: bad usage or config.
 *
 * Signals: SIGPIPE is ignored from the start, before any thread exists, so
 * every thread inherits it: a write to a peer that died (Gloo's TCP pairs,
 * the RPC sockets of a fleet job) fails with EPIPE, which the caller turns
 * into an error naming the peer, instead of killing the daemon (exit 141,
 * nothing logged). SIGPIPE is the only signal a dying TCP peer raises
 * (SIGURG, for out-of-band data nobody sends, is ignored by default). */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/devices.h"
#include "server/dpmd.h"
#include "server/help.h"
#include "server/log.h"
#include "server/models/store.h"
#include "server/notify.h"
#include "server/paths.h"
#include "server/server.h"

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* first: every thread inherits it (see Signals) */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      dpmd_help(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--man")) {
      dpmd_man(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--version")) {
      printf("dpmd %s (protocol %d)\n", DPMD_VERSION, DPM_PROTOCOL_VERSION);
      return 0;
    }
  }
  dpmd_config cfg;
  dpm_err err = {0};
  if (dpmd_config_load(dpmd_config_flag_path(argc, argv), &cfg, &err) ||
      dpmd_config_flags(&cfg, argc - 1, argv + 1, &err) ||
      dpmd_config_finish(&cfg, &err)) {
    fprintf(stderr, "dpmd: %s\n", err.msg);
    if (err.code != DPM_IO) dpmd_usage(stderr);
    dpmd_config_fini(&cfg);
    return err.code == DPM_IO ? 1 : 2;
  }
  dpmd_log_init(cfg.log_level);
  umask(0007);                 /* sockets and files: owner and group only */
  openblas_set_num_threads(1); /* each device worker calls BLAS on its own */
  dpmd_paths *paths = NULL;
  dpmd_devices *devices = NULL;
  int rc = 1, lock = -1;
  char failed[DPMD_SHUTDOWN_FAILED_MAX] = "";
  if (dpmd_store_init(cfg.state_dir, &err) ||
      dpmd_store_lock(cfg.state_dir, &lock, &err) ||
      dpmd_paths_create(&cfg, &paths, &err) ||
      dpmd_devices_create(cfg.cpu_devices, cfg.gpus, cfg.fenced_devices, &devices,
                          &err)) {
    dpmd_error("%s", err.msg);
  } else {
    dpmd_info("dpmd %s: %d cpu device(s), state in %s", DPMD_VERSION, cfg.cpu_devices,
              cfg.state_dir);
    dpmd_info("%s", dpmd_devices_loaded(devices));
    if (dpmd_serve(&cfg, devices, paths, failed, sizeof failed, &err))
      dpmd_error("%s", err.msg);
    else if (failed[0])
      dpmd_error("stopped, but not every model was saved (see above): %s", failed);
    else
      rc = 0;
  }
  dpmd_devices_destroy(devices);
  dpmd_paths_destroy(paths);
  if (lock >= 0) close(lock);
  dpmd_config_fini(&cfg);
  if (!rc) dpmd_info("stopped");
  return rc;
}
