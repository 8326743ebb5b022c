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


# wait_state NAME STATE: polls status until the model is in STATE (30 s).
wait_state() {
  for _ in $(seq 300); do
    [ "$(json_str "$(ctl status "$1")" state)" = "$2" ] && return 0
    sleep 0.1
  done
  die "model $1 never reached state $2: $(ctl status "$1")"
}

# ---- shared by the dpmd tests --------------------------------------------------

ms() { date +%s%3N; }
# within_ms START MAX WHAT: fails unless less than MAX ms passed since START.
within_ms() {
  _took=$(($(ms) - $1))
  [ "$_took" -lt "$2" ] || die "$3 took $_took ms (limit $2)"
}
# refused CODE STATUS ARGS...: dpmctl --json ARGS exits CODE and prints
# {"error":..,"status":STATUS}; the JSON is printed.
refused() {
  _code=$1 _want=$2
  shift 2
  _out=$(ctl_fails "$_code" "$@")
  expect "dpmctl $* status" "$(json_str "$_out" status)" "$_want"
  echo "$_out"
}
# mentions TEXT JSON: the JSON's error message contains TEXT.
mentions() {
  case $(json_str "$2" error) in
  *"$1"*) ;;
  *) die "message should mention '$1': $2" ;;
  esac
}
# not_listed NAME: no model NAME in the registry nor in the state dir.
not_listed() {
  case $(ctl list) in *"\"name\":\"$1\""*) die "model $1 is listed: $(ctl list)" ;; esac
  [ ! -e "$STATE/models/$1" ] || die "model $1 left $STATE/models/$1 behind"
}
iter_of() { json_field "$(ctl status "$1")" iter; }
state_of() { json_str "$(ctl status "$1")" state; }
# metric PREFIX: the sum of the metrics lines starting with PREFIX.
metric() {
  build/dpmctl metrics | awk -v k="$1" 'index($0, k) == 1 { s += $NF } END { print s + 0 }'
}
# ckpt_path DIR ITER: the file name the daemon gives ITER's checkpoint.
ckpt_path() { printf '%s/ckpt-%012d.dpmckpt' "$1" "$2"; }
# log_mark / log_since: the daemon log written after the mark.
log_mark() { mark=$(wc -l <"$T/dpmd.log"); }
log_since() { tail -n "+$((mark + 1))" "$T/dpmd.log"; }
# sanitizers_quiet LOG: no ASan, LSan or UBSan report in LOG.
sanitizers_quiet() {
  if grep -Eq "AddressSanitizer|LeakSanitizer|runtime error" "$1"; then
    die "sanitizer report in $1: $(grep -E -A12 "Sanitizer|runtime error" "$1" | head -40)"
  fi
}
# tiny_ops: the forward ops and losses of a tiny model over data and label.
tiny_ops() {
  cat <<'YAML'
  - {op: FC, in: [data], out: fc1, dim_out: 16}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 4}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
YAML
}
# poll SECONDS WHAT COMMAND...: runs COMMAND every 50 ms until it succeeds;
# fails the test ("WHAT: not within SECONDS s") when it has not by then.
poll() {
  _end=$(($(date +%s) + $1)) _secs=$1 _what=$2
  shift 2
  until "$@"; do
    [ "$(date +%s)" -lt "$_end" ] || die "$_what: not within $_secs s"
    sleep 0.05
  done
}
# iter_above NAME N: NAME's iteration is above N.
iter_above() { [ "$(iter_of "$1")" -gt "$2" ]; }
# free_port: a tcp port that no socket of this machine uses (/proc/net/tcp
# and tcp6), at random in 20000-32767 (below the ephemeral ports), so that
# tests running at once do not meet on one.
free_port() {
  _used=" $(sed -n 's/^ *[0-9]*: [0-9A-Fa-f]*:\([0-9A-Fa-f]*\) .*/\1/p' /proc/net/tcp \
    /proc/net/tcp6 2>/dev/null | while read -r _h; do echo $((0x$_h)); done | tr '\n' ' ') "
  while :; do
    _p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12768))
    case $_used in *" $_p "*) ;; *) echo "$_p" && return 0 ;; esac
  done
}

# free_port_not P...: a free_port other than the ports given (picked for
# daemons not started yet).
free_port_not() {
  while :; do
    _p=$(free_port)
    case " $* " in *" $_p "*) ;; *) echo "$_p" && return 0 ;; esac
  done
}
