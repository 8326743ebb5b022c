/* dpmd's configuration (config.h): one table of keys says, for each key, its
 * type, range and field; the YAML file (read through spec/ytree.h) and the
 * command-line flags both go through that table, so a value means the same
 * wherever it comes from. Every key is documented in systemd/dpmd.yaml. */
#include "server/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/validate.h"
#include "common/ytree.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define FIELD(cfg, off, type) ((type *)((char *)(cfg) + (off)))

#define CFG_MAX_FILE (1u << 20) /* config file size limit */
#define CFG_MAX_TOKEN 4096      /* token file size limit */
#define CFG_MAX_CPU 1024        /* devices.cpu upper bound */
#define CFG_IPC_PATH_MAX 107    /* sockaddr_un.sun_path less the NUL */

/* ---- the key table ----------------------------------------------------- */

typedef enum {
  CK_ENDPOINTS, /* list of ipc:// or tcp:// endpoints (char **, aux: int count) */
  CK_ENDPOINT,  /* one endpoint (char *, aux: int "was set" flag) */
  CK_ABSPATH,   /* an absolute path (char *) */
  CK_ABSPATHS,  /* list of absolute paths (char **, aux: int count) */
  CK_STORES,    /* list of rendezvous store kinds (char **, aux: int count) */
  CK_PATH,      /* a path (char *) */
  CK_INT,       /* integer in [lo, hi], into an int, size_t or uint64_t */
  CK_BOOL,      /* true or false (int) */
  CK_ENUM,      /* one of choices[], stored as its index (int) */
  CK_EVERY,     /* N (iterations) or "Ns" (seconds): two uint64_t, aux the seconds */
  CK_MAP,       /* a mapping read with sub[] */
} cfg_kind;

typedef struct cfg_key {
  const char *key;  /* YAML key */
  const char *flag; /* command-line flag setting it, or NULL */
  cfg_kind kind;
  size_t off, size, aux;      /* field offset and size; companion field */
  uint64_t lo, hi;            /* CK_INT range */
  int nullable;               /* null allowed: clears the value */
  int auto_cores;             /* CK_INT: "auto" means the number of cores */
  const char *const *choices; /* CK_ENUM: NULL-terminated names */
  const struct cfg_key *sub;  /* CK_MAP: its keys, ended by a NULL key */
  const char *arg;            /* the flag's value in help ("DIR"); NULL: none */
  const char *help;           /* one line for --help and dpmd.8 */
} cfg_key;

#define OFF(f) offsetof(dpmd_config, f), sizeof(((dpmd_config *)0)->f)
#define AUX(f) offsetof(dpmd_config, f)

static const char *const level_names[] = {"error", "warning", "info", "debug", NULL};
static const char *const gpu_modes[] = {"off", "auto", NULL}; /* index = cfg->gpus */

/* One row per key; systemd/dpmd.yaml documents each. */
/* clang-format off */
static const cfg_key device_keys[] = {
    {.key = "cpu", .flag = "--devices", .kind = CK_INT, .off = OFF(cpu_devices), .lo = 1, .hi = CFG_MAX_CPU, .auto_cores = 1, .arg = "N|auto", .help = "CPU replicas served, cpu:0..cpu:N-1: 1..1024, or auto (one per core this process may run on)"},
    {.key = "cuda", .kind = CK_ENUM, .off = OFF(gpus), .choices = gpu_modes, .help = "auto: load the CUDA plugin and serve every GPU as cuda:N; off: none"},
    {.key = "fenced", .kind = CK_INT, .off = OFF(fenced_devices), .lo = 0, .hi = 16, .help = "fenced:N test devices, 0..16 (test builds only)"},
    {.key = NULL},
};

