# A fleet job under stops and faults, two dpmd on 127.0.0.1 (A coordinates,
# B is shard 1; the MLP as 2 shards x 1 device; collectives' timeout 2 s):
# pause at A stops both shards at one iteration (agreed in band) and resume
# at A goes on on both; pause sent to B is refused (send it to A); a
# checkpoint at A (none written at B) loads into a 1-shard job of 2 devices,
# and after 10 steps of each its parameters equal the fleet's bitwise, and
# the reverse: the 1-shard job's checkpoint, loaded at A (B reads no file,
# it receives the state), then sync, then 10 steps, equal again; eval and
# extract-predictor at A answer for the job; while
# the job trains, kill -9 of B makes A's model `failed` within the timeout
# + 1 s, its message naming the collective, the job's rank and B's endpoint,
# and status, list and another model at A still answer; B restarted, resume
# at A re-forms m from A's checkpoint C1 (B reads no file), and after K - I1
# steps its parameters on B equal bitwise those of a 1 x 2 job that loaded
# C1 and trained as many; a
# new job stopped with SIGSTOP on B fails A's model within the timeout + 1
# s with a timeout naming B; after SIGCONT, B fails too, and resume at A
# re-forms n (no checkpoint: from iteration 0) with B's failed shard
# replaced;
# shutdown of A while a job trains stops both shards at one iteration (B
# paused there), and A's checkpoint holds that iteration; A restarted
# brings q back paused at that iteration (no trainer: get-blob refused) and
# resume re-forms it with B (whose paused shard is replaced); resume q
# --shards A re-forms it on A alone from that checkpoint with the global
# batch kept (128 on one device; 3 shards refused: 128 does not divide,
# naming --allow-batch-change), and its parameters after K - iq steps
# equal, within 1e-5, a 1 x 2 job's from the same checkpoint; resume
# --shards A,B,C --allow-batch-change re-forms it on three daemons at 128
# per device (dpmctl notes on stderr that the global batch is now 384);
# kill -9 of A while a job trains fails B's model within the timeout + 1 s
# naming shard 0 and A's endpoint, and A restarted brings the job back at
# its checkpoint (ready there after resume: a crash saves no target), resume
# re-forming it with B (whose failed shard goes), which then trains on; B
# killed and restarted while a job is paused: resume at A checkpoints where
# the job stopped and re-forms it from there.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh

PA=$(free_port)
PB=$(free_port_not "$PA")
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB
TIMEOUT_MS=2000
# own_status ENDPOINT NAME: status without its shards (the model's own error)
own_status() { at "$1" status "$2" | sed 's/,"shards":.*/}/'; }
state_at() { json_str "$(own_status "$1" "$2")" state; }
iter_at() { json_field "$(own_status "$1" "$2")" iter; }
# failed_ms LOG NAME: when LOG says NAME failed, in ms since the epoch (the
# daemon's clock, not the time a status call that asks a stopped shard takes)
failed_ms() {
  _l=$(grep "model $2 failed:" "$1" | head -1 | cut -d' ' -f1)
  [ -n "$_l" ] || die "$1 says nothing of $2 failing"
  date -d "$_l" +%s%3N
}
is_state() { [ "$(state_at "$1" "$2")" = "$3" ]; }
iter_over() { [ "$(iter_at "$1" "$2")" -gt "$3" ]; }

up A "$EA"
up B "$EB"
{
  sed '/^parallel:/,$d' examples/fmnist_mlp.yaml
  cat <<YAML
parallel:
  devices: [cpu:0]
  net_type: simple
  rendezvous: {store: daemon, timeout_ms: $TIMEOUT_MS}
YAML
} >"$T/fleet.yaml"
t0=$(ms)

