#!/bin/sh
# Every document a tracked file cites by name (a *.md file, in a comment or a
# message) is in the repository: beside the citing file, or by its path
# from the root. Prints each citation of a missing one; exits 1 if any.
cd "$(dirname "$0")/.." || exit 2
bad=$(git ls-files | grep -v '\.md$' | while read -r f; do
  [ -f "$f" ] || continue
  grep -noE '[A-Za-z0-9_./-]+\.md\b' "$f" 2>/dev/null | while IFS=: read -r line doc; do
    case $doc in http* | */*/*/*) continue ;; esac
    [ -e "$doc" ] || [ -e "$(dirname "$f")/$doc" ] || echo "$f:$line: cites $doc"
  done
done)
[ -z "$bad" ] && exit 0
echo "documents cited but not in the repository:"
echo "$bad"
exit 1
