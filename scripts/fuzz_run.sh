#!/bin/sh
# Runs every libFuzzer harness in build-fuzz for SECONDS (default 20) on its
# seed corpus fuzz/corpus/NAME (new inputs go to a temporary directory, the
# repository's corpus is read-only here) and prints executions per target.
# Exit 1 if any target finds a crash (its reproducer is kept in build-fuzz/).
SECONDS_EACH=${1:-20}
cd "$(dirname "$0")/.." || exit 2
status=0
for f in build-fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=${f#build-fuzz/fuzz_}
  work=$(mktemp -d)
  log=$work/log
  mkdir "$work/tmp" "$work/new"; TMPDIR="$work/tmp" "$f" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -artifact_prefix=build-fuzz/"$name"- \
      "$work/new" "fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  echo "fuzz $name: ${SECONDS_EACH}s, ${execs:-?} executions, exit $rc"
  if [ "$rc" -ne 0 ]; then tail -n 40 "$log"; status=1; fi
  rm -rf "$work"
done
exit $status