static const cfg_key top_keys[] = {
    {.key = "listen", .flag = "--listen", .kind = CK_ENDPOINTS, .off = OFF(listen), .aux = AUX(n_listen), .arg = "ADDR", .help = "an address to serve requests on, ipc://PATH or tcp://HOST:PORT (repeatable; a non-loopback tcp:// one needs auth_token_file)"},
    {.key = "events", .flag = "--events", .kind = CK_ENDPOINT, .off = OFF(events), .aux = AUX(events_set), .nullable = 1, .arg = "ADDR|none", .help = "where progress events are published besides the request socket's stream (default: NAME.events.sock beside the first ipc:// listen address NAME.sock); none: nowhere"},
    {.key = "state_dir", .flag = "--state-dir", .kind = CK_ABSPATH, .off = OFF(state_dir), .arg = "DIR", .help = "the daemon's state: models, their specs and checkpoints (absolute; default /var/lib/dpmd)"},
    {.key = "devices", .kind = CK_MAP, .sub = device_keys, .help = "devices served: cpu, cuda, fenced"},
    {.key = "max_models", .kind = CK_INT, .off = OFF(max_models), .lo = 1, .hi = 100000, .help = "most models held at once (default 16)"},
    {.key = "checkpoint_retention", .kind = CK_INT, .off = OFF(checkpoint_retention), .lo = 0, .hi = 1000000, .help = "checkpoints kept per model, oldest removed first; 0 keeps all (default 3)"},
    {.key = "checkpoint_on_shutdown", .kind = CK_BOOL, .off = OFF(checkpoint_on_shutdown), .help = "at SIGTERM or shutdown, checkpoint every model with progress since its last checkpoint, training or not, and exit non-zero naming any that failed (default true)"},
    {.key = "allowed_paths", .flag = "--allow-path", .kind = CK_ABSPATHS, .off = OFF(allowed_paths), .aux = AUX(n_allowed_paths), .nullable = 1, .arg = "DIR", .help = "directories besides state_dir where clients may have checkpoints and predictors written or read (--allow-path: one more, repeatable)"},
    {.key = "data_paths", .kind = CK_ABSPATHS, .off = OFF(data_paths), .aux = AUX(n_data_paths), .nullable = 1, .help = "directories a spec's data files may be read from, besides state_dir and allowed_paths (default /usr/share/datasets)"},
    {.key = "rendezvous_stores", .kind = CK_STORES, .off = OFF(rendezvous_stores), .aux = AUX(n_rendezvous_stores), .nullable = 1, .help = "the rendezvous stores fleet jobs may use: daemon, file (a file:///DIR store under state_dir or allowed_paths) and exact redis://HOST:PORT entries (default [daemon, file]; [] or null: none)"},
    {.key = "checkpoint_every", .kind = CK_EVERY, .off = OFF(checkpoint_every_iters), .aux = AUX(checkpoint_every_s), .help = "periodic checkpoints: every N iterations, or Ns seconds; 0 never (default 600s)"},
    {.key = "auth_token_file", .flag = "--token-file", .kind = CK_PATH, .off = OFF(auth_token_file), .nullable = 1, .arg = "FILE", .help = "a file holding the token every request must carry; not readable by other users"},
    {.key = "log_level", .flag = "--log-level", .kind = CK_ENUM, .off = OFF(log_level), .choices = level_names, .arg = "LEVEL", .help = "error, warning, info (default) or debug; logs go to stderr"},
    /* nanomsg's NN_RCVMAXSIZE is an int */
    {.key = "max_message_bytes", .kind = CK_INT, .off = OFF(max_message_bytes), .lo = 1024, .hi = INT_MAX, .help = "largest request accepted (default 64 MiB)"},
    {.key = "max_model_bytes", .kind = CK_INT, .off = OFF(max_model_bytes), .lo = 1u << 20, .hi = 1ull << 50, .help = "bytes one model may make dpmd allocate, counted before anything is (default 8 GiB)"},
    {.key = "max_total_bytes", .kind = CK_INT, .off = OFF(max_total_bytes), .lo = 0, .hi = 1ull << 50, .help = "bytes every model together may make dpmd allocate; a model past it is queued until room frees (default: the machine's memory; 0: no bound)"},
    {.key = "device_memory_bytes", .kind = CK_INT, .off = OFF(device_memory_bytes), .lo = 0, .hi = 1ull << 50, .help = "bytes of each device's memory for models' replicas (tensors and scratch); a model past it is queued (default 0: no bound)"},
    {.key = "data_cache_bytes", .kind = CK_INT, .off = OFF(data_cache_bytes), .lo = 0, .hi = 1ull << 50, .help = "bytes of decoded data sets kept for models to share (default 1 GiB)"},
    {.key = "progress_every", .kind = CK_INT, .off = OFF(progress_every), .lo = 1, .hi = 1000000, .help = "training steps between progress events (default 10)"},
    {.key = NULL},
};
/* clang-format on */

/* ---- documentation ----------------------------------------------------- */

static void describe(const cfg_key *keys, const char *prefix, dpmd_config_doc_fn fn,
                     void *ctx) {
  for (const cfg_key *k = keys; k->key; k++) {
    char name[64], sub[66];
    snprintf(name, sizeof name, "%s%s", prefix, k->key);
    if (k->sub) {
      snprintf(sub, sizeof sub, "%s.", name);
      describe(k->sub, sub, fn, ctx);
      continue;
    }
    fn(ctx, name, k->flag, k->arg, k->kind == CK_ENDPOINTS, k->help);
  }
}

