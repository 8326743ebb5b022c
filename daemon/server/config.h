/* dpmd's configuration: defaults, then the YAML file (/etc/dpmd/dpmd.yaml
 * or --config), then command-line flags. Documented key by key in
 * systemd/dpmd.yaml (the default config installed with the daemon).
 *
 * Errors: DPM_SPEC with "FILE:LINE:COL: message" for a bad file (unknown,
 * duplicate or missing keys, wrong types, out-of-range values, endpoints
 * that are not ipc:// or tcp://, relative paths), DPM_IO when a file named
 * explicitly cannot be read (the default path may be absent: then the
 * defaults hold; so may the token file), DPM_INVALID for bad flags or
 * combinations (a non-loopback TCP listen address without auth_token_file;
 * an empty or world-readable token file). An empty or comments-only file
 * means the defaults.
 *
 * Ownership: dpmd_config owns every string and array in it; free with
 * dpmd_config_fini. Threads: loaded once at start; read-only afterwards. */
#ifndef DPMD_CONFIG_H
#define DPMD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

#define DPMD_DEFAULT_CONFIG "/etc/dpmd/dpmd.yaml"

typedef enum { DPMD_LOG_ERROR, DPMD_LOG_WARNING, DPMD_LOG_INFO, DPMD_LOG_DEBUG } dpmd_log_level;

typedef struct dpmd_config {
  char **listen;            /* RPC endpoints; default ipc:///run/dpmd/dpmd.sock */
  int n_listen;
  char *events;             /* PUB endpoint; default: NAME.events.sock beside the
                               first ipc listen address, else none (NULL) */
  int events_set;           /* events given by the file or --events (null or
                               "none": no events socket); else derived */
  char *state_dir;          /* default /var/lib/dpmd */
  int cpu_devices;          /* CPU replicas served (devices.cpu); default: cores */
  int gpus;                 /* devices.cuda: 1 auto (load the backend if present), 0 off */
  int fenced_devices;       /* devices.fenced: fenced:0..N-1, test builds only; default 0 */
  int max_models;           /* default 16 */
  int checkpoint_retention; /* checkpoints kept per model; default 3 (0: all) */
  int checkpoint_on_shutdown; /* default 1 */
  char **allowed_paths;     /* besides state_dir, where checkpoints and
                               predictors may be read and written */
  int n_allowed_paths;
  char **data_paths;        /* where else a spec's data files may be read;
                               default /usr/share/datasets */
  int n_data_paths;
  char **rendezvous_stores; /* the stores a fleet job may meet through: "daemon",
                               "file" (file:///DIR under the state dir or an
                               allowed path), "redis://HOST:PORT" (that server
                               only); default daemon and file */
  int n_rendezvous_stores;
  uint64_t checkpoint_every_iters; /* a model checkpoints every N iterations */
  uint64_t checkpoint_every_s;     /* ... or every S seconds of training; 0: off.
                                      checkpoint_every: N | Ns; default 600s */
  char *auth_token_file;    /* NULL: no token */
  char *token;              /* its contents, trailing whitespace removed */
  dpmd_log_level log_level; /* default info */
  size_t max_message_bytes; /* largest request accepted; default 64 MiB */
  uint64_t max_model_bytes; /* bytes of tensors per model (all replicas); default 8 GiB */
  uint64_t max_total_bytes; /* every model's bytes together (server/sched.h); default:
                               physical memory; 0: unbounded */
  uint64_t device_memory_bytes; /* each device's bytes for replicas; 0: unbounded */
  uint64_t data_cache_bytes; /* data sets kept decoded for every model (io/datacache.h);
                                default 1 GiB */
  int progress_every;       /* steps between progress events; default 10 */
  int foreground;           /* --foreground (informational: dpmd never forks) */
} dpmd_config;

/* Fills *cfg with the defaults, then reads path (NULL: DPMD_DEFAULT_CONFIG,
 * silently skipped when absent). *cfg is output only (not freed first); on
 * failure it is left zeroed, and dpmd_config_fini on it is harmless. */
dpm_status dpmd_config_load(const char *path, dpmd_config *cfg, dpm_err *err);
/* Defaults, then text (for tests); source names it in messages. Same
 * ownership as dpmd_config_load. */
dpm_status dpmd_config_parse(const char *text, size_t len, const char *source,
                             dpmd_config *cfg, dpm_err *err);
/* Applies dpmd's flags (argv without the program name; --config is skipped
 * here, the caller reads it first with dpmd_config_flag_path). Flags:
 * --listen ADDR (repeatable; replaces the file's list), --events ADDR|none,
 * --state-dir DIR, --devices N|auto (CPU replicas), --log-level L,
 * --token-file FILE (auth_token_file), --foreground; "--flag=value" works
 * too. Anything else (unknown flags, stray arguments; --help is the
 * caller's) is DPM_INVALID naming it. On failure cfg stays valid (fini it). */
dpm_status dpmd_config_flags(dpmd_config *cfg, int argc, char **argv, dpm_err *err);
/* Every key of the config, in the table's order, for --help and the man
 * page: fn(ctx, key ("devices.cpu"), flag ("--devices", or NULL), the
 * flag's value name ("N|auto", or NULL), whether the flag may be repeated,
 * one line of help). */
typedef void (*dpmd_config_doc_fn)(void *ctx, const char *key, const char *flag,
                                   const char *arg, int repeatable, const char *help);
void dpmd_config_describe(dpmd_config_doc_fn fn, void *ctx);
/* The value of --config in argv, or NULL. */
const char *dpmd_config_flag_path(int argc, char **argv);
/* Final checks and the token file: call after flags. Checks state_dir,
 * allowed_paths and data_paths are absolute, events differs from every
 * listen address, no tcp:// listen address names a host ("localhost":
 * nanomsg binds addresses and interfaces only), a non-loopback one
 * (anything but 127.0.0.0/8, [::1], lo) has auth_token_file; reads the token file (regular, not
 * readable by other users, at most 4 KiB, not empty once trailing
 * whitespace is stripped) into cfg->token. */
dpm_status dpmd_config_finish(dpmd_config *cfg, dpm_err *err);
void dpmd_config_fini(dpmd_config *cfg);

#endif
