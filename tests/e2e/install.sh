# `make install DESTDIR=... PREFIX=/usr` puts the programs, headers, the
# systemd unit (ExecStart pointing at /usr/bin/dpmd) and the default config
# in place, and never overwrites a config that is already there. It also
# installs libdpmclient and libdpmpredict (shared, with their soname, and
# static) with their pkg-config files: programs of tests/install/ are built
# against the installed copy only (the DESTDIR's pkg-config files, headers
# and libraries; no -I or -L into the tree) and run, once linked with the
# shared libraries and once with the static ones: the client's ping of a
# missing ipc socket is DPM_IO, and the predictor's top-1 classes for 10
# test images, from a predictor that the installed dpm-train extracted,
# equal the installed `dpmctl predict`'s. The man pages (dpmctl.1, dpmd.8,
# dpm-train.1) and dpmctl's bash completion are installed, groff's man
# macros accept the pages with every warning on, and the completion
# completes a command and an option's value in bash.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
make -s install DESTDIR="$dir" PREFIX=/usr >"$dir.log" 2>&1 ||
  die "make install failed: $(tail -20 "$dir.log"; rm -f "$dir.log")"
rm -f "$dir.log"
for f in usr/bin/dpmd usr/bin/dpmctl usr/bin/dpm-train usr/bin/dpm-pack; do
  [ -f "$dir/$f" ] && [ -x "$dir/$f" ] || die "missing or not executable: $f"
