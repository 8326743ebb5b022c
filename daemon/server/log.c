/* dpmd's log (log.h): formats one line in a stack buffer, writes it with one
 * write(2) to stderr. The level and the journal test are atomics, so any
 * thread may log at any time, even before dpmd_log_init. */
#include "server/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define LOG_LINE_MAX 4096 /* longer messages are cut, ending in "..." */

static atomic_int log_level = DPMD_LOG_INFO;
static atomic_int log_journal = -1; /* -1: not checked yet, 0: no, 1: yes */

static const char *const level_names[] = {"error", "warning", "info", "debug"};
static const char level_prio[] = {'3', '4', '6',
                                  '7'}; /* syslog: err warning info debug */

/* $JOURNAL_STREAM is "DEVICE:INODE" of the journal's stream: stderr is the
 * journal only if it is still that very file (not redirected since). */
static int on_journal(void) {
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat sb;
  if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &sb) != 0)
    return 0;
  return (unsigned long long)sb.st_dev == dev && (unsigned long long)sb.st_ino == ino;
}

void dpmd_log_init(dpmd_log_level level) {
  atomic_store(&log_level, (int)level);
  atomic_store(&log_journal, on_journal());
}

/* Appends msg to line[o..cap), replacing newlines and other control bytes
 * so that one message stays one line; returns the new length. */
static size_t put_message(char *line, size_t o, size_t cap, const char *msg) {
  for (const unsigned char *p = (const unsigned char *)msg; *p && o < cap; p++) {
    if (*p == '\n' || *p == '\r') {
      if (o + 2 > cap) break;
      line[o++] = '\\';
      line[o++] = *p == '\n' ? 'n' : 'r';
    } else {
      line[o++] = (*p < 0x20 && *p != '\t') || *p == 0x7F ? '?' : (char)*p;
    }
  }
  return o;
}

/* One line: fmt over ap, then suffix (may be ""). */
static void vlog(dpmd_log_level level, const char *suffix, const char *fmt, va_list ap) {
  if ((int)level < 0 || (int)level > DPMD_LOG_DEBUG ||
      (int)level > atomic_load(&log_level))
    return;
  int saved = errno; /* callers may log and then use errno */
  int journal = atomic_load(&log_journal);
  if (journal < 0) atomic_store(&log_journal, journal = on_journal());

  char msg[LOG_LINE_MAX], line[LOG_LINE_MAX + 64];
  int mn = vsnprintf(msg, sizeof msg, fmt, ap);
  if (mn < 0) snprintf(msg, sizeof msg, "(unformattable message: %s)", fmt);
  if (mn >= 0 && (size_t)mn < sizeof msg && *suffix) {
    int sn = snprintf(msg + mn, sizeof msg - (size_t)mn, "%s", suffix);
    if (sn < 0 || (size_t)sn >= sizeof msg - (size_t)mn) mn = (int)sizeof msg; /* cut */
  }

  size_t o;
  if (journal) {
    o = (size_t)snprintf(line, sizeof line, "<%c>", level_prio[level]);
  } else {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    o = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    o += (size_t)snprintf(line + o, sizeof line - o, ".%03ldZ %s: ", ts.tv_nsec / 1000000,
                          level_names[level]);
  }
  size_t cap = sizeof line - 4; /* room for "...\n" */
  o = put_message(line, o, cap, msg);
  if (mn >= (int)sizeof msg || o == cap) {
    memcpy(line + o, "...", 3);
    o += 3;
  }
  line[o++] = '\n';
  for (size_t done = 0; done < o;) { /* one write; more only if interrupted */
    ssize_t w = write(STDERR_FILENO, line + done, o - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  errno = saved;
}

void dpmd_log(dpmd_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, "", fmt, ap);
  va_end(ap);
}

int dpmd_log_limited(dpmd_ratelimit *r, dpmd_log_level level, const char *fmt, ...) {
  uint64_t held;
  if (!dpmd_ratelimit_allow(r, dpm_mono_s(), &held)) return 0;
  char suffix[96] = "";
  if (held)
    snprintf(suffix, sizeof suffix,
             " (and %llu more like it, not logged, since the last)",
             (unsigned long long)held);
  va_list ap;
  va_start(ap, fmt);
  vlog(level, suffix, fmt, ap);
  va_end(ap);
  return 1;
}
