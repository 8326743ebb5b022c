# The Fashion-MNIST CNN example reaches >= 0.91 test accuracy within 5
# epochs, trained data-parallel on two CPU replicas of 32 examples each
# (the example's global batch of 64, which trains like one replica of 64):
# about 5 minutes on 2 quiet cores, where one replica takes 10.
. tests/e2e_lib.sh
spec=$(mktemp /tmp/dpm-cnn.XXXXXX)
trap 'rm -f "$spec"' EXIT
sed -e "0,/batch_size:/s/batch_size: *[0-9]*/batch_size: 32/" examples/fmnist_cnn.yaml >"$spec"
grep -q "batch_size: 32" "$spec" || die "could not set the per-device batch"
out=$(build/dpm-train "$spec" --devices cpu:0,cpu:1 --epochs 5 --json)
echo "$out"
best=$(echo "$out" | grep '"epoch"' | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' | sort -n | tail -1)
at_least "$best" 0.91 || die "best test accuracy in 5 epochs $best < 0.91"
