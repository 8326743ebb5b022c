#!/bin/sh
# Installs the Debian packages dpm builds, tests and demos with, when missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -e
PKGS="gcc g++ make pkg-config libprotobuf-c-dev protobuf-c-compiler libyaml-dev
libopenblas-dev zlib1g-dev libuv1-dev libnanomsg-dev dataset-fashion-mnist systemd
clang libclang-rt-14-dev libgloo-dev libhiredis-dev redis-server"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing="$missing $p"
done
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
