# dpmd's hardening, end to end (each of these misbehaved before):
#  1. a shape whose byte count overflows is refused (SHAPE, naming the op);
#  2. max_model_bytes counts the reader and the rest, not only the tensors: a
#     synthetic set of 10^8 shuffled examples is refused at once, while ping,
#     delete and shutdown answer; status shows memory_bytes;
#  3. data files are read only under the state dir, allowed_paths and
#     data_paths (default /usr/share/datasets);
#  4. a FIFO as data or checkpoint is refused at once, and SIGTERM then stops
#     dpmd (it hung forever in open());
#  5. an IDX error shows none of the file's bytes;
#  6. the state dir's own files (models/, lock) are never a client's target;
#  7. the checkpoint path is checked where it is written, on the model
#     thread: a directory swapped for a symlink while the request waits (the
#     ASan daemon's test gate, $DPMD_TEST_GATE) is refused;
#  8. a second dpmd on the same state dir exits 1 naming the first's pid;
#  9. a NUL byte inside a request's string is refused;
# 10. periodic checkpoints (submit --checkpoint-every, the spec's, the
#     config's checkpoint_every);
# 11. status after a load shows no loss, accuracy or speed of the last run;
# 12. control bytes (a newline in a spec file's name) are escaped in replies
#     and logs;
# 13. tcp listen addresses: host names refused, [::1] served;
# 14. dpm-train --help, dpmctl --version, dpmctl help for an unknown command;
# 15. the README's predict example names a file that exists;
# 16. scripts/deps.sh waits for the dpkg lock.
# The daemons run under ASan+UBSan with leak detection and report nothing.
# Usage: sh tests/e2e/dpmd_hardening.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd, built with DPM_TEST_HOOKS).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
for b in "$DPMD" build/dpmctl build/dpm-train build/tests/nnsend; do
  [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd build/tests/nnsend"
done

OUTSIDE=$T/outside # outside the state dir and every allowed path
PID2=""
trap 'rc=$?
  set +e
  [ -n "$PID2" ] && kill -9 "$PID2" 2>/dev/null
  if [ $rc -ne 0 ]; then
    echo "--- dpmd.log (tail)" >&2
    tail -n 8 "$T/dpmd.log" >&2 2>/dev/null
  fi
  cleanup' EXIT

# wait_exit PID SECONDS WHAT: waits up to SECONDS for PID (a child of this
# shell) to exit; its exit status in $rc.
wait_exit() {
  _n=$(($2 * 10))
  while [ "$_n" -gt 0 ] && kill -0 "$1" 2>/dev/null &&
    ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; do
    sleep 0.1
    _n=$((_n - 1))
  done
  [ "$_n" -gt 0 ] || die "$3: still running after $2 s: $(tail -5 "$T/dpmd.log")"
  rc=0
  wait "$1" || rc=$?
}

spec_with() {
  echo "name: $1"
  echo "input: $2"
  echo "forward:"
  tiny_ops
}
SYN="{reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}"
spec_with tiny "$SYN" >"$T/tiny.yaml"
# idx NAME IMAGES: a spec reading IMAGES (labels from the dataset)
idx() {
  spec_with "$1" "{reader: idx, images: $2, labels: $DATA/train-labels-idx1-ubyte.gz, batch_size: 8}"
}

mkdir -p "$T/allowed/d" "$T/other" "$OUTSIDE"
cat >"$T/dpmd.yaml" <<EOF
allowed_paths: [$T/allowed]
max_model_bytes: 67108864
checkpoint_every: 30
EOF
export DPMD_TEST_GATE="$T/gate" # no such file: requests run at once
start_dpmd --config "$T/dpmd.yaml"

# ---- 1. a shape that overflows --------------------------------------------------
{
  echo "name: ovf"
  echo "input: $SYN"
  echo "forward:"
  echo "  - {op: ConstantFill, in: [], out: k, shape: [2147483648, 2147483648]}"
  tiny_ops
} >"$T/ovf.yaml"
out=$(refused 1 SHAPE submit "$T/ovf.yaml")
mentions "op #1 (ConstantFill)" "$out"
mentions "is larger than" "$out"
ctl ping >/dev/null
not_listed ovf

# ---- 2. the memory budget counts the reader --------------------------------------
ctl submit "$T/tiny.yaml" --name other >/dev/null
spec_with big "{reader: synthetic, batch_size: 8, num_examples: 100000000, shuffle: true, shape: [1, 8, 8], num_classes: 4}" >"$T/big.yaml"
t0=$(ms)
(
  rc=0
  build/dpmctl --json submit "$T/big.yaml" >"$T/big.out" 2>/dev/null || rc=$?
  echo "$rc $(ms)" >"$T/big.done"
) &
big=$!
t1=$(ms)
ctl ping >/dev/null
within_ms "$t1" 2000 "ping while a 10^8-example model is submitted"
t1=$(ms)
ctl delete other >/dev/null
within_ms "$t1" 2000 "delete while a 10^8-example model is submitted"
wait "$big"
read -r rc t1 <"$T/big.done"
[ $((t1 - t0)) -lt 1000 ] || die "refusing the 10^8-example model took $((t1 - t0)) ms"
out=$(cat "$T/big.out")
expect "submit of 10^8 examples: exit" "$rc" 1
expect "submit of 10^8 examples: status" "$(json_str "$out" status)" DENIED
mentions "(max_model_bytes)" "$out"
mentions "reader" "$out"
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$DPMD_PID/status")
[ "$hwm" -lt 300000 ] || die "peak memory ${hwm} kB after refusing a 400 MB reader"
not_listed big
not_listed other
sed 's/num_examples: 100000000/num_examples: 2147483647/' "$T/big.yaml" >"$T/huge.yaml"
out=$(refused 1 SPEC submit "$T/huge.yaml")
mentions "num_examples" "$out"
ctl submit "$T/tiny.yaml" --name a >/dev/null
ctl train a --iters 3 --wait --no-progress >/dev/null
s=$(ctl status a)
mem=$(json_field "$s" memory_bytes)
[ -n "$mem" ] || die "status has no memory_bytes: $s"
tb=$(json_field "$s" tensor_bytes) # dpmctl may not print it: then metrics'
[ -n "$tb" ] || tb=$(metric 'dpm_model_tensor_bytes{model="a"}')
if [ "$tb" -le 0 ] || [ "$mem" -le "$tb" ]; then die "memory_bytes $mem, tensor_bytes $tb: $s"; fi
ctl delete a >/dev/null

# ---- 3. data only from the state dir, allowed and data paths ----------------------
cp "$DATA/train-images-idx3-ubyte.gz" "$T/other/images.gz"
idx pw /etc/passwd >"$T/pw.yaml"
idx oth "$T/other/images.gz" >"$T/oth.yaml"
{ idx ev "$DATA/train-images-idx3-ubyte.gz"; echo "eval: {images: /etc/shadow, labels: /etc/passwd}"; } >"$T/ev.yaml"
for f in pw oth ev; do
  out=$(refused 1 DENIED submit "$T/$f.yaml")
  mentions "is not under" "$out"
  not_listed "$f"
done
idx fm "$DATA/train-images-idx3-ubyte.gz" >"$T/fm.yaml" # the default data_paths
ctl submit "$T/fm.yaml" >/dev/null
ctl delete fm >/dev/null

# ---- 5. IDX errors show no file bytes ----------------------------------------------
echo "root:x:0:0:root:/root:/bin/bash" >"$T/allowed/passwd"
idx leak "$T/allowed/passwd" >"$T/leak.yaml"
log_mark
out=$(ctl_fails 1 submit "$T/leak.yaml")
mentions "not an IDX file" "$out"
for s in 726f6f74 0x72 root:; do
  case $out in *"$s"*) die "the error shows the file's bytes ($s): $out" ;; esac
  if log_since | grep -qF "$s"; then die "the log shows the file's bytes ($s): $(log_since)"; fi