done
for h in include/dpm/*.h; do
  [ -f "$dir/usr/$h" ] || die "missing header: usr/$h"
done
[ -f "$dir/usr/include/dpm/proto/dpm.pb-c.h" ] || die "missing usr/include/dpm/proto/dpm.pb-c.h"
unit=$dir/lib/systemd/system/dpmd.service
[ -f "$unit" ] || die "missing lib/systemd/system/dpmd.service"
grep -qx 'ExecStart=/usr/bin/dpmd --config /etc/dpmd/dpmd.yaml' "$unit" ||
  die "ExecStart: $(grep ExecStart "$unit")"
grep -q '@BINDIR@' "$unit" && die "@BINDIR@ left in the installed unit"
cmp -s systemd/dpmd.yaml "$dir/etc/dpmd/dpmd.yaml" || die "etc/dpmd/dpmd.yaml differs"
mode() { stat -c %a "$1"; }
[ "$(mode "$dir/usr/bin/dpmd")" = 755 ] || die "dpmd mode $(mode "$dir/usr/bin/dpmd")"
[ "$(mode "$unit")" = 644 ] || die "unit mode $(mode "$unit")"
[ "$(mode "$dir/etc/dpmd/dpmd.yaml")" = 644 ] || die "config mode"

# The man pages and the bash completion, written by the programs from their
# tables: installed, and accepted by groff's man macros with every warning
# on (or, without groff, a structural check: .TH first, NAME and SYNOPSIS).
for m in share/man/man1/dpmctl.1 share/man/man1/dpm-train.1 share/man/man1/dpm-pack.1 \
  share/man/man8/dpmd.8; do
  page=$dir/usr/$m
  [ -f "$page" ] || die "missing usr/$m"
  [ "$(mode "$page")" = 644 ] || die "usr/$m mode $(mode "$page")"
  if command -v groff >/dev/null 2>&1; then
    warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || die "groff refuses usr/$m: $warn"
    [ -z "$warn" ] || die "groff warns on usr/$m: $warn"
    text=$(groff -man -Tutf8 "$page" 2>/dev/null | col -b 2>/dev/null || groff -man -Tascii "$page")
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS; do
      case $m in *dpmctl.1) [ "$s" = OPTIONS ] && s="GLOBAL OPTIONS" ;; esac
      echo "$text" | grep -q "^$s" || die "usr/$m has no $s section"
    done
  else
    head -1 "$page" | grep -q '^\.TH ' || die "usr/$m does not start with .TH"
    grep -q '^\.SH NAME' "$page" && grep -q '^\.SH SYNOPSIS' "$page" ||
      die "usr/$m lacks NAME or SYNOPSIS"
  fi
done
grep -q 'extract\\-predictor' "$dir/usr/share/man/man1/dpmctl.1" ||
  die "dpmctl.1 does not document extract-predictor"
comp=$dir/usr/share/bash-completion/completions/dpmctl
[ -f "$comp" ] || die "missing usr/share/bash-completion/completions/dpmctl"
if command -v bash >/dev/null 2>&1; then
  # the completion of "dpmctl sub" and of "dpmctl extract-predictor m --format "
  got=$(bash -c '. "$1"; COMP_WORDS=(dpmctl sub); COMP_CWORD=1; _dpmctl
    echo "${COMPREPLY[*]}"; COMP_WORDS=(dpmctl extract-predictor m --format ""); COMP_CWORD=4
    _dpmctl; echo "${COMPREPLY[*]}"' sh "$comp") || die "the completion fails in bash: $got"
  expect "bash completion" "$(echo "$got" | tr '\n' '/')" "submit/dpm onnx/"
fi

# A second install keeps the administrator's config.
echo "max_models: 1" > "$dir/etc/dpmd/dpmd.yaml"
make -s install DESTDIR="$dir" PREFIX=/usr >/dev/null 2>&1 || die "second make install failed"
[ "$(cat "$dir/etc/dpmd/dpmd.yaml")" = "max_models: 1" ] || die "the config was overwritten"

# ---- the libraries -----------------------------------------------------------
v=$(sed -n 's/^#define DPM_VERSION "\([^"]*\)".*/\1/p' include/dpm/protocol.h)
major=${v%%.*}
lib=$dir/usr/lib
for l in dpmclient dpmpredict; do
  [ -f "$lib/lib$l.a" ] || die "missing usr/lib/lib$l.a"
  [ -f "$lib/lib$l.so.$v" ] || die "missing usr/lib/lib$l.so.$v"
  expect "usr/lib/lib$l.so.$major" "$(readlink "$lib/lib$l.so.$major")" "lib$l.so.$v"
  expect "usr/lib/lib$l.so" "$(readlink "$lib/lib$l.so")" "lib$l.so.$major"
  soname=$(readelf -d "$lib/lib$l.so.$v" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  expect "soname of lib$l.so.$v" "$soname" "lib$l.so.$major"
  [ -f "$lib/pkgconfig/$l.pc" ] || die "missing usr/lib/pkgconfig/$l.pc"
  grep -qx "prefix=/usr" "$lib/pkgconfig/$l.pc" || die "$l.pc: $(cat "$lib/pkgconfig/$l.pc")"
  # the shared library exports its headers' functions and nothing else
  exports=$(nm -D --defined-only "$lib/lib$l.so.$v" | awk '$2 == "T" { print $3 }' | sort)
  case $l in
  dpmclient) h="client.h status.h" other='^dpm__|^protobuf_c_' ;;
  dpmpredict) h="predictor.h status.h" other='^$' ;;
  esac
  # the headers' functions: the lower-case names followed by "(", less the
  # static inline ones
  inline=" $(grep -oh '^static inline .*dpm_[a-z0-9_]*(' include/dpm/*.h |
    sed 's/.*\(dpm_[a-z0-9_]*\)($/\1/' | tr '\n' ' ') "
  for f in $(cd include/dpm && grep -oh 'dpm_[a-z0-9_]*(' $h | tr -d '(' | sort -u); do
    case $inline in *" $f "*) continue ;; esac
    echo "$exports" | grep -qx "$f" || die "lib$l.so does not export $f"
  done
  extra=$(echo "$exports" | grep -v '^dpm_' | grep -Ev "$other" || :)
  [ -z "$extra" ] || die "lib$l.so exports more than its headers: $(echo "$extra" | head -5)"
done

# pkg-config, pointed at the DESTDIR: the .pc files found there, their prefix
# moved to it.
pc() { PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --define-variable=prefix="$dir/usr" "$@"; }
expect "pkg-config --modversion dpmclient" "$(pc --modversion dpmclient)" "$v"
expect "pkg-config --modversion dpmpredict" "$(pc --modversion dpmpredict)" "$v"
flags="$(pc --cflags --libs dpmclient) $(pc --static --cflags --libs dpmpredict)"
case " $flags " in *" -I$dir/usr/include "*) ;; *) die "no -I$dir/usr/include: $flags" ;; esac
case " $flags " in *" -L$lib "*) ;; *) die "no -L$lib: $flags" ;; esac
case $flags in *"$(pwd)"*) die "the flags point into the source tree: $flags" ;; esac

# --static lists what the archives need; -lNAME alone links the shared
# library even so (the README says to write -l:libNAME.a, as build does)
case " $(pc --static --libs dpmpredict) " in
*" -lopenblas "*" -lm "*) ;;
*) die "pkg-config --static --libs dpmpredict: $(pc --static --libs dpmpredict)" ;;
esac
grep -q "pkg-config --static --libs dpmpredict | sed 's/-ldpmpredict/-l:libdpmpredict.a/'" \
  README.md || die "the README does not give the static link line build uses"
