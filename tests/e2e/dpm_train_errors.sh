# dpm-train: usage errors exit 2, a bad spec exits 1 naming file:line and op.
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
exit 0
