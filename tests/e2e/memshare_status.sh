# Gradient memory sharing (parallel.optimize_gradient_memory) through dpmd:
# status and metrics report tensor bytes with sharing and without
# (tensor_bytes < tensor_bytes_unshared: the shared blobs counted apart
# instead of their arena; equal when it is off); a shared
# blob's get-blob is refused naming parallel.keep_blobs, a kept one and the
# parameters are served; the model trains and evaluates.
# Usage: sh tests/e2e/memshare_status.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1
for b in "$DPMD" build/dpmctl; do [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd"; done
set -e

# spec SHARE: a small CNN on synthetic data, sharing on or off
spec() {
  cat <<YAML
name: ms
input: {reader: synthetic, batch_size: 32, num_examples: 512, shape: [1, 28, 28], seed: 3}
forward:
  - {op: Conv, in: [data], out: conv1, dim_out: 4, kernel: 5, pad: 2}
  - {op: Relu, in: [conv1], out: conv1}
  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}
  - {op: FC, in: [pool1], out: fc2, dim_out: 32}
  - {op: Relu, in: [fc2], out: fc2}
  - {op: FC, in: [fc2], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05}}
parallel: {optimize_gradient_memory: $1, keep_blobs: [fc2]}
YAML
}
start_dpmd
spec true >"$T/on.yaml"
spec false >"$T/off.yaml"
ctl submit "$T/on.yaml" --name on --devices cpu:0 >/dev/null
ctl submit "$T/off.yaml" --name off --devices cpu:0 >/dev/null
ctl train on --iters 5 --wait >/dev/null
ctl train off --iters 5 --wait >/dev/null
s=$(ctl status on)
tb=$(json_field "$s" tensor_bytes)
tu=$(json_field "$s" tensor_bytes_unshared)
[ -n "$tb" ] && [ -n "$tu" ] && [ "$tb" -lt "$tu" ] || die "sharing on: tensor_bytes $tb, unshared $tu: $s"
echo "  sharing on: tensor_bytes $tb, tensor_bytes_unshared $tu"
s=$(ctl status off)
ob=$(json_field "$s" tensor_bytes)
ou=$(json_field "$s" tensor_bytes_unshared)
[ -n "$ob" ] && [ "$ob" = "$ou" ] || die "sharing off: tensor_bytes $ob, unshared $ou: $s"
echo "  sharing off: tensor_bytes $ob"
mu=$(metric 'dpm_model_tensor_bytes_unshared{model="on"}')
mb=$(metric 'dpm_model_tensor_bytes{model="on"}')
[ "$mu" = "$tu" ] && [ "$mb" = "$tb" ] || die "metrics: $mb / $mu, status: $tb / $tu"
out=$(refused 1 NOT_FOUND get-blob on conv1)
mentions "parallel.keep_blobs" "$out"
ctl get-blob on fc2 >/dev/null
ctl get-blob on loss >/dev/null
ctl get-blob on fc2_w >/dev/null
a=$(json_str "$(ctl get-blob on pred_w)" fnv1a64)
b=$(json_str "$(ctl get-blob off pred_w)" fnv1a64)
[ -n "$a" ] && [ "$a" = "$b" ] || die "pred_w differs with sharing: $a vs $b"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "memshare_status: ok"