void dpmd_config_describe(dpmd_config_doc_fn fn, void *ctx) {
  describe(top_keys, "", fn, ctx);
}

/* ---- helpers ------------------------------------------------------------- */

static void free_strs(char **a, int n) {
  if (!a) return;
  for (int i = 0; i < n; i++) free(a[i]);
  free(a);
}

static int cores(void) {
  cpu_set_t set;
  long n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > CFG_MAX_CPU ? CFG_MAX_CPU : (int)n;
}

/* Appends a copy of s to a string list; 0 when out of memory. */
static int push_str(char ***list, int *n, const char *s) {
  char **a = realloc(*list, (size_t)(*n + 1) * sizeof *a);
  if (!a) return 0;
  *list = a;
  if (!(a[*n] = strdup(s))) return 0;
  (*n)++;
  return 1;
}

/* NULL if s is a usable endpoint, else what is wrong (in buf). */
static const char *endpoint_problem(const char *s, char *buf, size_t cap) {
  if (strncmp(s, "ipc://", 6) == 0) {
    size_t n = strlen(s + 6);
    if (n == 0) return "needs a socket path after ipc://";
    if (n > CFG_IPC_PATH_MAX) {
      snprintf(buf, cap, "has a socket path longer than %d bytes", CFG_IPC_PATH_MAX);
      return buf;
    }
    return NULL;
  }
  if (strncmp(s, "tcp://", 6) == 0) {
    const char *colon = strrchr(s + 6, ':');
    const char *close = strrchr(s + 6, ']');
    char *end;
    if (!colon || colon == s + 6 || (close && close > colon))
      return "needs a host and a port (tcp://HOST:PORT)";
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || errno || port < 1 || port > 65535)
      return "needs a port in 1..65535 (tcp://HOST:PORT)";
    return NULL;
  }
  return "must start with ipc:// or tcp://";
}

/* NULL if s is a usable path (absolute if asked, under PATH_MAX bytes), else
 * what is wrong. */
static const char *path_problem(const char *s, int absolute) {
  if (!*s) return "must not be empty";
  if (absolute && s[0] != '/') return "must be an absolute path";
  if (strlen(s) >= PATH_MAX) return "is too long";
  return NULL;
}

/* NULL if s is a rendezvous_stores entry: daemon, file, or a Redis server
 * as redis://HOST:PORT (common/validate.h); else what is wrong. */
static const char *store_problem(const char *s) {
  if (!strcmp(s, "daemon") || !strcmp(s, "file")) return NULL;
  if (!strncmp(s, "redis://", 8) && dpm_store_url_valid(s)) return NULL;
  return "must be daemon, file or redis://HOST:PORT";
}

/* Sets key k of cfg from the text s (a YAML scalar or a flag's value).
 * append: for list kinds, add to the list (else replace it). Returns NULL
 * or a problem phrased after the key ("must be ..."), without the value. */
