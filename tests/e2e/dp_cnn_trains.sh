# The CNN example trains on two CPU replicas (dag): 200 steps of global
# batch 128 reach >= 0.75 test accuracy.
. tests/e2e_lib.sh
out=$(build/dpm-train examples/fmnist_cnn.yaml --devices cpu:0,cpu:1 --iters 200 --json)
echo "$out"
acc=$(json_field "$(echo "$out" | tail -1)" test_accuracy)
at_least "$acc" 0.75 || die "test accuracy $acc < 0.75"
