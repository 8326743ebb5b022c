# dpmd and bad input: random bytes, truncated and oversized messages, an old
# protocol version, an unknown command, unknown models and blobs, invalid
# specs (YAML errors, engine refusals, bad devices and names), paths outside
# the state dir and allowed_paths (also through ".." and symlinks), files that
# are not checkpoints, missing and wrong tokens. Each gets an error reply (or
# is dropped), while a model trains on and the daemon keeps serving; both
# daemons run under ASan+UBSan with leak detection, exit 0 and report nothing.
# Usage: sh tests/e2e/dpmd_bad_input.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
NNSEND=build/tests/nnsend
for b in "$DPMD" build/dpmctl "$NNSEND"; do
  [ -x "$b" ] || die "missing $b: make build/asan-bin/dpmd build/dpmctl build/tests/nnsend"
done

OUTSIDE=/tmp/dpm-outside-$$ # outside the state dir and every allowed path
PID2=""
trap 'rc=$?
  set +e
  [ -n "$PID2" ] && kill -9 "$PID2" 2>/dev/null
  if [ $rc -ne 0 ]; then
    echo "--- dpmd.log (tail)" >&2
    tail -n 8 "$T/dpmd.log" "$T/d2/dpmd.log" >&2 2>/dev/null
  fi
  rm -rf "$OUTSIDE.ckpt" "$OUTSIDE.pred"
  cleanup' EXIT

# answer ENDPOINT MODE [ARG]: what nnsend got back. nnsend waits 2 s for an
# answer: on a loaded machine, one "no reply" is retried once.
answer() {
  _a=$("$NNSEND" "$@") || die "nnsend $* failed"
  [ "$_a" = "no reply" ] && { _a=$("$NNSEND" "$@") || die "nnsend $* failed"; }
  echo "$_a"
}
# nn ENDPOINT WANT MODE [ARG]: nnsend's answer starts with WANT.
nn() {
  _ep=$1 _want=$2
  shift 2
  _got=$(answer "$_ep" "$@")
  case $_got in
  "$_want"*) ;;
  *) die "nnsend $*: got '$_got', expected '$_want...'" ;;
  esac
}
# wait_iter NAME N: polls until NAME's iteration is above N (30 s).
wait_iter() {
  for _ in $(seq 300); do
    [ "$(iter_of "$1")" -gt "$2" ] && return 0
    sleep 0.1
  done
  die "model $1 stuck at iteration $(iter_of "$1") (waited for > $2)"
}

# ---- 1. the daemon and a model that trains throughout ------------------------
mkdir -p "$T/allowed" "$T/outdir"
cat >"$T/dpmd.yaml" <<EOF
max_message_bytes: 1048576
allowed_paths: [$T/allowed]
EOF
start_dpmd --config "$T/dpmd.yaml"
ctl submit examples/fmnist_mlp.yaml --name bg --devices cpu:0,cpu:1 >/dev/null
ctl train bg --iters 1000000 >/dev/null
wait_iter bg 0
iter0=$(iter_of bg)

# ---- 2. raw messages ---------------------------------------------------------
E=$DPM_ENDPOINT
dropped0=$(metric dpmd_dropped_messages_total)
# oversized (over max_message_bytes): dropped, no answer; sent in the
# background, so the daemon must answer others meanwhile
"$NNSEND" "$E" size 2000000 >"$T/big1" & big1=$!
"$NNSEND" "$E" random 1100000 >"$T/big2" & big2=$!
for n in 0 1 2 17 1000 65536 1048000; do # 1048000 + the REQ header fits 1 MiB
  nn "$E" "reply CORRUPT not a dpm request ($n bytes)" random "$n"
done
nn "$E" "reply CORRUPT" truncate
ctl ping >/dev/null
burst=""
for i in 1 2 3 4 5 6; do # several broken clients at once
  answer "$E" random $((i * 3000)) >"$T/burst$i" &
  burst="$burst $!"
done
ctl status bg >/dev/null
for p in $burst; do wait "$p"; done
for i in 1 2 3 4 5 6; do
  expect "burst $i" "$(cat "$T/burst$i")" "reply CORRUPT not a dpm request ($((i * 3000)) bytes)"
