# A restarted dpmd brings its models back at their last checkpoint, paused,
# with their iteration:
#  1. SIGTERM while a model trains: dpmd checkpoints it and exits 0; after a
#     restart the model is paused at that checkpoint's iteration and trains on.
#  2. kill -9 in the middle of a checkpoint write (a *.tmp* file is left):
#     after a restart (on the stale ipc socket files) the model is back at the
#     last complete checkpoint, the temporary is gone and an older checkpoint
#     still loads.
#  3. A truncated newest checkpoint is skipped with a warning naming it: the
#     model comes back from the one before.
#  4. Shutdown checkpoints every model with progress since its last
#     checkpoint in its own directory, whatever its state: `dpmctl shutdown`
#     with a ready model (3's, one step on), then SIGTERM with a model that
#     finished `train --wait`, a paused one, one whose last checkpoint went
#     elsewhere (--out) and one never trained (no checkpoint: nothing to
#     save); after each restart every model is back at its iteration.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh

# newest_iter DIR: the iteration of the newest ckpt-ITER.dpmckpt in DIR.
newest_iter() {
  ls "$1" | sed -n 's/^ckpt-\([0-9]\{12\}\)\.dpmckpt$/\1/p' | sort | tail -1 |
    awk '{ print $1 + 0 }'
}

# ---- 1. SIGTERM while training ---------------------------------------------
start_dpmd
ctl submit examples/fmnist_mlp.yaml --name mlp --devices cpu:0,cpu:1 >/dev/null
wait_state mlp ready
MLP_TARGET=100000
ctl train mlp --iters $MLP_TARGET >/dev/null
it=0
for _ in $(seq 300); do
  it=$(json_field "$(ctl status mlp)" iter)
  [ "$it" -gt 20 ] && break
  sleep 0.1
done
[ "$it" -gt 20 ] || die "mlp did not get past iteration 20: $(ctl status mlp)"
log_mark
kill -TERM "$DPMD_PID"
rc=0
wait "$DPMD_PID" || rc=$?
DPMD_PID=""
expect "dpmd exit status after SIGTERM" "$rc" 0
mdir=$STATE/models/mlp/checkpoints
I=$(newest_iter "$mdir")
[ -n "$I" ] || die "no checkpoint written at SIGTERM: $(ls -la "$mdir"; log_since)"
[ "$I" -gt 20 ] || die "checkpoint at SIGTERM has iteration $I, want > 20"
P=$(ckpt_path "$mdir" "$I")
log_since | grep -qF "model mlp: checkpoint $P (iteration $I)" ||
  die "no shutdown checkpoint in the log: $(log_since)"

log_mark
start_dpmd
wait_state mlp paused
s=$(ctl status mlp)
expect "restored iter" "$(json_field "$s" iter)" "$I"
expect "restored target_iter (the interrupted run's)" "$(json_field "$s" target_iter)" \
  "$((MLP_TARGET))"
expect "restored checkpoint_iter" "$(json_field "$s" checkpoint_iter)" "$I"
expect "restored checkpoint" "$(json_str "$s" checkpoint)" "$P"
log_since | grep -qF "model mlp: restored from $P (iteration $I of $MLP_TARGET)" ||
  die "restore not logged: $(log_since)"
[ ! -e "$STATE/models/mlp/target" ] || die "target file left after the restore"
s=$(ctl resume mlp)
expect "state after resume" "$(json_str "$s" state)" training
ctl pause mlp >/dev/null
I=$(json_field "$(ctl status mlp)" iter)
s=$(ctl train mlp --iters 5 --wait --no-progress)
expect "iter after 5 more" "$(json_field "$s" iter)" "$((I + 5))"
expect "state after 5 more" "$(json_str "$s" state)" ready
ctl delete mlp >/dev/null # the rest restarts dpmd often: keep it quick

# ---- 2. kill -9 during a checkpoint write ------------------------------------
# The CNN: a ~26 MB checkpoint takes tens of ms to write.
ctl submit examples/fmnist_cnn.yaml --name cnn >/dev/null
wait_state cnn ready
ctl train cnn --iters 2 --wait --no-progress >/dev/null
out=$(ctl checkpoint cnn)
P1=$(json_str "$out" path)
I1=$(json_field "$out" iter)
expect "first checkpoint iter" "$I1" 2
ctl train cnn --iters 1 --wait --no-progress >/dev/null
out=$(ctl checkpoint cnn)
P2=$(json_str "$out" path)
I2=$(json_field "$out" iter)
expect "second checkpoint iter" "$I2" 3
cdir=$STATE/models/cnn/checkpoints
expect "first checkpoint path" "$P1" "$(ckpt_path "$cdir" "$I1")"
expect "second checkpoint path" "$P2" "$(ckpt_path "$cdir" "$I2")"
size=$(wc -c <"$P2")
[ "$size" -gt 10000000 ] || die "CNN checkpoint is only $size bytes"

