#!/bin/sh
# check_api: docs/DESIGN.md's count and list of the public API match the
# headers. DESIGN states "The public API: N headers, M function
# declarations" and "Developer tooling: N headers, M function declarations",
# and lists every header of include/ and include/dev/ in a table row
# "| `NAME.h` | what | COUNT |" (dev headers as `dev/NAME.h`). A function
# declaration is a line that starts at column 0 with a return type followed
# by sp_NAME( (typedefs, macros and static inline helpers are not counted).
# Prints each mismatch, one line each, and exits 1 if there is any.
# usage: scripts/check_api.sh [ROOT]   (default: this script's checkout)
cd "${1:-$(dirname "$0")/..}" || exit 2
doc=docs/DESIGN.md

count() { # functions declared in header $1
  grep -cE '^[A-Za-z_][A-Za-z0-9_ ]*[ *]+sp_[a-z0-9_]+\(' "$1" |
    tr -d ' '
}
# the count typedef/static lines would add, subtracted (they match the pattern)
skip() {
  grep -E '^[A-Za-z_][A-Za-z0-9_ ]*[ *]+sp_[a-z0-9_]+\(' "$1" | grep -cE '^(typedef|static|extern)' |
    tr -d ' '
}

bad=0
for set in public dev; do
  if [ $set = public ]; then files=$(ls include/*.h); label="The public API"; prefix=""
  else files=$(ls include/dev/*.h); label="Developer tooling"; prefix="dev/"; fi
  nh=0; nf=0
  for f in $files; do
    name="$prefix$(basename "$f")"
    n=$(( $(count "$f") - $(skip "$f") ))
    nh=$((nh + 1)); nf=$((nf + n))
    row=$(grep -E "^\| \`$name\` \|" "$doc" | head -n 1)
    if [ -z "$row" ]; then
      echo "$doc: no row for $name ($n function declarations)"; bad=1; continue
    fi
    stated=$(echo "$row" | sed -n 's/.*| *\([0-9][0-9]*\) *| *$/\1/p')
    [ "$stated" = "$n" ] || { echo "$doc: $name has $n function declarations, the table says ${stated:-nothing}"; bad=1; }
  done
  line=$(grep -oE "$label: [0-9]+ headers, [0-9]+ function declarations" "$doc" | head -n 1)
  want="$label: $nh headers, $nf function declarations"
  [ "$line" = "$want" ] || { echo "$doc: says '${line:-nothing}', the headers make '$want'"; bad=1; }
done
# rows for headers that are gone
grep -oE '^\| `(dev/)?[a-z_0-9]+\.h` \|' "$doc" | sed 's/^| `\(.*\)` |$/\1/' | while read -r h; do
  case "$h" in
    sp_*|specula.h|dev/*) [ -f "include/$h" ] || echo "$doc: lists $h, which include/ does not have";;
  esac
done | { out=$(cat); [ -z "$out" ] || { echo "$out"; exit 1; }; } || bad=1
exit $bad
