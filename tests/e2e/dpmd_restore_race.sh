# dpmd under ThreadSanitizer (build/tsan-bin/dpmd) restores the four models
# of its state dir at once, each on its own thread (two MLPs, two CNNs, two
# replicas each): every one comes back paused at its checkpoint's
# iteration, then all train a step and extract a predictor at the same
# time, and dpmd exits 0 with no race reported (a report makes it exit 66).
. tests/e2e_lib.sh
. tests/dpmd_lib.sh

MODELS="mlp1 cnn1 mlp2 cnn2"
example() { case $1 in mlp*) echo examples/fmnist_mlp.yaml ;; *) echo examples/fmnist_cnn.yaml ;; esac; }

start_dpmd
for m in $MODELS; do
  ctl submit "$(example $m)" --name "$m" --devices cpu:0,cpu:1 >/dev/null
done
i=0
for m in $MODELS; do
  i=$((i + 1))
  wait_state "$m" ready
  ctl train "$m" --iters "$i" --wait --no-progress >/dev/null
  ctl checkpoint "$m" >/dev/null
done
stop_dpmd

log_mark
export TSAN_OPTIONS="exitcode=66 history_size=2"
DPMD=build/tsan-bin/dpmd start_dpmd
i=0
for m in $MODELS; do
  i=$((i + 1))
  wait_state "$m" paused
  expect "$m restored at" "$(iter_of "$m")" "$i"
done
for m in $MODELS; do ctl train "$m" --iters 1 >/dev/null; done
for m in $MODELS; do wait_state "$m" ready; done
pids=""
for m in $MODELS; do
  ctl extract-predictor "$m" --inputs data --outputs softmax --out "$STATE/$m.pred" \
    >/dev/null &
  pids="$pids $!"
done
for p in $pids; do wait "$p" || die "extract-predictor failed"; done
for m in $MODELS; do
  build/dpmctl predict "$STATE/$m.pred" --input "$DATA/t10k-images-idx3-ubyte.gz" \
    --labels "$DATA/t10k-labels-idx1-ubyte.gz" --count 100 >/dev/null ||
    die "the predictor of $m does not run"
done
stop_dpmd
if grep -q "ThreadSanitizer" "$T/dpmd.log"; then
  die "race in dpmd: $(grep -A30 "WARNING: ThreadSanitizer" "$T/dpmd.log" | head -60)"
fi
log_since | grep -c "restored from" | grep -qx 4 || die "restores not logged: $(log_since)"
