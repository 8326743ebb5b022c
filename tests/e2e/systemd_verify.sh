# The unit `make unit` writes from systemd/dpmd.service.in (what `make
# install` installs) passes `systemd-analyze verify` without printing
# anything (verify only warns about unknown keys and exits 0, so any output
# fails), its dpmd in build/ when build/dpmd exists, else a stand-in dpmd in
# a temporary directory. The repository holds only the template (a
# .service.in, which nobody mistakes for a unit to verify as it is).
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
[ ! -e systemd/dpmd.service ] || die "systemd/dpmd.service: the template is dpmd.service.in"
make -s unit UNIT_BINDIR="$bindir" UNIT_OUT="$dir/dpmd.service" >/dev/null ||
  die "make unit failed"
grep -q '@BINDIR@' "$dir/dpmd.service" && die "@BINDIR@ left in the unit"
if ! out=$(systemd-analyze verify "$dir/dpmd.service" 2>&1); then
  die "systemd-analyze verify failed: $out"
fi
[ -z "$out" ] || die "systemd-analyze verify printed: $out"

# The settings the daemon and the docs rely on.
for line in Type=notify NotifyAccess=main \
  "ExecStart=$bindir/dpmd --config /etc/dpmd/dpmd.yaml" \
  Restart=on-failure DynamicUser=yes RuntimeDirectory=dpmd StateDirectory=dpmd \
  ConfigurationDirectory=dpmd UMask=0007 KillMode=mixed \
  "Environment=OPENBLAS_NUM_THREADS=1 OPENBLAS_THREAD_TIMEOUT=4" \
  NoNewPrivileges=yes ProtectSystem=strict CapabilityBoundingSet=; do
  grep -qxF "$line" "$dir/dpmd.service" || die "the unit lacks the line: $line"
done
# it cites only what the repository has
for f in $(grep -o '[A-Za-z_./-]*\.md' systemd/dpmd.service.in); do
  [ -e "$f" ] || [ -e "systemd/$f" ] || die "the unit cites $f, which is not in the repository"
done
exit 0
