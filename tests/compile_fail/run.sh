#!/bin/sh
# Device memory's type (daemon/backend/dptr.h) at compile time: every
# tests/compile_fail/*.c but control.c plants one way host code could touch
# device memory (a dereference, an index, a host pointer, memcpy, pointer
# arithmetic) and must FAIL to compile; control.c uses the ways across
# (dpm_dev_to_host and the like) and must compile, so that a failure is the
# planted line's and not a broken include. Compiled with the project's C
# flags (-Werror), syntax only. Prints each file's verdict; exits 1 if a
# planted file compiles or the control does not.
cd "$(dirname "$0")/../.." || exit 2
cc=${CC:-cc}
flags="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -Idaemon -Iclient -I. -Ibuild -fsyntax-only"
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
fail=0
# shellcheck disable=SC2086 # flags: split intended
if $cc $flags tests/compile_fail/control.c >"$out" 2>&1; then
  echo "ok   control.c compiles"
else
  echo "FAIL control.c does not compile:"
  cat "$out"
  fail=1
fi
for f in tests/compile_fail/*.c; do
  [ "$f" = tests/compile_fail/control.c ] && continue
  # shellcheck disable=SC2086
  if $cc $flags "$f" >"$out" 2>&1; then
    echo "FAIL $(basename "$f") compiles: host code can touch device memory"
    fail=1
  else
    echo "ok   $(basename "$f") refused: $(grep -m1 'error:' "$out" | sed 's/.*error: //')"
  fi
done
exit $fail
