#!/bin/sh
# Installs the Debian packages dpm builds, tests and demos with, when missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
#   scripts/deps.sh               the packages (make deps, and before any build)
#   scripts/deps.sh --onnx-venv   build/onnx-venv only (make test, make check)
set -e
PKGS="gcc g++ make pkg-config libprotobuf-c-dev protobuf-c-compiler libyaml-dev
libopenblas-dev zlib1g-dev libuv1-dev libnanomsg-dev dataset-fashion-mnist systemd
clang libclang-rt-14-dev libgloo-dev libhiredis-dev redis-server python3-venv
bubblewrap liblmdb-dev libpng-dev libjpeg62-turbo-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing="$missing $p"
done

# build/onnx-venv: a virtualenv with onnx, onnxruntime, numpy and pillow from PyPI
# (about 225 MB), for the ONNX export's test (tests/e2e/onnx_export.sh)
# and the image decode's reference check against Pillow (tests/e2e/image_vs_pil.sh)
# alone, so only the test targets make it; made once (the
# stamp .complete marks a finished install). Where PyPI cannot be reached
# the build goes on: build/onnx-venv.failed keeps pip's reason, the test
# prints it and fails, and deps tries again once that file is removed.
onnx_venv() {
  v=build/onnx-venv
  # A virtualenv made before pillow was on the list gets it added once.
  if [ -f "$v/.complete" ] && ! [ -f "$v/.pillow" ] &&
    "$v/bin/python3" -m pip install -q --timeout 20 --retries 2 pillow >/dev/null 2>&1; then
    touch "$v/.pillow"
  fi
  [ -f "$v/.complete" ] || [ -f "$v.failed" ] || ! [ -x /usr/bin/python3 ] && return 0
  mkdir -p build
  exec 9>"$v.lock" # builds run deps side by side: one of them creates it
  flock 9
  if [ -f "$v/.complete" ] || [ -f "$v.failed" ]; then
    exec 9>&-
    return 0
  fi
  echo "deps: creating $v (onnx, onnxruntime, numpy, pillow from PyPI)"
  rm -rf "$v"
  if /usr/bin/python3 -m venv "$v" >"$v.log" 2>&1 &&
    "$v/bin/pip" install -q --timeout 20 --retries 2 onnx onnxruntime numpy pillow >>"$v.log" 2>&1
  then
    touch "$v/.complete" "$v/.pillow"
    rm -f "$v.log"
  else
    rm -rf "$v"
    mv "$v.log" "$v.failed"
    echo "deps: could not create $v (tests/e2e/onnx_export.sh will fail); see $v.failed," \
      "remove it to try again" >&2
  fi
  exec 9>&-
}

if [ "${1:-}" = --onnx-venv ]; then
  onnx_venv
  exit 0
fi
[ -z "$missing" ] && exit 0
# Another apt (unattended upgrades on a fresh machine) may hold the dpkg
# lock: wait for it, up to 10 minutes, instead of failing at once.
wait_lock="-o DPkg::Lock::Timeout=600"
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing$missing"
  (apt-get $wait_lock update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get $wait_lock install -y --no-install-recommends \
      $missing) >&2
else
  echo "deps: missing packages; run:  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
