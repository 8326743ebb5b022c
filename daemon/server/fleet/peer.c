/* dpmd's calls to other daemons (peer.h): an RPC handle with the daemon's
 * token, its reply bound, and refusals turned into errors naming the peer. */
#include "server/fleet/peer.h"

#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/rpc.h"

struct dpmd_peer {
  dpm_rpc *rpc;
};

dpm_status dpmd_peer_open(const dpmd *d, const char *endpoint, dpmd_peer **out,
                          dpm_err *err) {
  *out = NULL;
  dpmd_peer *p = calloc(1, sizeof *p);
  if (!p) return dpm_errf(err, DPM_NOMEM, "out of memory");
  dpm_status s = dpm_rpc_open(endpoint, DPMD_PEER_TIMEOUT_MS, &p->rpc, err);
  if (!s) s = dpm_rpc_set_token(p->rpc, d->cfg->token, err);
  if (!s) s = dpm_rpc_set_max_reply(p->rpc, d->cfg->max_message_bytes, err);
  if (s) {
    dpm_rpc_close(p->rpc);
    free(p);
    return dpm_err_prefix(err, "%s: ", endpoint);
  }
  *out = p;
  return DPM_OK;
}

const char *dpmd_peer_endpoint(const dpmd_peer *p) { return dpm_rpc_endpoint(p->rpc); }

uint64_t dpmd_peer_instance(const dpmd_peer *p) { return dpm_rpc_instance(p->rpc); }

void dpmd_peer_close(dpmd_peer *p) {
  if (!p) return;
  dpm_rpc_close(p->rpc);
  free(p);
}

dpm_status dpmd_peer_call(dpmd_peer *p, Dpm__Request *rq, int timeout_ms,
                          Dpm__Response **out, dpm_err *err) {
  *out = NULL;
  const char *ep = dpmd_peer_endpoint(p);
  rq->has_forwarded = 1;
  rq->forwarded = 1;
  dpm_rpc_set_timeout(p->rpc, timeout_ms);
  Dpm__Response *r = NULL;
  dpm_status s = dpm_rpc_call(p->rpc, rq, &r, err);
  if (s) return dpm_err_prefix(err, "cannot reach %s: ", ep);
  dpm_status st = dpm_status_from_wire(r->status);
  if (st == DPM_OK) {
    *out = r;
    return DPM_OK;
  }
  char msg[600];
  dpm_escape(r->message ? r->message : dpm_strerror(st), msg, sizeof msg);
  int token = st == DPM_DENIED && strstr(msg, "token");
  dpm__response__free_unpacked(r, NULL);
  return dpm_errf(err, st, "%s refused: %s%s", ep, msg,
                  token ? " (the daemons of a job must share one token: "
                          "auth_token_file or --token-file)"
                        : "");
}

dpm_status dpmd_peer_call_once(const dpmd *d, const char *endpoint, Dpm__Request *rq,
                               int timeout_ms, Dpm__Response **out, dpm_err *err) {
  *out = NULL;
  dpmd_peer *p;
  if (dpmd_peer_open(d, endpoint, &p, err)) return err->code;
  dpm_status s = dpmd_peer_call(p, rq, timeout_ms, out, err);
  dpmd_peer_close(p);
  return s;
}
