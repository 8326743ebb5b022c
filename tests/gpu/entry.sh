#!/bin/sh
# The GPU checks from a bundle (make gpu-bundle: tests/gpu/bundle.sh), on a
# host that has nothing of ours installed: it needs no make, compiler,
# package or network, only sh and base tools (sed, awk, gzip or python3,
# sha256sum or python3, timeout, mktemp).
#   1. checks every file against MANIFEST: a missing or damaged one fails,
#      named;
#   2. unpacks the programs and libraries into a temporary folder;
#   3. finds CUDA's libraries by searching: the toolkit's lib folders (from
#      nvcc's place, $CUDA_HOME, /usr/local/cuda*), the wheels' nvidia/*/lib
#      under every Python environment it finds, and the driver's folder;
#      sets LD_LIBRARY_PATH;
#   4. checks that every program and the plugin load (all libraries
#      resolve);
#   5. asks the loader (gpu_test --probe): without a GPU it prints
#      "no GPU: <the driver's reason>" and exits 0 (1 with --expect-gpu);
#      a GPU with a plugin that does not load fails, with dlerror's words;
#   6. with a GPU: gpu_test --quick (one row per check), dpm-train on
#      cuda:0, dpmd on cuda:0, bench/gpu; with --examples instead the two
#      examples' full trainings (gpu_test --examples-only).
# Every step is a row "name | ok/FAIL | figure", each under a time limit
# (the default run ends within 7 minutes on one H200); the table is
# printed at the end and, with $OUT set, written to $OUT/table.txt with
# every log in $OUT/logs.txt. Exits 0 when every row passed, 1 otherwise.
#
# --kind cpu runs step 6 with cpu devices in place of cuda ones (gpu_test
# --kind cpu, cpu:0; no bench/gpu) whatever step 5 found: the script's own
# test, on any host (tests/gpu/rehearsal.sh).
#
#   run.sh [--expect-gpu] [--examples] [--kind cpu]
set -u
B=$(cd "$(dirname "$0")" && pwd)
usage() {
  echo "usage: run.sh [--expect-gpu] [--examples] [--kind cpu]" >&2
  exit 2
}
expect_gpu="" examples="" kind=cuda
while [ $# -gt 0 ]; do
  case "$1" in
  --expect-gpu) expect_gpu=--expect-gpu ;;
  --examples) examples=1 ;;
  --kind)
    [ "${2:-}" = cpu ] || usage
    kind=cpu
    shift
    ;;
  *) usage ;;
  esac
  shift
done
# time limits, seconds
LIMIT_GPU_TEST=170 LIMIT_TRAIN=60 LIMIT_DPMD=100 LIMIT_BENCH=60 LIMIT_EXAMPLES=540
export OPENBLAS_NUM_THREADS=1

W=$(mktemp -d "${TMPDIR:-/tmp}/dpm-gpu.XXXXXX") || exit 1
LOG="$W/logs.txt" TABLE="$W/table.txt"
: >"$LOG"
: >"$TABLE"
fails=0 DPMD_PID=""
start=$(date +%s)
finish() {
  [ -n "$DPMD_PID" ] && kill -9 "$DPMD_PID" 2>/dev/null
  echo
  echo "== run.sh: $(($(date +%s) - start)) s"
  cat "$TABLE"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$TABLE" "$OUT/table.txt"
    cp "$LOG" "$OUT/logs.txt"
  fi
  rm -rf "$W"
}
trap finish EXIT
# row NAME ok|FAIL FIGURE
row() {
  printf '%-44s | %-4s | %s\n' "$1" "$2" "$3" | tee -a "$TABLE"
  [ "$2" = ok ] || fails=$((fails + 1))
}
# stop VERDICT STATUS: the last row is the verdict; exits with STATUS
stop() {
  echo "$1"
  exit "$2"
}
# logged NAME SECONDS CMD...: CMD under a time limit, its output in the log
# and in $W/last; the status is CMD's (124: timed out)
logged() {
  name=$1 limit=$2
  shift 2
  echo "== $name: $*" >>"$LOG"
  timeout -k 5 "$limit" "$@" >"$W/last" 2>&1
  rc=$?
  cat "$W/last" >>"$LOG"
  echo "== $name: exit $rc" >>"$LOG"
  return $rc
}
json_field() { echo "$1" | sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p"; }
json_str() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v + 0 >= m + 0) }'; }
sha256() {
  if command -v sha256sum >/dev/null; then
    sha256sum "$1" | cut -d' ' -f1
  else
    python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}
