#!/bin/sh
# Runs every test binary in BUILD/tests and prints one closing line
# "N passed, N failed" summed over all of them. Exit 1 if any test failed
# or any binary crashed.
BUILD=${1:-build}
passed=0; failed=0; crashed=0
cd "$(dirname "$0")/.." || exit 2
for t in "$BUILD"/tests/test_*; do
  case "$t" in *.d) continue;; esac
  [ -x "$t" ] || continue
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep '^SP_RESULT ' | tail -n 1)
  if [ -z "$line" ]; then
    echo "!! $t exited $rc without a result line (crash?)"
    crashed=$((crashed + 1)); failed=$((failed + 1))
    continue
  fi
  set -- $line
  passed=$((passed + $2)); failed=$((failed + $3))
done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$crashed" -eq 0 ]
