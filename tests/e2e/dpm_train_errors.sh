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
