# A model whose loss becomes NaN fails with a message and touches no other
# model; loading a checkpoint brings it back.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
# a learning rate of 1e30 from the first step: the loss is not finite by
# the second
sed -e 's/base: 0.05,/base: 1.0e+30,/' -e 's/warmup_iters: 100/warmup_iters: 0/' \
  -e '/op: Relu/d' examples/fmnist_mlp.yaml >"$T/diverge.yaml"
grep -q 'base: 1.0e+30,.*warmup_iters: 0' "$T/diverge.yaml" ||
  die "could not make the diverging spec"
start_dpmd
ctl submit examples/fmnist_mlp.yaml --name good --devices cpu:0 >/dev/null
ctl submit "$T/diverge.yaml" --name bad --devices cpu:1 >/dev/null
c=$(ctl checkpoint bad)
ckpt=$(json_str "$c" path)
ctl train good --iters 100000 >/dev/null
out=$(ctl_fails 1 train bad --iters 500 --wait)
echo "$out" | grep -q '"status":"NUMERIC"' || die "diverging train: $out"
s=$(ctl status bad)
expect "state of the diverged model" "$(json_str "$s" state)" failed
echo "$s" | grep -q '"error":"loss is -*nan' || die "no error text: $s"
ctl_fails 1 train bad --iters 5 | grep -q STATE || die "train of a failed model"
ctl_fails 1 checkpoint bad | grep -q STATE || die "checkpoint of a failed model"
# the other model kept training
wait_state good training
i1=$(json_field "$(ctl status good)" iter)
poll 10 "good model stalled at $i1" iter_above good "$i1"
# a checkpoint brings the failed model back
s=$(ctl load bad "$ckpt")
expect "state after load" "$(json_str "$s" state)" ready
expect "iter after load" "$(json_field "$s" iter)" 0
stop_dpmd
