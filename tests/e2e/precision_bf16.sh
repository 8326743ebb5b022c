# precision.compute bf16 end to end: dpm-train --dump-plan shows the Casts
# (f32 masters, bf16 working copies and activations) and trains; dpmd serves
# the model, and dpmctl get-blob reads a bf16 blob (2 bytes a value) and its
# f32 master. Its plan also counts the parameters and forward FLOPs.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
spec="$T/bf16.yaml"
sed 's/^parallel:/precision: {compute: bf16}\nparallel:/' examples/fmnist_mlp.yaml >"$spec"
plan=$(build/dpm-train "$spec" --dump-plan) || die "dump-plan failed"
echo "$plan" | head -1 | grep -q "precision.compute bf16" || die "dump-plan header: $plan"
# the update writes the master and its working copy; the Cast that makes
# the copy anew runs only after a load or a sync (the refresh, r0 ...)
echo "$plan" | grep -q "^r[0-9]* Cast fc1_w_bf16:bf16\[256,784\] <- fc1_w:f32\[256,784\]$" ||
  die "no working copy of fc1_w in the plan: $plan"
echo "$plan" | grep -q "^[0-9]* FC fc1:bf16\[64,256\] <- data_bf16:bf16" ||
  die "FC not in bf16: $plan"
echo "$plan" | grep -q "^[0-9]* MomentumSGD fc1_w:f32\[256,784\], fc1_w_momentum:f32\[256,784\], fc1_w_bf16:bf16\[256,784\] <-" ||
  die "update: $plan"
# the weight gradients come out of FCGradient in f32, with no Cast after it
echo "$plan" | grep -q "^[0-9]* FCGradient fc1_w_grad:f32\[256,784\], fc1_b_grad:f32\[256\] <-" ||
  die "FCGradient's f32 gradients: $plan"
# the count: the f32 masters once (784*256+256 + 256*128+128 + 128*10+10), not
# their bf16 copies; 2 x 234,752 multiply-adds of the 3 FCs (784*256 + 256*128 + 128*10)
echo "$plan" | grep -q "^# parameters: 235146 trainable" || die "parameter count: $plan"
echo "$plan" | grep -q "^# forward per example: 0.0004695 GFLOPs = 2 x 234752 multiply-adds of 0 Conv and 3 FC" ||
  die "FLOP count: $plan"
out=$(build/dpm-train "$spec" --iters 5 --json) || die "bf16 training failed: $out"
start_dpmd
ctl submit "$spec" --name b --devices cpu:0,cpu:1 >/dev/null
ctl train b --iters 3 --wait >/dev/null
g=$(ctl get-blob b fc1_w_bf16)
expect "working copy dtype" "$(json_str "$g" dtype)" bf16
expect "working copy bytes" "$(json_field "$g" bytes)" $((256 * 784 * 2))
echo "$g" | grep -q '"values":\[-\{0,1\}[0-9]' || die "bf16 values: $g"
m=$(ctl get-blob b fc1_w)
expect "master dtype" "$(json_str "$m" dtype)" f32
# the copy is the master rounded to bf16 (the update writes both): within
# half a bf16 ulp, 2^-9 relative, and the printed digits
first() { echo "$1" | sed -n 's/.*"values":\[\([^],]*\).*/\1/p'; }
awk -v a="$(first "$g")" -v b="$(first "$m")" 'BEGIN { d = a - b; if (d < 0) d = -d;
  s = b < 0 ? -b : b; exit !(d <= 0.002 * s + 1e-6) }' ||
  die "bf16 value $(first "$g") is not near its master's $(first "$m")"
t=$(build/dpmctl get-blob b fc1_w_bf16) || die "get-blob text: $t"
echo "$t" | grep -q "^fc1_w_bf16 bf16\[256,784\]  200704 values  401408 bytes" || die "text: $t"
echo "$t" | grep -q "non-finite" && die "bf16 values read as non-finite: $t"
stop_dpmd
