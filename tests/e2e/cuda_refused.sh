# dpmd and dpm-train load the CUDA plugin at start; on a host without a
# driver or GPU (this one, CI) each logs one line with the CUDA error (dpm-train
# when asked for cuda devices, or with --verbose), CPU
# devices work as before and cuda:0 is refused with that reason. With the
# plugin missing (DPM_CUDA_LIB pointing nowhere) cuda:0 is refused as "no
# plugin", and a CPU model still trains.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
if [ -e build/libdpm_cuda.so ]; then
  why="no usable CUDA driver or device"
else
  why="no plugin" # a build with CUDA=0
fi
if nvidia-smi >/dev/null 2>&1; then
  echo "a GPU is present: this test checks the host without one (tests/gpu/run.sh covers GPUs)"
  exit 0
fi
# dpm-train: one line at start, then cuda:0 refused with the reason
set +e
err=$(build/dpm-train examples/fmnist_mlp.yaml --devices cuda:0 --iters 1 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 1 ] || die "dpm-train on cuda:0: exit $rc, want 1: $err"
[ "$(echo "$err" | grep -c '^dpm-train: cuda: ')" -eq 1 ] || die "dpm-train's cuda line: $err"
echo "$err" | grep -q "cuda:0.*$why" || die "dpm-train's refusal does not give the reason: $err"
# ... and on cpu:0 it trains, the cuda line only with --verbose
err=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 2 2>&1 >/dev/null) ||
  die "dpm-train on cpu:0 failed: $err"
echo "$err" | grep -q "cuda" && die "a cuda line on cpu:0 without --verbose: $err"
err=$(build/dpm-train examples/fmnist_mlp.yaml --devices cpu:0 --iters 2 --verbose 2>&1 \
  >/dev/null) || die "dpm-train on cpu:0 failed: $err"
echo "$err" | grep -q "^dpm-train: cuda: .*$why" || die "dpm-train's cuda line: $err"
# dpmd: the reason in its log, cuda:0 refused with it, cpu devices serve
start_dpmd
[ "$(grep -c "cuda: .*$why" "$T/dpmd.log")" -eq 1 ] || die "dpmd's log: $(cat "$T/dpmd.log")"
out=$(refused 1 UNSUPPORTED submit examples/fmnist_mlp.yaml --name g --devices cuda:0)
mentions "$why" "$out"
not_listed g
ctl submit examples/fmnist_mlp.yaml --name c --devices cpu:0,cpu:1 >/dev/null
ctl train c --iters 3 --wait >/dev/null
expect "iter of the cpu model" "$(iter_of c)" 3
stop_dpmd
# without the plugin: "no plugin", and the cpu still trains
err=$(DPM_CUDA_LIB=/nonexistent/libdpm_cuda.so build/dpm-train examples/fmnist_mlp.yaml \
  --devices cpu:0 --iters 1 --verbose 2>&1 >/dev/null) || die "dpm-train without the plugin: $err"
echo "$err" | grep -q "^dpm-train: cuda: no plugin (DPM_CUDA_LIB=/nonexistent" ||
  die "missing plugin line: $err"
exit 0
