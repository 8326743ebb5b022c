# The scheduler through dpmd (server/sched.h): a higher priority that trains
# holds a lower model on its devices back (preempted, its iteration frozen)
# and lets it go on when it stops; a model preempted 10 times, with policy
# keep and with spill, ends bitwise equal to an unpreempted run of the same
# iterations; a kill -9 while spilled loses nothing (after the restart it
# trains on to its target and ends equal too); with max_total_bytes room
# for two models, a third is queued, refused with --no-queue naming its
# bytes, builds by itself when one is deleted, and trains to the same
# result; set changes a schedule and a restart keeps it; queue lists it all.
# Usage: sh tests/e2e/dpmd_sched.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1
for b in "$DPMD" build/dpmctl; do [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd"; done
set -e

# small: the model preempted (ms a step); big: the one that preempts it
cat >"$T/small.yaml" <<YAML
name: small
input: {reader: idx, images: $DATA/train-images-idx3-ubyte.gz,
        labels: $DATA/train-labels-idx1-ubyte.gz, batch_size: 16, scale: 0.0039, shuffle: true,
        seed: 5}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 64}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.01}}
checkpoint_every: 0
YAML
cat >"$T/big.yaml" <<YAML
name: big
input: {reader: synthetic, batch_size: 16, num_examples: 4096, shape: [1, 16, 16], seed: 6}
forward:
  - {op: FC, in: [data], out: fc1, dim_out: 256}
  - {op: Relu, in: [fc1], out: fc1}
  - {op: FC, in: [fc1], out: pred, dim_out: 10}
  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}
losses: [loss]
update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.01}}
checkpoint_every: 0
YAML
# ms_of CMD...: the milliseconds CMD takes
ms_of() {
  _t=$(date +%s%3N)
  "$@" >/dev/null
  _t=$(($(date +%s%3N) - _t))
  echo $((_t > 0 ? _t : 1))
}
# hashes NAME: the fnv1a64 of both weights of model NAME
hashes() {
  echo "$(json_str "$(ctl get-blob "$1" fc1_w)" fnv1a64)/$(json_str "$(ctl get-blob "$1" pred_w)" fnv1a64)"
}
# wait_iter NAME ITER: polls until the model has run ITER steps (120 s)
wait_iter() {
  for _ in $(seq 1200); do
    [ "$(iter_of "$1")" = "$2" ] && [ "$(state_of "$1")" = ready ] && return 0
    sleep 0.1
  done
  die "model $1 never reached iteration $2: $(ctl status "$1")"
}
# wait_log TEXT: polls until the daemon logs TEXT after the mark (30 s)
wait_log() {
  for _ in $(seq 300); do
    log_since | grep -q "$1" && return 0
    sleep 0.1
  done
  die "the daemon never logged '$1': $(log_since | tail -5)"
}
# preempt_rounds NAME N: N times, big trains ROUND steps while NAME is
# preempted (seen in status, iteration frozen), then NAME goes on
preempt_rounds() {
  frozen=0
  for r in $(seq "$2"); do
    ctl train big --iters "$ROUND" >/dev/null
    wait_state "$1" preempted
    a=$(iter_of "$1")
    sleep 0.2
    b=$(iter_of "$1")
    if [ "$(state_of big)" = training ]; then
      expect "$1's iteration while preempted" "$b" "$a"
      frozen=$((frozen + 1))
    fi
    wait_state big ready
    [ "$(state_of "$1")" != preempted ] || die "round $r: $1 still preempted: $(ctl status "$1")"
  done
  at_least "$frozen" $(($2 / 2)) || die "$1 was seen frozen in $frozen rounds of $2 only"
}