# ---- pause and resume at the coordinator: one iteration on both ------------------------
at "$EA" submit "$T/fleet.yaml" --name m --shards "$EA,$EB" >/dev/null
at "$EA" train m --iters 1000000 >/dev/null
poll 20 "m training on B" iter_over "$EB" m 5
o=$(refused_at "$EB" STATE pause m)
mentions "coordinated by $EA: send pause there" "$o"
s=$(at "$EA" pause m)
expect "A paused" "$(json_str "$s" state)" paused
poll 5 "B paused after A" is_state "$EB" m paused
ia=$(iter_at "$EA" m) ib=$(iter_at "$EB" m)
expect "B's iteration where A paused" "$ib" "$ia"
at "$EA" resume m >/dev/null
expect "B training after resume" "$(state_at "$EB" m)" training
poll 20 "m going on on B after resume" iter_over "$EB" m $((ia + 5))
s=$(at "$EA" pause m)
poll 5 "B paused again" is_state "$EB" m paused
expect "B's iteration at the second pause" "$(iter_at "$EB" m)" "$(json_field "$s" iter)"
grep -q "model m: every shard paused at iteration $ia" "$T/A.log" || die "A logged no agreed stop"
grep -q "model m: the job's coordinator paused it at iteration $ia" "$T/B.log" ||
  die "B logged no stop at $ia: $(grep 'model m' "$T/B.log" | tail -5)"

# ---- checkpoints across hosts: A writes, load at A reaches B (which has no file) -------------
# close A B: the raw float32 files hold as many values, and they differ by at
# most 1e-5 of B's largest magnitude
close() {
  [ "$(wc -c <"$1")" = "$(wc -c <"$2")" ] || die "$1 and $2 differ in size"
  od -An -v -tf4 "$1" | tr -s ' ' '\n' | sed '/^$/d' >"$1.txt"
  od -An -v -tf4 "$2" | tr -s ' ' '\n' | sed '/^$/d' >"$2.txt"
  paste "$1.txt" "$2.txt" | awk '
    { d = $1 - $2; if (d < 0) d = -d; if (d > md) md = d
      b = $2 < 0 ? -$2 : $2; if (b > mb) mb = b; n++ }
    END { if (n == 0 || md > 1e-5 * mb) { print "max diff " md ", largest " mb ", " n " values"; exit 1 } }'
}
# same FILE_A FILE_B: the raw float32 files are equal byte for byte
same() { cmp -s "$1" "$2" || die "$1 and $2 differ"; }
# params_equal M1 EP1 M2 EP2: every parameter of M1 at EP1 equals M2's at EP2
params_equal() {
  for b in fc1_w fc1_b fc2_w fc2_b pred_w pred_b; do
    at "$2" get-blob "$1" $b --out "$T/x.$b" >/dev/null
    at "$4" get-blob "$3" $b --out "$T/y.$b" >/dev/null
    same "$T/x.$b" "$T/y.$b"
  done
}
c=$(at "$EA" checkpoint m)
C1=$(json_str "$c" path) I1=$(json_field "$c" iter)
[ ! -e "$T/B/models/m/checkpoints" ] || [ -z "$(ls "$T/B/models/m/checkpoints")" ] ||
  die "B wrote a checkpoint"
o=$(refused_at "$EB" STATE load m "$C1")
mentions "send load there" "$o"
at "$EA" submit examples/fmnist_mlp.yaml --name r --devices cpu:0,cpu:1 >/dev/null
at "$EA" load r "$C1" >/dev/null # 2 shards -> 1 shard of 2 devices
at "$EA" train r --iters 10 --wait --no-progress >/dev/null
at "$EA" train m --iters 10 --wait --no-progress >/dev/null # m goes on from C1 too
params_equal m "$EB" r "$EA"
c=$(at "$EA" checkpoint r)
C2=$(json_str "$c" path)
at "$EA" train r --iters 10 --wait --no-progress >/dev/null
s=$(at "$EA" load m "$C2") # 1 shard -> 2 shards: B receives it from A
expect "m's iteration after the load" "$(json_field "$s" iter)" $((I1 + 10))
expect "B's iteration after the load" "$(iter_at "$EB" m)" $((I1 + 10))
at "$EA" sync m >/dev/null
at "$EA" train m --iters 10 --wait --no-progress >/dev/null
params_equal m "$EB" r "$EA"
params_equal m "$EA" r "$EA"
at "$EA" delete r >/dev/null
e=$(at "$EA" eval m) # eval and extract-predictor at the coordinator: shard 0's
at_least "$(json_field "$e" accuracy)" 0.1 || die "eval at A: $e"
at "$EA" extract-predictor m --inputs data --outputs softmax --out "$T/A/pred" >/dev/null
[ -n "$(ls "$T/A/pred")" ] || die "no predictor written at A"

