#!/bin/sh
# Runs bench/serve_bench against `specula serve` for --parallel 1, 2, 4, 8
# (after one warm-up request per slot, not measured),
# one server per configuration on a free loopback port, interleaved per
# --parallel value: plain requests in shared passes (--batching on) and on
# their own slots (--batching off); speculative requests (SPEC, default a
# Q4_0 self-draft) in the shared pass, on their own slots beside it (the
# behaviour before speculative requests joined the pass: the A/B), and with
# the server's default (--batching auto). Prints one line per configuration.
# usage: bench/serve_bench.sh MODEL [CLIENTS REQUESTS MAX_TOKENS THREADS SPEC]
# environment: PARALLEL (default "1 2 4 8"), SPECULA (the binary to serve with,
# default build/specula), SERVE_FLAGS (more server flags,
# e.g. "-md DRAFT.gguf"), ONLY_SPEC=1 (the speculative rows only), COST_AB=1
# (also the shared pass with --spec-cost wall: the adaptive draft length
# charged the pass's wall time instead of its share)
# SERVE_BENCH_MIX=1 (passed on to serve_bench: every other request plain).
# (build first: make build/specula build/bench/serve_bench)
set -eu
M=$1
C=${2:-8}; R=${3:-32}; N=${4:-32}; T=${5:-2}
SPEC=${6:-'{"drafter":"lowbit","lowbit":"q4_0"}'}
PARALLEL=${PARALLEL:-"1 2 4 8"}
SERVE_FLAGS=${SERVE_FLAGS:-}
ONLY_SPEC=${ONLY_SPEC:-0}
COST_AB=${COST_AB:-0}
B=$(dirname "$0")/../build
BIN=${SPECULA:-$B/specula}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
one() { # PARALLEL LABEL SERVER-FLAGS SPECULATIVE
  "$BIN" serve -m "$M" --port 0 -t "$T" -c 1024 --parallel "$1" $SERVE_FLAGS $3 2>"$log" &
  pid=$!
  port=""
  while [ -z "$port" ]; do
    sleep 0.2
    port=$(sed -n 's/.*http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  done
  printf 'parallel %d %-22s ' "$1" "$2"
  "$B/bench/serve_bench" "$port" "$C" "$R" "$N" "$4" "$1"
  kill -TERM $pid
  wait $pid
}
for p in $PARALLEL; do
  if [ "$ONLY_SPEC" != 1 ]; then
    one $p "plain, batching" "--batching on" ""
    [ $p -gt 1 ] && one $p "plain, no batching" "--batching off" ""
  fi
  one $p "speculative, shared" "--batching on" "$SPEC"
  [ "$COST_AB" = 1 ] && [ $p -gt 1 ] && one $p "spec., shared, wall" "--batching on --spec-cost wall" "$SPEC"
  if [ $p -gt 1 ]; then
    one $p "speculative, own slot" "--batching on --no-spec-batching" "$SPEC"
    one $p "speculative, auto" "" "$SPEC"
  fi
done
