/* dpmd's log: one line per message on stderr, journald-friendly. When
 * stderr is the journal ($JOURNAL_STREAM matches stderr's device and inode)
 * each line starts with the syslog priority, "<3>" error ... "<7>" debug,
 * and carries no timestamp (journald adds one); otherwise lines read
 * "2026-11-29T23:50:01.123Z info: message". Messages above the configured
 * level are dropped. Embedded newlines are replaced so one call is one line.
 *
 * Threads: safe from any thread (one write(2) per line). */
#ifndef DPMD_LOG_H
#define DPMD_LOG_H

#include "server/config.h"
#include "server/ratelimit.h"

void dpmd_log_init(dpmd_log_level level);
void dpmd_log(dpmd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* dpmd_log through the limiter r (ratelimit.h, with the monotonic clock):
 * written when r allows it, ending in "(and N more like it, not logged,
 * since the last)" when some were held back; otherwise only counted. Returns whether it
 * was written. The thread that owns r. */
int dpmd_log_limited(dpmd_ratelimit *r, dpmd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define dpmd_error(...) dpmd_log(DPMD_LOG_ERROR, __VA_ARGS__)
#define dpmd_warn(...) dpmd_log(DPMD_LOG_WARNING, __VA_ARGS__)
#define dpmd_info(...) dpmd_log(DPMD_LOG_INFO, __VA_ARGS__)
#define dpmd_debug(...) dpmd_log(DPMD_LOG_DEBUG, __VA_ARGS__)
#define dpmd_error_limited(r, ...) dpmd_log_limited(r, DPMD_LOG_ERROR, __VA_ARGS__)
#define dpmd_warn_limited(r, ...) dpmd_log_limited(r, DPMD_LOG_WARNING, __VA_ARGS__)

#endif
