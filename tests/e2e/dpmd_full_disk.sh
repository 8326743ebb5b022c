# dpmd on a full disk: the state dir is a 40 MiB tmpfs, a model's checkpoint
# is 16 MiB; one checkpoint is written, then the disk is filled up to 1 MiB.
#  (a) `dpmctl checkpoint` fails with IO; the failure is logged and shows in
#      status as checkpoint_error; the model is unharmed;
#  (b) SIGTERM while it trains and another model (idle) is ready with steps
#      not checkpointed: both shutdown checkpoints fail, dpmd says so and
#      exits 1 naming both, the previous checkpoint is intact and
#      models/NAME/target is written;
#  (c) with space freed, a restarted dpmd brings the model back paused at the
#      first checkpoint's iteration, and `resume` finishes the interrupted run;
#  (d) checkpoint_every: 1 on the full disk: the failures are logged
#      rate-limited (the first, then a count every 10 s) and the periodic
#      checkpoint backs off (1 s, 2 s, 4 s ...), while status shows the
#      error; with space freed, the next try succeeds and says how many
#      failures were not logged.
# Needs root (mount); prints "skip: ..." and exits 0 otherwise.
# Usage: sh tests/e2e/dpmd_full_disk.sh (from the repo root; DPMD picks the
# daemon binary, default build/dpmd).
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
[ "$(id -u)" -eq 0 ] || { echo "skip: mounting a tmpfs needs root"; exit 0; }
mkdir -p "$STATE"
mount -t tmpfs -o size=40m,mode=0700 dpm-full-disk "$STATE" 2>"$T/mount.err" ||
  { echo "skip: cannot mount a tmpfs: $(cat "$T/mount.err")"; exit 0; }
trap 'rc=$?
  set +e
  if [ -n "$DPMD_PID" ]; then kill -9 "$DPMD_PID"; wait "$DPMD_PID" 2>/dev/null; DPMD_PID=""; fi
  if [ $rc -ne 0 ]; then
    echo "--- dpmd.log (tail)" >&2
    tail -n 8 "$T/dpmd.log" >&2 2>/dev/null
  fi
  umount "$STATE" || umount -l "$STATE"
  cleanup' EXIT

avail_kb() { df -Pk "$STATE" | awk 'NR == 2 { print $4 }'; }

# 1024 inputs x 2048 fc1 units: 8 MiB of weights and 8 MiB of momentum,
# a ~16 MiB checkpoint; a step takes ~10-20 ms on two CPU replicas.
cat >"$T/fat.yaml" <<'YAML'
name: fat
input: {reader: synthetic, batch_size: 8, num_examples: 512, shape: [1, 32, 32], num_classes: 10}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 2048}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.01}}
YAML
echo "checkpoint_every: 0" >"$T/dpmd.yaml" # only the checkpoints asked for
start_dpmd --config "$T/dpmd.yaml"
ctl submit "$T/fat.yaml" --devices cpu:0,cpu:1 >/dev/null
ctl submit "$T/fat.yaml" --name idle --devices cpu:0,cpu:1 >/dev/null
ctl train idle --iters 1 --wait --no-progress >/dev/null
ctl train fat --iters 2 --wait --no-progress >/dev/null
out=$(ctl checkpoint fat)
C=$STATE/models/fat/checkpoints
P1=$(ckpt_path "$C" 2)
expect "first checkpoint" "$(json_str "$out" path)" "$P1"
size=$(wc -c <"$P1")
[ "$size" -gt 12000000 ] || die "the checkpoint is only $size bytes"
sum1=$(md5sum <"$P1")
ctl train fat --iters 1 --wait --no-progress >/dev/null

# fill the disk, leaving 1 MiB: room for small files, not for a checkpoint
left=$(($(avail_kb) - 1024))
[ "$left" -gt 0 ] || die "the tmpfs is already full: $(df -k "$STATE")"
dd if=/dev/zero of="$STATE/fill" bs=1024 count="$left" 2>/dev/null ||
  die "cannot fill $STATE: $(df -k "$STATE")"

# ---- (a) a checkpoint on the full disk --------------------------------------
log_mark
out=$(ctl_fails 1 checkpoint fat)
expect "checkpoint on a full disk: status" "$(json_str "$out" status)" IO
P2=$(ckpt_path "$C" 3)
case $(json_str "$out" error) in
*"$P2"*"No space left on device"*) ;;
*) die "checkpoint on a full disk: $out" ;;
esac
log_since | grep "error: model fat: checkpoint failed: $P2" | grep -q "No space left" ||
  die "the failed checkpoint is not logged: $(log_since)"
s=$(ctl status fat)
case $(json_str "$s" checkpoint_error) in
*"$P2"*"No space left on device"*) ;;
*) die "status has no checkpoint_error: $s" ;;
esac
expect "state after the failed checkpoint" "$(json_str "$s" state)" ready
expect "checkpoint_iter after the failed checkpoint" "$(json_field "$s" checkpoint_iter)" 2
expect "checkpoints after the failed one" "$(ls "$C")" "$(basename "$P1")"

