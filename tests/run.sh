#!/bin/sh
# Runs every test: the unit tests (ASan+UBSan build) and the end-to-end
# trainer checks, then prints one closing line "N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
export OPENBLAS_NUM_THREADS=1
passed=0
failed=0
log=build/tests/unit.log

./build/tests/unit | tee "$log"
p=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | tail -1)
f=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | tail -1)
[ -n "$p" ] || { p=0; f=$((f + 1)); echo "FAIL unit test binary did not finish"; }
passed=$((passed + p))
failed=$((failed + ${f:-0}))

# check NAME COMMAND...: one end-to-end check, passing when COMMAND exits 0.
check() {
  name=$1
  shift
  if out=$("$@" 2>&1); then
    echo "ok   $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name"
    echo "$out" | tail -20 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}

check layers sh scripts/check_layers.sh
check device-bytes sh scripts/check_device_bytes.sh
# Races under ThreadSanitizer: models restored and predictors loaded at once.
check race build/tests/race

for t in tests/e2e/*.sh; do
  check "$(basename "$t" .sh)" sh "$t"
done

# Fuzz targets (tests/fuzz): every seed and regression input replayed under
# ASan+UBSan; with clang's libFuzzer at hand, or in CI, each target also
# fuzzes for FUZZ_SMOKE_SECONDS (10; at most 30 in CI).
for t in $(sh tests/fuzz/fuzz.sh list); do
  check "fuzz-replay $t" sh tests/fuzz/fuzz.sh replay "$t"
done
if [ "${CI:-}" = true ] || sh tests/fuzz/fuzz.sh have-libfuzzer; then
  for t in $(sh tests/fuzz/fuzz.sh list); do
    check "fuzz-smoke $t" sh tests/fuzz/fuzz.sh smoke "$t" "${FUZZ_SMOKE_SECONDS:-10}"
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
