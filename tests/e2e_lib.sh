# Helpers for end-to-end checks (sourced).
set -eu
die() { echo "$*" >&2; exit 1; }
# json_field LINE KEY: the numeric value of KEY in a one-line JSON object.
json_field() { echo "$1" | sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p"; }
# at_least VALUE MIN: exits non-zero unless VALUE >= MIN.
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v + 0 >= m + 0) }'; }
# expect WHAT ACTUAL WANTED: fails unless ACTUAL is WANTED.
expect() { [ "$2" = "$3" ] || die "$1: got '$2', expected '$3'"; }
