/* dpmd's shared state: the loop, the sockets, the model registry, counters.
 *
 * Threads: the loop thread (server.c) owns the nanomsg sockets, the
 * registry and every field here except `mu` and what it guards. Model
 * threads (model.c) answer requests and publish events only through
 * dpmd_reply and dpmd_publish, which queue the bytes under `mu` and wake
 * the loop (uv_async_send coalesces: the loop drains the whole queue).
 *
 * Errors: handlers answer every request exactly once, with a dpm_status and
 * a message; nothing a client sends can stop the loop. */
#ifndef DPMD_DPMD_H
#define DPMD_DPMD_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "dpm/client.h" /* DPM_PROTOCOL_VERSION */
#include "dpm/wire.h"   /* dpm_status_to_wire */
#include "proto/dpm.pb-c.h"
#include "server/config.h"

#define DPMD_VERSION DPM_VERSION

struct dpmd_model;
struct dpmd_devices;
struct dpmd_paths;

/* Where a Response goes: the raw REP socket's header of the request (a
 * nanomsg chunk, owned until the answer is sent) and the request's id. */
typedef struct dpmd_reply_to {
  void *header;
  uint64_t id;
  int command; /* the request's command (metrics); 0 if unknown */
} dpmd_reply_to;

typedef struct dpmd_outmsg dpmd_outmsg; /* server.c's queue entry */

/* Requests counted by command (the oneof case, 0 = not decodable) and status. */
#define DPMD_MAX_COMMAND 32

typedef struct dpmd {
  dpmd_config *cfg;
  uv_loop_t *loop;
  pthread_t loop_thread;
  int rep, pub;        /* nanomsg: raw REP (every listen address), PUB or -1 */
  uv_poll_t rep_poll;
  uv_async_t wake;     /* model threads -> loop */
  uv_signal_t sig[2];  /* SIGTERM, SIGINT */
  uv_timer_t stop_timer;
  pthread_mutex_t mu;  /* guards out, out_tail */
  dpmd_outmsg *out, *out_tail;
  struct dpmd_model **models; /* the registry (loop thread) */
  int n_models;
  struct dpmd_devices *devices;
  struct dpmd_paths *paths; /* where clients' paths may lead (server/paths.h) */
  uint64_t instance;   /* random per start: clients notice a restart by it */
  int shutdown_failed; /* atomic: a model could not save itself at shutdown */
  double started;      /* CLOCK_REALTIME seconds */
  int stopping;        /* shutdown requested: refuse new work */
  uint64_t requests[DPMD_MAX_COMMAND][DPM_STATUS_COUNT];
  uint64_t dropped;    /* requests refused undecoded (garbage, over the size
                          limit; nanomsg drops far larger ones unseen) */
} dpmd;

/* Send resp (id filled in) to `to` and release to's header. Any thread. */
void dpmd_reply(dpmd *d, dpmd_reply_to *to, Dpm__Response *resp);
/* Answer with an error status and message. Any thread. */
void dpmd_reply_error(dpmd *d, dpmd_reply_to *to, dpm_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Publish ev for model `name` ("NAME\n" + Event). Any thread. */
void dpmd_publish(dpmd *d, const char *name, Dpm__Event *ev);
/* A model thread has ended (deleted, failed to build, shut down): the loop
 * joins it, drops it from the registry, then sends `resp` (if any) to `to`.
 * Model threads only. */
void dpmd_model_exited(dpmd *d, struct dpmd_model *m, dpmd_reply_to *to,
                       Dpm__Response *resp);

/* commands.c: decode-independent dispatch of one request (loop thread);
 * takes ownership of rq. */
void dpmd_handle(dpmd *d, Dpm__Request *rq, dpmd_reply_to *to);
/* The command's name in the table ("get-blob"; "unknown"). */
const char *dpmd_command_name(int command);
/* Start the models found in the state dir (loop thread, once serving). */
void dpmd_restore_models(dpmd *d);
/* metrics.c: Prometheus text for the metrics command (loop thread); malloc'd. */
char *dpmd_metrics_text(dpmd *d);

/* server.c */
dpm_status dpmd_serve(dpmd *d, dpm_err *err); /* runs until shut down */
void dpmd_shutdown(dpmd *d);                  /* loop thread: begin stopping */
/* A model could not checkpoint at shutdown: dpmd will exit non-zero. Any
 * thread. */
void dpmd_shutdown_failed(dpmd *d);
double dpmd_now(void);                        /* CLOCK_REALTIME seconds */
void dpmd_notify_status(dpmd *d);             /* systemd STATUS= line */

#endif
