#!/bin/sh
# Every GPU check and the GPU benchmark, from the bundle (make gpu-bundle,
# tests/gpu/bundle.sh), whose entry script (tests/gpu/entry.sh) says what
# runs and what each row means. In a work tree with a build (build/libdpm.a)
# it first brings the bundle up to date with make; where there is none (a
# bare CUDA host that was given build/gpu-bundle alone) it runs the bundle
# as it is; in a build without the plugin (make CUDA=0) it says so and
# exits 0. Arguments go to the entry script.
#
#   tests/gpu/run.sh [--expect-gpu] [--examples]
set -eu
cd "$(dirname "$0")/../.."
if [ -f build/libdpm.a ] && [ ! -f build/libdpm_cuda.so ]; then
  echo "skipped: no CUDA plugin in this build (make CUDA=0, or nvcc not found)"
  exit 0
fi
if [ -f build/libdpm.a ] && command -v make >/dev/null; then
  make -s gpu-bundle >/dev/null || {
    echo "tests/gpu/run.sh: make gpu-bundle failed" >&2
    exit 1
  }
fi
if [ ! -f build/gpu-bundle/run.sh ]; then
  echo "tests/gpu/run.sh: build/gpu-bundle is missing (make gpu-bundle where dpm builds," \
    "then copy or carry build/gpu-bundle)" >&2
  exit 1
fi
exec sh build/gpu-bundle/run.sh "$@"
