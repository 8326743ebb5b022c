/* What command handlers and model threads see of the daemon: its
 * configuration, devices and paths, and the way out for answers and events.
 *
 * The loop (server.c) makes one dpmd before it serves and keeps it until it
 * has stopped. The fields of struct dpmd are set before serving and never
 * change afterwards, so any thread may read them. The rest (the queue that
 * answers and events take to the loop, the sockets they leave by, request
 * counters, the stopping flag) is dpmd.c's own, reached only through the
 * functions below, each of which names the threads it may be called from.
 * The model registry is not here: it is the loop's (server/models/registry.h), and
 * model threads never touch it.
 *
 * Threads: the loop thread runs the command table (server/commands.h); each
 * model has a thread that runs the jobs posted to it (server/models/model.h). A
 * model thread answers requests and publishes events only through
 * dpmd_reply, dpmd_reply_error and dpmd_publish, which queue the bytes under
 * a lock and wake the loop (uv_async_send coalesces: the loop drains the
 * whole queue); called on the loop thread they send at once.
 *
 * Errors: every request is answered exactly once, with a dpm_status and a
 * message; nothing a client sends can stop the loop. */
#ifndef DPMD_DPMD_H
#define DPMD_DPMD_H

#include <stdint.h>

#include "dpm/protocol.h"
#include "dpm/wire.h" /* dpm_status_to_wire */
#include "proto/dpm.pb-c.h"
#include "server/config.h"

#define DPMD_VERSION DPM_VERSION

struct dpmd_model;
struct dpmd_devices;
struct dpmd_paths;
struct dpmd_kv;
struct dpmd_gather;
struct dpm_data_cache;
struct dpmd_sched;
struct uv_loop_s;
typedef struct dpmd_core dpmd_core;

typedef struct dpmd {
  const dpmd_config *cfg;         /* the configuration, final before serving */
  struct dpmd_devices *devices;   /* devices and warm crews; any thread (devices.h) */
  const struct dpmd_paths *paths; /* where clients' paths may lead (paths.h) */
  struct dpmd_kv *kv;             /* the rendezvous store it serves; any thread (kv.h) */
  struct dpmd_gather *gather;     /* asks fleet jobs' shards for status (gather.h) */
  struct dpmd_stream *stream;     /* events through the request socket (stream.h); loop */
  struct dpm_data_cache *data; /* every model's data sets (io/datacache.h); any thread */
  struct dpmd_sched *sched;    /* turns and memory admission (sched.h); any thread */
  uint64_t instance;           /* random per start: clients notice a restart */
  double started;              /* CLOCK_REALTIME seconds */
  dpmd_core *core;             /* dpmd.c's: through the functions below only */
} dpmd;

/* Where a Response goes: the raw REP socket's header of the request (a
 * nanomsg chunk, owned until the answer is sent) and the request's id. */
typedef struct dpmd_reply_to {
  void *header;
  uint64_t id;
  int command;    /* the request's command (its oneof case: metrics); 0 if unknown */
  double arrived; /* monotonic ms (common/clock.h) when the loop read it (a model's
                     phases) */
} dpmd_reply_to;

/* ---- answers and events: any thread --------------------------------------- */

/* Send resp (id filled in, control bytes in its message escaped) to `to`
 * and release to's header. */
void dpmd_reply(dpmd *d, dpmd_reply_to *to, Dpm__Response *resp);
/* Answer with an error status and message. */
void dpmd_reply_error(dpmd *d, dpmd_reply_to *to, dpm_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Publish ev for model `name` ("NAME\n" + Event): on the events socket
 * when there is one, and on the events stream (stream.h). */
void dpmd_publish(dpmd *d, const char *name, Dpm__Event *ev);
/* Model `model` could not checkpoint at shutdown: dpmd will exit non-zero
 * naming it. Any thread. */
void dpmd_shutdown_failed(dpmd *d, const char *model);
#define DPMD_SHUTDOWN_FAILED_MAX 1024 /* bytes of their names kept */
double dpmd_now(void);                /* CLOCK_REALTIME seconds */

/* A model thread has ended (deleted, failed to build, shut down): on the
 * loop thread, the loop's exited hook (dpmd_core_start) joins and frees it,
 * then resp (if any) goes to `to` (may be NULL). Model threads only. */
void dpmd_model_exited(dpmd *d, struct dpmd_model *m, dpmd_reply_to *to,
                       Dpm__Response *resp);

/* ---- the loop's state: loop thread ------------------------------------------ */

/* Whether a shutdown has begun (new mutating commands are refused). */
int dpmd_stopping(const dpmd *d);
/* Begins stopping: tells systemd (STOPPING=1). Returns 0, or -1 when the
 * daemon was stopping already. */
int dpmd_begin_stopping(dpmd *d);
/* systemd's STATUS= line: "serving N model(s)" (not once stopping). */
void dpmd_notify_serving(dpmd *d, int n_models);

/* Requests counted by command (the oneof case; 0 = not decodable) and
 * status, as their answers leave; and those refused undecoded (garbage,
 * over the size limit: nanomsg drops far larger ones unseen). */
#define DPMD_MAX_COMMAND 48
uint64_t dpmd_requests(const dpmd *d, int command, dpm_status s);
uint64_t dpmd_dropped(const dpmd *d);
void dpmd_count_dropped(dpmd *d);

/* ---- the core's life: server.c ---------------------------------------------- */

/* What the core hands to the loop's owner (server.c), on the loop thread:
 * exited, a model whose thread has ended (dpmd_model_exited), before its
 * answer is sent; event (NULL: none), each published event ("NAME\n" +
 * packed Event, the core's again once the call returns) after the PUB
 * socket took it: the events stream (stream.h) keeps it. */
typedef struct dpmd_core_hooks {
  void (*exited)(void *arg, struct dpmd_model *m);
  void (*event)(void *arg, const uint8_t *msg, size_t len);
  void *arg;
} dpmd_core_hooks;

/* Makes d's core on the calling thread, which becomes the loop thread:
 * answers leave by the raw REP socket rep, events by the PUB socket pub (-1:
 * none) and hooks->event, and a wake handle on loop brings queued ones to
 * this thread. hooks is copied. */
dpm_status dpmd_core_start(dpmd *d, struct uv_loop_s *loop, int rep, int pub,
                           const dpmd_core_hooks *hooks, dpm_err *err);
/* Closes the wake handle (as the loop stops). Messages still queued are
 * dropped by dpmd_core_free, which runs once uv_run has returned. */
void dpmd_core_close(dpmd *d);
void dpmd_core_free(dpmd *d);
/* The models that could not save themselves at shutdown
 * (dpmd_shutdown_failed), ", "-separated, into out (cap bytes); "" when
 * none. */
void dpmd_core_shutdown_failed(dpmd *d, char *out, size_t cap);

#endif
