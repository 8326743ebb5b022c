# One model trained across Linux network namespaces (two "hosts" joined by
# a veth pair, its end named fleet0 in both, addresses inside the namespaces
# only: 10.77.0.1 and 10.77.0.2), each daemon or dpm-train shard in its own
# namespace, rendezvous.interface fleet0. Skipped (exit 0, a line saying
# SKIP and why) where namespaces cannot be made: not root, no `ip`, EPERM.
#  1. dpmd A (namespace 0) coordinates a job of 2 shards x 1 device with B
#     (namespace 1), store daemon: 20 steps at A train both; status at A
#     shows both at 20; A's and B's checkpoints are bitwise equal, and
#     within 1e-5 (ckpt_diff) of dpm-train's 1 shard x 2 devices at the
#     same global batch;
#  2. the redis store (redis-server started here inside namespace 0 on
#     10.77.0.1, --save '' --appendonly no) and the file store (a shared
#     directory) each form the job, which trains 20 steps to the same
#     checkpoint as with the daemon store, bitwise;
#  3. dpm-train shards with another lr on shard 1 are refused at rendezvous,
#     both exit non-zero, shard 1 naming itself and what differs;
#  4. dpm-train shard 1 whose shard 0 never comes fails within the timeout
#     (2 s) + 1 s;
#  5. the veth set down mid-training: dpm-train shards both fail within the
#     timeout + 1 s with a timeout error (latency printed); then dpmd
#     shards: each daemon logs the model failed within the timeout (3 s)
#     + 1 s, status at each says failed with a timeout error naming the
#     other shard's daemon, and both still answer status and ping.
# No sanitizer report in either daemon's log (DPMD=build/asan-bin/dpmd: 15 s).
# dpmctl reaches the daemons over ipc sockets (a path works across network
# namespaces); the daemons talk to each other over tcp on the veth.
. tests/e2e_lib.sh
skip() {
  echo "fleet_netns: SKIP: $*"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
. tests/dpmd_lib.sh
DIFF=build/tests/ckpt_diff
[ -x "$DIFF" ] || die "$DIFF is missing: make $DIFF"

tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS0=dpm$tag-0 NS1=dpm$tag-1 V0=d${tag}a V1=d${tag}b IF=fleet0
A_IP=10.77.0.1 B_IP=10.77.0.2
PIDS=""
made=""
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
  for p in $PIDS; do wait "$p" 2>/dev/null || true; done
  for n in $made; do ip netns del "$n" 2>/dev/null || true; done
  ip link del "$V0" 2>/dev/null || true # not yet moved into a namespace
  rm -rf "$T"
}
trap cleanup EXIT
t0=$(ms)

# ---- two hosts -----------------------------------------------------------------------
ip netns add "$NS0" 2>"$T/ip.err" || skip "cannot create a network namespace: $(cat "$T/ip.err")"
made="$NS0"
ip netns add "$NS1" 2>"$T/ip.err" || skip "cannot create a network namespace: $(cat "$T/ip.err")"
made="$NS0 $NS1"
ip netns exec "$NS0" true 2>"$T/ip.err" || skip "cannot run in a network namespace: $(cat "$T/ip.err")"
ip link add "$V0" type veth peer name "$V1" 2>"$T/ip.err" ||
  skip "cannot create a veth pair: $(cat "$T/ip.err")"
ip link set "$V0" netns "$NS0"
ip link set "$V1" netns "$NS1"
ip -n "$NS0" link set "$V0" name $IF
ip -n "$NS1" link set "$V1" name $IF
ip -n "$NS0" addr add $A_IP/24 dev $IF
ip -n "$NS1" addr add $B_IP/24 dev $IF
for n in "$NS0" "$NS1"; do
  ip -n "$n" link set lo up
  ip -n "$n" link set $IF up
done
# carrier: both ends of the veth have a carrier (after a link set up)
carrier() { ip -n "$NS0" link show $IF | grep -q LOWER_UP && ip -n "$NS1" link show $IF | grep -q LOWER_UP; }
poll 10 "the veth up" carrier