start_dpmd
t0=$(date +%s)
dev="--devices cpu:0,cpu:1"
# K: small's steps in about 3 s (at least 4000), so that 10 preemption
# rounds, their gaps included, take well under half of a run
ctl submit "$T/small.yaml" --name pace $dev >/dev/null
K=$((1000 * 3000 / $(ms_of ctl train pace --iters 1000 --wait --no-progress)))
[ "$K" -ge 4000 ] || K=4000
ctl delete pace >/dev/null
ctl submit "$T/small.yaml" --name ref $dev >/dev/null
ctl train ref --iters $K --wait --no-progress >/dev/null
ref_hash=$(hashes ref)
ctl submit "$T/small.yaml" --name early $dev >/dev/null # still learning at the end
ctl train early --iters $((K - 20)) --wait --no-progress >/dev/null
[ "$(hashes early)" != "$ref_hash" ] || die "parameters did not change in the last 20 steps"
ctl delete early >/dev/null
echo "  unpreempted $K steps: $ref_hash ($(($(date +%s) - t0)) s)"

# ---- keep: preempted 10 times -------------------------------------------------
ctl submit "$T/big.yaml" --name big $dev --priority 5 >/dev/null
# ROUND: big's steps in about 0.5 s (at least 200), so that a round outlasts
# the 0.2 s freeze check however fast this build steps
ROUND=$((500 * 500 / $(ms_of ctl train big --iters 500 --wait --no-progress)))
[ "$ROUND" -ge 200 ] || ROUND=200
ctl submit "$T/small.yaml" --name keep $dev >/dev/null
log_mark
build/dpmctl --json watch keep >"$T/watch.log" 2>&1 &
WATCH=$!
ctl train keep --iters $K >/dev/null
preempt_rounds keep 10
wait_iter keep $K
kill "$WATCH"
n=$(grep -c '"message":"preempted by big"' "$T/watch.log" || true)
at_least "$n" 10 || die "watch saw $n preemption events: $(tail -3 "$T/watch.log")"
n=$(log_since | grep -c "model keep: preempted by big")
at_least "$n" 10 || die "keep was preempted $n times: $(log_since | tail)"
expect "keep after $n preemptions" "$(hashes keep)" "$ref_hash"
echo "  ($(($(date +%s) - t0)) s)"
echo "  keep: preempted $n times, parameters equal the unpreempted run's"
s=$(ctl status keep)
expect "keep's priority" "$(json_field "$s" priority)" 0

# ---- spill: preempted 10 times ------------------------------------------------
ctl submit "$T/small.yaml" --name spill $dev --preempt spill >/dev/null
log_mark
ctl train spill --iters $K >/dev/null
preempt_rounds spill 10
wait_iter spill $K
n=$(log_since | grep -c "model spill: spilled at iteration")
b=$(log_since | grep -c "model spill: back from")
at_least "$n" 10 || die "spill spilled $n times: $(log_since | tail)"
expect "spill's returns" "$b" "$n"
expect "spill after $n spills" "$(hashes spill)" "$ref_hash"
echo "  ($(($(date +%s) - t0)) s)"
echo "  spill: spilled and back $n times, parameters equal the unpreempted run's"

# ---- kill -9 while spilled ----------------------------------------------------
ctl submit "$T/small.yaml" --name crash $dev --preempt spill >/dev/null
log_mark
ctl train crash --iters $K >/dev/null
sleep 0.3
ctl train big --iters 100000 >/dev/null
wait_log "model crash: spilled at iteration"
s=$(ctl status crash)
expect "crash's state" "$(json_str "$s" state)" preempted
case $(json_str "$s" waiting) in *"by big, spilled"*) ;; *) die "waiting: $s" ;; esac
ctl queue | grep -q '"name":"crash"' || die "queue lacks crash: $(ctl queue)"
kill -9 "$DPMD_PID"
wait "$DPMD_PID" 2>/dev/null || true
DPMD_PID=""
log_mark
start_dpmd
wait_iter crash $K # big came back at its last checkpoint (none: ready); crash trains on
expect "crash after a kill -9 while spilled" "$(hashes crash)" "$ref_hash"
expect "big's state after the restart" "$(state_of big)" ready
expect "big's priority after the restart" "$(json_field "$(ctl status big)" priority)" 5
echo "  kill -9 while spilled: back, trained on to $K, parameters equal"

