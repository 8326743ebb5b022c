#!/bin/sh
# Only backends and kernels touch a tensor's bytes (daemon/backend/backend.h):
# everything else copies through dpm_tensor_read/_write and the backend.
# Kernels live under daemon/backend/ (the CPU's in daemon/backend/cpu/) and
# are not checked. Grep-level: in the ops' semantics (daemon/ops/: shapes
# and graphs only), the engine, predictor, trainer, server, step plans and
# I/O, outside the files that are the backend's side of the seam
# (tensor.c, workspace.c, exec.c: allocation and binding; engine/collective.c:
# device buffers handed to the communicator; predictor.c: the
# host predictor runtime; checkpoint.c: host tensors handed to it), no
# line may read a tensor's data (t->data, x->data, .t.data, ->t.data,
# dpm_f32/i32/i64()), unless it only passes or tests the pointer and says
# so ("pointer only"), and none (nor the communicators, daemon/comm/) may
# unwrap a device memory handle (dpm_dptr_raw: backend/dptr.h). The fenced
# backend catches at run time what this misses. Exits 1 naming each line.
cd "$(dirname "$0")/.." || exit 2
files=$(ls daemon/ops/*.c daemon/engine/*.c daemon/predictor/*.c daemon/train/*.c \
  daemon/server/*.c daemon/server/*/*.c daemon/parallel/*.c daemon/io/*.c |
  grep -vE '/(tensor|workspace|exec|predictor|checkpoint)\.c$|^daemon/engine/collective\.c$')
# shellcheck disable=SC2086 # file list: split intended
bad=$(grep -nE '(\.|->)t(\.|->)data\b|\bdpm_(f32|i32|i64)\(' $files | grep -v 'pointer only'
  grep -nE '\b(t|x|w|tensor)->data\b' $(echo "$files" | grep -v '^daemon/server/') |
    grep -v 'pointer only'
  grep -nE '\bdpm_dptr_raw\(' $files daemon/comm/*.c daemon/comm/*.h)
[ -z "$bad" ] && exit 0
echo "tensor bytes read outside the backend and kernels (copy through dpm_tensor_read):"
echo "$bad"
exit 1
