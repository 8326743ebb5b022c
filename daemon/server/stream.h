/* The events stream through the request socket: the `events` command, so
 * that every dpmd serves its events over the transport its clients already
 * use (a daemon on tcp:// only has no ipc events socket beside it), behind
 * the same token as every other request.
 *
 * The stream keeps the last DPMD_STREAM_KEEP events (each "NAME\n" + a
 * packed Event, as published), numbered from 1. An events request names
 * the last number it has seen (`after`) and is answered as soon as an
 * event after it (for its model, or any) is kept, or after its wait_ms
 * (at most DPMD_STREAM_MAX_WAIT_MS) with none: a long poll, which the raw
 * REP socket allows (the answer goes out later, other requests meanwhile).
 * A request without `after` is answered at once with where the stream
 * stands. Bounds: DPMD_STREAM_BATCH events per answer, and at most
 * DPMD_STREAM_MAX_WAITERS requests waiting (more are refused, DPM_DENIED).
 *
 * Threads: all on the loop thread. stop answers the waiting requests and
 * closes the timer (before the core stops sending); free after the loop
 * has ended. */
#ifndef DPMD_STREAM_H
#define DPMD_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/dpm.pb-c.h"
#include "server/dpmd.h"

#define DPMD_STREAM_KEEP 1024
#define DPMD_STREAM_BATCH 64
#define DPMD_STREAM_MAX_WAITERS 64
#define DPMD_STREAM_MAX_WAIT_MS 5000

typedef struct dpmd_stream dpmd_stream;

dpm_status dpmd_stream_create(dpmd *d, uv_loop_t *loop, dpmd_stream **out, dpm_err *err);
/* Keeps msg ("NAME\n" + packed Event; copied) and answers the requests
 * waiting for it. Out of memory drops the event (counted as dropped). */
void dpmd_stream_add(dpmd_stream *s, const uint8_t *msg, size_t len);
/* Answers r (now or later); takes to's header. */
void dpmd_stream_request(dpmd_stream *s, const Dpm__EventsRequest *r, dpmd_reply_to *to);
void dpmd_stream_stop(dpmd_stream *s);
void dpmd_stream_free(dpmd_stream *s);

#endif
