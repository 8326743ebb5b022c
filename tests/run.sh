#!/bin/sh
# Runs the tests, a few at a time, then prints one closing line
# "N passed, N failed" (exit 0 when none failed).
#
#   tests/run.sh [--quick] [-j N] [NAME...]
#
# Every check (make test): the unit tests (ASan+UBSan build, one line per
# test), the race tests (TSan), the GPU checks (gpu-harness: their logic on
# fenced devices; gpu-run: tests/gpu/run.sh; gpu-rehearsal: the bundle in a
# sandbox), the source checks (layers, cuda-seam, namesakes, device-bytes,
# citations, spec-doc: docs/SPEC.md up to date), compile-fail (planted host
# uses of device memory must not compile), every end-to-end script
# tests/e2e/*.sh, the fuzz replays and, with clang's libFuzzer or in CI, the fuzz smokes.
# --quick (make check): the same without the slow end-to-end scripts (SLOW
# below: each trains a model to an accuracy, minutes), the fuzz smokes and
# NOT_QUICK: the checks that need the builds make check skips (the TSan
# build, the GPU bundle, the ONNX checker's virtualenv), the fleet
# scenarios of several daemons or namespaces beyond fleet_loopback (10-22 s
# each) and the scheduler's preemption scenarios (dpmd_sched, 40 s); for
# the edit loop.
# NAME...: only the checks of these names (unit, race, layers, dpmd_verbs,
# "fuzz-replay spec", ...).
#
# Each check runs in the background with its output in a file; as it ends
# the runner prints "ok   NAME (S s)" or "FAIL NAME (S s)" and the last 20
# lines of its output (the unit tests print their own lines), in the order
# they end, and keeps the whole output in build/tests/logs/NAME.log. -j N (or TEST_JOBS=N) checks run at once: 2 by default (1 on one
# CPU). The slow ones start first, so that the short ones fill the other
# slot. Scripts keep out of each other's way: each has its own mktemp
# directory (state dir, ipc sockets, logs; tests/dpmd_lib.sh), tcp ports
# are picked free (free_port), the fuzz checks have a folder per target.
cd "$(dirname "$0")/.." || exit 2
export OPENBLAS_NUM_THREADS=1
# make test runs this with its jobserver in MAKEFLAGS; the makes that the
# checks run themselves (fuzz.sh, install.sh: everything is built by then)
# go without it.
MAKEFLAGS=$(printf '%s\n' "${MAKEFLAGS:-}" |
  sed -e 's/--jobserver-[a-z]*=[^ ]*//g' -e 's/\(^\| \)-j[0-9]*\( \|$\)/ /g')
export MAKEFLAGS

# End-to-end scripts that take minutes (they train to an accuracy): make
# test only. cnn_bn_reaches_0925: the CNN with combined BN statistics, 6
# epochs on two replicas of 64, 3 1/2 min alone here (0.9303 of its 0.925).
SLOW="cnn_bn_reaches_0925 cnn_reaches_091 dp_mlp_checkpoint_predictor mlp_reaches_088
  bmuf_mlp"
# make test only: checks that need the ThreadSanitizer build, the GPU
# bundle or the ONNX virtualenv (onnx_export, image_vs_pil), which make
# check does not build, the fleet scenarios beyond fleet_loopback and
# dpmd_sched.
NOT_QUICK="race dpmd_restore_race gpu-run gpu-rehearsal onnx_export image_vs_pil fleet_faults fleet_preempt
  fleet_equivalence fleet_netns dpmd_sched"
# End-to-end scripts run only when named (tests/run.sh NAME):
# cnn_bf16_reaches_091, cnn_reaches_091's training in bf16 (2 min alone,
# which would take make test past 15 minutes on 2 cores).
BY_HAND="cnn_bf16_reaches_091"
# The checks that take longest start first, in this order (the rest in
# the order queued below), so that the short ones fill the other slot.
FIRST="cnn_bn_reaches_0925 cnn_reaches_091 dp_mlp_checkpoint_predictor mlp_reaches_088
  dpmd_sched dpmd_verbs_fenced dpmd_restore_race unit install"
