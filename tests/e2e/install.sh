# `make install DESTDIR=... PREFIX=/usr` puts the programs, headers, the
# systemd unit (ExecStart pointing at /usr/bin/dpmd) and the default config
# in place, and never overwrites a config that is already there.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
make -s install DESTDIR="$dir" PREFIX=/usr >"$dir.log" 2>&1 ||
  die "make install failed: $(tail -20 "$dir.log"; rm -f "$dir.log")"
rm -f "$dir.log"
for f in usr/bin/dpmd usr/bin/dpmctl usr/bin/dpm-train; do
  [ -f "$dir/$f" ] && [ -x "$dir/$f" ] || die "missing or not executable: $f"
done
for h in include/dpm/*.h; do
  [ -f "$dir/usr/$h" ] || die "missing header: usr/$h"
done
[ -f "$dir/usr/include/dpm/proto/dpm.pb-c.h" ] || die "missing usr/include/dpm/proto/dpm.pb-c.h"
unit=$dir/lib/systemd/system/dpmd.service
[ -f "$unit" ] || die "missing lib/systemd/system/dpmd.service"
grep -qx 'ExecStart=/usr/bin/dpmd --config /etc/dpmd/dpmd.yaml --foreground' "$unit" ||
  die "ExecStart: $(grep ExecStart "$unit")"
grep -q '@BINDIR@' "$unit" && die "@BINDIR@ left in the installed unit"
cmp -s systemd/dpmd.yaml "$dir/etc/dpmd/dpmd.yaml" || die "etc/dpmd/dpmd.yaml differs"
mode() { stat -c %a "$1"; }
[ "$(mode "$dir/usr/bin/dpmd")" = 755 ] || die "dpmd mode $(mode "$dir/usr/bin/dpmd")"
[ "$(mode "$unit")" = 644 ] || die "unit mode $(mode "$unit")"
[ "$(mode "$dir/etc/dpmd/dpmd.yaml")" = 644 ] || die "config mode"

# A second install keeps the administrator's config.
echo "max_models: 1" > "$dir/etc/dpmd/dpmd.yaml"
make -s install DESTDIR="$dir" PREFIX=/usr >/dev/null 2>&1 || die "second make install failed"
[ "$(cat "$dir/etc/dpmd/dpmd.yaml")" = "max_models: 1" ] || die "the config was overwritten"
exit 0
