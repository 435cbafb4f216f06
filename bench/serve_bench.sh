#!/bin/sh
# Runs bench/serve_bench against `specula serve` for --parallel 1, 2, 4, 8:
# plain requests with continuous batching, plain without (--no-batching),
# and speculative requests (SPEC, default a Q4_0 self-draft), one server per
# configuration on a free loopback port. Prints one line per configuration.
# usage: bench/serve_bench.sh MODEL [CLIENTS REQUESTS MAX_TOKENS THREADS SPEC]
# (build first: make build/specula build/bench/serve_bench)
set -eu
M=$1
C=${2:-8}; R=${3:-32}; N=${4:-32}; T=${5:-2}
SPEC=${6:-'{"drafter":"lowbit","lowbit":"q4_0"}'}
B=$(dirname "$0")/../build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
one() { # PARALLEL LABEL SERVER-FLAGS SPECULATIVE
  "$B/specula" serve -m "$M" --port 0 -t "$T" -c 1024 --parallel "$1" $3 2>"$log" &
  pid=$!
  port=""
  while [ -z "$port" ]; do
    sleep 0.2
    port=$(sed -n 's/.*http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  done
  printf 'parallel %d %-22s ' "$1" "$2"
  "$B/bench/serve_bench" "$port" "$C" "$R" "$N" "$4"
  kill -TERM $pid
  wait $pid
}
for p in 1 2 4 8; do
  one $p "plain, batching" "" ""
  [ $p -gt 1 ] && one $p "plain, no batching" "--no-batching" ""
  one $p "speculative" "" "$SPEC"
done
