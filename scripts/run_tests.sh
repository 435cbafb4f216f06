#!/bin/sh
# Runs every test binary in BUILD/tests, JOBS at a time (default 1; `make
# check` uses 2), prints each binary's output in order and one closing line
# "tests: N passed, N failed" summed over all of them, naming the failing
# binaries (and their first failure lines) just before it. Exit 1 if any test
# failed or any binary crashed, 2 if ../shared (or $SPECULA_SHARED) is missing.
# usage: scripts/run_tests.sh [BUILD] [JOBS]
BUILD=${1:-build}
JOBS=${2:-1}
cd "$(dirname "$0")/.." || exit 2
SHARED=${SPECULA_SHARED:-../shared}
for f in models/stories260K.gguf models/stories260K.bin models/tok512.bin \
         data/tinystories_val_sample.txt reference/README.md; do
  if [ ! -f "$SHARED/$f" ]; then
    echo "tests: missing $SHARED/$f: the suite reads the shared models and reference outputs" \
         "from ../shared beside the checkout (or from \$SPECULA_SHARED)" >&2
    exit 2
  fi
done
out=$(mktemp -d) || exit 2
trap 'rm -rf "$out"' EXIT
ls "$BUILD"/tests/test_* 2>/dev/null | grep -v '\.d$' > "$out/list"
# each binary writes NAME.out and NAME.rc
xargs -P "$JOBS" -I{} sh -c 'n=$(basename "$1"); "$1" > "$2/$n.out" 2>&1; echo $? > "$2/$n.rc"' _ {} "$out" < "$out/list"
passed=0; failed=0; crashed=0; bad=""
while read -r t; do
  n=$(basename "$t")
  cat "$out/$n.out"
  line=$(grep '^SP_RESULT ' "$out/$n.out" | tail -n 1)
  if [ -z "$line" ]; then
    echo "!! $t exited $(cat "$out/$n.rc") without a result line (crash?)"
    crashed=$((crashed + 1)); failed=$((failed + 1)); bad="$bad $n"
    continue
  fi
  set -- $line
  passed=$((passed + $2)); failed=$((failed + $3))
  [ "$3" -ne 0 ] && bad="$bad $n"
done < "$out/list"
# failing binaries are named last, so a log cut to its tail still says which
if [ -n "$bad" ]; then
  for n in $bad; do grep -E 'FAILED|ERROR|^!!|[Ee]rror' "$out/$n.out" | head -5 | sed "s/^/  $n: /"; done
  echo "tests: $passed passed, $failed failed (in:$bad)"
else
  echo "tests: $passed passed, $failed failed"
fi
[ "$failed" -eq 0 ] && [ "$crashed" -eq 0 ]
