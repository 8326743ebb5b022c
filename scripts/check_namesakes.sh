#!/bin/sh
# Helpers that every layer needs are written once, in common/, and called
# from there: the out-of-memory error (dpm_nomem, common/err.h), the
# monotonic clock (dpm_mono_ns/_ms/_s and dpm_mono_deadline,
# common/clock.h) and mkdir -p (dpm_mkdirs, common/file.h). A private copy
# under another file's roof (a static nomem, now_ms, mono_ms, now_s,
# mono_s, deadline_after or mkdirs) drifts from the original and makes the
# plan of the house lie: a call seems to run between two rooms that share
# only a name. Grep-level, on the sources of daemon/, common/ and client/
# (C and C++). daemon/backend/cuda/ is not checked: cuda.c and nccl.c
# still hold their own now_ms and deadline_after. Exits 1 naming each
# definition.
cd "$(dirname "$0")/.." || exit 2
names='nomem|now_ms|mono_ms|now_s|mono_s|deadline_after|mkdirs'
bad=$(grep -rnE "^[a-z_][a-z_0-9 ]*[ *]($names)\(" daemon common client \
  --include=*.c --include=*.h --include=*.cc | grep -v '^daemon/backend/cuda/')
[ -z "$bad" ] && exit 0
echo "private copies of a shared helper (call common/err.h, common/clock.h or dpm_mkdirs):"
echo "$bad"
exit 1
