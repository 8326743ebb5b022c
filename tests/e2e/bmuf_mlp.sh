# parallel.mode bmuf (Caffe2's Parallelize_BMUF): the Fashion-MNIST MLP
# example on 2 CPU replicas with BMUF's defaults (local_steps 10, block
# momentum 1 - 1/2, block learning rate 1) reaches >= 0.88 test accuracy
# in 10 epochs (measured 0.885). Its speed against plain data parallelism
# is bench/parallel's.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e 's/^  devices: \[cpu:0\]/  devices: [cpu:0, cpu:1]\n  mode: bmuf/' \
  examples/fmnist_mlp.yaml >"$dir/bmuf.yaml"
grep -q '^  mode: bmuf' "$dir/bmuf.yaml" || die "the example's devices line moved"
bmuf=$(build/dpm-train "$dir/bmuf.yaml" --epochs 10 --json)
echo "$bmuf"
[ "$(echo "$bmuf" | grep -c '"epoch"')" -eq 10 ] || die "expected 10 epoch lines"
acc=$(json_field "$(echo "$bmuf" | tail -1)" test_accuracy)
at_least "$acc" 0.88 || die "bmuf test accuracy $acc < 0.88"
