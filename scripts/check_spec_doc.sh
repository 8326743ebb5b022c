#!/bin/sh
# docs/SPEC.md is what build/tests/spec_doc writes from docs/SPEC.md.in and
# the code's key and op tables (tests/tools/spec_doc.c): prints the
# difference and exits 1 when it is not (rewrite it with make docs/SPEC.md).
cd "$(dirname "$0")/.." || exit 2
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
build/tests/spec_doc docs/SPEC.md.in >"$out" || exit 1
diff -u docs/SPEC.md "$out" && exit 0
echo "docs/SPEC.md is out of date: run make docs/SPEC.md and commit it"
exit 1
