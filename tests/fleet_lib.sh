# Helpers for tests that run several dpmd on 127.0.0.1 (sourced after
# tests/dpmd_lib.sh): daemons named A, B, ... with state $T/NAME and log
# $T/NAME.log, sharing the token file $TOK (written here); every daemon
# started is killed at exit (stopped ones continued first).
TOK=$T/token
printf 'fleet-secret\n' >"$TOK"
chmod 600 "$TOK"
PIDS=""
cleanup() {
  for p in $PIDS; do kill -CONT "$p" 2>/dev/null || :; kill -9 "$p" 2>/dev/null || :; done
  [ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

# up NAME ENDPOINT [TOKEN [FLAGS]]: starts dpmd NAME (2 cpu devices; TOKEN
# default $TOK; PID_NAME its pid) and waits until it answers
up() {
  _tok=${3:-$TOK}
  # shellcheck disable=SC2086
  "$DPMD" --listen "$2" --state-dir "$T/$1" --devices 2 --token-file "$_tok" ${4:-} \
    2>>"$T/$1.log" &
  PIDS="$PIDS $!"
  eval "PID_$1=$!"
  _end=$(($(date +%s) + 20))
  until build/dpmctl --endpoint "$2" --token-file "$_tok" --timeout 1000 ping >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$_end" ] || die "dpmd $1 did not start: $(cat "$T/$1.log")"
    sleep 0.05
  done
}
# at ENDPOINT ARGS...: dpmctl --json with the token; must exit 0
at() {
  _ep=$1
  shift
  build/dpmctl --json --token-file "$TOK" --endpoint "$_ep" "$@" || die "dpmctl at $_ep: $* exited $?"
}
# refused_at ENDPOINT STATUS ARGS...: must exit 1 with STATUS; prints the JSON
refused_at() {
  _ep=$1 _want=$2
  shift 2
  set +e
  _out=$(build/dpmctl --json --token-file "$TOK" --endpoint "$_ep" "$@" 2>/dev/null)
  _rc=$?
  set -e
  [ "$_rc" -eq 1 ] || die "dpmctl at $_ep: $* exited $_rc, expected 1: $_out"
  expect "dpmctl $* status" "$(json_str "$_out" status)" "$_want"
  echo "$_out"
}
