#!/bin/sh
# The adaptive draft length at two depths (issue #18, "Speculation at
# depth"): plain decoding against adaptive speculation with a draft model,
# in one `specula bench` run per depth, T = 0. Depth 128: the 8 short
# prompts of bench/prompts/stories8.jsonl; depth about 4000: 4 prompts of
# about 8,300 characters (about 4,000 tokens of the stories260K vocabulary)
# from ../shared/data/tinystories_val_sample.txt.
# usage: bench/adapt_depth.sh TARGET.gguf DRAFT.gguf [SHARED]
#   e.g. bench/adapt_depth.sh synth1b-q8_0.gguf synth1b-q4_K_M.gguf
#   (synth-1b: specula mkmodel --dim 2048 --layers 16 --heads 32 --kv-heads 32
#    --ffn 5632 --seed 1 --type q8_0 / q4_K_M, the stories260K vocabulary)
# Environment: THREADS (2), N (64 tokens per prompt), N_DEEP (128 at depth),
# CONFIGS (draft=model). Every prompt runs to its N tokens (--ignore-eos).
set -eu
T=${1:?target}; D=${2:?draft}; SH=${3:-${SPECULA_SHARED:-$(dirname "$0")/../../shared}}
S="$(dirname "$0")/../build/specula"
TH=${THREADS:-2}; N=${N:-64}; ND=${N_DEEP:-128}; C=${CONFIGS:-draft=model}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$SH/data/tinystories_val_sample.txt" "$TMP/deep.jsonl" <<'PY'
import json, sys
paras = [p.strip() for p in open(sys.argv[1]).read().split("\n") if p.strip()]
with open(sys.argv[2], "w") as f:
    i = 0
    for _ in range(4):
        s = ""
        while len(s) < 8300:
            s += paras[i] + "\n"
            i += 1
        f.write(json.dumps({"prompt": s[:8400]}) + "\n")
PY
echo "=== depth 128"
"$S" bench -m "$T" -md "$D" --prompts "$(dirname "$0")/prompts/stories8.jsonl" -n "$N" -t "$TH" --temp 0 --ignore-eos \
    --seed 7 --configs "$C" --out "$TMP/shallow" 2>&1 | sed -n '/^configuration/,/^results/p' | grep -v '^results'
echo "=== depth about 4000"
"$S" bench -m "$T" -md "$D" --prompts "$TMP/deep.jsonl" -n "$ND" -t "$TH" --temp 0 -c 4352 --ignore-eos \
    --seed 7 --configs "$C" --out "$TMP/deep" 2>&1 | sed -n '/^configuration/,/^results/p' | grep -v '^results'