static const char *cfg_set(dpmd_config *cfg, const cfg_key *k, const char *s, int append,
                           char *buf, size_t cap) {
  const char *bad = NULL;
  char *copy;
  switch (k->kind) {
  case CK_ENDPOINTS:
  case CK_ABSPATHS:
  case CK_STORES: {
    bad = k->kind == CK_ENDPOINTS ? endpoint_problem(s, buf, cap)
          : k->kind == CK_STORES  ? store_problem(s)
                                  : path_problem(s, 1);
    if (bad) return bad;
    char ***list = FIELD(cfg, k->off, char **);
    int *n = FIELD(cfg, k->aux, int);
    if (!append) {
      free_strs(*list, *n);
      *list = NULL;
      *n = 0;
    }
    return push_str(list, n, s) ? NULL : "cannot be stored: out of memory";
  }
  case CK_ENDPOINT:
  case CK_ABSPATH:
  case CK_PATH:
    bad = k->kind == CK_ENDPOINT ? endpoint_problem(s, buf, cap)
                                 : path_problem(s, k->kind == CK_ABSPATH);
    if (bad) return bad;
    if (!(copy = strdup(s))) return "cannot be stored: out of memory";
    free(*FIELD(cfg, k->off, char *));
    *FIELD(cfg, k->off, char *) = copy;
    if (k->aux) *FIELD(cfg, k->aux, int) = 1;
    return NULL;
  case CK_INT: {
    uint64_t x;
    if (k->auto_cores && strcmp(s, "auto") == 0) {
      x = (uint64_t)cores();
    } else {
      const char *d = s + (*s == '-');
      size_t nd = strspn(d, "0123456789");
      if (nd == 0 || d[nd]) {
        snprintf(buf, cap, "must be an integer%s", k->auto_cores ? " or auto" : "");
        return buf;
      }
      errno = 0;
      x = strtoull(d, NULL, 10);
      if (errno || (*s == '-' && x) || x < k->lo || x > k->hi) {
        snprintf(buf, cap, "must be between %llu and %llu", (unsigned long long)k->lo,
                 (unsigned long long)k->hi);
        return buf;
      }
    }
    if (k->size == sizeof(int)) {
      int v = (int)x;
      memcpy(FIELD(cfg, k->off, char), &v, sizeof v);
    } else {
      memcpy(FIELD(cfg, k->off, char), &x, sizeof x); /* size_t and uint64_t */
    }
    return NULL;
  }
  case CK_BOOL:
    if (strcmp(s, "true") && strcmp(s, "false")) return "must be true or false";
    *FIELD(cfg, k->off, int) = strcmp(s, "true") == 0;
    return NULL;
  case CK_ENUM: {
    size_t o = snprintf(buf, cap, "must be one of:");
    for (int i = 0; k->choices[i]; i++) {
      if (strcmp(s, k->choices[i]) == 0) {
        int v = i;
        memcpy(FIELD(cfg, k->off, char), &v, sizeof v); /* int or an int-sized enum */
        return NULL;
      }
      if (o < cap) o += snprintf(buf + o, cap - o, "%s %s", i ? "," : "", k->choices[i]);
    }
    return buf;
  }
  case CK_EVERY: {
    size_t n = strspn(s, "0123456789");
    int secs = n && s[n] == 's' && !s[n + 1];
    if (!n || n > 9 || (s[n] && !secs))
      return "must be iterations (1000) or seconds (600s)";
    uint64_t v = strtoull(s, NULL, 10);
    *FIELD(cfg, k->off, uint64_t) = secs ? 0 : v;
    *FIELD(cfg, k->aux, uint64_t) = secs ? v : 0;
    return NULL;
  }
  case CK_MAP:
    return "must be a mapping";
  }
  return "is not supported";
}

/* Clears a nullable key's value (YAML null, or the flag value "none"). */
static void cfg_clear(dpmd_config *cfg, const cfg_key *k) {
  if (k->kind == CK_ABSPATHS || k->kind == CK_ENDPOINTS || k->kind == CK_STORES) {
    free_strs(*FIELD(cfg, k->off, char **), *FIELD(cfg, k->aux, int));
    *FIELD(cfg, k->off, char **) = NULL;
    *FIELD(cfg, k->aux, int) = 0;
    return;
  }
  free(*FIELD(cfg, k->off, char *));
  *FIELD(cfg, k->off, char *) = NULL;
  if (k->kind == CK_ENDPOINT && k->aux) *FIELD(cfg, k->aux, int) = 1;
}

/* events named after the first ipc listen address, unless given
 * explicitly: ipc:///run/dpmd/dpmd.sock -> ipc:///run/dpmd/dpmd.events.sock
 * (a trailing ".sock" replaced), so that daemons whose sockets share a
 * folder have events sockets of their own. None when the name would be too
 * long for a socket path (the stream through the request socket remains). */
static int cfg_derive_events(dpmd_config *cfg) {
  if (cfg->events_set) return 1;
  free(cfg->events);
  cfg->events = NULL;
  if (cfg->n_listen < 1 || strncmp(cfg->listen[0], "ipc://", 6) != 0) return 1;
  const char *l = cfg->listen[0];
  size_t n = strlen(l);
  if (n > 5 + 6 && !strcmp(l + n - 5, ".sock")) n -= 5;
  if (n - 6 + strlen(".events.sock") > CFG_IPC_PATH_MAX) return 1;
  if (asprintf(&cfg->events, "%.*s.events.sock", (int)n, l) < 0) {
    cfg->events = NULL;
    return 0;
  }
  return 1;
}