TOK=$T/token
printf 'netns-fleet\n' >"$TOK"
chmod 600 "$TOK"
EA=tcp://$A_IP:7070 EB=tcp://$B_IP:7070
IA=ipc://$T/A.sock IB=ipc://$T/B.sock
# the file store under an allowed path; the Redis server started below
mkdir -p "$T/store"
cat >"$T/dpmd.yaml" <<EOF
allowed_paths: [$T/store]
rendezvous_stores: [daemon, file, "redis://$A_IP:6379"]
EOF
# up NAME NAMESPACE TCP IPC: dpmd NAME in NAMESPACE, listening on both
up() {
  ip netns exec "$2" "$DPMD" --listen "$3" --listen "$4" --state-dir "$T/$1" --devices 2 \
    --token-file "$TOK" --config "$T/dpmd.yaml" 2>>"$T/$1.log" &
  PIDS="$PIDS $!"
  eval "PID_$1=$!"
  _end=$(($(date +%s) + 20))
  until build/dpmctl --endpoint "$4" --token-file "$TOK" --timeout 1000 ping >/dev/null 2>&1; do
    kill -0 "$(eval echo "\$PID_$1")" 2>/dev/null || die "dpmd $1 exited: $(cat "$T/$1.log")"
    [ "$(date +%s)" -lt "$_end" ] || die "dpmd $1 did not start: $(cat "$T/$1.log")"
    sleep 0.05
  done
}
up A "$NS0" "$EA" "$IA"
up B "$NS1" "$EB" "$IB"
at() {
  _ep=$1
  shift
  build/dpmctl --json --token-file "$TOK" --endpoint "$_ep" "$@" || die "dpmctl at $_ep: $* exited $?"
}
shard_of() { echo "$1" | grep -o "{\"shard_id\":$2,\"endpoint\":[^}]*}"; }

REDIS=""
if command -v redis-server >/dev/null 2>&1; then
  ip netns exec "$NS0" redis-server --bind $A_IP --port 6379 --save '' --appendonly no --protected-mode no \
    --dir "$T" >"$T/redis.log" 2>&1 &
  PIDS="$PIDS $!"
  redis_up() { ip netns exec "$NS1" sh -c "exec 3<>/dev/tcp/$A_IP/6379" 2>/dev/null; }
  # /dev/tcp is bash's; dash has none: ask redis-cli where there is one
  command -v redis-cli >/dev/null 2>&1 &&
    redis_up() { [ "$(ip netns exec "$NS1" redis-cli -h $A_IP -p 6379 ping 2>/dev/null)" = PONG ]; }
  poll 10 "redis-server in $NS0" redis_up
  REDIS=redis://$A_IP:6379
else
  echo "fleet_netns: no redis-server: the redis store is not tried"
fi

# ---- specs ---------------------------------------------------------------------------
# spec FILE LR PARALLEL: the MLP on synthetic data, 16 examples per device
spec() {
  cat >"$1" <<YAML
name: nsmlp
input: {reader: synthetic, batch_size: 16, num_examples: 2048,
        shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 256}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: fc2, dim_out: 128}
  - {op: Relu, in: [fc2], out: fc2}
  - {op: FC, in: [fc2], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
  - {op: Accuracy, in: [softmax, label], out: accuracy}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, weight_decay: 0.0001, lr: {base: $2}}
parallel: {$3}
YAML
}
rdv() { echo "devices: [cpu:0], net_type: dag, rendezvous: {store: $1, interface: $IF, timeout_ms: $2}"; }
spec "$T/daemon.yaml" 0.01 "$(rdv daemon 3000)"
[ -z "$REDIS" ] || spec "$T/redis.yaml" 0.01 "$(rdv "$REDIS" 3000)"
spec "$T/file.yaml" 0.01 "$(rdv "file://$T/store" 3000)"
spec "$T/one.yaml" 0.01 "devices: [cpu:0, cpu:1], net_type: dag"
spec "$T/train.yaml" 0.01 "devices: [cpu:0], net_type: dag, rendezvous: {interface: $IF, timeout_ms: 2000}"
spec "$T/other.yaml" 0.02 "devices: [cpu:0], net_type: dag, rendezvous: {interface: $IF, timeout_ms: 2000}"

