# One model trained by several dpm-train processes (shards) on 127.0.0.1,
# meeting through a FileStore in this test's own directory:
#  1. 2 shards x 1 device, 1 shard x 2 devices and 1 x 1 at the same global
#     batch give the same parameters after 20 steps, for an MLP and a CNN
#     (no BN), simple and dag: 2x1 and 1x2 bitwise (one sum of two), 1x1
#     within 1e-5 relative (ckpt_diff: max |a-b| / max |a| per tensor);
#  2. two runs of 2x1 write the same checkpoint (every tensor and the
#     metadata but the creation time; cmp of everything after the header);
#  3. a checkpoint of the 2-shard job resumes in a 1-shard job and the
#     reverse, exactly as an uninterrupted run (with Dropout, which draws by
#     the replica's rank in the job); shard 1 is given no file;
#  4. a shard killed with SIGKILL mid-run: the other exits non-zero within
#     the timeout + 1 s, naming the collective and the peer; both ways.
# Only shard 0 writes checkpoints and prints figures.
. tests/e2e_lib.sh
export OPENBLAS_NUM_THREADS=1
B=build/dpm-train
DIFF=build/tests/ckpt_diff
[ -x "$DIFF" ] || die "$DIFF is missing: make $DIFF"
dir=$(mktemp -d /tmp/dpm-shards.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
store="file://$dir/store"
ms() { date +%s%3N; }

# spec NAME PER_DEVICE FORWARD_FILE [RENDEZVOUS]: a spec on synthetic 28x28
# data with PER_DEVICE examples per device.
spec() {
  {
    echo "name: $1"
    echo "input: {reader: synthetic, batch_size: $2, num_examples: 2048,"
    echo "        shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 7}"
    echo "forward:"
    cat "$3"
    echo "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}"
    echo "  - {op: Accuracy, in: [softmax, label], out: accuracy}"
    echo "losses: [loss]"
    echo "update: {optimizer: momentum_sgd, momentum: 0.9, weight_decay: 0.0001,"
    echo "         lr: {base: 0.01}}"
    [ -z "${4:-}" ] || echo "parallel: {rendezvous: {$4}}"
  } >"$dir/$1.yaml"
}
cat >"$dir/mlp.ops" <<'YAML'
  - {op: FC, in: [data], out: fc1, dim_out: 256}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: fc2, dim_out: 128}
  - {op: Relu, in: [fc2], out: fc2}
  - {op: FC, in: [fc2], out: pred, dim_out: 10}
YAML
cat >"$dir/cnn.ops" <<'YAML'
  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}
  - {op: Relu, in: [conv1], out: conv1}
  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}
  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 5, pad: 2}
  - {op: Relu, in: [conv2], out: conv2}
  - {op: MaxPool, in: [conv2], out: pool2, kernel: 2, stride: 2}
  - {op: FC, in: [pool2], out: fc3, dim_out: 64}
  - {op: Relu, in: [fc3], out: fc3}
  - {op: FC, in: [fc3], out: pred, dim_out: 10}
YAML
cat >"$dir/drop.ops" <<'YAML'
  - {op: FC, in: [data], out: fc1, dim_out: 64}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: Dropout, in: [fc1], out: drop1, ratio: 0.3}
  - {op: FC, in: [drop1], out: pred, dim_out: 10}
YAML
for m in mlp cnn drop; do
  spec "$m" 16 "$dir/$m.ops"
  spec "$m-x2" 32 "$dir/$m.ops" # one device, the global batch of two
done
spec kill 16 "$dir/mlp.ops" "timeout_ms: 3000"

# shards JOB SPEC ARGS...: SPEC on 2 shards of one device (--job JOB), every
# shard given ARGS, and its output in $dir/JOB.{0,1}.{out,err}; fails unless
# both exit 0.
shards() {
  _job=$1 _spec=$2
  shift 2
  _p=""
  for i in 0 1; do
    "$B" "$dir/$_spec.yaml" --shard "$i/2" --store "$store" --job "$_job" \
      --interface lo "$@" >"$dir/$_job.$i.out" 2>"$dir/$_job.$i.err" &
    _p="$_p $!"
  done
  pids="$pids $_p"
  for p in $_p; do
    wait "$p" || die "$_job: a shard exited $?: $(cat "$dir/$_job".*.err)"
  done
}
# one SPEC DEVICES ARGS...: one process.
one() {
  _spec=$1 _devs=$2
  shift 2
  "$B" "$dir/$_spec.yaml" --devices "$_devs" "$@" >/dev/null || die "$_spec on $_devs failed"
}
# same A B: bitwise the same tensors, iteration and reader position.
same() {
  "$DIFF" --exact "$1" "$2" >"$dir/diff" || die "$1 and $2 differ: $(cat "$dir/diff")"
}

