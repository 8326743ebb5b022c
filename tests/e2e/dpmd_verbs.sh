# A real dpmd driven through every dpmctl verb: submit on two replicas,
# train, status, list, get-blob (replicas equal), eval, checkpoint,
# delete -> submit again -> load (parameters equal the checkpoint on every
# device), sync, extract-predictor + predict, watch, pause/resume, a second
# model on warm devices, metrics, shutdown. DPM_TEST_KIND=fenced runs it all
# on fenced devices (the ASan daemon's test backend: device memory host code
# cannot touch; tests/e2e/dpmd_verbs_fenced.sh).
. tests/e2e_lib.sh
K=${DPM_TEST_KIND:-cpu}
[ "$K" = cpu ] || DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
echo "devices: {$K: 2}" >"$T/dpmd.yaml"
start_dpmd --config "$T/dpmd.yaml"

v=$(ctl version)
expect "protocol" "$(json_field "$v" protocol)" 1
echo "$v" | grep -q "\"devices\":\[.*\"$K:0\",\"$K:1\"" || die "version: $v"

s=$(ctl submit examples/fmnist_mlp.yaml --name m1 --devices $K:0,$K:1)
expect "submit state" "$(json_str "$s" state)" ready
echo "$s" | grep -q "\"devices\":\[\"$K:0\",\"$K:1\"\]" || die "submit: $s"
[ -f "$STATE/models/m1/spec.pb" ] || die "no spec.pb in the state dir"

s=$(ctl train m1 --iters 30 --wait)
expect "iter after train --wait" "$(json_field "$s" iter)" 30
expect "state after train --wait" "$(json_str "$s" state)" ready
# list: a header line over aligned columns (--json is unchanged)
l=$(build/dpmctl list)
echo "$l" | head -1 | grep -q "^NAME  *STATE  *ITER  *LOSS  *ACC  *IMG/S  *NOTE$" ||
  die "list header: $l"
echo "$l" | sed -n 2p | grep -q "^m1  *ready  *30/30  *[0-9.]*  *[0-9.]*  *[0-9]*$" ||
  die "list row: $l"

# training threads (the model's, its crew worker and reader) yield to the
# loop thread, which keeps its priority (this script's: dpmd inherits it),
# 5 nice values below it (at most 19)
base=$(ps -o ni= -p $$ | tr -d ' ')
train=$((base + 5 < 19 ? base + 5 : 19))
expect "nice of dpmd's loop thread" "$(ps -o ni= -p "$DPMD_PID" | tr -d ' ')" "$base"
# (run at nice 19 already, there is nothing lower to tell them apart by)
[ "$train" = "$base" ] ||
  expect "dpmd threads at nice $train" "$(ps -L -o ni= -p "$DPMD_PID" | grep -c "^ *$train\$")" 3

# blob_hash NAME BLOB DEVICE: FNV-1a of the tensor's bytes on that device
blob_hash() { json_str "$(ctl get-blob "$1" "$2" --device "$3")" fnv1a64; }
for b in fc1_w fc1_b pred_w; do
  expect "$b on $K:1" "$(blob_hash m1 $b $K:1)" "$(blob_hash m1 $b $K:0)"
done
ctl get-blob m1 fc1_w --out "$T/fc1_w.bin" >/dev/null
expect "get-blob --out size" "$(wc -c <"$T/fc1_w.bin")" $((256 * 784 * 4))

e=$(ctl eval m1)
at_least "$(json_field "$e" accuracy)" 0.3 || die "eval: $e"

c=$(ctl checkpoint m1 --out "$STATE/saved.ckpt")
expect "checkpoint path" "$(json_str "$c" path)" "$STATE/saved.ckpt"
expect "checkpoint iter" "$(json_field "$c" iter)" 30
saved_w=$(blob_hash m1 fc1_w $K:0)
saved_b=$(blob_hash m1 pred_b $K:0)
c=$(ctl checkpoint m1)
case "$(json_str "$c" path)" in
"$STATE"/models/m1/checkpoints/ckpt-000000000030.dpmckpt) ;;
*) die "default checkpoint path: $c" ;;
esac

# delete -> submit again -> load: every device holds the checkpoint
ctl train m1 --iters 10 --wait >/dev/null
[ "$(blob_hash m1 fc1_w $K:0)" != "$saved_w" ] || die "training did not change fc1_w"
ctl delete m1 >/dev/null
ctl list | grep -q '"m1"' && die "m1 still listed after delete"
[ -d "$STATE/models/m1" ] && die "m1's directory is still there"
ctl_fails 1 status m1 | grep -q NOT_FOUND || die "status of a deleted model"
s=$(ctl submit examples/fmnist_mlp.yaml --name m1 --devices $K:0,$K:1)
expect "iter after resubmit" "$(json_field "$s" iter)" 0
s=$(ctl load m1 "$STATE/saved.ckpt")
expect "iter after load" "$(json_field "$s" iter)" 30
for d in $K:0 $K:1; do
  expect "fc1_w on $d after load" "$(blob_hash m1 fc1_w $d)" "$saved_w"
  expect "pred_b on $d after load" "$(blob_hash m1 pred_b $d)" "$saved_b"