/* The machine's memory in bytes; 0 when it cannot be told. */
static uint64_t physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static dpm_status cfg_defaults(dpmd_config *cfg, dpm_err *err) {
  memset(cfg, 0, sizeof *cfg);
  cfg->cpu_devices = cores();
  cfg->gpus = 1;
  cfg->max_models = 16;
  cfg->checkpoint_retention = 3;
  cfg->checkpoint_on_shutdown = 1;
  cfg->checkpoint_every_s = 600;
  cfg->log_level = DPMD_LOG_INFO;
  cfg->max_message_bytes = (size_t)64 << 20;
  cfg->max_model_bytes = (uint64_t)8 << 30;
  cfg->data_cache_bytes = (uint64_t)1 << 30;
  cfg->max_total_bytes = physical_memory();
  cfg->progress_every = 10;
  if (!push_str(&cfg->listen, &cfg->n_listen, "ipc:///run/dpmd/dpmd.sock") ||
      !push_str(&cfg->data_paths, &cfg->n_data_paths, "/usr/share/datasets") ||
      !push_str(&cfg->rendezvous_stores, &cfg->n_rendezvous_stores, "daemon") ||
      !push_str(&cfg->rendezvous_stores, &cfg->n_rendezvous_stores, "file") ||
      !(cfg->state_dir = strdup("/var/lib/dpmd")) || !cfg_derive_events(cfg)) {
    dpmd_config_fini(cfg);
    return dpm_errf(err, DPM_NOMEM, "config: out of memory");
  }
  return DPM_OK;
}

/* ---- the YAML file -------------------------------------------------------- */

typedef struct {
  const char *src;
  dpm_err *err;
} cfg_ctx;

/* "'key' PROBLEM, got VALUE" at node n. */
static dpm_status cfg_node_fail(cfg_ctx *c, const dpm_ynode *n, const char *key,
                                const char *problem) {
  char got[80];
  dpm_ynode_describe(n, got, sizeof got);
  if (n->kind == DPM_YNODE_SCALAR && n->quoted && strlen(got) + 20 < sizeof got)
    strcat(got, " (a quoted string)");
  return dpm_yerr(c->err, c->src, n, "'%s' %s, got %s", key, problem, got);
}

/* One scalar value (a list item for list kinds). */
static dpm_status cfg_read_scalar(cfg_ctx *c, dpmd_config *cfg, const cfg_key *k,
                                  const char *name, const dpm_ynode *v, int append) {
  char buf[160];
  const char *want = k->kind == CK_INT    ? "must be an integer"
                     : k->kind == CK_BOOL ? "must be true or false"
                                          : "must be a string";
  if (v->kind != DPM_YNODE_SCALAR) return cfg_node_fail(c, v, name, want);
  if (dpm_ynode_is_null(v)) return cfg_node_fail(c, v, name, "must have a value");
  if (strlen(v->str) != v->len) return cfg_node_fail(c, v, name, "must not hold a NUL");
  if (v->quoted && (k->kind == CK_INT || k->kind == CK_BOOL))
    return cfg_node_fail(c, v, name, want);
  const char *bad = cfg_set(cfg, k, v->str, append, buf, sizeof buf);
  return bad ? cfg_node_fail(c, v, name, bad) : DPM_OK;
}

static dpm_status cfg_read_map(cfg_ctx *c, dpmd_config *cfg, const cfg_key *keys,
                               const char *path, const dpm_ynode *map);

/* Key k's value v; name is the key as messages show it ("devices.cpu"). */
static dpm_status cfg_read_value(cfg_ctx *c, dpmd_config *cfg, const cfg_key *k,
                                 const char *name, const dpm_ynode *v) {
  if (k->nullable && dpm_ynode_is_null(v)) {
    cfg_clear(cfg, k);
    return DPM_OK;
  }
  if (k->kind == CK_MAP) {
    if (v->kind != DPM_YNODE_MAP) return cfg_node_fail(c, v, name, "must be a mapping");
    return cfg_read_map(c, cfg, k->sub, name, v);
  }
  if (k->kind != CK_ENDPOINTS && k->kind != CK_ABSPATHS && k->kind != CK_STORES)
    return cfg_read_scalar(c, cfg, k, name, v, 0);
  /* a list, or one string standing for a list of one */
  if (v->kind == DPM_YNODE_MAP) return cfg_node_fail(c, v, name, "must be a list");
  if (v->kind == DPM_YNODE_SCALAR) return cfg_read_scalar(c, cfg, k, name, v, 0);
  cfg_clear(cfg, k);
  if (k->kind == CK_ENDPOINTS && v->n == 0)
    return dpm_yerr(c->err, c->src, v, "'%s' must list at least one endpoint", name);
  for (size_t i = 0; i < v->n; i++) {
    dpm_status st = cfg_read_scalar(c, cfg, k, name, v->items[i], 1);
    if (st != DPM_OK) return st;
  }
  return DPM_OK;
}