# 1. the same parameters however the global batch is split
for m in mlp cnn; do
  for net in simple dag; do
    shards "$m-$net" "$m" --net-type "$net" --iters 20 --checkpoint "$dir/$m-$net-2x1.ckpt"
    one "$m" cpu:0,cpu:1 --net-type "$net" --iters 20 --checkpoint "$dir/$m-$net-1x2.ckpt"
    one "$m-x2" cpu:0 --net-type "$net" --iters 20 --checkpoint "$dir/$m-$net-1x1.ckpt"
    same "$dir/$m-$net-2x1.ckpt" "$dir/$m-$net-1x2.ckpt"
    "$DIFF" --max 1e-5 "$dir/$m-$net-2x1.ckpt" "$dir/$m-$net-1x1.ckpt" >"$dir/diff" ||
      die "$m $net: 2x1 and 1x1 differ: $(cat "$dir/diff")"
    echo "$m $net: 2x1 = 1x2 bitwise; 2x1 vs 1x1: $(grep '^max' "$dir/diff")"
  done
done
# shard 0 alone printed, and alone wrote
[ -s "$dir/mlp-dag.0.out" ] || die "shard 0 printed nothing"
[ ! -s "$dir/mlp-dag.1.out" ] || die "shard 1 printed: $(cat "$dir/mlp-dag.1.out")"
grep -q 'images/s' "$dir/mlp-dag.0.out" || die "shard 0's figures: $(cat "$dir/mlp-dag.0.out")"

# 2. two runs of 2x1 are bitwise equal
shards again mlp --net-type dag --iters 20 --checkpoint "$dir/again.ckpt"
same "$dir/mlp-dag-2x1.ckpt" "$dir/again.ckpt"
tail -c +97 "$dir/mlp-dag-2x1.ckpt" >"$dir/a.body"
tail -c +97 "$dir/again.ckpt" >"$dir/b.body"
cmp -s "$dir/a.body" "$dir/b.body" || die "two runs of 2x1: checkpoint bytes differ"
echo "two runs of 2x1: bitwise equal"

# 3. 2 shards -> 1 shard of 2 devices, and back, exactly (Dropout too)
one drop cpu:0,cpu:1 --iters 20 --checkpoint "$dir/straight.ckpt"
shards half2 drop --iters 10 --checkpoint "$dir/half-2x1.ckpt"
one drop cpu:0,cpu:1 --iters 10 --resume "$dir/half-2x1.ckpt" --checkpoint "$dir/to-1x2.ckpt"
same "$dir/straight.ckpt" "$dir/to-1x2.ckpt"
one drop cpu:0,cpu:1 --iters 10 --checkpoint "$dir/half-1x2.ckpt"
# shard 1 gets no file (shard 0 reads it and sends the state) and writes none
_p=""
"$B" "$dir/drop.yaml" --shard 0/2 --store "$store" --job back --interface lo --iters 10 \
  --resume "$dir/half-1x2.ckpt" --checkpoint "$dir/to-2x1.ckpt" >/dev/null 2>"$dir/back.0.err" &
_p=$!
"$B" "$dir/drop.yaml" --shard 1/2 --store "$store" --job back --interface lo --iters 10 \
  --checkpoint "$dir/by-shard1.ckpt" >/dev/null 2>"$dir/back.1.err" &
_p="$_p $!"
pids="$pids $_p"
for p in $_p; do wait "$p" || die "resume in 2 shards: $(cat "$dir"/back.*.err)"; done
same "$dir/straight.ckpt" "$dir/to-2x1.ckpt"
[ ! -e "$dir/by-shard1.ckpt" ] || die "shard 1 wrote a checkpoint"
echo "resumed 2x1 -> 1x2 and 1x2 -> 2x1: bitwise as uninterrupted"

# 4. a shard killed mid-run: its peer fails within timeout (3 s) + 1 s
killed() {
  victim=$1 peer=$((1 - $1))
  for i in 0 1; do
    "$B" "$dir/kill.yaml" --shard "$i/2" --store "$store" --job "kill$victim" \
      --interface lo --iters 1000000 --json >"$dir/k$victim.$i.out" 2>"$dir/k$victim.$i.err" &
    eval "pid$i=$!"
    pids="$pids $!"
  done
  # training: shard 0 has printed two epochs (64 steps each)
  _end=$(($(date +%s) + 30))
  until [ "$(wc -l <"$dir/k$victim.0.out")" -ge 2 ]; do
    [ "$(date +%s)" -lt "$_end" ] || die "kill $victim: no epochs: $(cat "$dir/k$victim".*.err)"
    sleep 0.05
  done
  eval "kill -9 \$pid$victim"
  t0=$(ms)
  eval "p=\$pid$peer"
  until ! kill -0 "$p" 2>/dev/null; do
    [ $(($(ms) - t0)) -lt 6000 ] || die "shard $peer still runs 6 s after shard $victim died"
    sleep 0.02
  done
  took=$(($(ms) - t0))
  set +e
  wait "$p"
  rc=$?
  set -e
  msg=$(cat "$dir/k$victim.$peer.err")
  [ "$rc" -ne 0 ] || die "shard $peer exited 0 after shard $victim died"
  [ "$took" -le 4000 ] || die "shard $peer took $took ms to fail (timeout 3000 ms + 1 s)"
  case $msg in
  *allreduce* | *broadcast*) ;;
  *) die "shard $peer (exit $rc) names no collective: $msg" ;;
  esac
  case $msg in
  *"process $victim"*) ;;
  *) die "shard $peer (exit $rc) does not name shard $victim: $msg" ;;
  esac
  echo "shard $victim killed: shard $peer exited $rc after $took ms: $msg"
}
killed 1
killed 0
exit 0