done
ctl ping >/dev/null
nn "$E" "reply OK" size 1000 # padded with an unknown field, under the limit
nn "$E" "reply OK" size 1048576 # exactly max_message_bytes
nn "$E" "reply DENIED request of 10485" size 1048600 # over it: refused
wait "$big1"
wait "$big2"
expect "oversized ping" "$(cat "$T/big1")" "no reply"
expect "oversized random" "$(cat "$T/big2")" "no reply"
ctl ping >/dev/null
for v in 0 2 4294967295; do
  nn "$E" "reply UNSUPPORTED protocol version $v" version "$v"
done
nn "$E" "reply UNSUPPORTED unknown command" unknown
nn "$E" "reply OK" ping
ctl ping >/dev/null
dropped=$(metric dpmd_dropped_messages_total)
[ "$dropped" -ge $((dropped0 + 14)) ] || die "dropped messages: $dropped0 -> $dropped"

# ---- 3. unknown models, blobs, commands; bad arguments ------------------------
for args in "status nope" "train nope --iters 5" "checkpoint nope" "get-blob nope fc1_w" \
  "delete nope" "pause nope" "resume nope" "sync nope" "eval nope" "watch nope" \
  "load nope $STATE/x.ckpt" \
  "extract-predictor nope --inputs data --outputs softmax --out $T/allowed/p"; do
  # shellcheck disable=SC2086 # word splitting intended
  out=$(refused 1 NOT_FOUND $args)
  mentions "no model named 'nope'" "$out"
done
refused 1 NOT_FOUND get-blob bg no_such_blob >/dev/null
refused 1 NOT_FOUND get-blob bg fc1_w --device cpu:5 >/dev/null
refused 2 USAGE train bg --iters 0 >/dev/null
refused 2 USAGE train bg --iters -3 >/dev/null
refused 2 USAGE train bg >/dev/null
refused 2 USAGE load bg >/dev/null
refused 2 USAGE frobnicate bg >/dev/null
refused 2 USAGE status bg --bogus-flag >/dev/null
refused 1 INVALID train bg --iters 99999999999999 >/dev/null # over 2^40
refused 1 STATE train bg --iters 10 >/dev/null              # already training
refused 1 UNSUPPORTED extract-predictor bg --inputs data --outputs softmax \
  --out "$T/allowed/p" --format tflite >/dev/null
out=$(refused 1 INVALID extract-predictor bg --inputs no_such --outputs softmax \
  --out "$T/allowed/p")
mentions "no_such" "$out"
ctl ping >/dev/null

# ---- 4. invalid specs ----------------------------------------------------------
spec_head() {
  cat <<'YAML'
name: tiny
input: {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}
forward:
YAML
}
{ spec_head; tiny_ops; } >"$T/tiny.yaml"
# (a) YAML errors: refused by dpmctl with FILE:LINE:COL, nothing sent
{ spec_head; tiny_ops; echo "losses: [loss]"; } >"$T/dup.yaml"
{ spec_head; tiny_ops; echo "optimiser: sgd"; } >"$T/unknown.yaml"
printf 'name: tiny\ninput:\n  reader: synthetic\n    batch_size: 8\n' >"$T/indent.yaml"
submits0=$(metric 'dpmd_requests_total{command="submit"')
pings0=$(metric 'dpmd_requests_total{command="ping"')
out=$(refused 1 SPEC submit "$T/dup.yaml" --name bad_dup)
mentions "$T/dup.yaml:9:1: duplicate key 'losses'" "$out"
out=$(refused 1 SPEC submit "$T/unknown.yaml" --name bad_unknown)
mentions "$T/unknown.yaml:9:1: unknown key 'optimiser'" "$out"
out=$(refused 1 SPEC submit "$T/indent.yaml" --name bad_indent)
json_str "$out" error | grep -Eq "^$T/indent.yaml:4:[0-9]+: " || die "indentation: $out"
expect "submits sent for YAML errors" "$(metric 'dpmd_requests_total{command="submit"')" \
  "$submits0"
