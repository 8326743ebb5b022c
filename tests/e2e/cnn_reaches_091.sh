# The Fashion-MNIST CNN example reaches >= 0.91 test accuracy within 5 epochs
# (about 7 minutes on 2 cores).
. tests/e2e_lib.sh
out=$(build/dpm-train examples/fmnist_cnn.yaml --epochs 5 --json)
echo "$out"
best=$(echo "$out" | grep '"epoch"' | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' | sort -n | tail -1)
at_least "$best" 0.91 || die "best test accuracy in 5 epochs $best < 0.91"