done
not_listed leak

# ---- 9. NUL bytes inside strings ------------------------------------------------------
# Request {version: 1, submit: {spec: {name: ...}}} and {spec: {name: "ok"},
# name: ...}, written byte by byte; the last has no NUL: it decodes and is
# refused for its spec (no input), so the encoding is right.
printf '\010\001\142\021\012\017\012\015a\000/../../evil' >"$T/nul1.pb"
printf '\010\001\142\025\012\004\012\002ok\022\015a\000/../../evil' >"$T/nul2.pb"
printf '\010\001\142\020\012\016\012\014a\000bcdefghijk' >"$T/nul3.pb"
printf '\010\001\142\020\012\016\012\014a_bcdefghijk' >"$T/nonul.pb"
for f in nul1:submit.spec.name nul2:submit.name nul3:submit.spec.name; do
  got=$(build/tests/nnsend "$DPM_ENDPOINT" file "$T/${f%%:*}.pb") || die "nnsend ${f%%:*} failed"
  expect "${f%%:*}" "$got" "reply INVALID request field '${f#*:}' holds a NUL byte"
done
got=$(build/tests/nnsend "$DPM_ENDPOINT" file "$T/nonul.pb") || die "nnsend nonul failed"
case $got in "reply SPEC "*) ;; *) die "the request without a NUL: $got" ;; esac
for n in a ok a_bcdefghijk; do not_listed "$n"; done
if [ -e "$T/evil" ] || [ -e "$STATE/evil" ]; then die "a NUL name made a file: $(ls "$T" "$STATE")"; fi
expect "models after NUL names" "$(ctl list)" '{"models":[]}'

