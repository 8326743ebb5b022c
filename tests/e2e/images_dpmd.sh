# dpmd trains from WebDataset tar shards that dpm-pack made: the shards are
# held whole in the data cache (its held bytes are the shards' sizes), the
# eval set is read through the tar reader too, and status and metrics count
# skipped samples; a shard with a corrupt image fails the model naming the
# sample under on_bad_sample: fail, and is skipped and counted under skip; a
# shard outside the daemon's data paths is refused at submit.
# Usage: sh tests/e2e/images_dpmd.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1
for b in "$DPMD" build/dpmctl build/dpm-pack; do
  [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd"
done
set -e

D=$T/data
mkdir -p "$D" "$T/outside"
# 256 28x28 images in 4 classes (an IDX pair), packed as 2 tar shards
python3 - "$T/set.gz" <<'PY'
import gzip, struct, sys
path = sys.argv[1]
with gzip.open(path, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 256, 28, 28))
    f.write(bytes((i * 7 + (i // 784) * 13) % 256 for i in range(256 * 784)))
with gzip.open(path + ".labels.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, 256) + bytes(i % 4 for i in range(256)))
PY
build/dpm-pack --images "$T/set.gz" --labels "$T/set.gz.labels.gz" --out "$D/set" \
  --per-shard 128 --no-progress >"$T/pack.txt"
grep -q '^samples: 256$' "$T/pack.txt" || die "dpm-pack: $(cat "$T/pack.txt")"
cp "$D/set-000000.tar" "$T/outside/"
# the same shards with sample 5's image cut in half (a corrupt PNG)
python3 - "$D/set-000000.tar" "$D/bad-000000.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], "w") as dst:
    for m in src.getmembers():
        data = src.extractfile(m).read()
        if m.name.startswith("00000005.png"):
            data = data[: len(data) // 2]
        m.size = len(data)
        dst.addfile(m, io.BytesIO(data))
PY
cp "$D/set-000001.tar" "$D/bad-000001.tar"
SHARDS=$(($(stat -c %s "$D/set-000000.tar") + $(stat -c %s "$D/set-000001.tar")))

# spec NAME SHARDS [BAD]: the tiny MLP on SHARDS, eval on set-000001.tar
spec() {
  cat >"$T/$1.yaml" <<YAML
name: $1
input:
  reader: tar
  shards: "$2"
  batch_size: 16
  num_classes: 4
  on_bad_sample: ${3:-fail}
  image: {channels: 1, crop: 24, resize: 28, mirror: true, std: [255], decode_threads: 2}
forward:
$(tiny_ops)
update: {optimizer: sgd, lr: {base: 0.01}}
eval: {reader: tar, shards: "$D/set-000001.tar", batch_size: 64}
YAML
}
cat >"$T/dpmd.yaml" <<YAML
data_paths: [$D]
data_cache_bytes: 100000000
YAML
start_dpmd --config "$T/dpmd.yaml"

spec m1 "$D/set-{000000..000001}.tar"
ctl submit "$T/m1.yaml" --devices cpu:0,cpu:1 >/dev/null
expect "held bytes: the two shards" "$(metric 'dpmd_data_cache_bytes{state="held"}')" "$SHARDS"
ctl train m1 --iters 20 --wait >/dev/null
st=$(ctl status m1)
expect "iterations" "$(json_field "$st" iter)" 20
expect "skipped samples" "$(json_field "$st" skipped_samples)" 0
ev=$(ctl eval m1)
loss=$(json_field "$ev" loss)
# 4 classes: an untrained net's loss is about ln 4 = 1.39; a finite one, above 0
at_least "$loss" 0.01 && awk -v l="$loss" 'BEGIN { exit !(l < 10) }' ||
  die "eval from the tar shards: $ev"
echo "  20 steps from 2 shards held in the cache ($SHARDS bytes), eval loss $loss"

# a corrupt image: fail names it; skip replaces and counts it
spec m2 "$D/bad-{000000..000001}.tar"
ctl submit "$T/m2.yaml" --devices cpu:0 >/dev/null
build/dpmctl --json train m2 --iters 40 --wait >"$T/m2.out" 2>&1 || true
wait_state m2 failed
st=$(ctl status m2)
case $st in *"sample 00000005"*) ;; *) die "the failure should name the sample: $st" ;; esac
spec m3 "$D/bad-{000000..000001}.tar" skip
ctl submit "$T/m3.yaml" --devices cpu:1 >/dev/null
ctl train m3 --iters 40 --wait >/dev/null
skipped=$(json_field "$(ctl status m3)" skipped_samples)
at_least "$skipped" 1 || die "skipped samples: $(ctl status m3)"
expect "metrics" "$(metric 'dpm_model_skipped_samples_total{model="m3"}')" "$skipped"
echo "  a corrupt image: fail names it, skip counts it ($skipped)"

# a shard outside data_paths: refused, nothing read
spec m4 "$T/outside/set-000000.tar"
out=$(refused 1 DENIED submit "$T/m4.yaml" --devices cpu:0)
mentions "outside" "$out"
echo "  a shard outside the data paths is refused"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "images_dpmd: ok"