gunzip_to() {
  if command -v gzip >/dev/null; then
    gzip -dc "$1" >"$2"
  else
    python3 -c 'import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2"
  fi
}

# 1. the bundle against its MANIFEST
missing="" for_tools=""
for t in sed awk cut timeout mktemp; do
  command -v $t >/dev/null || for_tools="$for_tools $t"
done
command -v gzip >/dev/null || command -v python3 >/dev/null || for_tools="$for_tools gzip|python3"
command -v sha256sum >/dev/null || command -v python3 >/dev/null ||
  for_tools="$for_tools sha256sum|python3"
[ -z "$for_tools" ] || { row "base tools" FAIL "missing:$for_tools" && stop "FAIL: tools" 1; }
: >"$W/empty"
[ "$(sha256 "$W/empty" 2>&1)" = e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 ] || {
  row "base tools" FAIL "sha256sum (or python3's hashlib) does not work: $(sha256 "$W/empty" 2>&1 | head -1)"
  stop "FAIL: tools" 1
}
[ -f "$B/MANIFEST" ] || { row "bundle intact (MANIFEST)" FAIL "$B/MANIFEST is missing" && stop "FAIL: no MANIFEST" 1; }
n=0
while read -r sum size f; do
  n=$((n + 1))
  if [ ! -f "$B/$f" ]; then
    missing="$missing $f (missing)"
  elif [ "$(wc -c <"$B/$f" | tr -d ' ')" != "$size" ] || [ "$(sha256 "$B/$f")" != "$sum" ]; then
    missing="$missing $f (damaged)"
  fi
done <"$B/MANIFEST"
if [ -n "$missing" ]; then
  row "bundle intact (MANIFEST)" FAIL "$missing"
  stop "FAIL: the bundle is incomplete:$missing" 1
fi
row "bundle intact (MANIFEST)" ok "$n files, sha256 and size match"

# 2. unpacked: W/bin, W/lib, W/lib/dpm (the programs find the plugin in
# ../lib/dpm), W/examples with absolute data paths
mkdir -p "$W/bin" "$W/lib/dpm" "$W/examples"
for gz in "$B"/bin/*.gz "$B"/lib/*.gz "$B"/lib/dpm/*.gz; do
  rel=${gz#"$B"/}
  gunzip_to "$gz" "$W/${rel%.gz}" || { row "unpack" FAIL "$rel" && stop "FAIL: cannot unpack $rel" 1; }
done
chmod 755 "$W"/bin/*
for f in "$B"/examples/*.yaml; do
  sed "s|: data/|: $B/data/|" "$f" >"$W/examples/${f##*/}"
done

# 3. CUDA's libraries, found where the host keeps them
dirs="" # folders, in order, each once
add_dir() { case ":$dirs:" in *":$1:"*) ;; *) [ -d "$1" ] && dirs="${dirs:+$dirs:}$1" ;; esac; }
has_so() { for s in "$1"/lib*.so.*; do [ -e "$s" ] && return 0; done; return 1; }
nvcc=$(command -v nvcc 2>/dev/null || true)
for top in ${nvcc:+"$(dirname "$nvcc")/.."} ${CUDA_HOME:+"$CUDA_HOME"} ${CUDA_PATH:+"$CUDA_PATH"} \
  /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
  for d in "$top/lib64" "$top/lib" "$top"/targets/*/lib; do
    [ -d "$d" ] && has_so "$d" && add_dir "$(cd "$d" && pwd -P)"
  done
done
# Python environments: the python3 on the PATH and those in the usual places
sites=""
for py in python3 /opt/*/.venv/bin/python3 /opt/*/bin/python3 /opt/venv*/bin/python3 \
  /usr/local/bin/python3 /usr/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  sites="$sites $("$py" -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]+[p for p in sys.path if p.endswith("-packages")]))' 2>/dev/null)"
done
for sp in $sites /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages; do
  for d in "$sp"/nvidia/*/lib "$sp"/nvidia/*/*/lib; do
    [ -d "$d" ] && has_so "$d" && add_dir "$d"
  done
done
# the driver (libcuda.so.1) where it is not in the loader's own folders
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib; do
  [ -e "$d/libcuda.so.1" ] && add_dir "$d"