# ---- kill -9 of shard 1 mid-training: A fails within the timeout + 1 s -------------------
at "$EA" submit examples/fmnist_mlp.yaml --name other --devices cpu:1 >/dev/null
at "$EA" train m --iters 1000000 >/dev/null
poll 20 "m training again" iter_over "$EB" m "$(iter_at "$EB" m)"
kill -9 "$PID_B"
t=$(ms)
wait "$PID_B" 2>/dev/null || true
poll $((TIMEOUT_MS / 1000 + 3)) "A's m failed after B was killed" is_state "$EA" m failed
kill_ms=$(($(failed_ms "$T/A.log" m) - t))
[ "$kill_ms" -le $((TIMEOUT_MS + 1000)) ] || die "A's m failed after $kill_ms ms (timeout $TIMEOUT_MS)"
s=$(own_status "$EA" m)
mentions "job rank 1" "$s"
mentions "process 1 is shard 1 at $EB" "$s"
case $(json_str "$s" error) in *broadcast* | *allreduce*) ;; *) die "no collective named: $s" ;; esac
at "$EA" list >/dev/null
s=$(at "$EA" train other --iters 5 --wait --no-progress)
expect "another model trains at A" "$(json_field "$s" iter)" 5

# ---- resume re-forms the job from A's checkpoint once B is back --------------------------
up B "$EB" # restarted: it does not bring its shard of m back
o=$(refused_at "$EA" STATE checkpoint m)
s=$(at "$EA" resume m)
expect "m re-formed" "$(json_str "$s" state)" training
expect "m re-formed at C1's iteration" "$(json_field "$s" iter)" "$I1"
poll 20 "m training on the restarted B" iter_over "$EB" m $((I1 + 3))
s=$(at "$EA" pause m)
K=$(json_field "$s" iter)
poll 5 "B paused" is_state "$EB" m paused
at "$EA" submit examples/fmnist_mlp.yaml --name r2 --devices cpu:0,cpu:1 >/dev/null
at "$EA" load r2 "$C1" >/dev/null
at "$EA" train r2 --iters $((K - I1)) --wait --no-progress >/dev/null
params_equal m "$EB" r2 "$EA" # re-formed from C1 = an uninterrupted run from C1
at "$EA" delete r2 >/dev/null
at "$EA" delete m >/dev/null

# ---- SIGSTOP of shard 1: a timeout naming it --------------------------------------------
at "$EA" submit "$T/fleet.yaml" --name n --shards "$EA,$EB" >/dev/null
at "$EA" train n --iters 1000000 >/dev/null
poll 20 "n training on B" iter_over "$EB" n 5
kill -STOP "$PID_B"
t=$(ms)
poll $((TIMEOUT_MS / 1000 + 3)) "A's n failed after B stopped" is_state "$EA" n failed
stop_ms=$(($(failed_ms "$T/A.log" n) - t))
[ "$stop_ms" -le $((TIMEOUT_MS + 1000)) ] || die "A's n failed after $stop_ms ms (timeout $TIMEOUT_MS)"
s=$(own_status "$EA" n)
mentions "timed out after $TIMEOUT_MS ms" "$s"
mentions "shard 1 at $EB" "$s"
at "$EA" status other >/dev/null
kill -CONT "$PID_B"
poll $((TIMEOUT_MS / 1000 + 5)) "B's n failed after SIGCONT" is_state "$EB" n failed
s=$(at "$EA" resume n) # no checkpoint: re-formed at iteration 0, B's failed shard replaced
expect "n re-formed from its init" "$(json_field "$s" iter)" 0
poll 20 "n training on B again" iter_over "$EB" n 3
at "$EA" delete n >/dev/null

