#!/bin/sh
# The GPU bundle (make gpu-bundle) rehearsed on a bare CUDA host: its
# entry script runs inside a bubblewrap sandbox whose root holds only
# glibc, libstdc++/libgcc_s, dash and the base tools the script uses (with
# their own libraries), CUDA's libraries laid out as the lent image lays
# them out (cudart, cuBLAS and cuBLASLt in /usr/local/cuda-13.0/targets/
# x86_64-linux/lib, lib64 a link to it; cuDNN and NCCL, versioned names
# only, in a Python environment's site-packages/nvidia/{cudnn,nccl}/lib),
# and the bundle; no /usr/share/datasets, no library of ours, no build
# tree, no network, no driver. It checks that:
#   - the bundle reaches "no GPU" with the driver's reason and exits 0;
#   - with --kind cpu its checks (step 6 of tests/gpu/entry.sh) pass on
#     cpu devices: gpu_test --kind cpu (run once, its rows in the closing
#     table), dpm-train and dpmd on cpu:0;
#   - with --expect-gpu it exits 1, naming that reason;
#   - a copy without one library, or with one data file missing or
#     damaged, fails naming the file (MANIFEST); a copy whose MANIFEST also
#     forgets a library fails at load, the dynamic loader naming it;
#   - with a probe that reports a GPU (tests/gpu/fake_probe.c) and NCCL
#     absent, the bundle fails naming libnccl.so.2;
# and, outside the sandbox, gpu_test's loader verdicts: a GPU found with
# the plugin missing or broken fails (exit 1), no probe at all says what
# was looked for where. Skipped, saying so, without the CUDA plugin
# (make CUDA=0).
#
#   sh tests/gpu/rehearsal.sh
set -eu
cd "$(dirname "$0")/../.."
. tests/e2e_lib.sh
BUNDLE=build/gpu-bundle
FAKE=build/tests/fake-gpu/libdpm_cuda_probe.so
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f build/libdpm_cuda.so ]; then
  echo "skipped: no CUDA plugin (make CUDA=0, or nvcc not found)"
  exit 0
fi
[ -f "$BUNDLE/MANIFEST" ] || die "$BUNDLE is not built (make gpu-bundle)"
[ -f "$FAKE" ] || die "$FAKE is not built"
command -v bwrap >/dev/null || die "bwrap not found (Debian package bubblewrap: make deps)"
T=$(mktemp -d /tmp/dpm-rehearsal.XXXXXX)
trap 'rm -rf "$T"' EXIT

# ---- gpu_test's loader verdicts, on this host ------------------------------------
v="$T/verdicts"
mkdir -p "$v/bin" "$v/lib/dpm"
cp build/tests/gpu_test "$v/bin/"
set +e
out=$("$v/bin/gpu_test" --expect-gpu 2>&1)
rc=$?
[ $rc -eq 1 ] || die "no probe, --expect-gpu: exit $rc, want 1: $out"
echo "$out" | grep -q "^no plugin: cuda: no plugin (no libdpm_cuda_probe.so in $v/bin, $v, $v/lib/dpm)" ||
  die "no probe: $out"
cp "$FAKE" "$v/lib/dpm/"
out=$("$v/bin/gpu_test" 2>&1)
rc=$?
[ $rc -eq 1 ] || die "a GPU and no plugin: exit $rc, want 1: $out"
echo "$out" | grep -q "^FAIL: cuda: plugin failed (the probe found 1 GPU but .*libdpm_cuda.so is missing)" ||
  die "a GPU and no plugin: $out"
echo "not a library" >"$v/lib/dpm/libdpm_cuda.so"
out=$("$v/bin/gpu_test" 2>&1)
rc=$?
[ $rc -eq 1 ] || die "a GPU and a broken plugin: exit $rc, want 1: $out"
echo "$out" | grep -q "^FAIL: cuda: plugin failed (cannot load .*libdpm_cuda.so: " ||
  die "a GPU and a broken plugin: $out"
set -e
echo "ok: gpu_test's verdicts: no probe, a GPU without a plugin, a GPU with a broken one"

# ---- the sandbox's root --------------------------------------------------------------
R="$T/root"
mkdir -p "$R/usr/bin" "$R/lib/x86_64-linux-gnu" "$R/lib64" "$R/tmp" "$R/bundle"
ln -s usr/bin "$R/bin"
tools="sh sed awk cut timeout mktemp gzip sha256sum wc tr head tail cat cp rm mkdir chmod date
sleep grep dirname tee env"
libs="libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 libgcc_s.so.1"
for t in $tools; do
  p=$(command -v "$t") || die "no $t here"
  cp -L "$p" "$R/usr/bin/$t"
  libs="$libs $(ldd "$p" | awk '$2 == "=>" { print $1 }')"
done
for l in $(echo $libs | tr ' ' '\n' | sort -u); do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
  [ -n "$p" ] || die "$l not found here"
  cp -L "$p" "$R/lib/x86_64-linux-gnu/$l"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
