# Accumulation, clipping and a dynamic loss scale through dpmd: status
# --json and the step events carry grad_norm, loss_scale and
# skipped_steps; metrics export them (skipped steps as a counter); the
# loss scale grows after growth_interval clean updates, up to 2^127 (no
# doubling to an fp32 overflow); a checkpoint loaded back restores the
# scale and its counter; a spec mistake names file:line; dpm-train --json
# prints the norm (null on the plain path).
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
# the step events carry the norm and the scale (enough updates that watch
# subscribes while they run)
ctl train u --iters 2000 >/dev/null
build/dpmctl --json watch u --until-done >"$T/watch.out" 2>&1 || die "watch exited $?: $(cat "$T/watch.out")"
grep -q '"kind":"progress".*"grad_norm":[0-9].*"loss_scale":[0-9].*"skipped_steps":0' "$T/watch.out" ||
  die "no progress event with grad_norm, loss_scale, skipped_steps: $(cat "$T/watch.out")"
echo "  watch: $(grep -c '"kind":"progress"' "$T/watch.out") progress events"
# 2000 more clean updates double the scale up to 2^127: the next doubling
# would overflow fp32 and is not taken
s=$(ctl status u)
expect "state after 2000 updates" "$(json_str "$s" state)" ready
expect "iter after 2000 updates" "$(json_field "$s" iter)" 2022
ls=$(echo "$s" | sed -n 's/.*"loss_scale":\([-0-9.e+]*\).*/\1/p')
awk -v v="$ls" 'BEGIN { exit !(v == 2^127) }' || die "loss_scale $ls, expected 2^127: $s"
echo "  after 2000 more: loss_scale $ls (2^127), skipped_steps $(json_field "$s" skipped_steps)"
sed 's/accumulate_steps: 2/accumulate_steps: 0/' "$T/u.yaml" >"$T/bad.yaml"
out=$(refused 1 SPEC submit "$T/bad.yaml" --name bad --devices cpu:0)
mentions "bad.yaml:9:" "$out"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
# dpm-train --json: each epoch line carries its last update's norm, null
# on the plain path (no accumulation, clipping or loss scale)
j=$(build/dpm-train "$T/u.yaml" --iters 3 --json 2>/dev/null | head -1)
g=$(json_field "$j" grad_norm)
at_least "$g" 0.000001 || die "dpm-train grad_norm '$g': $j"
j=$(build/dpm-train examples/fmnist_mlp.yaml --iters 1 --json 2>/dev/null | head -1)
case $j in *'"grad_norm":null}') ;; *) die "plain path, not a null grad_norm: $j" ;; esac
echo "  dpm-train: grad_norm $g, null on the plain path"
echo "update_status: ok"