static dpm_status cfg_read_map(cfg_ctx *c, dpmd_config *cfg, const cfg_key *keys,
                               const char *path, const dpm_ynode *map) {
  for (size_t i = 0; i < map->n; i++) {
    const dpm_ynode *kn = dpm_ymap_key(map, i);
    const cfg_key *k = keys;
    while (k->key && !dpm_ynode_is(kn, k->key)) k++;
    if (!k->key) {
      char got[80], list[400];
      size_t o = 0;
      for (const cfg_key *p = keys; p->key && o < sizeof list; p++)
        o += snprintf(list + o, sizeof list - o, "%s%s", p == keys ? "" : ", ", p->key);
      return dpm_yerr(c->err, c->src, kn, "unknown key %s%s%s (expected one of: %s)",
                      dpm_ynode_describe(kn, got, sizeof got), path ? " in " : "",
                      path ? path : "", list);
    }
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", path ? path : "", path ? "." : "", k->key);
    dpm_status st = cfg_read_value(c, cfg, k, name, dpm_ymap_value(map, i));
    if (st != DPM_OK) return st;
  }
  return DPM_OK;
}

/* True if text holds no YAML content: blank lines, comments, "---". */
static int cfg_blank(const char *text, size_t len) {
  size_t i = 0;
  while (i < len) {
    size_t e = i;
    while (e < len && text[e] != '\n') e++;
    size_t j = i;
    while (j < e && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
    if (j < e && text[j] != '#' && !(e - j >= 3 && memcmp(text + j, "---", 3) == 0))
      return 0;
    i = e + 1;
  }
  return 1;
}

dpm_status dpmd_config_parse(const char *text, size_t len, const char *source,
                             dpmd_config *cfg, dpm_err *err) {
  cfg_ctx c = {.src = source ? source : "<config>", .err = err};
  dpm_ynode *root = NULL;
  dpm_status st = cfg_defaults(cfg, err);
  if (st != DPM_OK) return st;
  if (!text || cfg_blank(text, len)) return DPM_OK;
  if ((st = dpm_ytree_parse(text, len, c.src, &root, err)) != DPM_OK) goto fail;
  if (root->kind == DPM_YNODE_MAP)
    st = cfg_read_map(&c, cfg, top_keys, NULL, root);
  else if (!dpm_ynode_is_null(root))
    st = dpm_yerr(err, c.src, root, "the config must be a mapping of keys");
  if (st == DPM_OK && !cfg_derive_events(cfg))
    st = dpm_errf(err, DPM_NOMEM, "%s: out of memory", c.src);
  dpm_ytree_free(root);
  if (st == DPM_OK) return DPM_OK;
fail:
  dpmd_config_fini(cfg);
  return st;
}

dpm_status dpmd_config_load(const char *path, dpmd_config *cfg, dpm_err *err) {
  const char *p = path ? path : DPMD_DEFAULT_CONFIG;
  memset(cfg, 0, sizeof *cfg);
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (!path && errno == ENOENT) return dpmd_config_parse(NULL, 0, p, cfg, err);
    return dpm_errf(err, DPM_IO, "cannot read config %s: %s", p, strerror(errno));
  }
  /* Read to the end (a file, /dev/null, a pipe), at most CFG_MAX_FILE bytes. */
  size_t len = 0, cap = 0;
  char *text = NULL;
  int e = 0;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? 2 * cap : 4096;
      char *t = cap > CFG_MAX_FILE ? NULL : realloc(text, ncap);
      if (!t) {
        e = cap > CFG_MAX_FILE ? EFBIG : ENOMEM;
        break;
      }
      text = t;
      cap = ncap;
    }
    ssize_t r = read(fd, text + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      e = r < 0 ? errno : 0;
      break;
    }
    len += (size_t)r;
  }
  close(fd);
  if (!e && len > CFG_MAX_FILE) e = EFBIG;
  dpm_status st;
  if (e)
    st = dpm_errf(err, DPM_IO, "cannot read config %s: %s", p, strerror(e));
  else
    st = dpmd_config_parse(text, len, p, cfg, err);
  free(text);
  return st;
}

/* ---- flags ------------------------------------------------------------------ */

static const cfg_key *cfg_flag_key(const char *name, size_t n) {
  const cfg_key *tables[] = {top_keys, device_keys};
  for (size_t t = 0; t < ARRAY_LEN(tables); t++)
    for (const cfg_key *k = tables[t]; k->key; k++)
      if (k->flag && strlen(k->flag) == n && strncmp(k->flag, name, n) == 0) return k;
  return NULL;
}