has_tmp() {
  for f in "$cdir"/*.tmp*; do [ -e "$f" ] && return 0; done
  return 1
}
# Each try: checkpoint cnn over and over (the same iteration: the same file,
# replaced through a new temporary each time), and kill -9 dpmd as soon as a
# temporary shows up. The kill hit a write when a temporary is left.
# dpmctl waits up to 120 s for a checkpoint's answer whatever --timeout says,
# and nanomsg would resend the request to the next daemon: the dpmctl in
# flight is stopped (by its pid) before dpmd restarts.
stop_loop() {
  touch "$T/stop"
  for _ in $(seq 200); do
    [ -e "$T/loop.done" ] && break
    kill "$(cat "$T/ctl.pid" 2>/dev/null)" 2>/dev/null || :
    sleep 0.05
  done
  wait "$loop" || :
  [ -e "$T/loop.done" ] || die "the checkpoint loop did not stop"
}
hit=""
for try in 1 2 3 4 5 6 7 8; do
  if [ -z "$DPMD_PID" ]; then
    start_dpmd
    wait_state cnn paused
  fi
  rm -f "$T/stop" "$T/loop.done" "$T/ctl.pid"
  (while [ ! -e "$T/stop" ]; do
    build/dpmctl --timeout 1000 checkpoint cnn >/dev/null 2>&1 &
    echo $! >"$T/ctl.pid"
    wait $! || :
  done
  touch "$T/loop.done") 2>/dev/null &
  loop=$!
  rounds=0 # ~5000 looks (tens of ms) a round, no forks: poll tightly
  while [ "$rounds" -lt 300 ] && ! has_tmp; do
    i=0
    while [ "$i" -lt 5000 ] && ! has_tmp; do i=$((i + 1)); done
    rounds=$((rounds + 1))
  done
  kill -9 "$DPMD_PID"
  wait "$DPMD_PID" 2>/dev/null || :
  DPMD_PID=""
  stop_loop
  if has_tmp; then
    hit=$try
    break
  fi
done
[ -n "$hit" ] || die "8 kills never hit a checkpoint write: $(ls -la "$cdir")"
echo "kill -9 hit a write on try $hit: $(cd "$cdir" && wc -c -- * | head -n -1 | tr -s ' \n' ' ')"
[ -S "$T/dpmd.sock" ] || die "no stale socket left by kill -9: $(ls -la "$T")"
expect "complete checkpoint size after the kill" "$(wc -c <"$P2")" "$size"

# Restart on the stale socket files: back at the last complete checkpoint.
log_mark
start_dpmd
wait_state cnn paused
s=$(ctl status cnn)
expect "iter after kill -9" "$(json_field "$s" iter)" "$I2"
expect "checkpoint_iter after kill -9" "$(json_field "$s" checkpoint_iter)" "$I2"
expect "checkpoint after kill -9" "$(json_str "$s" checkpoint)" "$P2"
! has_tmp || die "temporary left after the restart: $(ls -la "$cdir")"
log_since | grep -qF "model cnn: restored from $P2 (iteration $I2 of $I2)" ||
  die "restore not logged: $(log_since)"
# the older checkpoint loads too
s=$(ctl load cnn "$P1")
expect "iter after load" "$(json_field "$s" iter)" "$I1"
expect "checkpoint_iter after load" "$(json_field "$s" checkpoint_iter)" "$I1"

# ---- 3. a torn newest checkpoint is skipped ---------------------------------
stop_dpmd
truncate -s 1000 "$P2"
log_mark
start_dpmd
wait_state cnn paused
s=$(ctl status cnn)
expect "iter from the older checkpoint" "$(json_field "$s" iter)" "$I1"
expect "checkpoint_iter from the older checkpoint" "$(json_field "$s" checkpoint_iter)" "$I1"
expect "checkpoint from the older checkpoint" "$(json_str "$s" checkpoint)" "$P1"
log_since | grep "warning" | grep -qF "$P2" ||
  die "no warning naming the truncated $P2: $(log_since)"
log_since | grep -qF "model cnn: restored from $P1 (iteration $I1 of $I1)" ||
  die "restore not logged: $(log_since)"
s=$(ctl train cnn --iters 1 --wait --no-progress)
expect "iter after training on" "$(json_field "$s" iter)" "$((I1 + 1))"
stop_dpmd

# ---- 4. shutdown saves the progress of models that are not training ----------
log_mark
start_dpmd
wait_state cnn paused
expect "cnn's iteration after dpmctl shutdown (ready, one step on)" "$(iter_of cnn)" \
  "$((I1 + 1))"
ctl delete cnn >/dev/null
{
  cat <<'YAML'
name: tiny
input: {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}
forward:
YAML
  tiny_ops
} >"$T/tiny.yaml"
for n in done held elsewhere fresh; do ctl submit "$T/tiny.yaml" --name $n >/dev/null; done
ctl train done --iters 2000 --wait --no-progress >/dev/null
ctl train elsewhere --iters 30 --wait --no-progress >/dev/null
ctl checkpoint elsewhere --out "$STATE/elsewhere.dpmckpt" >/dev/null
ctl train elsewhere --iters 7 --wait --no-progress >/dev/null
ctl checkpoint elsewhere --out "$STATE/elsewhere.dpmckpt" >/dev/null
ctl train held --iters 100000000 >/dev/null
poll 20 "held past iteration 20" iter_above held 20
ctl pause held >/dev/null
H=$(iter_of held)
kill -TERM "$DPMD_PID"
rc=0
wait "$DPMD_PID" || rc=$?
DPMD_PID=""
expect "dpmd exit status after SIGTERM" "$rc" 0
[ -z "$(ls "$STATE/models/fresh/checkpoints" 2>/dev/null)" ] ||
  die "a model never trained was checkpointed at shutdown"
start_dpmd
wait_state done paused
expect "done's iteration after SIGTERM (finished train --wait)" "$(iter_of done)" 2000
wait_state held paused
s=$(ctl status held)
expect "held's iteration after SIGTERM (paused)" "$(json_field "$s" iter)" "$H"
expect "held's target after SIGTERM (paused)" "$(json_field "$s" target_iter)" 100000000
wait_state elsewhere paused
expect "elsewhere's iteration after SIGTERM (checkpointed with --out)" \
  "$(iter_of elsewhere)" 37
wait_state fresh ready
expect "fresh's iteration after SIGTERM" "$(iter_of fresh)" 0
stop_dpmd
echo "ok: SIGTERM at iteration $I; kill -9 on try $hit; torn checkpoint skipped;" \
  "shutdown saved ready and paused models ($H)"
