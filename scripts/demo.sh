#!/bin/sh
# make demo: a real dpmd (temporary state dir and ipc endpoint) trains the
# Fashion-MNIST MLP on two CPU replicas for one epoch with a progress bar,
# evaluates, checkpoints, extracts a predictor, runs it on test images with
# `dpmctl predict`, and shuts the daemon down.
set -eu
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1
DATA=/usr/share/datasets/fashion-mnist
dir=$(mktemp -d /tmp/dpm-demo.XXXXXX)
export DPM_ENDPOINT="ipc://$dir/dpmd.sock"
ctl() { echo "\$ dpmctl $*" >&2; build/dpmctl "$@"; }

build/dpmd --listen "$DPM_ENDPOINT" --state-dir "$dir/state" --devices 2 \
  --log-level warning &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM

for _ in $(seq 400); do # dpmd's socket appears once it listens
  build/dpmctl ping >/dev/null 2>&1 && break
  sleep 0.05
done
ctl ping
ctl submit examples/fmnist_mlp.yaml --name mlp --devices cpu:0,cpu:1
# one epoch: 60000 images / (64 per device x 2 devices) = 468 steps
ctl train mlp --iters 468 --wait
ctl eval mlp
ctl checkpoint mlp
ctl extract-predictor mlp --inputs data --outputs softmax --out "$dir/state/predictor"
ctl predict "$dir/state/predictor" --input $DATA/t10k-images-idx3-ubyte.gz \
  --labels $DATA/t10k-labels-idx1-ubyte.gz --count 8
ctl shutdown
wait $pid
trap 'rm -rf "$dir"' EXIT
echo "demo: done (dpmd exited with status $?)"
