/* sd_notify(3) without libsystemd (notify.h): one datagram per call to the
 * AF_UNIX socket named by $NOTIFY_SOCKET. */
#include "server/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void dpmd_notify(const char *text) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !text || (path[0] != '/' && path[0] != '@')) return;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  /* A path needs its NUL inside sun_path; an abstract name ('@' -> '\0') is
   * exactly n bytes long, with no terminator. */
  if (n > sizeof sa.sun_path || (path[0] == '/' && n == sizeof sa.sun_path)) return;
  memcpy(sa.sun_path, path, n);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  if (path[0] == '@')
    sa.sun_path[0] = '\0';
  else
    len++; /* the terminating NUL, as systemd's own clients send it */
  int saved = errno;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ssize_t r;
    do r = sendto(fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    while (r < 0 && errno == EINTR);
    close(fd);
  }
  errno = saved;
}

void dpmd_notifyf(const char *fmt, ...) {
  char *text = NULL;
  va_list ap;
  if (!getenv("NOTIFY_SOCKET")) return;
  va_start(ap, fmt);
  int r = vasprintf(&text, fmt, ap);
  va_end(ap);
  if (r >= 0) dpmd_notify(text);
  free(text);
}
