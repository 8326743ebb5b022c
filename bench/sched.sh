#!/bin/sh
# The scheduler's figures (server/sched.h), one dpmd on cpu:0,cpu:1 with
# the Fashion-MNIST examples (real data, real models):
#   priority   a priority-5 CNN's step time alone and while a priority-0
#              CNN trains on the same devices, in alternating runs of
#              STEPS steps (wall time / steps), medians of ROUNDS each;
#              then that the low one ran while the high one was paused
#   shares     over WINDOW seconds of two models training together: two
#              equal CNNs, CNNs of weights 3 and 1, an MLP and a CNN of
#              equal weight (steps about 100x apart in cost): each one's
#              share of the time, from dpmd's queue (share of the last
#              minute) and, independently, from its steps in the window
#              times its step time alone
#
#   sh bench/sched.sh [--window S] [--rounds N] [--steps N]
# Needs build/dpmd and build/dpmctl (make all) and the Fashion-MNIST IDX
# files. Prints figures; asserts nothing.
set -e
cd "$(dirname "$0")/.."
WINDOW=60 ROUNDS=5 STEPS=40
while [ $# -gt 0 ]; do
  case $1 in
  --window) WINDOW=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --steps) STEPS=$2; shift 2 ;;
  *) echo "usage: sh bench/sched.sh [--window S] [--rounds N] [--steps N]" >&2; exit 2 ;;
  esac
done
export OPENBLAS_NUM_THREADS=1
T=$(mktemp -d /tmp/dpm-sched.XXXXXX)
export DPM_ENDPOINT="ipc://$T/dpmd.sock"
build/dpmd --listen "$DPM_ENDPOINT" --state-dir "$T/state" --devices 2 2>"$T/dpmd.log" &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -rf "$T"' EXIT
until build/dpmctl --timeout 1000 ping >/dev/null 2>&1; do sleep 0.05; done

ctl() { build/dpmctl --json "$@"; }
num() { echo "$1" | sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p"; }
str() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }
iter() { num "$(ctl status "$1")" iter; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
now() { date +%s.%N; }
# wait_ready NAME: until NAME is ready (its run done)
wait_ready() { until [ "$(str "$(ctl status "$1")" state)" = ready ]; do sleep 0.05; done; }
# run_ms NAME N: trains N steps and prints ms per step (wall)
run_ms() {
  t0=$(now)
  ctl train "$1" --iters "$2" --wait --no-progress >/dev/null
  echo "$(now) $t0 $2" | awk '{ printf "%.1f\n", ($1 - $2) * 1000 / $3 }'
}
# share NAME: its share of the last minute from dpmd's queue, in %
share() { ctl queue | tr '{' '\n' | grep "\"name\":\"$1\"" | sed -n 's/.*"share":\([0-9.e-]*\).*/\1/p' | awk '{ printf "%.1f", $1 * 100 }'; }

dev="--devices cpu:0,cpu:1"
ctl submit examples/fmnist_cnn.yaml --name hi $dev --priority 5 >/dev/null
ctl submit examples/fmnist_cnn.yaml --name lo $dev >/dev/null
ctl submit examples/fmnist_cnn.yaml --name cnn2 $dev >/dev/null
ctl submit examples/fmnist_mlp.yaml --name mlp $dev >/dev/null
ctl train hi --iters 10 --wait --no-progress >/dev/null # warm
echo "priority: a priority-5 CNN, $STEPS steps a run, $ROUNDS runs each, alternating"
: >"$T/alone"
: >"$T/shared"
for r in $(seq "$ROUNDS"); do
  run_ms hi "$STEPS" >>"$T/alone"
  ctl train lo --iters 1000000 >/dev/null
  sleep 0.5
  run_ms hi "$STEPS" >>"$T/shared"
  ctl pause lo >/dev/null
done
a=$(median <"$T/alone")
s=$(median <"$T/shared")
echo "  alone                 $a ms/step"
echo "  beside a low CNN      $s ms/step   ratio x$(echo "$s $a" | awk '{ printf "%.3f", $1 / $2 }')"
i0=$(iter lo)
ctl resume lo >/dev/null
sleep 2
ctl pause lo >/dev/null
echo "  high paused 2 s: the low one ran $(($(iter lo) - i0)) steps"

# the solo step time of each model, ms (for the steps-based shares)
solo() { run_ms "$1" "$2"; }
cnn_ms=$(solo lo 30)
cnn2_ms=$(solo cnn2 30)
mlp_ms=$(solo mlp 300)
echo "solo step times: CNN $cnn_ms ms, MLP $mlp_ms ms"

# pair A B WEIGHT_A WEIGHT_B A_MS B_MS: both train WINDOW seconds
pair() {
  ctl set "$1" --weight "$3" >/dev/null
  ctl set "$2" --weight "$4" >/dev/null
  ctl train "$1" --iters 100000000 >/dev/null
  ctl train "$2" --iters 100000000 >/dev/null
  ia=$(iter "$1") ib=$(iter "$2")
  sleep "$WINDOW"
  sa=$(share "$1") sb=$(share "$2")
  da=$(($(iter "$1") - ia)) db=$(($(iter "$2") - ib))
  ctl pause "$1" >/dev/null
  ctl pause "$2" >/dev/null
  ta=$(echo "$da $5" | awk '{ print $1 * $2 }')
  tb=$(echo "$db $6" | awk '{ print $1 * $2 }')
  echo "  $1 (w $3) vs $2 (w $4): dpmd's shares $sa% / $sb%;" \
    "steps $da / $db, x solo step time: $(echo "$ta $tb" | awk '{ printf "%.1f%% / %.1f%%", 100 * $1 / ($1 + $2), 100 * $2 / ($1 + $2) }')"
}
echo "shares over $WINDOW s:"
pair lo cnn2 1 1 "$cnn_ms" "$cnn2_ms"
pair lo cnn2 3 1 "$cnn_ms" "$cnn2_ms"
pair mlp cnn2 1 1 "$mlp_ms" "$cnn2_ms"
ctl shutdown >/dev/null
wait $PID