# ---- set ------------------------------------------------------------------------
s=$(ctl set keep --priority 7 --weight 2.5 --preempt spill)
expect "set priority" "$(json_field "$s" priority)" 7
expect "set weight" "$(json_field "$s" weight)" 2.5
ctl_fails 2 set keep >/dev/null
ctl_fails 2 set keep --weight 0 >/dev/null
stop_dpmd
start_dpmd
s=$(ctl status keep)
expect "keep's priority after a restart" "$(json_field "$s" priority)" 7
expect "keep's policy after a restart" "$(json_str "$s" preempt)" spill
stop_dpmd

# ---- admission ------------------------------------------------------------------
STATE=$T/state2
start_dpmd
ctl submit "$T/small.yaml" --name a $dev >/dev/null
bytes=$(json_field "$(ctl status a)" memory_bytes)
at_least "$bytes" 1 || die "no memory_bytes: $(ctl status a)"
stop_dpmd
total=$((bytes * 5 / 2)) # room for two
printf 'max_total_bytes: %s\n' "$total" >"$T/dpmd.yaml"
start_dpmd --config "$T/dpmd.yaml"
ctl submit "$T/small.yaml" --name b $dev >/dev/null
s=$(ctl submit "$T/small.yaml" --name c $dev)
expect "c's state" "$(json_str "$s" state)" queued
expect "c's queue position" "$(json_field "$s" queue_position)" 1
s=$(ctl submit "$T/small.yaml" --name e $dev)
expect "e's queue position" "$(json_field "$s" queue_position)" 2
ctl delete e >/dev/null # a queued model goes without being built
not_listed e
out=$(refused 1 DENIED submit "$T/small.yaml" --name d $dev --no-queue)
mentions "needs $bytes bytes" "$out"
mentions "of max_total_bytes $total are held" "$out"
not_listed d
ctl train c --iters $K >/dev/null # held until it builds
expect "c's state" "$(state_of c)" queued
ctl delete a >/dev/null
wait_iter c $K
expect "c, queued then built" "$(hashes c)" "$ref_hash"
echo "  admission: 2 of 3 fit in $total bytes; c queued, refused with --no-queue, built when a went, equal"
stop_dpmd

# ---- fenced devices: a spill gives the device memory back to the caching
# allocator, and the rebuild takes it again without a raw allocation
STATE=$T/state3
echo "devices: {fenced: 2}" >"$T/fenced.yaml"
start_dpmd --config "$T/fenced.yaml"
fdev="--devices fenced:0,fenced:1"
ctl submit "$T/big.yaml" --name fbig $fdev --priority 5 >/dev/null
ctl submit "$T/small.yaml" --name fsmall $fdev --preempt spill >/dev/null
ctl train fbig --iters 5 --wait --no-progress >/dev/null
ctl train fsmall --iters 5 --wait --no-progress >/dev/null
raw() { metric "dpmd_device_allocations_total{device=\"fenced:$1\",source=\"device\"}"; }
r0=$(raw 0) r1=$(raw 1)
log_mark
ctl train fsmall --iters 100000 >/dev/null
ctl train fbig --iters 200 >/dev/null
wait_log "model fsmall: spilled at iteration"
wait_state fbig ready
wait_log "model fsmall: back from"
ctl pause fsmall >/dev/null
expect "raw allocations on fenced:0 after a spill and a rebuild" "$(raw 0)" "$r0"
expect "raw allocations on fenced:1 after a spill and a rebuild" "$(raw 1)" "$r1"
echo "  fenced: spilled and rebuilt from the caching allocator, $r0 raw allocations before and after"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "dpmd_sched: ok"
