# Accumulation, clipping and a dynamic loss scale through dpmd: status
# --json and the step events carry grad_norm, loss_scale and
# skipped_steps; metrics export them (skipped steps as a counter); the
# loss scale grows after growth_interval clean updates; a checkpoint
# loaded back restores the scale; a spec mistake names file:line.
# Usage: sh tests/e2e/update_status.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1
for b in "$DPMD" build/dpmctl; do [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd"; done
set -e

cat >"$T/u.yaml" <<YAML
name: u
input: {reader: synthetic, batch_size: 8, num_examples: 512, shape: [1, 8, 8], seed: 3}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 16}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.05}, accumulate_steps: 2,
         clip_grad_norm: 1}
precision: {loss_scale: dynamic, growth_interval: 2}
YAML
start_dpmd
ctl submit "$T/u.yaml" --name u --devices cpu:0,cpu:1 >/dev/null
wait_state u ready
ctl train u --iters 5 --wait --no-progress >/dev/null
s=$(ctl status u)
expect "iter" "$(json_field "$s" iter)" 5
# 2^16, doubled after updates 2 and 4
expect "loss_scale" "$(json_field "$s" loss_scale)" 262144
expect "skipped_steps" "$(json_field "$s" skipped_steps)" 0
g=$(json_field "$s" grad_norm)
at_least "$g" 0.000001 || die "grad_norm '$g': $s"
echo "  status: grad_norm $g, loss_scale 262144, skipped_steps 0"
expect "metric loss_scale" "$(metric 'dpm_model_loss_scale{model="u"}')" 262144
build/dpmctl metrics | grep -q '^# TYPE dpm_model_skipped_steps_total counter' ||
  die "no counter dpm_model_skipped_steps_total"
build/dpmctl metrics | grep -q '^dpm_model_grad_norm{model="u"} ' || die "no grad_norm metric"
# one update takes two batches of 16: 512 examples are 16 updates an epoch
ctl train u --epochs 1 --wait --no-progress >/dev/null
expect "iter after an epoch" "$(json_field "$(ctl status u)" iter)" 21
ctl checkpoint u --out "$STATE/u.ckpt" >/dev/null
before=$(json_field "$(ctl status u)" loss_scale)
ctl train u --iters 3 --wait --no-progress >/dev/null
ctl load u "$STATE/u.ckpt" >/dev/null
ctl train u --iters 1 --wait --no-progress >/dev/null
after=$(json_field "$(ctl status u)" loss_scale)
# 21 updates: grown 10 times; resumed with the counter at 1: one more update grows it
expect "loss_scale before the checkpoint" "$before" 67108864
expect "loss_scale after load + 1 update" "$after" 134217728
sed 's/accumulate_steps: 2/accumulate_steps: 0/' "$T/u.yaml" >"$T/bad.yaml"
out=$(refused 1 SPEC submit "$T/bad.yaml" --name bad --devices cpu:0)
mentions "bad.yaml:9:" "$out"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "update_status: ok"