expect "pings sent for YAML errors" "$(metric 'dpmd_requests_total{command="ping"')" "$pings0"
# (b) specs that parse but the engine refuses: the op and its line are named
{ spec_head; tiny_ops | sed '2s/.*/  - {op: Bogus, in: [fc1], out: x}/'; } >"$T/bogus.yaml"
out=$(refused 1 SPEC submit "$T/bogus.yaml" --name bad_bogus)
mentions "$T/bogus.yaml:5: op #2 (Bogus): unknown op 'Bogus'" "$out"
{ spec_head; tiny_ops | sed '3s/in: \[fc1\]/in: [fc9]/'; } >"$T/undef.yaml"
out=$(refused 1 SPEC submit "$T/undef.yaml" --name bad_undef)
mentions "$T/undef.yaml:6: op #3 (FC): input 'fc9' is not defined" "$out"
{
  spec_head
  tiny_ops | sed '4s/.*/  - {op: Add, in: [pred, fc1], out: sum}\
  - {op: SoftmaxWithLoss, in: [sum, label], out: [softmax, loss]}/'
} >"$T/add.yaml"
out=$(ctl_fails 1 submit "$T/add.yaml" --name bad_add)
case $(json_str "$out" status) in SHAPE | SPEC) ;; *) die "shape mismatch: $out" ;; esac
mentions "$T/add.yaml:7: op #4 (Add)" "$out"
{ spec_head; tiny_ops | sed '1s/in: \[data\]/in: [label]/'; } >"$T/fclabel.yaml"
out=$(ctl_fails 1 submit "$T/fclabel.yaml" --name bad_fclabel)
case $(json_str "$out" status) in SHAPE | SPEC) ;; *) die "FC on labels: $out" ;; esac
mentions "op #1 (FC)" "$out" # (no FILE:LINE yet: engine/model.c add_params)
{
  echo "name: tiny"
  echo "input: {reader: idx, images: $T/allowed/no-such-images.gz, labels: $DATA/train-labels-idx1-ubyte.gz, batch_size: 8}"
  echo "forward:"
  tiny_ops
} >"$T/nodata.yaml"
out=$(refused 1 IO submit "$T/nodata.yaml" --name bad_nodata)
mentions "$T/allowed/no-such-images.gz" "$out"
# (c) devices and names
out=$(refused 1 UNSUPPORTED submit "$T/tiny.yaml" --name bad_dev --devices cuda:0)
mentions "cuda:0" "$out"
out=$(refused 1 NOT_FOUND submit "$T/tiny.yaml" --name bad_dev --devices cpu:7)
mentions "cpu:7" "$out"
refused 1 INVALID submit "$T/tiny.yaml" --name bad_dev --devices cpu:0,cpu:0 >/dev/null
refused 1 INVALID submit "$T/tiny.yaml" --name bad_dev --devices cpu:x >/dev/null
refused 1 INVALID submit "$T/tiny.yaml" --name '../x' >/dev/null
refused 1 INVALID submit "$T/tiny.yaml" --name .hidden >/dev/null
refused 1 INVALID submit "$T/tiny.yaml" --name "$(printf '%065d' 0)" >/dev/null
refused 1 EXISTS submit "$T/tiny.yaml" --name bg >/dev/null
if [ -e "$STATE/x" ] || [ -e "$T/x" ]; then die "'../x' created something"; fi
for n in bad_dup bad_unknown bad_indent bad_bogus bad_undef bad_add bad_fclabel bad_nodata \
  bad_dev x .hidden; do
  not_listed "$n"
done
expect "bg after bad specs" "$(state_of bg)" training
ctl ping >/dev/null

# ---- 5. paths ------------------------------------------------------------------
for args in "checkpoint bg --out $OUTSIDE.ckpt" "load bg /etc/passwd" \
  "extract-predictor bg --inputs data --outputs softmax --out $OUTSIDE.pred" \
  "checkpoint bg --out $STATE/../outside.ckpt" "load bg $STATE/../allowed/../../x.ckpt"; do
  # shellcheck disable=SC2086
  out=$(refused 1 DENIED $args)
  mentions "is not under the state dir or an allowed path" "$out"