done
ctl sync m1 >/dev/null
expect "fc1_w on $K:1 after sync" "$(blob_hash m1 fc1_w $K:1)" "$saved_w"

# predictor
p=$(ctl extract-predictor m1 --inputs data --outputs softmax --out "$STATE/pred")
expect "predictor path" "$(json_str "$p" path)" "$STATE/pred"
p=$(ctl predict "$STATE/pred" --input $DATA/t10k-images-idx3-ubyte.gz \
  --labels $DATA/t10k-labels-idx1-ubyte.gz --count 200)
at_least "$(json_field "$p" accuracy)" 0.4 || die "predict: $p"
ctl_fails 1 extract-predictor m1 --inputs data --outputs softmax --out "$STATE/p2" \
  --format tflite | grep -q UNSUPPORTED || die "format tflite not refused"
# --format onnx writes model.onnx only (tests/e2e/onnx_export.sh checks it)
p=$(ctl extract-predictor m1 --inputs data --outputs softmax --out "$STATE/p3" --format onnx)
expect "onnx export path" "$(json_str "$p" path)" "$STATE/p3"
expect "onnx export files" "$(ls "$STATE/p3")" model.onnx

# watch: progress events and the end of the run (watch --until-done on a
# model that is not training returns at once)
ctl train m1 --iters 1000 >/dev/null
build/dpmctl --json watch m1 --until-done >"$T/watch.out" || die "watch exited $?"
grep -q '"kind":"progress"' "$T/watch.out" || die "no progress event: $(cat "$T/watch.out")"
grep -q '"kind":"done".*"iter":1030' "$T/watch.out" || die "no done event: $(cat "$T/watch.out")"

# plain progress lines when stderr is not a terminal
build/dpmctl train m1 --iters 20 --wait >"$T/progress.txt" 2>&1
grep -q "^iter 1050/1050" "$T/progress.txt" || die "progress lines: $(cat "$T/progress.txt")"

# a second model on the same devices starts warm: no new device crew
crews() { build/dpmctl metrics | sed -n 's/^dpmd_device_crews \([0-9]*\).*/\1/p'; }
before=$(crews)
expect "crews after the first model" "$before" 1
ctl submit examples/fmnist_mlp.yaml --name m2 --devices $K:0,$K:1 >/dev/null
expect "crews after a second model" "$(crews)" "$before"
# a model on other devices gets a crew of its own (and runs beside them)
ctl submit examples/fmnist_mlp.yaml --name m3 --devices $K:1 >/dev/null
expect "crews after a model on $K:1" "$(crews)" "$((before + 1))"
ctl delete m3 >/dev/null

# pause / resume
ctl train m2 --iters 1000000 >/dev/null
wait_state m2 training
ctl_fails 1 train m2 --iters 5 | grep -q STATE || die "train while training"
s=$(ctl pause m2)
expect "state after pause" "$(json_str "$s" state)" paused
i1=$(json_field "$(ctl status m2)" iter)
sleep 0.3
expect "iter while paused" "$(json_field "$(ctl status m2)" iter)" "$i1"
s=$(ctl resume m2)
expect "state after resume" "$(json_str "$s" state)" training
poll 10 "no progress after resume from $i1" iter_above m2 "$i1"
# other verbs are answered between steps while m2 trains
ctl get-blob m2 fc1_w >/dev/null
ctl pause m2 >/dev/null

n=$(ctl list | grep -o '"name":"m[12]"' | wc -l)
expect "models listed" "$n" 2
m=$(build/dpmctl metrics)
echo "$m" | grep -q 'dpmd_requests_total{command="train",status="OK"}' || die "metrics: $m"
echo "$m" | grep -q 'dpm_model_iteration{model="m1"} 1050' || die "metrics: $m"
echo "$m" | grep -q 'dpmd_models{state="paused"} 1' || die "metrics: $m"
# the devices' caching allocators: memory in use, and steps served from the cache
in_use=$(echo "$m" | sed -n "s/^dpmd_device_memory_bytes{device=\"$K:0\",state=\"in_use\"} //p")
[ "${in_use:-0}" -gt 1000000 ] || die "device memory in use on $K:0: $m"
echo "$m" | grep -q "dpmd_device_memory_peak_bytes{device=\"$K:1\"}" || die "metrics: $m"
stop_dpmd
