# Helpers for tests that drive a real dpmd with dpmctl (sourced after
# tests/e2e_lib.sh). Each test gets a temporary directory with the state
# dir and the ipc endpoints; DPMD picks the binary (default build/dpmd).
export OPENBLAS_NUM_THREADS=1
DPMD=${DPMD:-build/dpmd}
DATA=/usr/share/datasets/fashion-mnist
T=$(mktemp -d /tmp/dpm-test.XXXXXX)
STATE=$T/state
export DPM_ENDPOINT="ipc://$T/dpmd.sock"
DPMD_PID=""
cleanup() {
  [ -n "$DPMD_PID" ] && kill -9 "$DPMD_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

# start_dpmd [FLAGS...]: starts dpmd on $T (2 cpu devices) and waits until
# it answers (pings every 50 ms for up to 20 s: a ping fails at once while
# the daemon has not created its socket); its log goes to $T/dpmd.log.
start_dpmd() {
  "$DPMD" --listen "$DPM_ENDPOINT" --state-dir "$STATE" --devices 2 "$@" \
    2>>"$T/dpmd.log" &
  DPMD_PID=$!
  _end=$(($(date +%s) + 20))
  until build/dpmctl --timeout 1000 ping >/dev/null 2>&1; do
    kill -0 "$DPMD_PID" 2>/dev/null || die "dpmd exited at start: $(cat "$T/dpmd.log")"
    [ "$(date +%s)" -lt "$_end" ] || die "dpmd did not start: $(cat "$T/dpmd.log")"
    sleep 0.05
  done
}

# stop_dpmd: asks dpmd to shut down and checks it exits 0.
stop_dpmd() {
  ctl shutdown >/dev/null
  wait "$DPMD_PID" || die "dpmd exited with $?: $(tail -20 "$T/dpmd.log")"
  DPMD_PID=""
}

# ctl ARGS...: dpmctl --json; fails the test unless it exits 0.
ctl() { build/dpmctl --json "$@" || die "dpmctl $* exited $?"; }

# ctl_fails CODE ARGS...: dpmctl --json must exit with CODE; prints its stdout.
ctl_fails() {
  want=$1
  shift
  set +e
  out=$(build/dpmctl --json "$@" 2>/dev/null)
  rc=$?
  set -e
  [ "$rc" -eq "$want" ] || die "dpmctl $* exited $rc, expected $want: $out"
  echo "$out"
}

# json_str LINE KEY: the string value of KEY in a one-line JSON object.
json_str() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }

# expect WHAT ACTUAL WANTED
expect() { [ "$2" = "$3" ] || die "$1: got '$2', expected '$3'"; }

# wait_state NAME STATE: polls status until the model is in STATE (30 s).
wait_state() {
  for _ in $(seq 300); do
    [ "$(json_str "$(ctl status "$1")" state)" = "$2" ] && return 0
    sleep 0.1
  done
  die "model $1 never reached state $2: $(ctl status "$1")"
}
