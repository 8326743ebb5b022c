# systemd/dpmd.service passes `systemd-analyze verify` without printing
# anything (verify only warns about unknown keys and exits 0, so any output
# fails), once @BINDIR@ is replaced as `make install` does: by build/ when
# build/dpmd exists, else by a stand-in dpmd in a temporary directory.
. tests/e2e_lib.sh
command -v systemd-analyze >/dev/null 2>&1 ||
  die "systemd-analyze not found: apt-get install systemd"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ -x build/dpmd ]; then
  bindir=$(pwd)/build
else
  bindir=$dir/bin
  mkdir "$bindir"
  printf '#!/bin/sh\nexit 0\n' > "$bindir/dpmd"
  chmod 755 "$bindir/dpmd"
fi
sed "s|@BINDIR@|$bindir|g" systemd/dpmd.service > "$dir/dpmd.service"
grep -q '@BINDIR@' "$dir/dpmd.service" && die "@BINDIR@ left in the unit"
if ! out=$(systemd-analyze verify "$dir/dpmd.service" 2>&1); then
  die "systemd-analyze verify failed: $out"
fi
[ -z "$out" ] || die "systemd-analyze verify printed: $out"

# The settings the daemon and the docs rely on.
for line in Type=notify NotifyAccess=main \
  "ExecStart=$bindir/dpmd --config /etc/dpmd/dpmd.yaml --foreground" \
  Restart=on-failure DynamicUser=yes RuntimeDirectory=dpmd StateDirectory=dpmd \
  ConfigurationDirectory=dpmd UMask=0007 KillMode=mixed \
  "Environment=OPENBLAS_NUM_THREADS=1 OPENBLAS_THREAD_TIMEOUT=4" \
  NoNewPrivileges=yes ProtectSystem=strict CapabilityBoundingSet=; do
  grep -qxF "$line" "$dir/dpmd.service" || die "the unit lacks the line: $line"
done
exit 0