# ---- shutdown at the coordinator: both shards stop at one iteration ---------------------
at "$EA" submit "$T/fleet.yaml" --name q --shards "$EA,$EB" >/dev/null
at "$EA" train q --iters 1000000 >/dev/null
poll 20 "q training on B" iter_over "$EB" q 5
at "$EA" delete other >/dev/null
build/dpmctl --token-file "$TOK" --endpoint "$EA" shutdown >/dev/null || die "shutdown A"
wait "$PID_A" || die "dpmd A exited with $?: $(tail -5 "$T/A.log")"
poll 5 "B paused after A's shutdown" is_state "$EB" q paused
iq=$(iter_at "$EB" q)
[ -f "$(ckpt_path "$T/A/models/q/checkpoints" "$iq")" ] ||
  die "no checkpoint of iteration $iq at A: $(ls "$T/A/models/q/checkpoints")"
grep -q "model q: the job's coordinator ended it at iteration $iq" "$T/B.log" || die "B logged no end at $iq"

# ---- the coordinator restarted: q back paused, resume re-forms it ------------------------
up A "$EA"
s=$(at "$EA" status q)
expect "q after A's restart" "$(json_str "$s" state)" paused
expect "q's iteration after A's restart" "$(json_field "$s" iter)" "$iq"
o=$(refused_at "$EA" STATE get-blob q fc1_w)
mentions "resume re-forms it" "$o"
s=$(at "$EA" resume q)
expect "q re-formed" "$(json_str "$s" state)" training
poll 20 "q training on B after A's restart" iter_over "$EB" q $((iq + 3))

# ---- elastic: q on A alone from its checkpoint (the global batch kept), then on both -----
at "$EA" pause q >/dev/null
o=$(refused_at "$EA" INVALID resume q --shards "$EA,$EB,tcp://127.0.0.1:9")
mentions "global batch of 128 does not divide among 3 devices" "$o"
mentions "--allow-batch-change" "$o"
o=$(refused_at "$EA" INVALID resume q --shards "$EB")
mentions "must be the job's coordinator" "$o"
s=$(at "$EA" resume q --shards "$EA")
expect "q on A alone" "$(json_field "$s" num_shards)" 1
expect "q re-formed at A's checkpoint" "$(json_field "$s" iter)" "$iq"
expect "q on A alone trains" "$(json_str "$s" state)" training
o=$(refused_at "$EB" NOT_FOUND status q) # B's shard was deleted
poll 20 "q training on A alone" iter_over "$EA" q $((iq + 3))
s=$(at "$EA" pause q)
K=$(json_field "$s" iter)
at "$EA" submit examples/fmnist_mlp.yaml --name r3 --devices cpu:0,cpu:1 >/dev/null
at "$EA" load r3 "$(ckpt_path "$T/A/models/q/checkpoints" "$iq")" >/dev/null
at "$EA" train r3 --iters $((K - iq)) --wait --no-progress >/dev/null
for b in fc1_w fc1_b fc2_w fc2_b pred_w pred_b; do # 1 x 1 at 128 against 1 x 2 at 64
  at "$EA" get-blob q $b --out "$T/q.$b" >/dev/null
  at "$EA" get-blob r3 $b --out "$T/r3.$b" >/dev/null
  why=$(close "$T/q.$b" "$T/r3.$b") || die "$b: elastic q vs 1 x 2 from the same checkpoint: $why"
done
at "$EA" delete r3 >/dev/null
PC=$(free_port_not "$PA" "$PB")
EC=tcp://127.0.0.1:$PC
up C "$EC"
s=$(build/dpmctl --json --token-file "$TOK" --endpoint "$EA" resume q --shards "$EA,$EB,$EC" \
  --allow-batch-change 2>"$T/note") || die "resume q over 3 shards: $s $(cat "$T/note")"
