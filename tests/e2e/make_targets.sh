# What the make targets a newcomer runs first do: `make demo` (and
# demo-fleet) install packages but not the ONNX test's virtualenv (about
# 210 MB that the demos never use; only make test makes it),
# and build the CUDA plugin whenever `make` would (CUDA=1, nvcc found).
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# scripts/deps.sh as `make demo` runs it, in a scratch copy: no virtualenv
mkdir "$dir/scripts"
cp scripts/deps.sh "$dir/scripts/"
out=$(cd "$dir" && timeout 10 sh scripts/deps.sh 2>&1) || die "deps.sh exited $?: $out"
case $out in *onnx-venv*) die "deps.sh makes the virtualenv: $out" ;; esac
[ ! -e "$dir/build/onnx-venv" ] || die "deps.sh created build/onnx-venv"
for t in demo demo-fleet; do
  plan=$(make -n "$t" CUDA=0 2>&1)
  case $plan in *--onnx-venv*) die "make $t makes the virtualenv: $plan" ;; esac
  make -n -B "$t" CUDA=1 NVCC=nvcc 2>/dev/null | grep -q "libdpm_cuda.so" ||
    die "make $t CUDA=1 does not build the CUDA plugin"
done
make -n test TEST_RUN=no 2>&1 | grep -q "deps.sh --onnx-venv" ||
  die "make test does not make the virtualenv"
case $(make -n check TEST_RUN=no 2>&1) in
*--onnx-venv*) die "make check makes the virtualenv (its checks do not use it)" ;;
esac
exit 0