# ---- 1, 2: a job of 2 shards x 1 device through each store ------------------------------
# job STORE: submits STORE.yaml as model STORE to A with --shards A,B, trains
# 20 steps, checks both shards at 20, writes A's and B's checkpoints to
# $T/STORE.{A,B}.ckpt and deletes the model
job() {
  t=$(ms)
  s=$(at "$IA" submit "$T/$1.yaml" --name "$1" --shards "$EA,$EB")
  expect "$1: num_shards" "$(json_field "$s" num_shards)" 2
  at "$IA" train "$1" --iters 20 --wait --no-progress >/dev/null
  s=$(at "$IA" status "$1")
  for id in 0 1; do
    expect "$1: shard $id iter" "$(json_field "$(shard_of "$s" $id)" iter)" 20
  done
  expect "$1: shard 1 endpoint" "$(json_str "$(shard_of "$s" 1)" endpoint)" "$EB"
  expect "$1: B's shard" "$(json_field "$(at "$IB" status "$1")" shard_id)" 1
  cp "$(json_str "$(at "$IA" checkpoint "$1")" path)" "$T/$1.A.ckpt"
  cp "$(json_str "$(at "$IB" checkpoint "$1")" path)" "$T/$1.B.ckpt"
  at "$IA" delete "$1" >/dev/null
  "$DIFF" --exact "$T/$1.A.ckpt" "$T/$1.B.ckpt" >"$T/diff" ||
    die "$1: shard 0's and shard 1's parameters differ: $(cat "$T/diff")"
  echo "store $1: formed across the namespaces and trained 20 steps ($(($(ms) - t)) ms)"
}
job daemon
OPENBLAS_NUM_THREADS=1 build/dpm-train "$T/one.yaml" --iters 20 --checkpoint "$T/one.ckpt" \
  >/dev/null 2>"$T/one.err" || die "1 x 2: $(cat "$T/one.err")"
"$DIFF" --max 1e-5 "$T/one.ckpt" "$T/daemon.A.ckpt" >"$T/diff" ||
  die "2 shards x 1 device vs 1 x 2: $(cat "$T/diff")"
exact=no
"$DIFF" --exact "$T/one.ckpt" "$T/daemon.A.ckpt" >/dev/null 2>&1 && exact=yes
echo "2 shards x 1 device = 1 x 2 after 20 steps: $(grep '^max' "$T/diff") (bitwise: $exact)"
for st in ${REDIS:+redis} file; do
  job $st
  "$DIFF" --exact "$T/daemon.A.ckpt" "$T/$st.A.ckpt" >"$T/diff" ||
    die "store $st trained otherwise than store daemon: $(cat "$T/diff")"
done

# ---- dpm-train shards, one per namespace ------------------------------------------------
# shard NS I SPEC JOB ARGS...: dpm-train shard I/2 of JOB in namespace NS
# (file store), output in $T/JOB.I.{out,err}; its pid in $SHARD_PID
shard() {
  _ns=$1 _i=$2 _spec=$3 _job=$4
  shift 4
  ip netns exec "$_ns" build/dpm-train "$T/$_spec.yaml" --shard "$_i/2" --job "$_job" \
    --store "file://$T/store" --interface $IF "$@" >"$T/$_job.$_i.out" 2>"$T/$_job.$_i.err" &
  SHARD_PID=$!
  PIDS="$PIDS $!"
}
# exits PID MS: waits for PID to end, at most MS ms; how long in $TOOK (ms
# since the call). Not in a subshell: there the pid of an exited child of
# this shell stays a zombie, which kill -0 finds alive.
exits() {
  _t=$(ms)
  while kill -0 "$1" 2>/dev/null; do
    [ $(($(ms) - _t)) -lt "$2" ] || die "pid $1 still runs after $2 ms"
    sleep 0.02
  done
  TOOK=$(($(ms) - _t))
}
# rc_of PID: waits for PID; its exit status in $RC
rc_of() {
  set +e
  wait "$1"
  RC=$?
  set -e
}

# 3. another spec on shard 1
shard "$NS0" 0 train diff --iters 20
p0=$SHARD_PID
shard "$NS1" 1 other diff --iters 20
p1=$SHARD_PID
exits "$p0" 15000
exits "$p1" 15000
rc_of "$p0"
[ "$RC" -ne 0 ] || die "shard 0 trained with a shard of another spec"
rc_of "$p1"
[ "$RC" -ne 0 ] || die "shard 1 of another spec trained"
e1=$(cat "$T/diff.1.err")
case $e1 in *"shard 1 of 2"*"differs from shard 0's: spec hash"*) ;;
*) die "shard 1's refusal does not name it and what differs: $e1" ;; esac
grep -q "differs from shard 0's" "$T/diff.0.err" || die "shard 0's refusal: $(cat "$T/diff.0.err")"
echo "another spec on shard 1: refused: $e1"