/* Splits argv[*i] into a flag name and its value ("--x=v" or "--x v"). */
static const char *flag_value(int argc, char **argv, int *i, size_t *name_len) {
  const char *eq = strchr(argv[*i], '=');
  if (eq) {
    *name_len = (size_t)(eq - argv[*i]);
    return eq + 1;
  }
  *name_len = strlen(argv[*i]);
  return *i + 1 < argc ? argv[++*i] : NULL;
}

const char *dpmd_config_flag_path(int argc, char **argv) {
  const char *path = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      path = argv[++i];
    else if (strncmp(argv[i], "--config=", 9) == 0)
      path = argv[i] + 9;
  }
  return path;
}

dpm_status dpmd_config_flags(dpmd_config *cfg, int argc, char **argv, dpm_err *err) {
  int listen_replaced = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--foreground") == 0) {
      cfg->foreground = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || !a[2])
      return dpm_errf(err, DPM_INVALID, "unexpected argument '%s'", a);
    size_t n;
    const char *v = flag_value(argc, argv, &i, &n);
    const cfg_key *k = cfg_flag_key(a, n);
    if (!k && !(n == 8 && strncmp(a, "--config", 8) == 0))
      return dpm_errf(err, DPM_INVALID, "unknown flag '%.*s'", (int)n, a);
    if (!v) return dpm_errf(err, DPM_INVALID, "%.*s needs a value", (int)n, a);
    if (!k) continue; /* --config: read by the caller */
    const char *bad;
    char buf[160];
    if (k->nullable && strcmp(v, "none") == 0) {
      cfg_clear(cfg, k);
      bad = NULL;
    } else {
      /* --listen replaces the file's list, then appends; --allow-path
         widens the file's allowed_paths */
      int append = k->kind == CK_ENDPOINTS ? listen_replaced : k->kind == CK_ABSPATHS;
      bad = cfg_set(cfg, k, v, append, buf, sizeof buf);
    }
    if (bad) return dpm_errf(err, DPM_INVALID, "%s %s, got '%.200s'", k->flag, bad, v);
    if (k->kind == CK_ENDPOINTS) listen_replaced = 1;
  }
  if (!cfg_derive_events(cfg)) return dpm_errf(err, DPM_NOMEM, "config: out of memory");
  return DPM_OK;
}

/* ---- final checks and the token -------------------------------------------- */

/* The address a tcp://HOST:PORT listen address binds, when nanomsg can
 * bind it: HOST is an IPv4 address, an IPv6 one in brackets, or "*" (every
 * interface). nanomsg (1.1) resolves neither host names nor interface
 * names when it binds ("No such device"), so those are refused up front.
 * Returns 4 or 6 with the address in *a4 or *a6, '*' for "*", 0 otherwise. */
static int tcp_bind_host(const char *ep, struct in_addr *a4, struct in6_addr *a6) {
  const char *h = ep + 6, *end = strrchr(h, ':');
  if (!end) return 0;
  size_t n = (size_t)(end - h);
  int v6 = n >= 2 && h[0] == '[' && h[n - 1] == ']';
  if (v6) h++, n -= 2;
  char host[64];
  if (n == 0 || n >= sizeof host) return 0;
  memcpy(host, h, n);
  host[n] = '\0';
  if (!v6 && strcmp(host, "*") == 0) return '*';
  if (!v6 && inet_pton(AF_INET, host, a4) == 1) return 4;
  return v6 && inet_pton(AF_INET6, host, a6) == 1 ? 6 : 0;
}

/* True for a bindable tcp://HOST:PORT whose HOST is a loopback address. */
static int tcp_is_loopback(const char *ep) {
  struct in_addr a4;
  struct in6_addr a6;
  switch (tcp_bind_host(ep, &a4, &a6)) {
  case 4:
    return (ntohl(a4.s_addr) >> 24) == 127;
  case 6:
    return IN6_IS_ADDR_LOOPBACK(&a6);
  default:
    return 0;
  }
}

