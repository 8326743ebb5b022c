# ONNX export: four models trained briefly in a real dpmd (the MLP, the CNN,
# a CNN with SpatialBN, a bias-less grouped Conv, AveragePool (windowed and global),
# Dropout, Tanh and Scale, and an MLP
# through the shape and sum ops, both written here), each extracted twice from the same parameters: --format dpm for
# `dpmctl predict --out` (dpm's outputs on 1000 test images) and --format
# onnx. tests/e2e/onnx_check.py then runs onnx.checker.check_model
# (full_check) and onnxruntime on the same images, and fails beyond
# 1e-5 of dpm's outputs. onnx and onnxruntime come from PyPI in the
# virtualenv `make deps` creates (build/onnx-venv); without it the test
# says why and fails.
. tests/e2e_lib.sh
PY=build/onnx-venv/bin/python
if ! [ -x "$PY" ]; then
  [ -f build/onnx-venv.failed ] && tail -5 build/onnx-venv.failed >&2
  die "onnx_export: no build/onnx-venv: make deps creates it with onnx and onnxruntime from \
PyPI$([ -f build/onnx-venv.failed ] && echo ', and could not (pip says above; is PyPI reachable?)')"
fi
"$PY" -c 'import onnx, onnxruntime, numpy' 2>"/tmp/onnx-import.$$" || {
  cat "/tmp/onnx-import.$$" >&2
  rm -f "/tmp/onnx-import.$$"
  die "onnx_export: build/onnx-venv lacks onnx, onnxruntime or numpy (make deps installs them from PyPI)"
}
rm -f "/tmp/onnx-import.$$"
. tests/dpmd_lib.sh
echo "devices: {cpu: 1}" >"$T/dpmd.yaml"
start_dpmd --config "$T/dpmd.yaml"
IMAGES=$DATA/t10k-images-idx3-ubyte.gz

# a CNN with BN: every op that maps to something else in ONNX
sed -n '/^name:/,/^forward:/p' examples/fmnist_cnn.yaml | sed 's/^name: .*/name: fmnist-cnn-bn/' \
  >"$T/cnn_bn.yaml"
cat >>"$T/cnn_bn.yaml" <<'YAML'
  - {op: Conv, in: [data], out: conv1, dim_out: 8, kernel: 5, pad: 2}
  - {op: SpatialBN, in: [conv1], out: bn1}
  - {op: Relu, in: [bn1], out: bn1}
  - {op: MaxPool, in: [bn1], out: pool1, kernel: 2, stride: 2}
  - {op: Conv, in: [pool1], out: conv2, dim_out: 16, kernel: 3, pad: 1, no_bias: true, group: 2}
  - {op: SpatialBN, in: [conv2], out: bn2, epsilon: 0.001}
  - {op: Tanh, in: [bn2], out: bn2}
  - {op: AveragePool, in: [bn2], out: pool2, kernel: 3, stride: 2, pad: 1}
  - {op: Dropout, in: [pool2], out: drop, ratio: 0.3}
  - {op: Scale, in: [drop], out: drop, scale: 1.5}
  - {op: AveragePool, in: [drop], out: gap, global_pooling: true}
  - {op: FC, in: [gap], out: pred_g, dim_out: 10}
  - {op: FC, in: [drop], out: pred_l, dim_out: 10}
  - {op: Add, in: [pred_l, pred_g], out: pred}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05, policy: fixed}}
parallel: {devices: [cpu:0]}
YAML

# an MLP through the remaining ops: Reshape, Sigmoid, Copy, StopGradient, Add,
# Sum, Concat, Flatten
sed -n '/^name:/,/^forward:/p' examples/fmnist_mlp.yaml | sed 's/^name: .*/name: fmnist-mixed/' \
  >"$T/mixed.yaml"
cat >>"$T/mixed.yaml" <<'YAML'
  - {op: Reshape, in: [data], out: flat, shape: [0, -1]}
  - {op: FC, in: [flat], out: a, dim_out: 32}
  - {op: Sigmoid, in: [a], out: a}
  - {op: FC, in: [flat], out: b, dim_out: 32}
  - {op: Copy, in: [b], out: c}
  - {op: StopGradient, in: [c], out: c}
  - {op: Add, in: [a, c], out: s}
  - {op: Sum, in: [a, b, s], out: t}
  - {op: Concat, in: [a, t], out: cat, axis: 1}
  - {op: Reshape, in: [cat], out: r, shape: [0, 4, 16]}
  - {op: Flatten, in: [r], out: f, axis: 1}
  - {op: FC, in: [f], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05, policy: fixed}}
parallel: {devices: [cpu:0]}
YAML

# check NAME SPEC ITERS: train, export both ways, compare
check() {
  ctl submit "$2" --name "$1" --devices cpu:0 >/dev/null
  ctl train "$1" --iters "$3" --wait >/dev/null
  ctl extract-predictor "$1" --inputs data --outputs softmax --out "$STATE/$1-dpm" >/dev/null
  ctl extract-predictor "$1" --inputs data --outputs softmax --out "$STATE/$1-onnx" \
    --format onnx >/dev/null
  expect "$1: files written by --format onnx" "$(ls "$STATE/$1-onnx")" model.onnx
  ctl predict "$STATE/$1-dpm" --input "$IMAGES" --count 1000 --out "$T/$1.ref" >/dev/null
  expect "$1: bytes of predict --out" "$(wc -c <"$T/$1.ref")" $((1000 * 10 * 4))
  scale=$(sed -n 's/^ *scale: *\([0-9.e-]*\).*/\1/p' "$2" | head -1)
  "$PY" tests/e2e/onnx_check.py "$STATE/$1-onnx/model.onnx" "$T/$1.ref" "$IMAGES" 1000 "$scale" ||
    die "$1: the ONNX export does not match dpm"
}
check mlp examples/fmnist_mlp.yaml 100
check cnn examples/fmnist_cnn.yaml 30
check cnn_bn "$T/cnn_bn.yaml" 60
check mixed "$T/mixed.yaml" 60

# an output that no op computes has no ONNX form: refused, naming it
out=$(ctl_fails 1 extract-predictor mlp --inputs fc2 --outputs fc2 --out "$STATE/bad" \
  --format onnx)
echo "$out" | grep -q "UNSUPPORTED" || die "output = input not refused: $out"
echo "$out" | grep -q "fc2" || die "the refusal does not name fc2: $out"
[ ! -e "$STATE/bad/model.onnx" ] || die "a refused export left model.onnx"
stop_dpmd

# dpm-train --extract-predictor DIR --format onnx writes DIR/model.onnx only
build/dpm-train examples/fmnist_mlp.yaml --iters 5 --extract-predictor "$T/dt" \
  --inputs data --outputs softmax --format onnx >/dev/null 2>&1 || die "dpm-train --format onnx failed"
expect "files written by dpm-train --format onnx" "$(ls "$T/dt")" model.onnx
"$PY" -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' \
  "$T/dt/model.onnx" || die "dpm-train's model.onnx fails the checker"
set +e
build/dpm-train examples/fmnist_mlp.yaml --iters 5 --format onnx >/dev/null 2>&1
rc=$?
set -e
expect "dpm-train --format without --extract-predictor" "$rc" 2
echo "onnx_export: ok"
