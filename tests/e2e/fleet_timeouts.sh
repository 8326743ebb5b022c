# A fleet job's calls to its other daemons are bounded by the job's timeout
# (parallel.rendezvous.timeout_ms, here T = 1000 ms), and the calls to
# several shards run at once: a submit whose peer nobody listens at, whose
# peer is an address nothing answers at, whose two peers are both dead, or
# whose coordinator (shards[0]) cannot be reached fails within T + M, and
# so does a delete at the coordinator of a job of three daemons whose two
# other daemons were killed. M = 1500 ms: each call's own deadline is T;
# what is left is dpmctl's round trip and a model thread's start
# (milliseconds), on a loaded 2-core machine. (A fixed grace of 10 s per
# peer, one after the other, took 5 s and more per dead peer here.)
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh

T_MS=1000
M_MS=1500
PA=$(free_port)
PB=$(free_port)
while [ "$PB" = "$PA" ]; do PB=$(free_port); done
PC=$(free_port)
while [ "$PC" = "$PA" ] || [ "$PC" = "$PB" ]; do PC=$(free_port); done
DEAD=$(free_port)
while [ "$DEAD" = "$PA" ] || [ "$DEAD" = "$PB" ] || [ "$DEAD" = "$PC" ]; do DEAD=$(free_port); done
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB EC=tcp://127.0.0.1:$PC
ED=tcp://127.0.0.1:$DEAD
EX=tcp://10.255.255.1:7070 # nothing answers there
up A "$EA"
up B "$EB"
up C "$EC"
{
  cat <<'YAML'
name: tiny
input: {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}
forward:
YAML
  tiny_ops
  cat <<YAML
parallel:
  devices: [cpu:0]
  rendezvous: {store: daemon, timeout_ms: $T_MS}
YAML
} >"$T/tiny.yaml"

# fails_within SHARDS WANT: a submit to A with --shards SHARDS is refused
# within T + M, its message containing WANT; prints the time taken
fails_within() {
  _t=$(ms)
  set +e
  _o=$(build/dpmctl --json --token-file "$TOK" --endpoint "$EA" --timeout 60000 \
    submit "$T/tiny.yaml" --name m --shards "$1" 2>/dev/null)
  _rc=$?
  set -e
  _took=$(($(ms) - _t))
  [ "$_rc" -eq 1 ] || die "submit --shards $1 exited $_rc: $_o"
  mentions "$2" "$_o"
  [ "$_took" -lt $((T_MS + M_MS)) ] ||
    die "submit --shards $1 failed after $_took ms (timeout $T_MS ms + $M_MS): $_o"
  echo "$_took"
}
t1=$(fails_within "$EA,$ED" "shard 1 did not join: cannot reach $ED")
t2=$(fails_within "$EA,$EX" "shard 1 did not join: cannot reach $EX")
t3=$(fails_within "$EA,$ED,$EX" "shard 1 did not join: cannot reach $ED")
t4=$(fails_within "$EX,$EA" "parallel.shards[0] must be the daemon that takes the submit")
case $(at "$EA" list) in *'"name":"m"'*) die "m is listed at A after the refusals" ;; esac

# ---- delete at the coordinator, two of three daemons dead ---------------------------
at "$EA" submit "$T/tiny.yaml" --name m --shards "$EA,$EB,$EC" >/dev/null
kill -9 "$PID_B" "$PID_C"
wait "$PID_B" "$PID_C" 2>/dev/null || :
t=$(ms)
o=$(refused_at "$EA" TIMEOUT delete m)
t5=$(($(ms) - t))
mentions "shard 1: cannot reach $EB" "$o"
mentions "shard 2: cannot reach $EC" "$o"
[ "$t5" -lt $((T_MS + M_MS)) ] ||
  die "delete with two dead shards took $t5 ms (timeout $T_MS ms + $M_MS): $o"
case $(at "$EA" list) in *'"name":"m"'*) die "m is listed at A after the delete" ;; esac
echo "fleet_timeouts: ok (timeout $T_MS ms: dead peer $t1 ms, silent address $t2 ms," \
  "two bad peers $t3 ms, unreachable shards[0] $t4 ms, delete with two dead $t5 ms)"
