# dpmd --allow-path DIR (repeatable; extends the config's allowed_paths):
# the README's quick start writes a checkpoint and a predictor into the
# client's working directory with relative --out paths. Without the flag
# they are refused, naming the way to allow them; the flag's value is
# checked as the config's is. And train --epochs N: N epochs of steps,
# which the daemon counts; --epochs with --iters is a usage error.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
mkdir "$T/work" "$T/other"
set +e
"$DPMD" --listen "ipc://$T/x.sock" --state-dir "$STATE" --allow-path relative/dir \
  2>"$T/bad.err"
rc=$?
set -e
expect "dpmd --allow-path relative/dir" "$rc" 2
grep -q "allow-path must be an absolute path" "$T/bad.err" || die "$(cat "$T/bad.err")"

start_dpmd --allow-path "$T/work" --allow-path "$T/other"
ctl submit examples/fmnist_mlp.yaml --name mlp --devices cpu:0,cpu:1 >/dev/null
s=$(ctl train mlp --epochs 1 --wait --no-progress)
# 60000 images / (64 per device x 2 devices) = 468 steps
expect "iter after --epochs 1" "$(json_field "$s" iter)" 468
ctl_fails 2 train mlp --epochs 1 --iters 5 >/dev/null
# relative --out paths, from the client's working directory
CTL=$PWD/build/dpmctl
(
  cd "$T/work"
  "$CTL" --json checkpoint mlp --out ./mlp.dpmckpt >/dev/null || die "checkpoint --out ./"
  "$CTL" --json extract-predictor mlp --inputs data --outputs softmax --out ./mypred \
    >/dev/null || die "extract-predictor --out ./mypred"
  "$CTL" predict ./mypred --count 10 --input $DATA/t10k-images-idx3-ubyte.gz >/dev/null ||
    die "predict ./mypred"
  cd "$T/other"
  "$CTL" --json checkpoint mlp --out ../other/second.dpmckpt >/dev/null ||
    die "checkpoint into the second --allow-path"
)
[ -f "$T/work/mlp.dpmckpt" ] && [ -f "$T/work/mypred/predictor.pb" ] &&
  [ -f "$T/other/second.dpmckpt" ] || die "files: $(ls -R "$T/work" "$T/other")"
# a folder not allowed: refused, saying how to allow it
mkdir "$T/elsewhere"
out=$(cd "$T/elsewhere" && "$CTL" --json checkpoint mlp --out ./x.dpmckpt 2>/dev/null) &&
  die "a checkpoint outside the allowed folders: $out"
mentions "dpmd --allow-path DIR" "$out"
[ ! -e "$T/elsewhere/x.dpmckpt" ] || die "refused, yet written"
stop_dpmd
echo "ok: --allow-path folders take relative --out paths, others are refused; train --epochs"
