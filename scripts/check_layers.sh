#!/bin/sh
# The layers' include rules (README "Layout"), checked on the sources:
# daemon/ includes nothing from client/, client/ nothing from daemon/, and
# common/ (shared by both by design) nothing from either. The Makefile's
# per-layer include folders make most crossings fail to compile; this also
# catches the ones spelled from the tree's root ("daemon/...", "client/...").
# C++ files (*.cc: the Gloo shim) are checked like C ones. Of the public
# headers, common/ includes none of the client library's (dpm/client.h):
# the RPC's constants are dpm/protocol.h, which common/rpc.c owns.
# Prints each crossing; exits 1 if there is one.
cd "$(dirname "$0")/.." || exit 2
daemon_dirs='engine|predictor|ops|io|comm|parallel|server|train|backend|pack'
client_dirs='spec|lib|dpmctl'
bad=$(
  grep -rnE "^#include \"(client/|($client_dirs)/)" daemon common --include=*.c --include=*.h \
    --include=*.cc
  grep -rnE "^#include \"(daemon/|($daemon_dirs)/)" client common --include=*.c --include=*.h \
    --include=*.cc
  grep -rnE '^#include "dpm/client\.h"' common --include=*.c --include=*.h --include=*.cc
)
[ -z "$bad" ] && exit 0
echo "layer crossings (daemon/ <-> client/, or common/ -> either, or to dpm/client.h):"
echo "$bad"
exit 1
