# dpm-train: usage errors exit 2 naming what is wrong, a bad spec exits 1
# naming file:line and op; --opt=value works; an epoch cut short by --iters
# says so; progress during an epoch on a terminal; the CUDA plugin's line
# only for cuda devices or --verbose.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
set +e
build/dpm-train >/dev/null 2>&1; [ $? -eq 2 ] || die "no spec: want exit 2"
build/dpm-train examples/fmnist_mlp.yaml --epochs zero >/dev/null 2>&1
[ $? -eq 2 ] || die "bad --epochs: want exit 2"
sed 's/op: Relu, in: \[fc1\]/op: Relu, in: [fc9]/' examples/fmnist_mlp.yaml > "$dir/bad.yaml"
msg=$(build/dpm-train "$dir/bad.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] || die "bad spec: want exit 1, got $rc"
echo "$msg" | grep -q "bad.yaml:.*op #2 (Relu): input 'fc9' is not defined" || die "message: $msg"
build/dpm-train "$dir/missing.yaml" >/dev/null 2>&1; [ $? -eq 1 ] || die "missing spec: want 1"
# a spec without eval data: test accuracy is JSON null, not "nan"
cat > "$dir/noeval.yaml" <<'YAML'
name: noeval
input: {reader: synthetic, batch_size: 32, num_examples: 256, shape: [1, 8, 8], num_classes: 4}
forward:
  - {op: FC, in: [data], out: pred, dim_out: 4}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
YAML
out=$(build/dpm-train "$dir/noeval.yaml" --iters 10 --json) || die "no-eval spec failed"
echo "$out" | tail -1 | grep -q '"test_accuracy":null' || die "no-eval summary: $out"
echo "$out" | grep -q nan && die "nan in JSON: $out"
# --eval-every 2: epochs 2 and 3 (the last) evaluate, epoch 1 reports null
cat > "$dir/every.yaml" <<'YAML'
name: every
input: {reader: synthetic, batch_size: 32, num_examples: 256, shape: [1, 28, 28], num_classes: 10}
forward:
  - {op: FC, in: [data], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
  - {op: Accuracy, in: [softmax, label], out: accuracy}
losses: [loss]
YAML
sed -n '/^eval:/,/^  batch_size/p' examples/fmnist_mlp.yaml >> "$dir/every.yaml"
out=$(build/dpm-train "$dir/every.yaml" --epochs 3 --eval-every 2 --json) || die "--eval-every: $out"
echo "$out" | grep '"epoch":1,' | grep -q '"test_accuracy":null' || die "--eval-every epoch 1: $out"
for e in 2 3; do
  echo "$out" | grep '"epoch":'$e, | grep -q '"test_accuracy":0\.[0-9]' || die "--eval-every epoch $e: $out"
done
# usage errors name the argument; --epochs with --iters is refused
msg=$(build/dpm-train examples/fmnist_mlp.yaml --iters 1 --bogus 2>&1); rc=$?
[ $rc -eq 2 ] || die "unknown option: want exit 2, got $rc"
echo "$msg" | grep -q "unexpected argument '--bogus'" || die "unknown option: $msg"
msg=$(build/dpm-train examples/fmnist_mlp.yaml --iters 1 extra.yaml 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "unexpected argument 'extra.yaml'" || die "second spec: $msg"
msg=$(build/dpm-train examples/fmnist_mlp.yaml --iters 5 --epochs 1 2>&1); rc=$?
[ $rc -eq 2 ] || die "--iters with --epochs: want exit 2, got $rc: $msg"
echo "$msg" | grep -q "give --epochs N or --iters N, not both" || die "--iters with --epochs: $msg"
msg=$(build/dpm-train examples/fmnist_mlp.yaml --iters=-3 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q -- "--iters takes a positive whole number, got '-3'" ||
  die "--iters=-3: $msg"
# --iters=N; 3 steps are not "epoch 1"; no cuda line on cpu devices
out=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters=3 2>"$dir/err") ||
  die "--iters=3 failed: $(cat "$dir/err")"
echo "$out" | grep -q "^epoch 1 (3 of 937 steps)  loss" || die "partial epoch: $out"
grep -q "cuda" "$dir/err" && die "a cuda line on a cpu run: $(cat "$dir/err")"
build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 1 --verbose 2>&1 >/dev/null |
  grep -q "^dpm-train: cuda: " || die "no cuda line with --verbose"
out=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 3 --json)
echo "$out" | head -1 | grep -q '^{"epoch":1,"steps":3,' || die "JSON partial epoch: $out"
# progress within the epoch on a terminal (script gives it one)
script -qec "build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 400" \
  /dev/null >"$dir/tty" 2>&1 || die "dpm-train on a terminal: $(cat "$dir/tty")"
grep -aq "epoch 1  step [0-9]*/400  loss" "$dir/tty" || die "no progress: $(cat -v "$dir/tty")"
# --dump-plan opens no data: ResNet-50's plan and counts without ImageNet's shards
out=$(build/dpm-train examples/resnet50_imagenet.yaml --dump-plan 2>&1) ||
  die "--dump-plan without the data: $out"
echo "$out" | grep -q "^# parameters: 25557032 trainable" || die "ResNet-50's count: $out"
# the summary says how long the steps waited for input
out=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 3 --json | tail -1)
echo "$out" | grep -q '"input_wait_pct":[0-9.]*,' || die "no input wait: $out"
exit 0