done
if [ -e "$OUTSIDE.ckpt" ] || [ -e "$OUTSIDE.pred" ] || [ -e "$T/outside.ckpt" ]; then
  die "a refused path was written"
fi
# symlinks inside the state dir that lead outside
ln -s "$T/outdir" "$STATE/link"                 # a directory
ln -s /etc/passwd "$STATE/passwd.ckpt"          # a file
ln -s "$T/outdir/new.ckpt" "$STATE/dangling.ckpt" # a file not there yet
refused 1 DENIED checkpoint bg --out "$STATE/link/c.ckpt" >/dev/null
refused 1 DENIED checkpoint bg --out "$STATE/dangling.ckpt" >/dev/null
refused 1 DENIED load bg "$STATE/passwd.ckpt" >/dev/null
refused 1 DENIED extract-predictor bg --inputs data --outputs softmax \
  --out "$STATE/link/pred" >/dev/null
[ -z "$(ls -A "$T/outdir")" ] || die "written through a symlink: $(ls "$T/outdir")"
# allowed: an allowed path from the config, the state dir, the default place
out=$(ctl checkpoint bg --out "$T/allowed/c.ckpt")
expect "checkpoint path" "$(json_str "$out" path)" "$T/allowed/c.ckpt"
[ -s "$T/allowed/c.ckpt" ] || die "no checkpoint in $T/allowed"
ctl checkpoint bg --out "$STATE/mine.ckpt" >/dev/null
[ -s "$STATE/mine.ckpt" ] || die "no checkpoint in the state dir"
ctl checkpoint bg >/dev/null
# files in the state dir that are not (this model's) checkpoints: refused,
# the model left as it was
head -c 5000 /dev/urandom >"$STATE/junk.ckpt"
size=$(wc -c <"$T/allowed/c.ckpt")
head -c $((size / 2)) "$T/allowed/c.ckpt" >"$STATE/truncated.ckpt"
cp "$T/allowed/c.ckpt" "$STATE/flipped.ckpt"
printf '\125\252\125\252' | dd of="$STATE/flipped.ckpt" bs=1 seek=$((size / 2)) conv=notrunc \
  2>/dev/null
ctl submit "$T/tiny.yaml" --name tiny >/dev/null
ctl train tiny --iters 3 --wait --no-progress >/dev/null
ctl checkpoint tiny --out "$STATE/tiny.ckpt" >/dev/null
ctl pause bg >/dev/null
iter_p=$(iter_of bg)
ctl get-blob bg fc1_w --out "$T/before.bin" >/dev/null
out=$(refused 1 CORRUPT load bg "$STATE/junk.ckpt")
mentions "junk.ckpt" "$out"
refused 1 CORRUPT load bg "$STATE/truncated.ckpt" >/dev/null
refused 1 CORRUPT load bg "$STATE/flipped.ckpt" >/dev/null
out=$(refused 1 SPEC load bg "$STATE/tiny.ckpt")
mentions "another spec" "$out"
refused 1 IO load bg "$STATE/absent.ckpt" >/dev/null
refused 1 CORRUPT load tiny "$STATE/models/bg/spec.pb" >/dev/null
ctl get-blob bg fc1_w --out "$T/after.bin" >/dev/null
ctl get-blob bg fc1_w --device cpu:1 --out "$T/after1.bin" >/dev/null
cmp -s "$T/before.bin" "$T/after.bin" || die "a refused load changed fc1_w"
cmp -s "$T/before.bin" "$T/after1.bin" || die "a refused load left cpu:1 out of sync"
expect "bg iteration after refused loads" "$(iter_of bg)" "$iter_p"
expect "bg state after refused loads" "$(state_of bg)" paused
expect "tiny after a refused load" "$(iter_of tiny)" 3
ctl resume bg >/dev/null
wait_iter bg "$iter_p"
ctl delete tiny >/dev/null
refused 1 NOT_FOUND status tiny >/dev/null
not_listed tiny

