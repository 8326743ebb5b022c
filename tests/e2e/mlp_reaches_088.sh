# The Fashion-MNIST MLP example reaches >= 0.88 test accuracy in 10 epochs
# and stays under 80 MB of peak RSS. Measured: 0.8902, 72 MB; with
# OpenBLAS's Sandybridge and Prescott kernels forced (OPENBLAS_CORETYPE)
# 0.8907 and 0.8892.
. tests/e2e_lib.sh
out=$(build/dpm-train examples/fmnist_mlp.yaml --epochs 10 --json)
echo "$out"
[ "$(echo "$out" | grep -c '"epoch"')" -eq 10 ] || die "expected 10 epoch lines"
last=$(echo "$out" | tail -1)
acc=$(json_field "$last" test_accuracy)
rss=$(json_field "$last" peak_rss_mb)
at_least "$acc" 0.88 || die "test accuracy $acc < 0.88"
at_least 80 "$rss" || die "peak RSS $rss MB > 80"
