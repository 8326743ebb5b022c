/* The RPC protocol's constants: what dpmd and its clients agree on before
 * any message (proto/dpm.proto holds the messages themselves).
 *
 * Owned by the RPC transport (common/rpc.c), which both sides use: dpmd
 * answers version and liveness pings by these numbers, the client library
 * (dpm/client.h, which includes this header for its users) calls by them.
 * Macros only; nothing to link. */
#ifndef DPM_PROTOCOL_H
#define DPM_PROTOCOL_H

#define DPM_PROTOCOL_VERSION 1
#define DPM_DEFAULT_ENDPOINT "ipc:///run/dpmd/dpmd.sock"
#define DPM_VERSION "0.5.0"    /* dpmd, dpmctl, dpm-train and the libraries */
#define DPM_PING_AFTER_MS 1000 /* a call without its answer pings this often */
#define DPM_LIVENESS_MS 5000   /* a call fails after this long without a word */

#endif
