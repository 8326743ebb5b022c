# Two CPU replicas: the MLP still reaches >= 0.88 in 10 epochs; a checkpoint
# and a predictor are written at the end; resuming from the checkpoint with
# one more epoch runs; the predictor file is in place.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0,cpu:1 --epochs 10 --json \
      --checkpoint "$dir/mlp.ckpt" --extract-predictor "$dir/pred" --inputs data \
      --outputs softmax)
echo "$out"
acc=$(json_field "$(echo "$out" | tail -1)" test_accuracy)
at_least "$acc" 0.88 || die "2 replicas: test accuracy $acc < 0.88"
[ -s "$dir/mlp.ckpt" ] || die "no checkpoint written"
[ -s "$dir/pred/predictor.pb" ] || die "no predictor written"
more=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0,cpu:1 --epochs 1 --json \
       --resume "$dir/mlp.ckpt")
echo "resumed: $(echo "$more" | tail -1)"
acc=$(json_field "$(echo "$more" | tail -1)" test_accuracy)
at_least "$acc" 0.88 || die "resumed: test accuracy $acc < 0.88"
# a checkpoint of another spec is refused
set +e
msg=$(build/dpm-train examples/fmnist_cnn.yaml --iters 1 --resume "$dir/mlp.ckpt" 2>&1)
[ $? -eq 1 ] || die "foreign checkpoint: want exit 1"
echo "$msg" | grep -q "another spec" || die "message: $msg"