# ---- 12. control bytes in replies and logs -------------------------------------------
nl='
'
bad="$T/bad${nl}injected: evil.yaml"
{
  echo "name: nl"
  echo "input: $SYN"
  echo "forward:"
  tiny_ops | sed '1s/.*/  - {op: Frob, in: [data], out: fc1}/'
} >"$bad"
log_mark
rc=0 # not ctl_fails: its echo (dash's) would turn the "\\n" back into a newline
out=$(build/dpmctl --json submit "$bad" 2>/dev/null) || rc=$?
expect "submit of a spec file named with a newline: exit" "$rc" 1
expect "reply lines" "$(printf '%s\n' "$out" | wc -l)" 1
case $out in
*'bad\\ninjected: evil.yaml'*"unknown op 'Frob'"*) ;;
*) die "the newline is not escaped as \\n in the reply: $out" ;;
esac
if log_since | grep -q '^injected'; then die "a log line was injected: $(log_since)"; fi
log_since | grep -qF 'bad\ninjected: evil.yaml' || die "the error is not logged: $(log_since)"
not_listed nl

# ---- 10. periodic checkpoints ------------------------------------------------------------
ctl submit "$T/tiny.yaml" --name p --devices cpu:0,cpu:1 --checkpoint-every 20 >/dev/null
ctl train p --iters 50 --wait --no-progress >/dev/null
P=$STATE/models/p/checkpoints
for i in 20 40; do [ -s "$(ckpt_path "$P" $i)" ] || die "no checkpoint at $i: $(ls "$P")"; done
s=$(ctl status p)
expect "p's checkpoint_iter" "$(json_field "$s" checkpoint_iter)" 40
expect "p's checkpoint" "$(json_str "$s" checkpoint)" "$(ckpt_path "$P" 40)"
case $s in *'"checkpoint_every":{"iters":20}'*) ;; *) die "p's policy: $s" ;; esac
{ cat "$T/tiny.yaml"; echo "checkpoint_every: 20"; } >"$T/every.yaml"
ctl submit "$T/every.yaml" --name r >/dev/null
ctl train r --iters 25 --wait --no-progress >/dev/null
[ -s "$(ckpt_path "$STATE/models/r/checkpoints" 20)" ] ||
  die "no checkpoint at 20 from the spec's policy: $(ls "$STATE/models/r/checkpoints")"
case $(ctl status r) in *'"checkpoint_every":{"iters":20}'*) ;; *) die "r: $(ctl status r)" ;; esac
ctl delete r >/dev/null
ctl submit "$T/tiny.yaml" --name q >/dev/null # the config's checkpoint_every: 30
ctl train q --iters 65 --wait --no-progress >/dev/null
Q=$STATE/models/q/checkpoints
expect "q's checkpoints" "$(ls "$Q" | tr '\n' ' ')" \
  "$(basename "$(ckpt_path . 30)") $(basename "$(ckpt_path . 60)") "
s=$(ctl status q)
expect "q's checkpoint_iter" "$(json_field "$s" checkpoint_iter)" 60
case $s in *'"checkpoint_every":{"iters":30}'*) ;; *) die "q's policy: $s" ;; esac

# ---- 11. status after a load ---------------------------------------------------------------
s=$(ctl status p)
case $s in *'"loss":'*'"images_per_s":'*) ;; *) die "no loss after training: $s" ;; esac
s=$(ctl load p "$(ckpt_path "$P" 20)")
expect "p's iter after load" "$(json_field "$s" iter)" 20
for s in "$s" "$(ctl status p)"; do
  case $s in *'"loss"'* | *'"accuracy"'* | *'"images_per_s"'*) die "stale figures after load: $s" ;; esac
done

# ---- 6. dpmd's own files -------------------------------------------------------------------
md5=$(md5sum <"$STATE/models/q/spec.pb")
lock=$(cat "$STATE/lock")
for args in "checkpoint p --out $STATE/models/q/spec.pb" \
  "checkpoint p --out $(ckpt_path "$Q" 999999999999)" "checkpoint p --out $STATE/lock" \
  "extract-predictor p --inputs data --outputs softmax --out $STATE/models/q"; do
  # shellcheck disable=SC2086 # word splitting intended
  out=$(refused 1 DENIED $args)
  mentions "one of dpmd's own files" "$out"
