#!/bin/sh
# Runs the libFuzzer harnesses of build-fuzz (`make fuzz`) one after another
# (one job each: the machine is shared) and prints a summary per target:
# seconds, executions, edge coverage (cov), features (ft), corpus entries,
# crashes. Exit 1 if any target crashed, leaked, timed out or ran out of
# memory (the reproducer is kept as build-fuzz/NAME-crash-..., replay it
# with build-fuzz/fuzz_NAME FILE).
#
#   scripts/fuzz_run.sh [SECONDS] [NAME[=SECONDS]]...
#
# SECONDS (default 20, CI's) is the time of every target not given its own;
# NAMEs pick targets (default: every build-fuzz/fuzz_*), e.g.
#   scripts/fuzz_run.sh 300 gguf=600           # gguf 10 min, the others 5
#   scripts/fuzz_run.sh 60 serve_request       # one target
# Seeds, read in place (never copied into the repository):
#   fuzz/corpus/NAME      the hand-made and generated seeds;
#   fuzz/regress/NAME     inputs that once crashed it (run first, every time);
#   for gguf, the .gguf files of ../shared/reference/{formats,arch/models,
#   arch2026/models} and ../shared/models up to FUZZ_SEED_MAX_KB (default
#   3072) KiB each, when present ($SPECULA_SHARED overrides ../shared).
# fuzz/NAME.dict is passed as the dictionary when it exists. New inputs go to
# a temporary directory, or to $FUZZ_KEEP/NAME when FUZZ_KEEP is set (to
# grow a corpus over long runs). FUZZ_ARGS adds libFuzzer flags.
cd "$(dirname "$0")/.." || exit 2
default=20
case "${1:-}" in [0-9]*) default=$1; shift;; esac
shared=${SPECULA_SHARED:-../shared}
max_kb=${FUZZ_SEED_MAX_KB:-3072}

targets=""
if [ $# -eq 0 ]; then
  for f in build-fuzz/fuzz_*; do [ -x "$f" ] && targets="$targets ${f#build-fuzz/fuzz_}"; done
else
  targets="$*"
fi

summary=$(mktemp)
status=0
for spec in $targets; do
  name=${spec%%=*}
  secs=$default
  [ "$spec" != "$name" ] && secs=${spec#*=}
  bin=build-fuzz/fuzz_$name
  if [ ! -x "$bin" ]; then echo "fuzz_run: no $bin (make fuzz)" >&2; status=1; continue; fi
  work=$(mktemp -d)
  mkdir "$work/tmp" "$work/seeds"
  new="$work/new"
  if [ -n "${FUZZ_KEEP:-}" ]; then new="$FUZZ_KEEP/$name"; fi
  mkdir -p "$new"
  dirs="fuzz/corpus/$name"
  [ -d "fuzz/regress/$name" ] && dirs="fuzz/regress/$name $dirs"
  maxlen=""
  if [ "$name" = gguf ]; then
    n=0 big=0
    for d in "$shared/reference/formats" "$shared/reference/arch/models" "$shared/reference/arch2026/models" \
             "$shared/models"; do
      for g in "$d"/*.gguf; do
        [ -f "$g" ] || continue
        [ "$(( $(wc -c <"$g") / 1024 ))" -le "$max_kb" ] || continue
        n=$((n + 1))
        sz=$(wc -c <"$g")
        [ "$sz" -gt "$big" ] && big=$sz
        ln -s "$(cd "$(dirname "$g")" && pwd)/$(basename "$g")" "$work/seeds/$n-$(basename "$g")"
      done
    done
    dirs="$dirs $work/seeds"
    # libFuzzer would cut inputs to 1 MiB (or the largest seed) otherwise
    [ "$big" -gt 0 ] && maxlen="-max_len=$big"
  fi
  dict=""
  [ -f "fuzz/$name.dict" ] && dict="-dict=fuzz/$name.dict"
  log=$work/log
  # shellcheck disable=SC2086
  TMPDIR="$work/tmp" "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix=build-fuzz/"$name"- $dict $maxlen ${FUZZ_ARGS:-} "$new" $dirs >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -n 1)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
  crashes=$(grep -c 'Test unit written to' "$log")
  [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1
  printf '%-16s %6ss %12s %7s %7s %7s %7s\n' "$name" "$secs" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
      "$crashes" >>"$summary"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz $name: exit $rc" >&2
    grep -E 'runtime error|ERROR:|SUMMARY:|Test unit written|ALARM' "$log" | head -n 20 >&2
    tail -n 40 "$log" >&2
    status=1
  fi
  rm -rf "$work"
done
printf '%-16s %7s %12s %7s %7s %7s %7s\n' target time executions cov ft corpus crashes
cat "$summary"
rm -f "$summary"
exit $status
