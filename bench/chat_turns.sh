#!/bin/sh
# Multi-turn chat benchmark (issue 22): CONVS conversations of TURNS turns
# at once (bench/chat_turns.py: each turn re-sends the whole transcript, as
# chat clients do, streamed at temperature 0), against `specula serve` with
# its default (the prompt cache on) and with cache_prompt false, and against
# llama.cpp's llama-server on the same file in the same run, with and
# without its cache. Prints a table of the median time to first token per
# turn (seconds) for each server, the prompt tokens of each turn, and the
# generated tokens per second over the whole run.
# usage: bench/chat_turns.sh MODEL [CONVS TURNS MAX_TOKENS THREADS PARALLEL CTX]
#   defaults: 8 conversations, 6 turns, 64 tokens a turn, 2 threads,
#   8 slots of 2048 tokens. The lead's run: bench/chat_turns.sh /work/models/l1b-q4_K_M.gguf
# environment: SPECULA (default build/specula), LLAMA_SERVER (default
#   /work/ref/llama.cpp/build/bin/llama-server; "none" skips it),
#   SPECULA_FLAGS (more serve flags, e.g. "--chat-template chatml"),
#   MODES (default "specula specula-nocache llama llama-nocache": each server
#   at its default, the prompt cache on, and with cache_prompt false).
set -eu
M=$1
CONVS=${2:-8}; TURNS=${3:-6}; N=${4:-64}; T=${5:-2}; P=${6:-8}; CTX=${7:-2048}
here=$(dirname "$0")
BIN=${SPECULA:-$here/../build/specula}
LLAMA=${LLAMA_SERVER:-/work/ref/llama.cpp/build/bin/llama-server}
MODES=${MODES:-"specula specula-nocache llama llama-nocache"}
SPECULA_FLAGS=${SPECULA_FLAGS:-}
out=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM $pid 2>/dev/null; rm -rf "$out"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() { # PORT PID LOG
  for _ in $(seq 1 1200); do
    curl -fs "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "chat_turns: the server did not start:" >&2; tail -5 "$3" >&2; exit 1; }
    sleep 0.25
  done
  echo "chat_turns: the server did not answer /health" >&2; exit 1
}

for mode in $MODES; do
  port=$(free_port)
  case $mode in
    specula*)
      "$BIN" serve -m "$M" --port "$port" -t "$T" -c "$CTX" --parallel "$P" $SPECULA_FLAGS 2>"$out/$mode.log" &
      ;;
    llama*)
      [ "$LLAMA" = none ] && continue
      "$LLAMA" -m "$M" --port "$port" -t "$T" -c $((CTX * P)) -np "$P" --no-webui >"$out/$mode.log" 2>&1 &
      ;;
  esac
  pid=$!
  wait_health "$port" "$pid" "$out/$mode.log"
  case $mode in *-nocache) cache=off ;; *) cache=default ;; esac
  python3 "$here/chat_turns.py" "$port" "$mode" "$CONVS" "$TURNS" "$N" "$cache" >"$out/$mode.json"
  kill -TERM $pid
  wait $pid || true
  pid=""
done

python3 - "$out" $MODES <<'EOF'
import json, os, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
rows = {}
for m in modes:
    p = os.path.join(out, m + ".json")
    if os.path.exists(p):
        rows[m] = json.load(open(p))
if not rows:
    sys.exit("chat_turns: no results")
turns = max(len(r["ttft"]) for r in rows.values())
print("time to first token per turn (median over conversations, seconds); prompt tokens (median)")
print("%-6s" % "turn" + "".join("%18s" % m for m in rows) + "%10s" % "prompt")
for t in range(turns):
    line = "%-6d" % (t + 1)
    prompt = None
    for m, r in rows.items():
        v = [x for x in r["ttft"][t] if x is not None] if t < len(r["ttft"]) else []
        line += "%18s" % ("%.3f" % statistics.median(v) if v else "n/a")
        pt = [x for x in r["prompt_tokens"][t] if x] if t < len(r["prompt_tokens"]) else []
        if pt and prompt is None:
            prompt = statistics.median(pt)
    print(line + "%10s" % ("%d" % prompt if prompt else "-"))
line = "%-6s" % "last/1"
for m, r in rows.items():
    a = [x for x in r["ttft"][0] if x is not None]
    b = [x for x in r["ttft"][-1] if x is not None]
    line += "%18s" % ("%.2fx" % (statistics.median(b) / statistics.median(a)) if a and b else "n/a")
print(line)
line = "%-6s" % "tok/s"
for m, r in rows.items():
    line += "%18s" % ("%.1f" % (r["generated"] / r["wall"]) if r["wall"] > 0 else "n/a")
print(line)
for m, r in rows.items():
    for e in r["errors"][:3]:
        print("%s: %s" % (m, e))
EOF