static dpm_status cfg_read_token(dpmd_config *cfg, dpm_err *err) {
  const char *f = cfg->auth_token_file;
  char buf[CFG_MAX_TOKEN + 2]; /* the token, one trailing newline, and one more:
                                  a full buffer means the file is too large */
  struct stat sb;
  size_t len = 0;
  int fd = open(f, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return dpm_errf(err, DPM_IO, "cannot read auth_token_file %s: %s", f,
                    strerror(errno));
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return dpm_errf(err, DPM_INVALID, "auth_token_file %s is not a regular file", f);
  }
  if (sb.st_mode & S_IROTH) {
    close(fd);
    return dpm_errf(err, DPM_INVALID,
                    "auth_token_file %s is readable by other users (mode %04o): "
                    "run chmod o-r %s",
                    f, (unsigned)(sb.st_mode & 07777), f);
  }
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return dpm_errf(err, DPM_IO, "cannot read auth_token_file %s: %s", f, strerror(e));
    }
    if (r == 0 || (len += (size_t)r) == sizeof buf) break;
  }
  close(fd);
  dpm_status st = DPM_OK;
  int full = len == sizeof buf;
  while (len && buf[len - 1] && strchr(" \t\r\n\v\f", buf[len - 1])) len--;
  if (full || len > CFG_MAX_TOKEN)
    st = dpm_errf(err, DPM_INVALID, "auth_token_file %s is larger than %d bytes", f,
                  CFG_MAX_TOKEN);
  else if (len == 0)
    st = dpm_errf(err, DPM_INVALID, "auth_token_file %s is empty", f);
  else if (memchr(buf, '\0', len))
    st = dpm_errf(err, DPM_INVALID, "auth_token_file %s holds a NUL byte", f);
  else if (!(cfg->token = strndup(buf, len)))
    st = dpm_errf(err, DPM_NOMEM, "config: out of memory");
  explicit_bzero(buf, sizeof buf);
  return st;
}

dpm_status dpmd_config_finish(dpmd_config *cfg, dpm_err *err) {
  const char *bad = NULL;
  if (!cfg->state_dir || (bad = path_problem(cfg->state_dir, 1)))
    return dpm_errf(err, DPM_INVALID, "state_dir '%s' %s",
                    cfg->state_dir ? cfg->state_dir : "",
                    cfg->state_dir ? bad : "is not set");
  for (int i = 0; i < cfg->n_allowed_paths; i++)
    if ((bad = path_problem(cfg->allowed_paths[i], 1)))
      return dpm_errf(err, DPM_INVALID, "allowed_paths '%s' %s", cfg->allowed_paths[i],
                      bad);
  for (int i = 0; i < cfg->n_data_paths; i++)
    if ((bad = path_problem(cfg->data_paths[i], 1)))
      return dpm_errf(err, DPM_INVALID, "data_paths '%s' %s", cfg->data_paths[i], bad);
  if (cfg->n_listen < 1) return dpm_errf(err, DPM_INVALID, "no listen address");
  if (!cfg_derive_events(cfg)) return dpm_errf(err, DPM_NOMEM, "config: out of memory");
  for (int i = 0; i < cfg->n_listen; i++) {
    const char *l = cfg->listen[i];
    if (cfg->events && strcmp(cfg->events, l) == 0)
      return dpm_errf(err, DPM_INVALID, "events %s is also a listen address", l);
    struct in_addr a4;
    struct in6_addr a6;
    if (strncmp(l, "tcp://", 6) == 0 && !tcp_bind_host(l, &a4, &a6))
      return dpm_errf(err, DPM_INVALID,
                      "listen %s: dpmd binds IP addresses, not host names or interface "
                      "names (use 127.0.0.1, [::1], 0.0.0.0 or *)",
                      l);
    if (strncmp(l, "tcp://", 6) == 0 && !cfg->auth_token_file && !tcp_is_loopback(l))
      return dpm_errf(err, DPM_INVALID, "listen %s is not loopback: set auth_token_file",
                      l);
  }
  if (cfg->token) {
    explicit_bzero(cfg->token, strlen(cfg->token));
    free(cfg->token);
    cfg->token = NULL;
  }
  return cfg->auth_token_file ? cfg_read_token(cfg, err) : DPM_OK;
}

void dpmd_config_fini(dpmd_config *cfg) {
  if (!cfg) return;
  free_strs(cfg->listen, cfg->n_listen);
  free_strs(cfg->allowed_paths, cfg->n_allowed_paths);
  free_strs(cfg->data_paths, cfg->n_data_paths);
  free_strs(cfg->rendezvous_stores, cfg->n_rendezvous_stores);
  free(cfg->events);
  free(cfg->state_dir);
  free(cfg->auth_token_file);
  if (cfg->token) explicit_bzero(cfg->token, strlen(cfg->token));
  free(cfg->token);
  memset(cfg, 0, sizeof *cfg);
}
