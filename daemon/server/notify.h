/* systemd's notify protocol (sd_notify(3)) without libsystemd: a datagram
 * to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace). Does
 * nothing when the variable is unset (not started by systemd).
 *
 * Threads: safe from any thread. Errors are ignored by design (systemd
 * treats a missing READY=1 as a start-up timeout, which is the report). */
#ifndef DPMD_NOTIFY_H
#define DPMD_NOTIFY_H

/* Sends text such as "READY=1\nSTATUS=serving 2 models". */
void dpmd_notify(const char *text);
void dpmd_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
