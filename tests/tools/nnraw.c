/* nnraw: a test tool that sends the bytes of a file to dpmd as one request,
 * unchanged, and reports what came back: requests dpmctl and nnsend cannot
 * craft (a NUL byte inside a string field, say), written with printf.
 *
 *   nnraw ENDPOINT FILE
 *
 * Prints "reply STATUS_NAME message" or "no reply" (after 2 s) and exits 0
 * either way; 1 on usage, file or socket errors. */
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpm/client.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nnraw ENDPOINT FILE\n");
    return 1;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  static unsigned char buf[1 << 20];
  size_t len = fread(buf, 1, sizeof buf, f);
  int bad = ferror(f) || !feof(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "nnraw: %s: unreadable or over %zu bytes\n", argv[2], sizeof buf);
    return 1;
  }
  int s = nn_socket(AF_SP, NN_REQ), t = 2000, max = -1;
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  if (s < 0 || nn_connect(s, argv[1]) < 0 || nn_send(s, buf, len, 0) < 0) {
    fprintf(stderr, "nnraw: %s\n", nn_strerror(nn_errno()));
    return 1;
  }
  void *msg = NULL;
  int n = nn_recv(s, &msg, NN_MSG, 0);
  if (n < 0) {
    printf("no reply\n");
  } else {
    Dpm__Response *rs = dpm__response__unpack(NULL, (size_t)n, msg);
    if (rs)
      printf("reply %s %s\n", dpm_status_name((dpm_status)rs->status),
             rs->message ? rs->message : "");
    else
      printf("reply undecodable (%d bytes)\n", n);
    dpm__response__free_unpacked(rs, NULL);
    nn_freemsg(msg);
  }
  nn_close(s);
  return 0;
}
