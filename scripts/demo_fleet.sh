#!/bin/sh
# make demo-fleet: two real dpmd on 127.0.0.1 (temporary state dirs, tcp
# endpoints on free ports, one shared token) train the Fashion-MNIST MLP as
# one job of 2 shards x 1 device (submitted to the first with --shards, so
# it coordinates and serves the rendezvous): one epoch with a progress bar,
# the status of both shards, eval, a checkpoint and a predictor on the
# coordinator, `dpmctl predict` on test images, and both daemons shut down.
set -eu
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1
DATA=/usr/share/datasets/fashion-mnist
dir=$(mktemp -d /tmp/dpm-demo-fleet.XXXXXX)
printf 'demo-fleet-%s\n' "$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')" >"$dir/token"
chmod 600 "$dir/token"

# free_port: a tcp port no socket uses here (/proc/net/tcp, tcp6), in 20000-32767
free_port() {
  _used=" $(sed -n 's/^ *[0-9]*: [0-9A-Fa-f]*:\([0-9A-Fa-f]*\) .*/\1/p' /proc/net/tcp \
    /proc/net/tcp6 2>/dev/null | while read -r _h; do echo $((0x$_h)); done | tr '\n' ' ') "
  while :; do
    _p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12768))
    case $_used in *" $_p "*) ;; *) echo "$_p" && return 0 ;; esac
  done
}
PA=$(free_port)
PB=$(free_port)
while [ "$PB" = "$PA" ]; do PB=$(free_port); done
A=tcp://127.0.0.1:$PA B=tcp://127.0.0.1:$PB

pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; wait $p 2>/dev/null; done; rm -rf "$dir"' \
  EXIT INT TERM
# up ENDPOINT NAME CPU: a dpmd of one cpu device on ENDPOINT, state $dir/NAME,
# on CPU CPU of this machine where it has more than one: each daemon's
# replica on a core of its own (a daemon's cpu:0 is the first core of its
# CPU set, so two unpinned daemons would share one)
up() {
  _on=""
  [ "$(nproc)" -gt 1 ] && _on="taskset -c $3"
  $_on build/dpmd --listen "$1" --state-dir "$dir/$2" --devices 1 --token-file "$dir/token" \
    --log-level warning &
  pids="$pids $!"
  for _ in $(seq 400); do # a tcp endpoint answers once dpmd listens
    build/dpmctl --endpoint "$1" --token-file "$dir/token" --timeout 1000 ping \
      >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "dpmd $2 did not start" >&2
  exit 1
}
up "$A" a 0
up "$B" b 1
# at ENDPOINT ARGS...: dpmctl at that daemon, echoed
at() {
  _ep=$1
  shift
  echo "\$ dpmctl --endpoint $_ep $*" >&2
  build/dpmctl --endpoint "$_ep" --token-file "$dir/token" "$@"
}
at "$A" ping
at "$B" ping
# A coordinates (shard 0), B is shard 1; the rendezvous is A's own store
at "$A" submit examples/fmnist_mlp.yaml --name mlp --devices cpu:0 --shards "$A,$B"
# one epoch: 60000 images / (64 per device x 1 device x 2 shards) = 468 steps
at "$A" train mlp --iters 468 --wait
at "$A" status mlp
at "$B" status mlp
at "$A" eval mlp
at "$A" checkpoint mlp
at "$A" extract-predictor mlp --inputs data --outputs softmax --out "$dir/a/predictor"
echo "\$ dpmctl predict $dir/a/predictor ..." >&2 # in process: no daemon
build/dpmctl predict "$dir/a/predictor" --input $DATA/t10k-images-idx3-ubyte.gz \
  --labels $DATA/t10k-labels-idx1-ubyte.gz --count 8
at "$A" delete mlp
rc=0
for ep in "$A" "$B"; do at "$ep" shutdown; done
for p in $pids; do wait "$p" || rc=$?; done
pids=""
trap 'rm -rf "$dir"' EXIT
echo "demo-fleet: done (both dpmd exited with status $rc)"
exit "$rc"
