#!/bin/sh
# The layering the tree keeps: the CLI (tools/) includes only the public API
# (include/*.h), the developer tooling (include/dev/) and its own headers,
# never the library's internal headers (src/). Prints offenders, exit 1.
cd "$(dirname "$0")/.." || exit 2
bad=0
for f in tools/*.c tools/*.h; do
  grep -o '#include "[^"]*"' "$f" | sed 's/#include "\(.*\)"/\1/' | while read -r h; do
    case "$h" in
      dev/*) [ -f "include/$h" ] || echo "$f: $h is not in include/dev";;
      *) if [ -f "include/$h" ] || [ -f "tools/$h" ]; then :; else echo "$f includes $h, which is not public"; fi;;
    esac
  done
done | { out=$(cat); [ -z "$out" ] || { echo "$out"; exit 1; }; }