done
expect "q's spec.pb after refusals" "$(md5sum <"$STATE/models/q/spec.pb")" "$md5"
expect "the lock after refusals" "$(cat "$STATE/lock")" "$lock"
if [ -e "$(ckpt_path "$Q" 999999999999)" ] || [ -e "$STATE/models/q/predictor.pb" ]; then
  die "written into q's directory: $(ls "$STATE/models/q" "$Q")"
fi

# ---- 7. the path is checked where it is written ----------------------------------------------
touch "$T/gate"
log_mark
build/dpmctl --json checkpoint p --out "$T/allowed/d/c.ckpt" >"$T/race.out" 2>/dev/null &
race=$!
for _ in $(seq 200); do
  log_since | grep -qF "model p: checkpoint waits at the test gate" && break
  sleep 0.05
done
log_since | grep -qF "model p: checkpoint waits at the test gate" ||
  die "the checkpoint never waited at the test gate (is $DPMD built with DPM_TEST_HOOKS?): $(log_since)"
mv "$T/allowed/d" "$T/allowed/d.old"
ln -s "$OUTSIDE" "$T/allowed/d"
rm "$T/gate"
rc=0
wait "$race" || rc=$?
out=$(cat "$T/race.out")
expect "checkpoint through a swapped-in symlink: exit ($out)" "$rc" 1
expect "checkpoint through a swapped-in symlink: status" "$(json_str "$out" status)" DENIED
mentions "crosses a symbolic link" "$out"
[ -z "$(ls -A "$OUTSIDE")" ] || die "written through the symlink: $(ls -la "$OUTSIDE")"
[ -z "$(ls -A "$T/allowed/d.old")" ] || die "written: $(ls -la "$T/allowed/d.old")"

# ---- 2 (end). shutdown while a 10^8-example model is refused; 6: q survives -------------------
build/dpmctl --json submit "$T/big.yaml" >"$T/big.out" 2>/dev/null &
big=$!
t0=$(ms)
ctl shutdown >/dev/null
within_ms "$t0" 2000 "shutdown while a 10^8-example model is submitted"
wait_exit "$DPMD_PID" 10 "dpmd after shutdown"
DPMD_PID=""
expect "dpmd's exit status after shutdown" "$rc" 0
wait "$big" || :
start_dpmd --config "$T/dpmd.yaml"
case $(state_of q) in paused | ready) ;; *) die "q after the restart: $(ctl status q)" ;; esac
# q (ready at 65, its last periodic checkpoint at 60) is saved at shutdown
expect "q's iteration after the restart" "$(json_field "$(ctl status q)" iter)" 65

# ---- 4. a FIFO as data or checkpoint, then SIGTERM ---------------------------------------------
mkfifo "$T/allowed/fifo"
idx ff "$T/allowed/fifo" >"$T/ff.yaml"
t0=$(ms)
set +e
out=$(timeout 10 build/dpmctl --json submit "$T/ff.yaml" 2>/dev/null)
rc=$?
set -e
within_ms "$t0" 5000 "submit of a FIFO"
expect "submit of a FIFO: exit ($out)" "$rc" 1
expect "submit of a FIFO: status" "$(json_str "$out" status)" IO
mentions "not a regular file" "$out"
not_listed ff
t0=$(ms)
set +e
out=$(timeout 10 build/dpmctl --json load q "$T/allowed/fifo" 2>/dev/null)
rc=$?
set -e
within_ms "$t0" 5000 "load of a FIFO"
expect "load of a FIFO: exit ($out)" "$rc" 1
expect "load of a FIFO: status" "$(json_str "$out" status)" IO
mentions "not a regular file" "$out"
kill -TERM "$DPMD_PID"
wait_exit "$DPMD_PID" 10 "dpmd after SIGTERM"
DPMD_PID=""
expect "dpmd's exit status after SIGTERM" "$rc" 0
sanitizers_quiet "$T/dpmd.log"

# ---- 8. two daemons on one state dir --------------------------------------------------------------
unset DPMD_TEST_GATE
start_dpmd
set +e
timeout 30 "$DPMD" --listen "ipc://$T/second.sock" --state-dir "$STATE" --devices 2 \
  2>"$T/second.log"
rc=$?
set -e
expect "second dpmd on the same state dir: exit ($(cat "$T/second.log"))" "$rc" 1
grep -qF "in use by another dpmd (pid $DPMD_PID)" "$T/second.log" ||
  die "the second dpmd does not name the first's pid $DPMD_PID: $(cat "$T/second.log")"