# Checks that run while nothing else runs: fleet_preempt, whose two
# daemons train for some 20 s on both cores, which starved the 3 s
# collective timeouts of fleet_netns beside it. The accuracy thresholds
# do not depend on the load (a 2-replica run under load gives the same
# losses and accuracies to the last digit, only slower), and no script
# measures speed; the timing bounds of the others (dpmctl_liveness,
# dpmd_hardening) are seconds for what takes milliseconds.
ALONE="fleet_preempt"

quick=""
jobs=${TEST_JOBS:-}
while [ $# -gt 0 ]; do
  case $1 in
  --quick) quick=1 ;;
  -j) jobs=$2; shift ;;
  -j*) jobs=${1#-j} ;;
  -h | --help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
  -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
  shift
done
if [ -z "$jobs" ]; then
  jobs=2
  [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] || jobs=1
fi
case $jobs in '' | *[!0-9]* | 0) echo "run.sh: -j takes a positive number" >&2; exit 2 ;; esac

R=$(mktemp -d /tmp/dpm-run.XXXXXX) || exit 2
running="" # ids of the checks in flight
load=0     # slots they hold
passed=0
failed=0
n=0

# in_list WORD LIST: whether WORD is one of LIST's words (any white space).
in_list() {
  for _w in $2; do [ "$_w" = "$1" ] && return 0; done
  return 1
}

# stop_all: ends the checks in flight, each with its process group (its
# dpmd and dpmctl too).
stop_all() {
  [ -n "$running" ] || return 0
  for _id in $running; do
    _pid=$(cat "$R/$_id.pid" 2>/dev/null) || continue
    kill -TERM -- "-$_pid" 2>/dev/null || kill -TERM "$_pid" 2>/dev/null
  done
  sleep 1
  for _id in $running; do
    _pid=$(cat "$R/$_id.pid" 2>/dev/null) || continue
    kill -KILL -- "-$_pid" 2>/dev/null
  done
}
trap 'stop_all; rm -rf "$R"' EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM HUP

# queue NAME COMMAND...: adds a check (passing when COMMAND exits 0) unless
# NAMEs were given and this is not one of them.
queue() {
  if [ -n "$names" ]; then
    printf '%s\n' "$names" | grep -qxF "$1" || return 0
  elif [ -n "$quick" ] && in_list "$1" "$NOT_QUICK"; then
    return 0
  fi
  n=$((n + 1))
  printf '%s\n' "$1" >"$R/$n.name"
  shift
  printf '%s\n' "$*" >"$R/$n.cmd"
  echo "$n" >>"$R/queue"
}
names=$(for a; do printf '%s\n' "$a"; done)

# start ID: runs check ID in the background, in a session of its own
# (setsid), so that stop_all can end its whole process group.
start() {
  (
    t0=$(date +%s)
    # shellcheck disable=SC2046
    $setsid $(cat "$R/$1.cmd") >"$R/$1.out" 2>&1 </dev/null &
    echo $! >"$R/$1.pid"
    wait $!
    echo "$? $(($(date +%s) - t0))" >"$R/$1.tmp"
    mv "$R/$1.tmp" "$R/$1.done"
  ) &
  echo $! >"$R/$1.sub"
  running="$running $1"
}
setsid=$(command -v setsid || :)

# report ID: prints and counts a check that ended; its whole output stays
# in build/tests/logs/NAME.log (an accuracy check's epochs, for one).
report() {
  read -r _rc _secs <"$R/$1.done"
  _name=$(cat "$R/$1.name")
  mkdir -p build/tests/logs
  cp "$R/$1.out" "build/tests/logs/$(printf '%s' "$_name" | tr ' /' '--').log"
  if [ "$_name" = unit ]; then # its own lines and closing line
    cp "$R/$1.out" build/tests/unit.log
    cat "$R/$1.out"
    _p=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$R/$1.out" | tail -1)
    _f=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$R/$1.out" | tail -1)
    if [ -z "$_p" ]; then
      echo "FAIL unit test binary did not finish (exit $_rc, $_secs s)"
      _p=0 _f=$((${_f:-0} + 1))
    fi
    passed=$((passed + _p))
    failed=$((failed + ${_f:-0}))
  elif [ "$_rc" -eq 0 ]; then
    echo "ok   $_name ($_secs s)"
    passed=$((passed + 1))
  else
    echo "FAIL $_name ($_secs s, exit $_rc)"
    tail -20 "$R/$1.out" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}

