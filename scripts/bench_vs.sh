#!/bin/sh
# scripts/bench_vs.sh REV [ROUNDS] [BENCH...]: this tree's benchmarks against
# those of commit REV, alternating (REV, this, REV, this, ... ROUNDS times,
# default 6), then the median of every figure of each build and their
# ratio. BENCH: names under bench/ (default: engine parallel). REV is built
# in a git worktree under build/vs/ (removed at the end). Figures are the
# lines' times ("1.262 ms") and, for engine, the share of the sgemm
# measured alongside ("32.0%"), and for parallel the scaling over one
# replica ("1.49x"): a lower time, a higher share or scaling is faster.
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 REV [ROUNDS] [BENCH...]" >&2; exit 2; }
rev=$1
rounds=${2:-6}
[ $# -ge 2 ] && shift 2 || shift 1
benches=${*:-engine parallel}
old=build/vs/$(git rev-parse --short "$rev")
out=build/vs/runs
rm -rf "$old" "$out"
mkdir -p build/vs "$out"
git worktree add --detach "$old" "$rev" >/dev/null
trap 'git worktree remove --force "$old"' EXIT
for b in $benches; do
  make -s "build/bench/$b" >/dev/null
  make -s -C "$old" "build/bench/$b" >/dev/null
done
export OPENBLAS_NUM_THREADS=1
i=0
while [ "$i" -lt "$rounds" ]; do
  i=$((i + 1))
  for b in $benches; do
    "$old/build/bench/$b" >"$out/old.$b.$i"
    "build/bench/$b" >"$out/new.$b.$i"
  done
  echo "round $i of $rounds" >&2
done
# key \t value for each figure of a run's output.
figures() {
  awk '/per device/ { n = split($0, h, ", "); sect = h[n] ": " }
  {
    line = $0; key = ""
    if (match(line, /[0-9.]+ ms/)) {
      key = substr(line, 1, RSTART - 1); gsub(/^ +| +$/, "", key); key = sect key
      print key " [ms]\t" substr(line, RSTART, RLENGTH - 3)
    } else if (match(line, /[0-9.]+x /)) {
      key = substr(line, 1, RSTART - 1); gsub(/^ +| +$/, "", key)
      print sect key " [x one replica]\t" substr(line, RSTART, RLENGTH - 2)
    }
    if (key != "" && match(line, /\| +[0-9.]+% \|/)) {
      v = substr(line, RSTART + 1, RLENGTH - 4); gsub(/ /, "", v)
      print key " [% of sgemm]\t" v
    }
  }' "$@"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-48s %10s %10s %7s\n' "figure (median of $rounds runs each)" "$rev" "this" "ratio"
for b in $benches; do
  figures "$out/old.$b.1" | cut -f1 | while IFS= read -r key; do
    o=$(for f in "$out"/old."$b".*; do figures "$f"; done | awk -F'\t' -v k="$key" '$1 == k { print $2 }' | median)
    n=$(for f in "$out"/new."$b".*; do figures "$f"; done | awk -F'\t' -v k="$key" '$1 == k { print $2 }' | median)
    printf '%-48s %10s %10s %7s\n' "$key" "$o" "$n" "$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.3f", o ? n / o : 0 }')"
  done
done
