# dpmd's data cache (data_cache_bytes), seen through metrics: two models
# on one data set share one decoded copy (one read of each file, the held
# bytes those of one copy) while each counts the data in its own memory
# budget; a file changed on disk is read again, and its old copy goes once
# the models holding it are deleted; the cache stays within its bound once
# nothing holds the entries over it; deleting every model that uses an
# entry lets it be evicted. Status shows each model's start phases.
# Usage: sh tests/e2e/data_cache.sh (from the repo root; DPMD picks the
# daemon binary, default build/asan-bin/dpmd).
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
export ASAN_OPTIONS=detect_leaks=1
for b in "$DPMD" build/dpmctl; do [ -e "$b" ] || die "missing $b: make all build/asan-bin/dpmd"; done
set -e

D=$T/data
mkdir -p "$D"
# idx FILE N FILL: N 28x28 images (gzipped) with pixel i*FILL mod 256 and
# the labels beside them (FILE.labels.gz, 0..3)
idx() {
  python3 - "$1" "$2" "$3" <<'PY'
import gzip, struct, sys
path, n, fill = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with gzip.open(path, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28))
    f.write(bytes((i * fill) % 256 for i in range(n * 784)))
with gzip.open(path + ".labels.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 4 for i in range(n)))
PY
}
# spec NAME IMAGES: the tiny MLP on IMAGES and its labels
spec() {
  cat >"$T/$1.yaml" <<YAML
name: $1
input: {reader: idx, images: $2, labels: $2.labels.gz, batch_size: 16, scale: 0.004, shuffle: true}
forward:
$(tiny_ops)
update: {optimizer: sgd, lr: {base: 0.01}}
YAML
}
held() { metric 'dpmd_data_cache_bytes{state="held"}'; }
idle() { metric 'dpmd_data_cache_bytes{state="idle"}'; }
misses() { metric 'dpmd_data_cache_lookups_total{result="miss"}'; }
hits() { metric 'dpmd_data_cache_lookups_total{result="hit"}'; }
ONE=$((256 * 784 + 256)) # one copy of a set: images and labels
BOUND=$((ONE + ONE / 2)) # room for one idle copy, not two

idx "$D/a.gz" 256 7
idx "$D/b.gz" 256 11
cat >"$T/dpmd.yaml" <<YAML
data_paths: [$D]
data_cache_bytes: $BOUND
YAML
start_dpmd --config "$T/dpmd.yaml"
[ "$(metric dpmd_data_cache_limit_bytes)" = "$BOUND" ] || die "limit: $(metric dpmd_data_cache_limit_bytes)"

# two models, one data set: one copy
spec m1 "$D/a.gz"
spec m2 "$D/a.gz"
ctl submit "$T/m1.yaml" --devices cpu:0 >/dev/null
ctl submit "$T/m2.yaml" --devices cpu:1 >/dev/null
expect "held bytes, two models on one set" "$(held)" "$ONE"
expect "misses, two models on one set" "$(misses)" 2
expect "hits, two models on one set" "$(hits)" 2
b1=$(json_field "$(ctl status m1)" memory_bytes)
b2=$(json_field "$(ctl status m2)" memory_bytes)
[ -n "$b1" ] && [ "$b1" = "$b2" ] && [ "$b1" -gt "$ONE" ] ||
  die "each model counts its data once: memory_bytes $b1 and $b2 (one copy $ONE)"
ctl train m1 --iters 3 --wait >/dev/null
ctl train m2 --iters 3 --wait >/dev/null
# status shows where each start went, the first step's phases once it ran
for p in admit validate graph data alloc init comm broadcast save train_wait first_batch first_step; do
  json_field "$(ctl status m2)" "$p" | grep -q '^[0-9]' || die "no phase $p: $(ctl status m2)"
done
echo "  two models share one copy: $ONE bytes held, 2 misses, 2 hits"

# the set is written anew on disk: read again; the old copy stays while held
idx "$D/a.gz" 256 13
touch -d '2001-01-01' "$D/a.gz" "$D/a.gz.labels.gz"
spec m3 "$D/a.gz"
ctl submit "$T/m3.yaml" --devices cpu:0 >/dev/null
expect "misses after the change" "$(misses)" 4
expect "held bytes: the old and the new copy" "$(held)" $((2 * ONE))
ctl train m3 --iters 3 --wait >/dev/null
echo "  a changed file is read again"

# deleting the old copy's models evicts it (stale); the new one is held
ev=$(metric dpmd_data_cache_evictions_total)
ctl delete m1 >/dev/null
ctl delete m2 >/dev/null
expect "held bytes after deleting m1, m2" "$(held)" "$ONE"
expect "idle bytes after deleting m1, m2" "$(idle)" 0
expect "evictions" "$(metric dpmd_data_cache_evictions_total)" $((ev + 2))
echo "  deleting its models evicts the old copy"

# another set: both copies held, over the bound; as they are released the
# least recently released idle files go until the cache is within it
spec m4 "$D/b.gz"
ctl submit "$T/m4.yaml" --devices cpu:1 >/dev/null
expect "held bytes, two sets" "$(held)" $((2 * ONE))
ctl delete m3 >/dev/null
expect "held bytes, m4" "$(held)" "$ONE"
[ $(($(held) + $(idle))) -le "$BOUND" ] || die "over the bound: $(held) held, $(idle) idle"
ctl delete m4 >/dev/null
total=$(($(held) + $(idle)))
[ "$total" -le "$BOUND" ] || die "cache holds $total bytes, bound $BOUND"
expect "held bytes, no model" "$(held)" 0
# b, released last, stayed
misses_before=$(misses)
spec m5 "$D/b.gz"
ctl submit "$T/m5.yaml" --devices cpu:0 >/dev/null
expect "misses, b again" "$(misses)" "$misses_before"
echo "  within the bound once released: $total <= $BOUND bytes, least recently released evicted"
stop_dpmd
sanitizers_quiet "$T/dpmd.log"
echo "data_cache: ok"
