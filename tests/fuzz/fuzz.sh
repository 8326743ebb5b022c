#!/bin/sh
# Fuzz driver behind `make fuzz` and the fuzz checks of tests/run.sh. Run
# from the repository root (it changes there itself):
#   fuzz.sh list                  the targets (tests/fuzz/fuzz_TARGET.c)
#   fuzz.sh have-libfuzzer        exit 0 when clang can build a libFuzzer target
#   fuzz.sh replay TARGET         build/fuzz/replay-TARGET (gcc, ASan+UBSan) on
#                                 every corpus and regression input
#   fuzz.sh run TARGET SECONDS    build/fuzz/TARGET (libFuzzer) for SECONDS
#   fuzz.sh smoke TARGET SECONDS  build it (make), then run
# replay and smoke build their binary with make; run expects it built.
#
# A run fuzzes a scratch corpus, build/fuzz/work/TARGET (kept between runs;
# new inputs land there, never in the tree), seeded from
# tests/fuzz/corpus/TARGET and tests/fuzz/regress/TARGET, with
# tests/fuzz/TARGET.dict when present; crashes, leaks, timeouts and
# out-of-memory inputs go to build/fuzz/artifacts/TARGET/, the full log to
# build/fuzz/logs/TARGET.log. It prints one line: executions, exec/s,
# coverage (cov: and ft: of libFuzzer's last status line), corpus growth
# and any finding, and exits 1 on a finding.
#
# A target may add libFuzzer flags with a comment line in its .c file:
#   " * fuzz-flags: -malloc_limit_mb=2049"   (or after //)
# Environment: FUZZ_CC (clang), FUZZ_TIMEOUT (seconds per input, 10),
# FUZZ_FLAGS (more libFuzzer flags), FUZZ_REPLAY_TIMEOUT (replay.c).
cd "$(dirname "$0")/../.." || exit 2
export OPENBLAS_NUM_THREADS=1
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
FUZZ_CC=${FUZZ_CC:-$(command -v clang-14 || echo clang)}

targets() {
  for f in tests/fuzz/fuzz_*.c; do
    [ -e "$f" ] || continue
    f=${f#tests/fuzz/fuzz_}
    echo "${f%.c}"
  done
}

need_target() {
  [ -f "tests/fuzz/fuzz_$1.c" ] || {
    echo "fuzz: no target '$1' (targets: $(targets | tr '\n' ' '))" >&2
    exit 2
  }
}

# The seed folders of a target that exist.
seeds() {
  for d in "tests/fuzz/corpus/$1" "tests/fuzz/regress/$1"; do
    [ -d "$d" ] && printf '%s\n' "$d"
  done
}

case "$1" in
list)
  targets
  ;;
have-libfuzzer)
  tmp=$(mktemp -d) || exit 1
  printf '%s\n' 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);' \
    'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) {' \
    '  (void)d; (void)n; return 0; }' >"$tmp/t.c"
  "$FUZZ_CC" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1
  rc=$?
  rm -rf "$tmp"
  exit $rc
  ;;
replay)
  need_target "$2"
  bin=build/fuzz/replay-$2
  make -s "$bin" >/dev/null || { echo "fuzz: cannot build $bin" >&2; exit 1; }
  dirs=$(seeds "$2")
  [ -n "$dirs" ] || { echo "replay $2: no corpus"; exit 1; }
  log=build/fuzz/logs/replay-$2.log
  mkdir -p build/fuzz/logs
  # shellcheck disable=SC2086
  if "$bin" -v $dirs >"$log" 2>&1; then
    echo "replay $2: $(sed -n 's/^replay: \([0-9]* inputs ran\)$/\1/p' "$log")"
    exit 0
  else
    rc=$?
    grep -v '^replay: running ' "$log" | tail -40
    # The input that leaked, else the last one started.
    bad=$(sed -n 's/^replay: .*; leak on input //p' "$log")
    [ -n "$bad" ] || bad=$(sed -n 's/^replay: running //p' "$log" | tail -1)
    echo "replay $2: FAILED (exit $rc) on input $bad; log: $log"
    exit 1
  fi
  ;;
run | smoke)
  need_target "$2"
  t=$2
  secs=${3:-60}
  bin=build/fuzz/$t
  if [ "$1" = smoke ]; then
    make -s "$bin" >/dev/null || { echo "fuzz: cannot build $bin" >&2; exit 1; }
  fi
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (make $bin)" >&2; exit 1; }
  work=build/fuzz/work/$t
  art=build/fuzz/artifacts/$t
  log=build/fuzz/logs/$t.log
  mkdir -p "$work" "$art" build/fuzz/logs
  flags=$(sed -n 's|^[ /*]*fuzz-flags:\(.*\)$|\1|p' "tests/fuzz/fuzz_$t.c" | sed 's|\*/||')
  dict=
  [ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
  before=$(find "$work" -type f | wc -l)
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$secs" -print_final_stats=1 -timeout="${FUZZ_TIMEOUT:-10}" \
    -artifact_prefix="$art/" $dict $flags ${FUZZ_FLAGS:-} "$work" $(seeds "$t") \
    >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  after=$(find "$work" -type f | wc -l)
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  line="fuzz $t: $(stat number_of_executed_units) runs in ${took} s"
  line="$line ($(stat average_exec_per_sec)/s), cov: ${cov:-?} ft: ${ft:-?},"
  line="$line corpus +$((after - before)), peak RSS $(stat peak_rss_mb) MB"
  if [ $rc -eq 0 ]; then
    echo "$line: no finding"
    exit 0
  fi
  what=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz check failed|ALARM|out-of-memory' "$log")
  units=$(sed -n 's/.*Test unit written to //p' "$log" | tr '\n' ' ')
  echo "$line: FOUND (exit $rc) ${what:-see the log}"
  echo "  input: ${units:-none written}; log: $log"
  exit 1
  ;;
*)
  sed -n '2,21s/^# \{0,1\}//p' "$0" >&2
  exit 2
  ;;
esac