# 4. shard 0 never comes: shard 1 fails within the timeout (2 s) + 1 s
t=$(ms)
shard "$NS1" 1 train alone --iters 20
p1=$SHARD_PID
exits "$p1" 6000
took=$(($(ms) - t))
rc_of "$p1"
[ "$RC" -ne 0 ] || die "shard 1 trained without shard 0"
[ "$took" -le 3000 ] || die "shard 1 without shard 0 failed after $took ms (timeout 2000 + 1 s)"
echo "shard 0 never came: shard 1 failed after $took ms: $(cat "$T/alone.1.err")"

# 5a. the link down under dpm-train shards
shard "$NS0" 0 train cut --iters 1000000 --json
p0=$SHARD_PID
shard "$NS1" 1 train cut --iters 1000000 --json
p1=$SHARD_PID
epochs() { [ "$(wc -l <"$T/cut.0.out")" -ge 2 ]; } # 64 steps each
poll 30 "dpm-train shards training across the namespaces" epochs
ip -n "$NS1" link set $IF down
t=$(ms)
exits "$p0" 8000
took0=$(($(ms) - t))
exits "$p1" 8000
took1=$(($(ms) - t))
for i in 0 1; do
  eval "p=\$p$i took=\$took$i"
  rc_of "$p"
  [ "$RC" -ne 0 ] || die "shard $i exited 0 with the link down"
  [ "$took" -le 3000 ] || die "shard $i failed $took ms after the link went down (timeout 2000 + 1 s)"
  grep -Eqi "timed out|timeout" "$T/cut.$i.err" || die "shard $i: no timeout error: $(cat "$T/cut.$i.err")"
done
echo "link down under dpm-train: shard 0 failed after $took0 ms, shard 1 after $took1 ms: $(cat "$T/cut.1.err")"
ip -n "$NS1" link set $IF up
poll 10 "the veth up again" carrier

# 5b. the link down under dpmd shards: each daemon fails the model and answers
at "$IA" submit "$T/daemon.yaml" --name cut --shards "$EA,$EB" >/dev/null
at "$IA" train cut --iters 1000000 >/dev/null
b_trains() { [ "$(json_field "$(at "$IB" status cut)" iter)" -gt 20 ]; }
poll 30 "dpmd shards training across the namespaces" b_trains
ma=$(wc -l <"$T/A.log") mb=$(wc -l <"$T/B.log")
failed_in() { tail -n "+$(($2 + 1))" "$T/$1.log" | grep -q "model cut failed"; }
ip -n "$NS1" link set $IF down
t=$(ms)
tookA="" tookB=""
while [ -z "$tookA" ] || [ -z "$tookB" ]; do
  [ -n "$tookA" ] || ! failed_in A "$ma" || tookA=$(($(ms) - t))
  [ -n "$tookB" ] || ! failed_in B "$mb" || tookB=$(($(ms) - t))
  [ $(($(ms) - t)) -lt 8000 ] || die "link down: dpmd A failed ${tookA:-not} B ${tookB:-not} within 8 s"
  sleep 0.02
done
for d in A B; do
  eval "took=\$took$d ep=\$I$d"
  [ "$took" -le 4000 ] || die "dpmd $d failed the model $took ms after the link went down (timeout 3000 + 1 s)"
  s=$(at "$ep" status cut)
  own=${s%%\"shards\":*} # the model's own fields, before those of its shards
  expect "dpmd $d: state after the link went down" "$(json_str "$own" state)" failed
  case $(json_str "$own" error) in *"timed out"* | *timeout*) ;;
  *) die "dpmd $d: the error is not a timeout: $s" ;; esac
  # it names the other shard, by its daemon's endpoint
  [ $d = A ] && other=$EB || other=$EA
  case $(json_str "$own" error) in *"$other"*) ;;
  *) die "dpmd $d: the error does not name the other shard ($other): $s" ;; esac
  at "$ep" ping >/dev/null
done
sa=$(at "$IA" status cut)
sb=$(at "$IB" status cut)
echo "link down under dpmd: A failed the model after $tookA ms, B after $tookB ms"
echo "  A says: $(json_str "${sa%%\"shards\":*}" error)"
echo "  B says: $(json_str "${sb%%\"shards\":*}" error)"

for d in A B; do sanitizers_quiet "$T/$d.log"; done
echo "fleet_netns: ok ($(($(ms) - t0)) ms)"