sanitizers_quiet "$T/second.log"
ctl ping >/dev/null
case $(ctl list) in *'"name":"q"'*) ;; *) die "the first dpmd lost q: $(ctl list)" ;; esac
stop_dpmd
sanitizers_quiet "$T/dpmd.log"

# ---- 13. tcp listen addresses -------------------------------------------------------------------------
PORT=$(free_port)
set +e
timeout 30 "$DPMD" --listen "tcp://localhost:$PORT" --state-dir "$T/s13" --devices 1 \
  2>"$T/tcp.log"
rc=$?
set -e
expect "dpmd --listen tcp://localhost: exit ($(cat "$T/tcp.log"))" "$rc" 2
grep -q "not host names" "$T/tcp.log" || die "no reason given: $(cat "$T/tcp.log")"
E6="tcp://[::1]:$PORT"
"$DPMD" --listen "$E6" --state-dir "$T/s13" --devices 1 2>"$T/tcp6.log" &
PID2=$!
up=""
for _ in $(seq 100); do
  kill -0 "$PID2" 2>/dev/null || die "dpmd on $E6 exited: $(cat "$T/tcp6.log")"
  build/dpmctl --endpoint "$E6" --timeout 1000 ping >/dev/null 2>&1 && up=1 && break
  sleep 0.1
done
[ -n "$up" ] || die "dpmctl --endpoint $E6 ping never answered: $(build/dpmctl \
  --endpoint "$E6" --timeout 1000 ping 2>&1); dpmd: $(cat "$T/tcp6.log")"
ctl --endpoint "$E6" shutdown >/dev/null
wait "$PID2" || die "dpmd on $E6 exited with $?: $(cat "$T/tcp6.log")"
PID2=""
sanitizers_quiet "$T/tcp6.log"

# ---- 14. help and version ------------------------------------------------------------------------------
rc=0
build/dpm-train --help >"$T/help.out" 2>"$T/help.err" || rc=$?
expect "dpm-train --help: exit" "$rc" 0
grep -q "^usage: dpm-train" "$T/help.out" || die "dpm-train --help: $(cat "$T/help.out" "$T/help.err")"
rc=0
v=$(build/dpmctl --version) || rc=$?
expect "dpmctl --version: exit" "$rc" 0
echo "$v" | grep -Eq '^dpmctl [0-9]+\.[0-9]+' || die "dpmctl --version printed '$v'"
rc=0
build/dpmctl help nosuch >"$T/nosuch.out" 2>&1 || rc=$?
expect "dpmctl help nosuch: exit" "$rc" 2
grep -q "'nosuch'" "$T/nosuch.out" || die "dpmctl help nosuch: $(cat "$T/nosuch.out")"

# ---- 15. the README's predict example ---------------------------------------------------------------------
# (the section's lines, continuation lines joined)
input=$(sed -n '/^## dpmd and dpmctl/,/^## /p' README.md | sed -e :a -e '/\\$/N' -e 's/\\\n//' -e ta |
  sed -n 's/^build\/dpmctl predict .*--input  *\([^ ]*\).*/\1/p')
[ -n "$input" ] || die "no 'build/dpmctl predict ... --input FILE' line in README.md"
[ -e "$input" ] || die "README.md's predict example reads '$input', which does not exist"

# ---- 16. scripts/deps.sh waits for the dpkg lock -----------------------------------------------------------
mkdir "$T/fakebin"
cat >"$T/fakebin/dpkg-query" <<'EOF'
#!/bin/sh
for p; do :; done
[ "$p" = libnanomsg-dev ] && exit 1
printf 'install ok installed'
EOF
printf '#!/bin/sh\necho 0\n' >"$T/fakebin/id"
printf '#!/bin/sh\necho "$*" >>"%s"\n' "$T/apt.calls" >"$T/fakebin/apt-get"
chmod +x "$T/fakebin/dpkg-query" "$T/fakebin/id" "$T/fakebin/apt-get"
PATH="$T/fakebin:$PATH" sh scripts/deps.sh >"$T/deps.out" 2>&1 ||
  die "scripts/deps.sh failed: $(cat "$T/deps.out")"
expect "apt-get calls" "$(wc -l <"$T/apt.calls")" 2
grep -q ' update' "$T/apt.calls" || die "no apt-get update: $(cat "$T/apt.calls")"
grep -q ' install .*libnanomsg-dev' "$T/apt.calls" || die "no install: $(cat "$T/apt.calls")"
while read -r call; do
  case $call in *"-o DPkg::Lock::Timeout="[0-9]*) ;; *) die "apt-get $call: no lock timeout" ;; esac
done <"$T/apt.calls"
echo "ok: 16 hardening checks"
exit 0
