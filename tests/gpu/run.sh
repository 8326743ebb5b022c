#!/bin/sh
# Every GPU check and the GPU benchmark, with a short table at the end:
#   1. builds the CUDA plugin, the checks, the benchmark and the programs;
#   2. build/tests/gpu_test: every op on cuda:0 against its CPU kernel,
#      finite-difference gradients, fills, Dropout, 20 steps against
#      cpu:0, deterministic runs, a warm second model, multi-GPU
#      equivalence, both examples to the CPU accuracy goals (its own table);
#   3. dpm-train on cuda:0: one epoch of the MLP example, a checkpoint and a
#      predictor;
#   4. dpmd with a cuda device: submit on cuda:0, train, eval, checkpoint,
#      extract-predictor, predict;
#   5. build/bench/gpu: figures, not assertions.
# On a host without a GPU it checks that the plugin built and loads and that
# cuda:0 is refused with the driver's reason, prints "no GPU: <reason>" and
# exits 0. Exits 1 when a check failed. Meant to finish within 8 minutes on
# one H200 from a work tree (the build included).
#
#   tests/gpu/run.sh
set -eu
cd "$(dirname "$0")/../.."
. tests/e2e_lib.sh
export OPENBLAS_NUM_THREADS=1
DATA=/usr/share/datasets/fashion-mnist
T=$(mktemp -d /tmp/dpm-gpu.XXXXXX)
DPMD_PID=""
cleanup() {
  [ -n "$DPMD_PID" ] && kill -9 "$DPMD_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
start=$(date +%s)

echo "== build"
if ! make -j"$(nproc)" build/libdpm_cuda.so build/libdpm_cuda_probe.so build/tests/gpu_test build/bench/gpu \
  build/dpmd build/dpmctl build/dpm-train >"$T/build.log" 2>&1; then
  tail -40 "$T/build.log"
  die "build failed"
fi
[ -s build/libdpm_cuda.so ] || die "build/libdpm_cuda.so was not built"

# the plugin named outright: it loads even where the probe finds no GPU
probe=$(DPM_CUDA_LIB=build/libdpm_cuda.so build/tests/gpu_test --need-plugin) || {
  echo "$probe"
  die "the CUDA plugin does not load"
}
case "$probe" in
"no GPU:"*)
  echo "$probe"
  b=$(build/bench/gpu)
  case "$b" in "no GPU:"*) ;; *) die "bench/gpu without a GPU: $b" ;; esac
  echo "no GPU: the plugin built and loads; nothing else to run here"
  exit 0
  ;;
esac

TABLE=""
fails=0
# row NAME OK|FAIL FIGURE
row() {
  TABLE="$TABLE$(printf '%-44s | %-4s | %s' "$1" "$2" "$3")
"
  [ "$2" = ok ] || fails=$((fails + 1))
}

echo "== build/tests/gpu_test"
t0=$(date +%s)
if build/tests/gpu_test; then r=ok; else r=FAIL; fi
row "build/tests/gpu_test (table above)" $r "$(($(date +%s) - t0)) s"

echo "== dpm-train on cuda:0"
t0=$(date +%s)
r=FAIL
if out=$(build/dpm-train examples/fmnist_mlp.yaml --devices cuda:0 --epochs 1 --json \
  --checkpoint "$T/mlp.ckpt" --extract-predictor "$T/pred" --inputs data \
  --outputs softmax 2>"$T/train.err"); then
  echo "$out"
  acc=$(json_field "$(echo "$out" | tail -1)" test_accuracy)
  if at_least "${acc:-0}" 0.80 && [ -s "$T/mlp.ckpt" ] && [ -s "$T/pred/predictor.pb" ]; then
    r=ok
  fi
else
  cat "$T/train.err"
fi
row "dpm-train MLP 1 epoch on cuda:0" $r \
  "test accuracy ${acc:-none} (>= 0.80), checkpoint + predictor, $(($(date +%s) - t0)) s"

echo "== dpmd on cuda:0"
t0=$(date +%s)
export DPM_ENDPOINT="ipc://$T/dpmd.sock"
echo "devices: {cpu: 1, cuda: auto}" >"$T/dpmd.yaml"
ctl() { build/dpmctl --json "$@"; }
json_str() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }
dpmd_ok() {
  build/dpmd --listen "$DPM_ENDPOINT" --state-dir "$T/state" --config "$T/dpmd.yaml" \
    2>>"$T/dpmd.log" &
  DPMD_PID=$!
  end=$(($(date +%s) + 20))
  until build/dpmctl --timeout 1000 ping >/dev/null 2>&1; do
    kill -0 "$DPMD_PID" 2>/dev/null || return 1
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.05
  done
  s=$(ctl submit examples/fmnist_mlp.yaml --name g --devices cuda:0) || return 1
  [ "$(json_str "$s" state)" = ready ] || return 1
  s=$(ctl train g --iters 500 --wait) || return 1
  [ "$(json_field "$s" iter)" = 500 ] || return 1
  e=$(ctl eval g) || return 1
  dpmd_acc=$(json_field "$e" accuracy)
  at_least "$dpmd_acc" 0.70 || return 1
  ctl checkpoint g --out "$T/state/g.ckpt" >/dev/null || return 1
  [ -s "$T/state/g.ckpt" ] || return 1
  ctl extract-predictor g --inputs data --outputs softmax --out "$T/state/gpred" >/dev/null || return 1
  p=$(ctl predict "$T/state/gpred" --input $DATA/t10k-images-idx3-ubyte.gz \
    --labels $DATA/t10k-labels-idx1-ubyte.gz --count 1000) || return 1
  pred_acc=$(json_field "$p" accuracy)
  at_least "$pred_acc" 0.70 || return 1
  ctl metrics >"$T/metrics.json" || return 1
  ctl shutdown >/dev/null || return 1
  wait "$DPMD_PID" || return 1
  DPMD_PID=""
}
dpmd_acc="" pred_acc=""
if dpmd_ok; then r=ok; else
  r=FAIL
  tail -20 "$T/dpmd.log"
fi
row "dpmd: submit/train/eval/ckpt/predictor cuda:0" $r \
  "eval ${dpmd_acc:-none}, predictor ${pred_acc:-none} (>= 0.70) after 500 steps, $(($(date +%s) - t0)) s"

echo "== build/bench/gpu"
t0=$(date +%s)
if build/bench/gpu | tee "$T/bench.txt"; then r=ok; else r=FAIL; fi
row "build/bench/gpu (figures above)" $r "$(($(date +%s) - t0)) s"

echo
echo "== tests/gpu/run.sh: $(($(date +%s) - start)) s"
printf '%s' "$TABLE"
[ "$fails" -eq 0 ] || die "$fails GPU check(s) failed"
echo "all GPU checks passed"
