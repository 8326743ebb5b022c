# A fleet job yields to a model of higher priority on one of its shards'
# devices: the MLP as 2 shards x 1 device (A coordinates, B is shard 1),
# each on cpu:0 of its daemon. First the job trains K steps unpreempted and
# A checkpoints it (the reference); it is deleted and submitted again under
# the same name, at priority 2, which shard 1 takes from its coordinator.
# While it trains K steps, a priority-5 MLP on cpu:0 trains
# 300 steps three times: on B twice (shard 1 asks the job to yield), then
# on A (the coordinator does). Each time both shards stop at one iteration,
# stay there while the high one trains (status: preempted, by hi on the
# shard that yields) and go on by themselves when it is done. At K the
# job's checkpoint is the reference's, byte for byte but its creation
# time, and shard 1's
# parameters equal shard 0's.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh

PA=$(free_port)
PB=$(free_port_not "$PA")
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB
up A "$EA"
up B "$EB"
SPEC=examples/fmnist_mlp.yaml
K=4500
# shard_iter ID: shard ID's iteration, as A's status of the job gives it
shard_iter() {
  at "$EA" status m | grep -o "{\"shard_id\":$1,[^}]*}" | sed -n 's/.*"iter":\([0-9]*\).*/\1/p'
}
# same_iter: both shards stand at one iteration, twice 50 ms apart
same_iter() {
  _a=$(shard_iter 0)
  [ "$(shard_iter 1)" = "$_a" ] || return 1
  sleep 0.05
  [ "$(shard_iter 0)" = "$_a" ] && [ "$(shard_iter 1)" = "$_a" ]
}
state_at() { json_str "$(at "$1" status "$2")" state; }
# ckpt_sum: A checkpoints the job; the sha256 of the file but its creation
# time and header CRC (io/checkpoint.h: bytes 56-63 and 92-95)
ckpt_sum() {
  p=$(json_str "$(at "$EA" checkpoint m)" path)
  { head -c 56 "$p"; tail -c +65 "$p" | head -c 28; tail -c +97 "$p"; } |
    sha256sum | cut -d' ' -f1
}
# wait_done EP NAME: NAME at EP is ready (120 s)
wait_done() {
  for _ in $(seq 1200); do
    [ "$(state_at "$1" "$2")" = ready ] && return 0
    sleep 0.1
  done
  die "$2 at $1 never finished: $(at "$1" status "$2")"
}

t0=$(ms)
at "$EA" submit $SPEC --name m --devices cpu:0 --shards "$EA,$EB" >/dev/null
at "$EA" train m --iters $K --wait --no-progress >/dev/null
ref=$(ckpt_sum)
at "$EA" delete m >/dev/null
echo "  unpreempted: $K steps, checkpoint $ref ($(($(ms) - t0)) ms)"

at "$EA" submit $SPEC --name m --devices cpu:0 --shards "$EA,$EB" --priority 2 >/dev/null
expect "shard 1's priority (the job's)" "$(json_field "$(at "$EB" status m)" priority)" 2
at "$EB" submit $SPEC --name hi --devices cpu:0 --priority 5 >/dev/null
at "$EA" submit $SPEC --name hi --devices cpu:0 --priority 5 >/dev/null
t0=$(ms)
at "$EA" train m --iters $K >/dev/null
for round in 1 2 3; do
  [ "$round" = 3 ] && EP=$EA || EP=$EB
  poll 60 "m trains before round $round" sh -c \
    "[ \"\$(build/dpmctl --json --token-file $TOK --endpoint $EA status m |
      sed -n 's/.*\"iter\":\([0-9]*\).*/\1/p' | head -1)\" -gt $((round * 1000)) ]"
  at "$EP" train hi --iters 300 >/dev/null
  poll 30 "shard at $EP preempted in round $round" sh -c \
    "build/dpmctl --json --token-file $TOK --endpoint $EP status m | grep -q '\"state\":\"preempted\",\"waiting\":\"by hi\"'"
  poll 10 "round $round: both shards at one iteration" same_iter
  a=$(shard_iter 0)
  [ "$(state_at "$EP" hi)" = training ] || die "round $round: hi ended before the check"
  sleep 0.3
  if [ "$(state_at "$EP" hi)" = training ]; then
    expect "round $round: shard 0 while hi trains" "$(shard_iter 0)" "$a"
    expect "round $round: shard 1 while hi trains" "$(shard_iter 1)" "$a"
  fi
  wait_done "$EP" hi
  poll 30 "m steps again after round $round" sh -c \
    "[ \"\$(build/dpmctl --json --token-file $TOK --endpoint $EA status m |
      sed -n 's/.*\"iter\":\([0-9]*\).*/\1/p' | head -1)\" -gt $a ]"
  echo "  round $round: hi on $EP; both shards held at iteration $a, then went on ($(($(ms) - t0)) ms)"
done
wait_done "$EA" m
n=$(grep -c "model m: the job yields at iteration" "$T/A.log" || true)
at_least "$n" 3 || die "A logged $n yields: $(tail -5 "$T/A.log")"
expect "the preempted job's checkpoint" "$(ckpt_sum)" "$ref"
for b in fc1_w pred_w; do
  expect "shard 1's $b" "$(json_str "$(at "$EB" get-blob m $b)" fnv1a64)" \
    "$(json_str "$(at "$EA" get-blob m $b)" fnv1a64)"
done
echo "  preempted 3 times: checkpoint equal to the unpreempted run's"
echo "fleet_preempt: ok"