done
export LD_LIBRARY_PATH="$W/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$LOG"
found="" absent=""
for l in $(cat "$B/cuda-libs"); do
  at=""
  old_ifs=$IFS
  IFS=:
  for d in $dirs; do [ -e "$d/$l" ] && at=$d && break; done
  IFS=$old_ifs
  if [ -n "$at" ]; then found="$found $l<-$at"; else absent="$absent $l"; fi
done
echo "CUDA libraries:$found" >>"$LOG"
if [ -n "$absent" ]; then
  row "CUDA libraries found" FAIL "not found:$absent (searched: ${dirs:-nothing})"
else
  row "CUDA libraries found" ok "$(echo $found | wc -w) in $(echo "$dirs" | tr ':' '\n' | wc -l) folder(s)"
fi

# 4. every program and the plugin load (a missing library fails here,
# named by the dynamic loader)
bad=""
for p in "dpmd --version" "dpmctl --version" "dpm-train --version" "bench-gpu --usage" \
  "gpu_test --probe"; do
  set -- $p
  logged "load $1" 30 "$W/bin/$1" "$2"
  rc=$?
  if grep -q "error while loading shared libraries\|cannot open shared object" "$W/last" ||
    [ "$rc" -eq 127 ] || [ "$rc" -ge 124 ]; then
    bad="$bad $1: $(head -1 "$W/last")"
  fi
done
logged "load the plugin" 30 env DPM_CUDA_LIB="$W/lib/dpm/libdpm_cuda.so" "$W/bin/gpu_test" --probe
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || bad="$bad libdpm_cuda.so: $(head -1 "$W/last")"
if [ -n "$bad" ]; then
  row "programs and plugin load" FAIL "$bad"
  stop "FAIL: a program or the plugin does not load:$bad" 1
fi
row "programs and plugin load" ok "5 programs, the plugin"

# 5. the loader's verdict
logged "probe" 60 "$W/bin/gpu_test" --probe
rc=$?
verdict=$(head -1 "$W/last")
[ $kind = cpu ] && [ $rc -eq 3 ] && rc=0 # the checks run on cpu devices
case $rc in
0) row "loader verdict" ok "$verdict" ;;
3)
  if [ -n "$expect_gpu" ]; then
    row "loader verdict" FAIL "$verdict"
    stop "FAIL (--expect-gpu): $verdict" 1
  fi
  row "loader verdict" ok "no GPU (nothing below runs): $verdict"
  stop "$verdict" 0
  ;;
*)
  row "loader verdict" FAIL "$verdict"
  stop "FAIL: $verdict" 1
  ;;
esac

# 6. the checks, on cuda:0 (cpu:0 with --kind cpu)
dev=$kind:0
kind_arg=""
[ $kind = cpu ] && kind_arg="--kind cpu"
gpu_rows() { grep -E ' \| (ok  |FAIL) \| ' "$W/last" >>"$TABLE"; }
if [ -n "$examples" ]; then
  t0=$(date +%s)
  logged "examples" $LIMIT_EXAMPLES "$W/bin/gpu_test" $kind_arg --examples-only --examples "$W/examples"
  rc=$?
  gpu_rows
  [ $rc -eq 0 ] || row "gpu_test --examples-only" FAIL "exit $rc$([ $rc -eq 124 ] && echo ": timed out after $LIMIT_EXAMPLES s"), $(($(date +%s) - t0)) s"
  [ "$fails" -eq 0 ] && [ $rc -eq 0 ] || exit 1
  exit 0
fi

t0=$(date +%s)
logged "gpu_test" $LIMIT_GPU_TEST "$W/bin/gpu_test" $kind_arg --quick --examples "$W/examples"
rc=$?
cat "$W/last"
gpu_rows
if [ $rc -eq 0 ]; then r=ok; else r=FAIL; fi
row "gpu_test --quick (rows above)" $r \
  "exit $rc$([ $rc -eq 124 ] && echo ": timed out after $LIMIT_GPU_TEST s"), $(($(date +%s) - t0)) s"