# none of the bundle's libraries may be in the root
for gz in "$BUNDLE"/lib/*.gz; do
  l=$(basename "$gz" .gz)
  [ ! -e "$R/lib/x86_64-linux-gnu/$l" ] || die "the sandbox's root has $l, a library of the bundle"
done
# CUDA as the image has it
tk=/usr/local/cuda-13.0/targets/x86_64-linux/lib
sp=/opt/pyenv/.venv/lib/python3.12/site-packages/nvidia
mkdir -p "$R$tk" "$R$sp/cudnn/lib" "$R$sp/nccl/lib"
ln -s cuda-13.0 "$R/usr/local/cuda"
ln -s targets/x86_64-linux/lib "$R/usr/local/cuda-13.0/lib64"
cuda_binds=""
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  cuda_binds="$cuda_binds --ro-bind $CUDA_HOME/lib64/$l $tk/$l"
done
for p in "$CUDA_HOME"/lib64/libcudnn*.so.9; do
  cuda_binds="$cuda_binds --ro-bind $p $sp/cudnn/lib/$(basename "$p")"
done
nccl_bind="--ro-bind $CUDA_HOME/lib64/libnccl.so.2 $sp/nccl/lib/libnccl.so.2"

# sandbox DIR [--no-nccl] ARGS...: the entry script of the bundle copy DIR
# in the sandbox; its output in $T/out, its status returned
sandbox() {
  dir=$1
  shift
  binds="$cuda_binds $nccl_bind"
  if [ "${1:-}" = --no-nccl ]; then
    binds=$cuda_binds
    rm -f "$R$sp/nccl/lib/libnccl.so.2" # a mount point left by an earlier run
    shift
  fi
  # shellcheck disable=SC2086
  bwrap --unshare-all --die-with-parent --clearenv --setenv PATH /usr/bin \
    --setenv HOME /tmp --bind "$R" / --proc /proc --dev /dev --tmpfs /tmp \
    $binds --ro-bind "$dir" /bundle /bin/sh /bundle/run.sh "$@" </dev/null >"$T/out" 2>&1
}
# copy NAME: a copy of the bundle to break (hard links: files are only
# removed or replaced, never written in place)
copy() {
  rm -rf "${T:?}/$1"
  cp -al "$BUNDLE" "$T/$1" 2>/dev/null || cp -a "$BUNDLE" "$T/$1"
  echo "$T/$1"
}
# run_expect WHAT STATUS TEXT ARGS...: the sandbox exits STATUS, its output
# has TEXT
run_expect() {
  what=$1 want=$2 text=$3
  shift 3
  set +e
  sandbox "$@"
  rc=$?
  set -e
  [ "$rc" -eq "$want" ] || die "$what: exit $rc, want $want: $(cat "$T/out")"
  grep -q -- "$text" "$T/out" || die "$what: no '$text' in: $(cat "$T/out")"
  echo "ok: $what: $(grep -m1 -- "$text" "$T/out")"
}

t0=$(date +%s)
run_expect "the bundle, no GPU" 0 "^no GPU: cuda: no usable CUDA driver or device: .*(cuda" "$BUNDLE"
cat "$T/out"
grep -q "^CUDA libraries found  *| ok " "$T/out" || die "CUDA libraries not found: $(cat "$T/out")"
run_expect "the rows on cpu devices (--kind cpu)" 0 \
  "^dpmd: submit/train/eval/ckpt/predictor cpu:0 *| ok " "$BUNDLE" --kind cpu
grep -q "^dpm-train MLP 1 epoch on cpu:0 *| ok " "$T/out" && ! grep -q "| FAIL |" "$T/out" ||
  die "--kind cpu: $(cat "$T/out")"
# the suite ran once, and its rows are in the closing table
row="^every op of the table covered *| ok "
[ "$(grep -c "$row" "$T/out")" -eq 2 ] && sed -n '/^== run.sh: /,$p' "$T/out" | grep -q "$row" ||
  die "--kind cpu: gpu_test's rows not once live and once in the table: $(cat "$T/out")"
run_expect "--expect-gpu" 1 "^FAIL (--expect-gpu): no GPU: cuda: no usable CUDA driver or device: " \
  "$BUNDLE" --expect-gpu

c=$(copy no-openblas)
rm "$c/lib/libopenblas.so.0.gz"
run_expect "a library removed" 1 "lib/libopenblas.so.0.gz (missing)" "$c"
c=$(copy no-data)
rm "$c/data/fashion-mnist/t10k-labels-idx1-ubyte.gz"
run_expect "a data file removed" 1 "data/fashion-mnist/t10k-labels-idx1-ubyte.gz (missing)" "$c"
c=$(copy bad-data)
f="$c/data/fashion-mnist/train-labels-idx1-ubyte.gz"
head -c 1000 "$f" >"$f.cut" && rm "$f" && mv "$f.cut" "$f"
run_expect "a data file cut short" 1 "data/fashion-mnist/train-labels-idx1-ubyte.gz (damaged)" "$c"
c=$(copy no-yaml)
rm "$c/lib/libyaml-0.so.2.gz"
grep -v " lib/libyaml-0.so.2.gz$" "$c/MANIFEST" >"$c/M" && rm "$c/MANIFEST" && mv "$c/M" "$c/MANIFEST"
run_expect "a library missing from bundle and MANIFEST" 1 "libyaml-0.so.2: cannot open shared object" "$c"
c=$(copy fake-gpu)
p="$c/lib/dpm/libdpm_cuda_probe.so.gz"
rm "$p"
gzip -n -c "$FAKE" >"$p"
grep -v " lib/dpm/libdpm_cuda_probe.so.gz$" "$c/MANIFEST" >"$c/M"
echo "$(sha256sum "$p" | cut -d' ' -f1) $(stat -c %s "$p") lib/dpm/libdpm_cuda_probe.so.gz" >>"$c/M"
rm "$c/MANIFEST" && mv "$c/M" "$c/MANIFEST"
run_expect "a GPU and no NCCL" 1 "libnccl.so.2: cannot open shared object" "$c" --no-nccl
grep -q "^CUDA libraries found  *| FAIL | not found: libnccl.so.2" "$T/out" ||
  die "NCCL's absence is not named: $(cat "$T/out")"
echo "rehearsal: $(($(date +%s) - t0)) s in the sandbox"