expect "q on three" "$(json_field "$s" num_shards)" 3
grep -q "the global batch is now 384 (was 128): 128 per device" "$T/note" ||
  die "no note of the batch change: $(cat "$T/note")"
poll 20 "q training on B again" iter_over "$EB" q $((iq + 3))
poll 20 "q training on C" iter_over "$EC" q $((iq + 3))
at "$EA" delete q >/dev/null
build/dpmctl --token-file "$TOK" --endpoint "$EC" shutdown >/dev/null || die "shutdown C"
wait "$PID_C" || die "dpmd C exited with $?"

# ---- kill -9 of the coordinator: B fails naming shard 0; A restarted re-forms ------------
at "$EA" submit "$T/fleet.yaml" --name k --shards "$EA,$EB" >/dev/null
at "$EA" train k --iters 1000000 >/dev/null
poll 20 "k training on B" iter_over "$EB" k 5
at "$EA" pause k >/dev/null
ck=$(json_field "$(at "$EA" checkpoint k)" iter)
at "$EA" resume k >/dev/null
poll 20 "k training again" iter_over "$EB" k $((ck + 3))
kill -9 "$PID_A"
t=$(ms)
wait "$PID_A" 2>/dev/null || true
poll $((TIMEOUT_MS / 1000 + 3)) "B's k failed after A was killed" is_state "$EB" k failed
coord_ms=$(($(failed_ms "$T/B.log" k) - t))
[ "$coord_ms" -le $((TIMEOUT_MS + 1000)) ] || die "B's k failed after $coord_ms ms"
mentions "process 0 is shard 0 at $EA" "$(own_status "$EB" k)"
up A "$EA"
expect "k back at A" "$(state_at "$EA" k)" paused
expect "k back at its checkpoint" "$(iter_at "$EA" k)" "$ck"
s=$(at "$EA" resume k) # re-formed; a crash saved no target: ready at the checkpoint
expect "k re-formed after the crash" "$(json_str "$s" state)" ready
at "$EA" train k --iters 5 --wait --no-progress >/dev/null
expect "B's k after 5 more steps" "$(iter_at "$EB" k)" $((ck + 5))
at "$EA" delete k >/dev/null

# ---- B restarted while the job is paused: resume re-forms it where it stopped ------------
at "$EA" submit "$T/fleet.yaml" --name p --shards "$EA,$EB" >/dev/null
at "$EA" train p --iters 1000000 >/dev/null
poll 20 "p training on B" iter_over "$EB" p 5
P=$(json_field "$(at "$EA" pause p)" iter)
kill -9 "$PID_B"
wait "$PID_B" 2>/dev/null || true
up B "$EB"
s=$(at "$EA" resume p)
expect "p re-formed where it paused" "$(json_field "$s" iter)" "$P"
expect "p training after the re-forming" "$(json_str "$s" state)" training
poll 20 "p training on the restarted B" iter_over "$EB" p $((P + 3))
at "$EA" delete p >/dev/null
build/dpmctl --token-file "$TOK" --endpoint "$EA" shutdown >/dev/null || die "shutdown A"
wait "$PID_A" || die "dpmd A exited with $?: $(tail -5 "$T/A.log")"

build/dpmctl --token-file "$TOK" --endpoint "$EB" shutdown >/dev/null || die "shutdown B"
wait "$PID_B" || die "dpmd B exited with $?: $(tail -5 "$T/B.log")"
PIDS=""
for d in A B C; do sanitizers_quiet "$T/$d.log"; done
echo "fleet_faults: ok ($(($(ms) - t0)) ms; failure seen after kill -9 of shard 1 in $kill_ms ms, after SIGSTOP in $stop_ms ms, after kill -9 of the coordinator in $coord_ms ms; timeout $TIMEOUT_MS ms)"
