# dpmctl when the daemon is missing, dies or restarts:
#  1. no daemon: an ipc socket file that does not exist, or that nobody
#     listens on, is exit 3 in well under a second (not a 10 s timeout);
#  2. kill -9 while `train --wait` and `watch` wait: both exit 3 within 10 s
#     and say why (before: train --wait waited forever);
#  3. kill -9 while `train --iters N --wait` is in flight, then a new daemon
#     on the same state dir: the request is never delivered to it (before,
#     nanomsg resent it and the new daemon trained the model by itself): the
#     model stays paused at its checkpoint, and the waiting dpmctl exits 3
#     (another instance answers its pings: "restarted");
#  4. watch --until-done on a model that already finished returns at once;
#  5. dpmctl --version, help for an unknown command, submit
#     --checkpoint-every (the policy shows in the model's status).
. tests/e2e_lib.sh
. tests/dpmd_lib.sh

# running PID: the process exists and has not exited (zombies have).
running() { [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# reap PID SECONDS WHAT: waits up to SECONDS for PID (a child of this shell)
# to exit, its exit status in $rc; one still waiting then fails the test.
reap() {
  _n=$(($2 * 10))
  while [ "$_n" -gt 0 ] && running "$1"; do
    sleep 0.1
    _n=$((_n - 1))
  done
  if running "$1"; then
    kill "$1" 2>/dev/null || :
    die "$3: dpmctl still waiting after $2 s"
  fi
  rc=0
  wait "$1" || rc=$?
}

cat >"$T/tiny.yaml" <<'YAML'
name: tiny
input:
  {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 16}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 4}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
YAML
BIG=1000000000 # steps: the train is still running when it is killed

# ---- 1. no daemon ---------------------------------------------------------------
t0=$(ms)
out=$(DPM_ENDPOINT="ipc://$T/none.sock" ctl_fails 3 ping)
within_ms "$t0" 1000 "ping with no socket file"
mentions "$T/none.sock" "$out"
expect "status of a missing socket" "$(json_str "$out" status)" IO

# ---- 2. kill -9 while dpmctl waits ----------------------------------------------
start_dpmd
ctl submit "$T/tiny.yaml" --name m --devices cpu:0 >/dev/null
wait_state m ready
ctl train m --iters 5 --wait --no-progress >/dev/null
C=$(json_field "$(ctl checkpoint m)" iter)
expect "checkpoint iteration" "$C" 5
build/dpmctl train m --iters $BIG --wait --no-progress >"$T/train.out" 2>&1 &
tpid=$!
build/dpmctl watch m >"$T/watch.out" 2>&1 &
wpid=$!
wait_state m training
# watch has pinged and asked for the events endpoint (then it subscribes)
watch_asked() { [ "$(metric 'dpmd_requests_total{command="watch"')" -gt 0 ]; }
poll 10 "watch's request" watch_asked
t0=$(ms)
kill -9 "$DPMD_PID"
wait "$DPMD_PID" 2>/dev/null || :
DPMD_PID=""
reap $tpid 10 "train --wait after kill -9"
expect "train --wait exit after kill -9" "$rc" 3
reap $wpid 10 "watch after kill -9"
expect "watch exit after kill -9" "$rc" 3
within_ms "$t0" 10000 "noticing the dead dpmd"
for f in train watch; do
  grep -q "stopped answering\|no dpmd listens" "$T/$f.out" ||
    die "$f after kill -9: $(tail -3 "$T/$f.out")"
done
# the socket file kill -9 left: nobody listens, refused at once
[ -S "$T/dpmd.sock" ] || die "no stale socket file after kill -9"
t0=$(ms)
out=$(ctl_fails 3 status m)
within_ms "$t0" 1000 "status on a stale socket"
mentions refused "$out"

# ---- 3. a restart while a train is in flight -----------------------------------
start_dpmd
wait_state m paused
expect "iter restored" "$(iter_of m)" "$C"
[ -n "$(json_str "$(ctl ping)" instance)" ] || die "ping names no instance: $(ctl ping)"
build/dpmctl train m --iters $BIG --wait --no-progress >"$T/train2.out" 2>&1 &
tpid=$!
wait_state m training
poll 10 "m training past its checkpoint" iter_above m "$C"
kill -9 "$DPMD_PID"
wait "$DPMD_PID" 2>/dev/null || :
DPMD_PID=""
start_dpmd # on the same socket: dpmctl's connection comes back to this one
wait_state m paused
sleep 2 # a resent request would have arrived and started training by now
s=$(ctl status m)
expect "state on the next daemon" "$(json_str "$s" state)" paused
expect "iter on the next daemon" "$(json_field "$s" iter)" "$C"
reap $tpid 5 "train --wait after a restart"
expect "train --wait exit after a restart" "$rc" 3
grep -q "restarted; the request was lost" "$T/train2.out" ||
  die "train after a restart: $(cat "$T/train2.out")"

# ---- 4. watch --until-done on a finished model ---------------------------------
ctl train m --iters 3 --wait --no-progress >/dev/null
t0=$(ms)
out=$(ctl watch m --until-done)
within_ms "$t0" 3000 "watch --until-done on a finished model"
echo "$out" | grep -q '"kind":"state".*"state":"ready".*"iter":'"$((C + 3))" ||
  die "watch --until-done printed: $out"
human=$(build/dpmctl watch m --until-done) || die "watch --until-done exited $?"
echo "$human" | grep -q "m state ready" || die "watch --until-done (human): $human"

# ---- 5. the command line --------------------------------------------------------
v=$(sed -n 's/^#define DPM_VERSION "\([^"]*\)".*/\1/p' include/dpm/protocol.h)
expect "--version" "$(build/dpmctl --version)" "dpmctl $v (protocol 1)"
expect "--json --version" "$(build/dpmctl --json --version)" \
  '{"program":"dpmctl","version":"'"$v"'","protocol":1}'
mentions "no such command 'nosuch'" "$(ctl_fails 2 help nosuch)"
ctl_fails 2 submit "$T/tiny.yaml" --name c --checkpoint-every 10m >/dev/null
s=$(ctl submit "$T/tiny.yaml" --name c --devices cpu:0 --checkpoint-every 600s)
echo "$s" | grep -q '"checkpoint_every":{"seconds":600}' || die "policy 600s: $s"
s=$(ctl submit "$T/tiny.yaml" --name d --devices cpu:0 --checkpoint-every 7)
echo "$s" | grep -q '"checkpoint_every":{"iters":7}' || die "policy 7: $s"
stop_dpmd
echo "ok: dead dpmd noticed, no resend after a restart, finished watch returns"