# reap: reports the checks that ended and frees their slots. (Functions
# here share the script's variables: theirs start with _.)
reap() {
  _still=""
  for _id in $running; do
    if [ -e "$R/$_id.done" ]; then
      wait "$(cat "$R/$_id.sub")" 2>/dev/null
      report "$_id"
      if in_list "$(cat "$R/$_id.name")" "$ALONE"; then load=0; else load=$((load - 1)); fi
    else
      _still="$_still $_id"
    fi
  done
  running=$_still
}

# ---- the checks, slow ones first --------------------------------------------------

if [ -z "$quick" ]; then
  for t in $SLOW; do
    [ -f "tests/e2e/$t.sh" ] && queue "$t" sh "tests/e2e/$t.sh"
  done
fi
for t in $BY_HAND; do
  [ -n "$names" ] && queue "$t" sh "tests/e2e/$t.sh"
done
queue unit ./build/tests/unit
# Races under ThreadSanitizer: models restored and predictors loaded at once.
queue race build/tests/race
for t in tests/e2e/*.sh; do
  t=$(basename "$t" .sh)
  in_list "$t" "$SLOW $BY_HAND" || queue "$t" sh "tests/e2e/$t.sh"
done
# The GPU checks' harness, every check (the op table's cases among them,
# tests/opcases/cases.c) on fenced devices in place of cuda ones, in the
# test build; then tests/gpu/run.sh itself (the bundle, build/gpu-bundle), which
# on a host without a GPU checks that the bundle is intact and that its
# programs and plugin load, and on one runs everything; then the bundle
# rehearsed in a sandbox laid out as a bare CUDA host (tests/gpu/rehearsal.sh).
queue gpu-harness build/asan-bin/gpu_test --kind fenced --quick
queue gpu-run sh tests/gpu/run.sh
queue gpu-rehearsal sh tests/gpu/rehearsal.sh
queue layers sh scripts/check_layers.sh
queue cuda-seam sh scripts/check_cuda_seam.sh
queue compile-fail sh tests/compile_fail/run.sh
queue namesakes sh scripts/check_namesakes.sh
queue spec-doc sh scripts/check_spec_doc.sh
queue device-bytes sh scripts/check_device_bytes.sh
queue citations sh scripts/check_citations.sh
# Fuzz targets (tests/fuzz): every seed and regression input replayed under
# ASan+UBSan; with clang's libFuzzer at hand, or in CI, each target also
# fuzzes for FUZZ_SMOKE_SECONDS (10; at most 30 in CI) in make test.
for t in $(sh tests/fuzz/fuzz.sh list); do
  queue "fuzz-replay $t" sh tests/fuzz/fuzz.sh replay "$t"
done
if [ -z "$quick" ] && { [ "${CI:-}" = true ] || sh tests/fuzz/fuzz.sh have-libfuzzer; }; then
  for t in $(sh tests/fuzz/fuzz.sh list); do
    queue "fuzz-smoke $t" sh tests/fuzz/fuzz.sh smoke "$t" "${FUZZ_SMOKE_SECONDS:-10}"
  done
fi
for a; do
  cat "$R"/*.name 2>/dev/null | grep -qxF "$a" || { echo "run.sh: no check named '$a'" >&2; exit 2; }
done

mkdir -p build/tests
order=""
for f in $FIRST; do
  for id in $(cat "$R/queue"); do
    [ "$(cat "$R/$id.name")" = "$f" ] && order="$order $id"
  done
done
for id in $(cat "$R/queue"); do
  in_list "$(cat "$R/$id.name")" "$FIRST" || order="$order $id"
done
for id in $order; do
  w=1
  in_list "$(cat "$R/$id.name")" "$ALONE" && w=$jobs
  while [ "$load" -gt 0 ] && [ $((load + w)) -gt "$jobs" ]; do
    sleep 0.1
    reap
  done
  start "$id"
  load=$((load + w))
done
while [ -n "$running" ]; do
  sleep 0.1
  reap
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
