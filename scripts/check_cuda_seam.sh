#!/bin/sh
# CUDA only behind the backend seam (daemon/backend/backend.h): outside
# daemon/backend/, no daemon source names CUDA in code. The rule, on every
# C, C++ and CUDA file under daemon/ but daemon/backend/:
#  - no #include of a CUDA, NCCL or cuBLAS header, nor of the plugin's
#    headers (backend/cuda_load.h, backend/cuda/...);
#  - with comments, string and character literals removed, no identifier
#    contains "cuda" in any case.
# Comments and strings may say CUDA: help text, log lines, errors and the
# config key "cuda" are what users read and type. Two identifiers are
# names users type, so code keeps them:
#  - DPM_DEVICE_CUDA: the device kind that "cuda:N" parses to
#    (common/device.h);
#  - cuda_graphs: the spec's key parallel.cuda_graphs, a field that
#    protobuf-c generates from proto/dpm.proto.
# Everything else (the plugin's table, CUDA types and calls, streams,
# counts) goes through dpm_backend's operations (backend.h: stream,
# comm_create, counts, release; dpm_backend_load). Prints each offending
# line as FILE:LINE: code; exits 1 if there is one.
cd "$(dirname "$0")/.." || exit 2
files=$(find daemon -path daemon/backend -prune -o -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' \) -print |
  sort)
[ -n "$files" ] || {
  echo "check_cuda_seam: no daemon sources found"
  exit 2
}
# shellcheck disable=SC2086 # file list: split intended
bad=$(
  grep -nEi '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^">]*(cuda|nccl|cublas)' $files
  # shellcheck disable=SC2086
  awk '
    FNR == 1 { com = 0 }
    {
      line = $0; out = ""; i = 1; n = length(line)
      while (i <= n) {
        c = substr(line, i, 1); two = substr(line, i, 2)
        if (com) {
          if (two == "*/") { com = 0; i += 2 } else i++
          continue
        }
        if (two == "/*") { com = 1; i += 2; continue }
        if (two == "//") break
        if (c == "\"" || c == "\047") {
          q = c; i++
          while (i <= n && substr(line, i, 1) != q) i += substr(line, i, 1) == "\\" ? 2 : 1
          i++; out = out " "; continue
        }
        out = out c; i++
      }
      code = out
      gsub(/DPM_DEVICE_CUDA|cuda_graphs/, "", code)
      if (tolower(code) ~ /cuda/) print FILENAME ":" FNR ": " out
    }' $files
)
[ -z "$bad" ] && exit 0
echo "CUDA named outside daemon/backend/ (use dpm_backend's operations; see $0):"
echo "$bad"
exit 1
