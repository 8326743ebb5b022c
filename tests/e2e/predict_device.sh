# dpmctl predict --device: cpu (the default) runs on the host; on a host
# without a GPU driver (this one, CI) cuda:0 is refused with exit 1 and the
# driver's reason ("no plugin" in a build with CUDA=0), and a name that is
# not a device is refused too. With a GPU, cuda:0 gives the host's accuracy.
. tests/e2e_lib.sh
DATA=/usr/share/datasets/fashion-mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 20 \
  --extract-predictor "$dir/pred" --inputs data --outputs softmax >/dev/null 2>&1 ||
  die "dpm-train could not extract a predictor"
predict() {
  build/dpmctl predict "$dir/pred" --input $DATA/t10k-images-idx3-ubyte.gz \
    --labels $DATA/t10k-labels-idx1-ubyte.gz --count 50 "$@"
}
host=$(predict) || die "predict on the host failed"
cpu=$(predict --device cpu) || die "predict --device cpu failed"
expect "--device cpu against the default" "$cpu" "$host"
echo "$host" | tail -1 | grep -q '^accuracy ' || die "no accuracy line: $host"
set +e
bad=$(predict --device gpu0 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 1 ] || die "--device gpu0: exit $rc, want 1: $bad"
echo "$bad" | grep -q "'gpu0' is not a device" || die "--device gpu0: $bad"
if nvidia-smi >/dev/null 2>&1; then
  gpu=$(predict --device cuda:0) || die "predict --device cuda:0 failed on a GPU host"
  a=$(echo "$host" | tail -1 | cut -d' ' -f2)
  b=$(echo "$gpu" | tail -1 | cut -d' ' -f2)
  # float sums in another order may flip a near tie: at most one image of 50
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d <= 0.02 && d >= -0.02) }' ||
    die "cuda:0's accuracy $b, the host's $a"
  exit 0
fi
if [ -e build/libdpm_cuda.so ]; then
  why="no usable CUDA driver or device"
else
  why="no cuda backend" # a build with CUDA=0
fi
set +e
err=$(predict --device cuda:0 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 1 ] || die "--device cuda:0: exit $rc, want 1: $err"
echo "$err" | grep -q "device cuda:0: $why" || die "--device cuda:0 without its reason: $err"
echo "$err"
exit 0
