# Events on every dpmd: one that listens on tcp:// only (the README's fleet
# recipe) has no events socket, and serves its events through the request
# socket instead: train --wait shows progress, watch works. Two daemons whose
# sockets share a folder get events sockets of their own, and a collision
# says what to do. watch on an idle model prints its state and ends at
# --timeout.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
export DPM_ENDPOINT="tcp://127.0.0.1:$(free_port)"
printf 'devices: {cpu: 2}\nprogress_every: 5\n' >"$T/dpmd.yaml"
start_dpmd --config "$T/dpmd.yaml"
grep -q "events on" "$T/dpmd.log" && die "a tcp-only dpmd has an events socket: $(cat "$T/dpmd.log")"
ctl submit examples/fmnist_mlp.yaml --name m --devices cpu:0,cpu:1 >/dev/null

# train --wait, not on a terminal, without --json: a progress line per event
out=$(build/dpmctl train m --iters 40 --wait 2>"$T/train.err") ||
  die "train --wait exited $?: $(cat "$T/train.err")"
echo "$out" | grep -q "^iter [0-9]*/40 loss" || die "no progress over tcp: '$out' $(cat "$T/train.err")"

# watch through the request socket: progress and done, over tcp
ctl train m --iters 1000 >/dev/null
build/dpmctl --json watch m --until-done >"$T/watch.out" 2>&1 || die "watch exited $?: $(cat "$T/watch.out")"
grep -q '"kind":"progress"' "$T/watch.out" || die "no progress event: $(cat "$T/watch.out")"
grep -q '"kind":"done".*"iter":1040' "$T/watch.out" || die "no done event: $(cat "$T/watch.out")"

# watch on an idle model: its state at once, and it ends at --timeout
t0=$(ms)
out=$(build/dpmctl --timeout 1000 watch m) || die "idle watch exited $?: $out"
within_ms "$t0" 4000 "watch --timeout 1000 on an idle model"
echo "$out" | grep -q " m state ready" || die "idle watch printed: '$out'"
set +e
build/dpmctl --timeout 1000 watch m --count 1 --until-done >/dev/null 2>&1
rc=$?
set -e
expect "watch --until-done on a finished model" "$rc" 0
stop_dpmd
sanitizers_quiet "$T/dpmd.log"

# two daemons in one folder: events sockets of their own
pinged() { build/dpmctl --endpoint "$1" --timeout 1000 ping >/dev/null 2>&1; }
export DPM_ENDPOINT="ipc://$T/one.sock"
"$DPMD" --listen "ipc://$T/one.sock" --state-dir "$T/s1" --devices 1 2>"$T/one.log" &
p1=$!
"$DPMD" --listen "ipc://$T/two.sock" --state-dir "$T/s2" --devices 1 2>"$T/two.log" &
p2=$!
for e in one two; do
  poll 20 "dpmd $e" pinged "ipc://$T/$e.sock"
done
kill -0 $p1 && kill -0 $p2 || die "a second dpmd in the folder exited: $(cat "$T/two.log")"
[ -S "$T/one.events.sock" ] && [ -S "$T/two.events.sock" ] || die "events sockets: $(ls "$T")"
# the same events socket given twice: the second says what to do
set +e
"$DPMD" --listen "ipc://$T/three.sock" --events "ipc://$T/one.events.sock" \
  --state-dir "$T/s3" --devices 1 2>"$T/three.log"
rc=$?
set -e
expect "dpmd on a taken events socket" "$rc" 1
grep -q "another dpmd publishes there: give this one --events" "$T/three.log" ||
  die "no hint: $(cat "$T/three.log")"
kill $p1 $p2
wait $p1 $p2 || true
echo "ok: events over tcp through the request socket, one events socket per daemon, idle watch ends"