(
  cd "$dir" && printf '#include <dpm/predictor.h>\nint main(void) { return dpm_strerror(DPM_OK) == 0; }\n' >s.c &&
    # shellcheck disable=SC2046
    ${CC:-cc} -o s s.c $(pc --cflags dpmpredict) $(pc --static --libs dpmpredict)
) >/dev/null 2>&1 || die "linking with pkg-config --static --libs dpmpredict failed"
readelf -d "$dir/s" | grep -q "libdpmpredict.so" ||
  die "-ldpmpredict with --static linked the archive: the README's -l: advice is stale"

src=$(pwd)/tests/install
mkdir "$dir/b"
# build NAME PACKAGE shared|static: cc in $dir/b, with the package's flags
# (static: its static library and every library it needs, from --static)
build() {
  (
    cd "$dir/b"
    cf=$(pc --cflags "$2")
    if [ "$3" = static ]; then
      libs=$(pc --static --libs "$2" | sed "s/-l$2\( \|\$\)/-l:lib$2.a /")
    else
      libs=$(pc --libs "$2")
    fi
    # shellcheck disable=SC2086
    ${CC:-cc} -std=c11 -Wall -Werror -MMD -o "$1-$3" $cf "$src/$1.c" $libs
  ) >"$dir/cc.log" 2>&1 || die "building tests/install/$1.c ($3): $(cat "$dir/cc.log")"
  grep -q "$dir/usr/include/dpm/" "$dir/b/$1-$3.d" ||
    die "$1.c did not include the installed headers: $(cat "$dir/b/$1-$3.d")"
  if grep -q "$(pwd)/include\|$(pwd)/build" "$dir/b/$1-$3.d"; then
    die "$1.c included headers of the source tree: $(cat "$dir/b/$1-$3.d")"
  fi
  needs=$(readelf -d "$dir/b/$1-$3" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  case "$3 $needs" in
  "shared "*"lib$2.so.$major "*) ;;
  "static "*"lib$2.so"*) die "$1-static needs lib$2.so: $needs" ;;
  static*) ;;
  *) die "$1-shared does not need lib$2.so.$major: $needs" ;;
  esac
}

for how in shared static; do
  build client dpmclient "$how"
  build predict dpmpredict "$how"
done

# The client: a missing socket is DPM_IO at once, naming the path.
for how in shared static; do
  set +e
  out=$(LD_LIBRARY_PATH=$lib "$dir/b/client-$how" "ipc://$dir/none.sock" 2>&1)
  rc=$?
  set -e
  [ "$rc" -eq 0 ] || die "client-$how exited $rc: $out"
  echo "$out" | grep -q "^dpmclient $v: request of [0-9]* bytes$" || die "client-$how: $out"
  echo "$out" | grep -q "^ping: IO: .*$dir/none.sock" || die "client-$how: $out"
done
# the shared one runs with the installed library, the static one without any
LD_LIBRARY_PATH=$lib ldd "$dir/b/client-shared" | grep -q "libdpmclient.so.$major => $lib/" ||
  die "client-shared does not load $lib/libdpmclient.so.$major: $(LD_LIBRARY_PATH=$lib ldd "$dir/b/client-shared")"

# The predictor: extracted by the installed dpm-train after a short run,
# run on 10 test images; dpmctl predict gives the same classes.
images=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
OPENBLAS_NUM_THREADS=1 "$dir/usr/bin/dpm-train" examples/fmnist_mlp.yaml --iters 100 --json \
  --extract-predictor "$dir/pred" --inputs data --outputs softmax >"$dir/train.log" 2>&1 ||
  die "dpm-train: $(tail -5 "$dir/train.log")"
want=$("$dir/usr/bin/dpmctl" predict "$dir/pred" --input "$images" --count 10) ||
  die "dpmctl predict exited $?"
gzip -dc "$images" | head -c $((16 + 10 * 784)) | tail -c $((10 * 784)) >"$dir/pixels"
for how in shared static; do
  got=$(LD_LIBRARY_PATH=$lib "$dir/b/predict-$how" "$dir/pred" 10 <"$dir/pixels") ||
    die "predict-$how exited $?: $got"
  expect "predict-$how's classes" "$got" "$want"
done
LD_LIBRARY_PATH=$lib ldd "$dir/b/predict-shared" | grep -q "libdpmpredict.so.$major => $lib/" ||
  die "predict-shared does not load $lib/libdpmpredict.so.$major"
exit 0