# ---- 6. a second daemon with a token ---------------------------------------------
D2=$T/d2
E2=ipc://$D2/dpmd.sock
mkdir -p "$D2"
(
  umask 077
  echo "tok-$$-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')" >"$D2/token"
  echo "not-the-token" >"$D2/wrong"
)
good=$(cat "$D2/token")
echo "max_model_bytes: 1048576" >"$D2/dpmd.yaml"
"$DPMD" --config "$D2/dpmd.yaml" --listen "$E2" --state-dir "$D2/state" --devices 1 \
  --token-file "$D2/token" 2>>"$D2/dpmd.log" &
PID2=$!
up=""
for _ in $(seq 400); do # its socket appears once it listens: poll
  build/dpmctl --endpoint "$E2" --token-file "$D2/token" ping >/dev/null 2>&1 && up=1 && break
  sleep 0.05
done
[ -n "$up" ] || die "second dpmd did not start: $(cat "$D2/dpmd.log")"
tok="--token-file $D2/token"
for args in "ping" "list" "status" "shutdown" "submit $T/tiny.yaml"; do
  # shellcheck disable=SC2086
  out=$(refused 1 DENIED --endpoint "$E2" $args)
  mentions "bad or missing token" "$out"
  # shellcheck disable=SC2086
  refused 1 DENIED --endpoint "$E2" --token-file "$D2/wrong" $args >/dev/null
done
nn "$E2" "reply DENIED" token wrong
nn "$E2" "reply DENIED" token ""
nn "$E2" "reply DENIED" ping
nn "$E2" "reply DENIED" token "${good%?}"  # a prefix
nn "$E2" "reply DENIED" token "${good}x"   # longer
nn "$E2" "reply DENIED" version 3          # the token is checked first
nn "$E2" "reply CORRUPT" random 100
nn "$E2" "reply OK" token "$good"
# shellcheck disable=SC2086
ctl --endpoint "$E2" $tok ping >/dev/null
# shellcheck disable=SC2086
expect "second dpmd's models" "$(ctl --endpoint "$E2" $tok list)" '{"models":[]}'
# over max_model_bytes (the right token): refused, nothing kept
# (refused from the planned sizes, before any allocation: 800 MB of fc1_w
# would show in the daemon's peak memory)
sed 's/dim_out: 16/dim_out: 1300000/' "$T/tiny.yaml" >"$T/large.yaml"
# shellcheck disable=SC2086
out=$(refused 1 DENIED --endpoint "$E2" $tok submit "$T/large.yaml" --name large)
mentions "max_model_bytes" "$out"
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$PID2/status")
[ "$hwm" -lt 400000 ] || die "peak memory ${hwm} kB after refusing an 800 MB model"
# shellcheck disable=SC2086
expect "second dpmd's models" "$(ctl --endpoint "$E2" $tok list)" '{"models":[]}'
# shellcheck disable=SC2086
ctl --endpoint "$E2" $tok shutdown >/dev/null
wait "$PID2" || die "second dpmd exited with $?: $(tail -20 "$D2/dpmd.log")"
PID2=""
sanitizers_quiet "$D2/dpmd.log"
# token files the daemon refuses: readable by others, empty
echo "tok" >"$D2/world"
chmod 644 "$D2/world"
: >"$D2/empty"
chmod 600 "$D2/empty"
for f in world empty; do
  set +e
  "$DPMD" --listen "ipc://$D2/x.sock" --state-dir "$D2/state" --devices 1 \
    --token-file "$D2/$f" 2>"$D2/$f.log"
  rc=$?
  set -e
  expect "dpmd with the $f token file: exit" "$rc" 2
  sanitizers_quiet "$D2/$f.log"
done
grep -q "readable by other users" "$D2/world.log" || die "$(cat "$D2/world.log")"
grep -q "is empty" "$D2/empty.log" || die "$(cat "$D2/empty.log")"

# ---- 7. the first daemon served throughout -------------------------------------------
ctl ping >/dev/null
expect "bg at the end" "$(state_of bg)" training
iter_end=$(iter_of bg)
[ "$iter_end" -gt "$iter0" ] || die "bg did not progress: $iter0 -> $iter_end"
expect "models in the state dir" "$(ls "$STATE/models")" bg
expect "models served" "$(ctl list | grep -o '"name":"[^"]*"')" '"name":"bg"'
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "ok: bg trained $iter0 -> $iter_end meanwhile"
exit 0
