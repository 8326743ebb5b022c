/* The metrics command's text: Prometheus text exposition format, version
 * 0.0.4. Uptime, models by state, warm device crews, each open device's
 * caching allocator (memory in use, cached and at peak; allocations served
 * from the cache or the device), requests by command and status, requests
 * dropped undecoded, what the rendezvous store holds (formations, keys,
 * bytes: server/fleet/kv.h), and per model its iteration, loss, images/s, step
 * time, tensor bytes and memory bytes (from each model's snapshot; a model
 * without a value has no line).
 *
 * Threads: the loop thread (it reads the registry and the counters). */
#ifndef DPMD_METRICS_H
#define DPMD_METRICS_H

#include "server/dpmd.h"
#include "server/models/registry.h"

/* The text (malloc'd; the caller frees it), or NULL when out of memory.
 * command_name labels the request counters by command (their oneof case):
 * the command table's names. */
char *dpmd_metrics_text(const dpmd *d, const dpmd_registry *models,
                        const char *(*command_name)(int command));

#endif
