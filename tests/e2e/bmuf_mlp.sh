# parallel.mode bmuf (Caffe2's Parallelize_BMUF): the Fashion-MNIST MLP
# example on 2 CPU replicas with BMUF's defaults (local_steps 10, block
# momentum 1 - 1/2, block learning rate 1) reaches >= 0.88 test accuracy
# in 10 epochs; then the same spec in plain data parallelism (an all-reduce
# every step) for comparison. Prints both runs' images/s (not asserted:
# the host's load decides them).
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e 's/^  devices: \[cpu:0\]/  devices: [cpu:0, cpu:1]\n  mode: bmuf/' \
  examples/fmnist_mlp.yaml >"$dir/bmuf.yaml"
sed -e 's/^  devices: \[cpu:0\]/  devices: [cpu:0, cpu:1]/' examples/fmnist_mlp.yaml >"$dir/sync.yaml"
grep -q '^  mode: bmuf' "$dir/bmuf.yaml" || die "the example's devices line moved"
bmuf=$(build/dpm-train "$dir/bmuf.yaml" --epochs 10 --json)
echo "$bmuf"
[ "$(echo "$bmuf" | grep -c '"epoch"')" -eq 10 ] || die "expected 10 epoch lines"
last=$(echo "$bmuf" | tail -1)
acc=$(json_field "$last" test_accuracy)
bmuf_ips=$(json_field "$last" images_per_s)
sync=$(build/dpm-train "$dir/sync.yaml" --epochs 10 --json | tail -1)
sync_ips=$(json_field "$sync" images_per_s)
sync_acc=$(json_field "$sync" test_accuracy)
echo "2 replicas, 10 epochs: bmuf $bmuf_ips images/s (test accuracy $acc), plain data" \
  "parallelism $sync_ips images/s (test accuracy $sync_acc)"
at_least "$acc" 0.88 || die "bmuf test accuracy $acc < 0.88"