# ---- (b) SIGTERM while training, the shutdown checkpoint fails ----------------
TARGET=153 # ~150 steps: a few seconds, the run is in flight at SIGTERM
ctl train fat --iters $((TARGET - 3)) >/dev/null
for _ in $(seq 300); do
  [ "$(json_field "$(ctl status fat)" iter)" -gt 4 ] && break
  sleep 0.05
done
s=$(ctl status fat)
it=$(json_field "$s" iter)
if [ "$(json_str "$s" state)" != training ] || [ "$it" -le 4 ] || [ "$it" -ge "$TARGET" ]; then
  die "fat should be training, past iteration 4 and short of $TARGET: $s"
fi
log_mark
kill -TERM "$DPMD_PID"
rc=0
wait "$DPMD_PID" || rc=$?
DPMD_PID=""
expect "dpmd's exit status when the shutdown checkpoint failed" "$rc" 1
log_since | grep -q "error: model fat: checkpoint at shutdown failed" ||
  die "the failed shutdown checkpoint is not logged: $(log_since)"
log_since | grep -q "error: model idle: checkpoint at shutdown failed" ||
  die "the failed shutdown checkpoint of a ready model is not logged: $(log_since)"
last=$(log_since | grep "stopped, but not every model was saved") ||
  die "dpmd's last word does not say which models were not saved: $(log_since)"
case $last in *fat*idle* | *idle*fat*) ;; *) die "not naming fat and idle: $last" ;; esac
expect "checkpoints after the shutdown" "$(ls "$C")" "$(basename "$P1")"
expect "the first checkpoint after the shutdown" "$(md5sum <"$P1")" "$sum1"
[ -f "$STATE/models/fat/target" ] || die "no target file: $(ls -la "$STATE/models/fat")"
expect "the saved target" "$(cat "$STATE/models/fat/target")" "$TARGET"
for f in "$C"/* "$STATE"/models/fat/*; do
  case $f in *.tmp*) die "temporary file left: $f" ;; esac
done

# ---- (c) space freed: back at the first checkpoint, resume finishes the run ----
rm "$STATE/fill"
log_mark
start_dpmd --config "$T/dpmd.yaml"
wait_state fat paused
s=$(ctl status fat)
expect "iter after the restart" "$(json_field "$s" iter)" 2
expect "checkpoint_iter after the restart" "$(json_field "$s" checkpoint_iter)" 2
expect "target_iter after the restart" "$(json_field "$s" target_iter)" "$TARGET"
ctl resume fat >/dev/null
for _ in $(seq 600); do
  [ "$(json_str "$(ctl status fat)" state)" = training ] || break
  sleep 0.1
done
s=$(ctl status fat)
expect "state after the resumed run" "$(json_str "$s" state)" ready
expect "iter after the resumed run" "$(json_field "$s" iter)" "$TARGET"
ctl delete idle >/dev/null # its checkpoint and fat's would not both fit
stop_dpmd

# ---- (d) checkpoint_every: 1 on the full disk --------------------------------
printf 'checkpoint_every: 0\ncheckpoint_retention: 1\n' >"$T/dpmd.yaml"
start_dpmd --config "$T/dpmd.yaml"
wait_state fat paused
ctl delete fat >/dev/null
ctl submit "$T/fat.yaml" --name flood --devices cpu:0,cpu:1 --checkpoint-every 1 >/dev/null
left=$(($(avail_kb) - 1024))
dd if=/dev/zero of="$STATE/fill" bs=1024 count="$left" 2>/dev/null ||
  die "cannot fill $STATE: $(df -k "$STATE")"
log_mark
ctl train flood --iters 100000000 >/dev/null
t0=$(ms)
poll 60 "flood past iteration 100" iter_above flood 100
sleep 2
S=$((($(ms) - t0) / 1000 + 1)) # seconds of training, rounded up
s=$(ctl status flood)
fi=$(json_field "$s" iter)
case $(json_str "$s" checkpoint_error) in
*"No space left on device"*) ;;
*) die "status has no checkpoint_error while the disk is full: $s" ;;
esac
# tries: at most 1 + log2(S + 1) in S s (waits of 1, 2, 4 ... s); lines: the
# first, then at most one per 10 s: 1 + S / 10
lines=$(log_since | grep -c "model flood: checkpoint failed") || :
expect "first failure logged" "$(log_since | grep -m1 -c "model flood: checkpoint failed")" 1
[ "$lines" -le $((1 + S / 10)) ] ||
  die "$lines lines of failed checkpoints in $S s over $fi iterations: $(log_since | tail -5)"
rm "$STATE/fill"
# the next try comes at most twice the training time so far after the start
poll $((2 * S + 10)) "a checkpoint once space is free" \
  sh -c "build/dpmctl --json status flood | grep -q '\"checkpoint_iter\"'"
log_since | grep -q "model flood: [0-9]* more failed checkpoint(s) were not logged" ||
  [ "$lines" -gt 1 ] || die "the failures held back are not counted: $(log_since | tail -5)"
ctl pause flood >/dev/null
stop_dpmd
echo "ok: checkpoint refused on a full disk, SIGTERM at iteration $it exited 1, resumed 2 -> $TARGET;" \
  "checkpoint_every 1 on a full disk: $lines line(s) over $fi iterations in $S s"
exit 0