# The epoch's mean training loss is the tight check (cpu:0 0.56893, an H200
# 0.56897); the test accuracy of the epoch's last iterate only a loose one:
# at the example's constant learning rate it swings by 0.04 within 70 steps
# (cpu:0, steps 900-970: 0.813-0.853; an H200 at step 937: 0.7927).
t0=$(date +%s) acc="" loss=""
r=FAIL
if logged "dpm-train" $LIMIT_TRAIN "$W/bin/dpm-train" "$W/examples/fmnist_mlp.yaml" \
  --devices $dev --epochs 1 --json --checkpoint "$W/mlp.ckpt" --extract-predictor "$W/pred" \
  --inputs data --outputs softmax; then
  loss=$(json_field "$(grep '^{"epoch"' "$W/last" | tail -1)" loss)
  acc=$(json_field "$(grep '^{' "$W/last" | tail -1)" test_accuracy)
  at_least 0.60 "${loss:-1}" && at_least "${acc:-0}" 0.75 && [ -s "$W/mlp.ckpt" ] &&
    [ -s "$W/pred/predictor.pb" ] && r=ok
fi
row "dpm-train MLP 1 epoch on $dev" $r \
  "loss ${loss:-none} (<= 0.60), test accuracy ${acc:-none} (>= 0.75), checkpoint + predictor, $(($(date +%s) - t0)) s"

t0=$(date +%s)
export DPM_ENDPOINT="ipc://$W/dpmd.sock"
printf 'devices: {cpu: 1, cuda: auto}\ndata_paths: [%s]\n' "$B/data" >"$W/dpmd.yaml"
ctl() { timeout 60 "$W/bin/dpmctl" --json "$@" 2>>"$W/dpmd.log"; }
DATA="$B/data/fashion-mnist"
dpmd_ok() {
  at=start
  "$W/bin/dpmd" --listen "$DPM_ENDPOINT" --state-dir "$W/state" --config "$W/dpmd.yaml" \
    2>>"$W/dpmd.log" &
  DPMD_PID=$!
  # the whole conversation under one limit: past it dpmd is killed
  (sleep $LIMIT_DPMD && kill -9 "$DPMD_PID") >/dev/null 2>&1 &
  watchdog=$!
  end=$(($(date +%s) + 20))
  until "$W/bin/dpmctl" --timeout 1000 ping >/dev/null 2>&1; do
    kill -0 "$DPMD_PID" 2>/dev/null || return 1
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.05
  done
  at=submit
  s=$(ctl submit "$W/examples/fmnist_mlp.yaml" --name g --devices $dev) || return 1
  [ "$(json_str "$s" state)" = ready ] || return 1
  at=train
  s=$(ctl train g --iters 500 --wait) || return 1
  [ "$(json_field "$s" iter)" = 500 ] || return 1
  at=eval
  e=$(ctl eval g) || return 1
  dpmd_acc=$(json_field "$e" accuracy)
  at_least "$dpmd_acc" 0.70 || return 1
  at=checkpoint
  ctl checkpoint g --out "$W/state/g.ckpt" >/dev/null || return 1
  [ -s "$W/state/g.ckpt" ] || return 1
  at=extract-predictor
  ctl extract-predictor g --inputs data --outputs softmax --out "$W/state/gpred" >/dev/null ||
    return 1
  at=predict
  p=$(ctl predict "$W/state/gpred" --input "$DATA/t10k-images-idx3-ubyte.gz" \
    --labels "$DATA/t10k-labels-idx1-ubyte.gz" --count 1000) || return 1
  pred_acc=$(json_field "$p" accuracy)
  at_least "$pred_acc" 0.70 || return 1
  at=shutdown
  ctl shutdown >/dev/null || return 1
  wait "$DPMD_PID" || return 1
  DPMD_PID="" at=""
}
dpmd_acc="" pred_acc="" watchdog=""
if dpmd_ok; then r=ok; else r=FAIL; fi
at=${at:+"failed at $at, "}
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
[ -n "$DPMD_PID" ] && kill -9 "$DPMD_PID" 2>/dev/null
DPMD_PID=""
{
  echo "== dpmd log"
  cat "$W/dpmd.log" 2>/dev/null
} >>"$LOG"
row "dpmd: submit/train/eval/ckpt/predictor $dev" $r \
  "${at}eval ${dpmd_acc:-none}, predictor ${pred_acc:-none} (>= 0.70) after 500 steps, $(($(date +%s) - t0)) s"

if [ $kind = cuda ]; then
  t0=$(date +%s)
  logged "bench/gpu" $LIMIT_BENCH "$W/bin/bench-gpu"
  rc=$?
  cat "$W/last"
  if [ $rc -eq 0 ]; then r=ok; else r=FAIL; fi
  row "bench/gpu (figures above)" $r "exit $rc, $(($(date +%s) - t0)) s"
fi

[ "$fails" -eq 0 ] || stop "FAIL: $fails GPU check(s) failed" 1
echo "all GPU checks passed"
