/* A program of a dpm user, built by tests/e2e/install.sh against the
 * installed libdpmclient only (pkg-config dpmclient): it includes
 * <dpm/client.h>, packs a request with the installed protobuf code, opens a
 * client to ENDPOINT (an ipc socket file that does not exist) and pings.
 * dpm/client.h: such a call fails at once with DPM_IO.
 *
 *   client ENDPOINT    prints "dpmclient VERSION: request of N bytes" and
 *                      "ping: STATUS: MESSAGE"; exits 0 when STATUS is IO */
#include <dpm/client.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: client ENDPOINT\n");
    return 2;
  }
  Dpm__Empty empty = DPM__EMPTY__INIT;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.version = DPM_PROTOCOL_VERSION;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &empty;
  printf("dpmclient %s: request of %zu bytes\n", DPM_VERSION,
         dpm__request__get_packed_size(&rq));

  dpm_client *c;
  dpm_err err = {0};
  dpm_status s = dpm_client_open(argv[1], 2000, &c, &err);
  if (s) {
    fprintf(stderr, "open: %s: %s\n", dpm_status_name(s), err.msg);
    return 1;
  }
  Dpm__Response *resp = NULL;
  s = dpm_client_ping(c, &resp, &err);
  printf("ping: %s: %s\n", dpm_status_name(s), s ? err.msg : "answered");
  if (resp) dpm_client_free_response(resp);
  dpm_client_close(c);
  return s == DPM_IO ? 0 : 1;
}
