/* nnsend: a test tool that sends raw bytes to dpmd, as a hostile or broken
 * client would, and reports what came back.
 *
 *   nnsend ENDPOINT MODE [ARG]
 *     random N     N random bytes (seeded, reproducible)
 *     truncate     a valid ping request, cut in half
 *     size N       a valid ping request padded to N bytes with an unknown field
 *     version V    a ping with protocol version V
 *     unknown      a request whose command is unknown to this daemon
 *     token T      a ping carrying token T ("" for none)
 *     ping         a valid ping
 *     file PATH    the bytes of a file, unchanged (requests written by hand:
 *                  a NUL byte inside a string field, say)
 *     forwarded-train NAME TOKEN [SECRET]
 *                  train NAME 5 iterations from iteration 0, marked
 *                  forwarded as a fleet's coordinator marks it, with TOKEN
 *                  and, when given, SECRET's bytes as the job's secret: a
 *                  forgery a shard must refuse
 *
 * Prints "reply STATUS_NAME message" or "no reply" (after 2 s) and exits 0
 * either way; 1 on usage, file or socket errors. */
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpm/client.h"

static size_t pack_ping(uint32_t version, const char *token, uint8_t **out) {
  Dpm__Request rq = DPM__REQUEST__INIT;
  Dpm__Empty e = DPM__EMPTY__INIT;
  rq.version = version;
  rq.has_id = 1;
  rq.id = 7;
  rq.token = (char *)token;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &e;
  size_t n = dpm__request__get_packed_size(&rq);
  *out = malloc(n + 16);
  dpm__request__pack(&rq, *out);
  return n;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: nnsend ENDPOINT MODE [ARG]\n");
    return 1;
  }
  const char *mode = argv[2], *arg = argc > 3 ? argv[3] : "0";
  uint8_t *buf = NULL;
  size_t len = 0;
  if (!strcmp(mode, "random")) {
    len = strtoul(arg, NULL, 10);
    buf = malloc(len + 1);
    srand(42);
    for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rand();
  } else if (!strcmp(mode, "truncate")) {
    len = pack_ping(DPM_PROTOCOL_VERSION, NULL, &buf) / 2;
  } else if (!strcmp(mode, "size")) {
    size_t want = strtoul(arg, NULL, 10);
    len = pack_ping(DPM_PROTOCOL_VERSION, NULL, &buf);
    /* field 1000, wire type 2 (bytes): tag, length, then zeros */
    size_t pad = want > len + 8 ? want - len - 8 : 0;
    buf = realloc(buf, len + 8 + pad);
    uint8_t *p = buf + len;
    uint32_t tag = (1000u << 3) | 2;
    do {
      *p++ = (uint8_t)((tag & 0x7f) | (tag > 0x7f ? 0x80 : 0));
      tag >>= 7;
    } while (tag);
    size_t v = pad;
    do {
      *p++ = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
      v >>= 7;
    } while (v);
    memset(p, 0, pad);
    len = (size_t)(p - buf) + pad;
  } else if (!strcmp(mode, "version")) {
    len = pack_ping((uint32_t)strtoul(arg, NULL, 10), NULL, &buf);
  } else if (!strcmp(mode, "unknown")) { /* no command this daemon knows */
    Dpm__Request rq = DPM__REQUEST__INIT;
    rq.version = DPM_PROTOCOL_VERSION;
    len = dpm__request__get_packed_size(&rq);
    buf = malloc(len + 3);
    dpm__request__pack(&rq, buf);
    const uint8_t field99[] = {0x9a, 0x06, 0x00}; /* field 99, bytes, empty */
    memcpy(buf + len, field99, sizeof field99);
    len += sizeof field99;
  } else if (!strcmp(mode, "token")) {
    len = pack_ping(DPM_PROTOCOL_VERSION, argc > 3 ? arg : NULL, &buf);
  } else if (!strcmp(mode, "ping")) {
    len = pack_ping(DPM_PROTOCOL_VERSION, NULL, &buf);
  } else if (!strcmp(mode, "forwarded-train")) {
    Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
    tr.name = (char *)arg;
    tr.iters = 5;
    tr.has_from_iter = 1;
    Dpm__Request rq = DPM__REQUEST__INIT;
    rq.version = DPM_PROTOCOL_VERSION;
    rq.token = argc > 4 ? argv[4] : NULL;
    rq.has_forwarded = rq.forwarded = 1;
    if (argc > 5) {
      rq.has_job_secret = 1;
      rq.job_secret.data = (uint8_t *)argv[5];
      rq.job_secret.len = strlen(argv[5]);
    }
    rq.command_case = DPM__REQUEST__COMMAND_TRAIN;
    rq.train = &tr;
    len = dpm__request__get_packed_size(&rq);
    buf = malloc(len);
    dpm__request__pack(&rq, buf);
  } else if (!strcmp(mode, "file")) {
    FILE *f = fopen(arg, "rb");
    buf = malloc(1 << 20);
    len = f && buf ? fread(buf, 1, 1 << 20, f) : 0;
    if (!f || !buf || ferror(f)) {
      fprintf(stderr, "nnsend: cannot read %s\n", arg);
      return 1;
    }
    fclose(f);
  } else {
    fprintf(stderr, "nnsend: unknown mode %s\n", mode);
    return 1;
  }
  int s = nn_socket(AF_SP, NN_REQ), t = 2000, max = -1;
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  if (s < 0 || nn_connect(s, argv[1]) < 0 || nn_send(s, buf, len, 0) < 0) {
    fprintf(stderr, "nnsend: %s\n", nn_strerror(nn_errno()));
    return 1;
  }
  free(buf);
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
