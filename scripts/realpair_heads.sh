#!/usr/bin/env bash
# EAGLE-3 heads on the real TinyStories pair (issue #24, "evidence on real
# weights"): trains a head for the 14.6M target of scripts/train_target.sh
# with `specula train-head` (fixed seed), then benchmarks, at T=0 and T=1,
# plain decoding, stories260K as a separate draft (chain gamma 4, adaptive,
# tree) and the head (chain gamma 4, tree) on the first prompts of
# stories.jsonl, and prints one table: acceptance, tokens per target step,
# drafting cost and tokens/s against plain decoding of the same bench run.
# Last, the drafting step of an l1b-shaped head (random weights, the shape
# and draft vocabulary of public Llama 3 EAGLE-3 heads) against a target
# step of the l1b model.
#
# usage: scripts/realpair_heads.sh [DIR] [SHARED]
#   DIR (default /tmp/specula-target) holds target15m.gguf, train.txt and
#   stories.jsonl (scripts/train_target.sh DIR SHARED makes them when
#   missing: ~20-30 min on 2 cores). The head is kept as DIR/head-eagle3.gguf;
#   when it exists, training is skipped (the benchmark part alone took 15 min
#   at load average ~15, plain decoding at ~10 tok/s; a few minutes on a
#   quiet machine). Environment overrides (for a quick trial, e.g. with stories260K
#   as a stand-in target): TARGET, DRAFT, HEAD, HEAD_STEPS, HEAD_FFN,
#   HEAD_UNROLL, N (tokens per prompt), PROMPTS (how many), TREE, L1B ("" skips
#   the l1b timing), TEMPS.
#
# Head choice (measured under load, docs/RESULTS.md): the trainer's loops are
# scalar and one-threaded, so its cost is ~6 x head parameters per token per
# unrolled step. The target's layers 2,4,5 (low, middle, high: train-head's
# default for 8 layers), FFN 512 instead of the target's 1024 (half the
# layer's cost), 3 unrolled steps (the training-time test: steps 2 and 3 read
# the head's own features, as chains of 4 do), 200 steps of 4 windows x 64
# tokens at lr 3e-3 -> 3e-4: 4.7 min of CPU (29 min wall at load average
# ~15 on 2 vCPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/specula-target}
SHARED=${2:-${SPECULA_SHARED:-../shared}}
TARGET=${TARGET:-$DIR/target15m.gguf}
DRAFT=${DRAFT:-$SHARED/models/stories260K.gguf}
HEAD=${HEAD:-$DIR/head-eagle3.gguf}
HEAD_STEPS=${HEAD_STEPS:-200}
HEAD_FFN=${HEAD_FFN:-512}
HEAD_UNROLL=${HEAD_UNROLL:-3}
N=${N:-48}
PROMPTS=${PROMPTS:-10}
TREE=${TREE:-2x2x1x1}
TEMPS=${TEMPS:-0 1}
L1B=${L1B-/work/models/l1b-q4_K_M.gguf}
GGUF_PY=${GGUF_PY:-/work/ref/llama.cpp/gguf-py}
QUANTIZE=${QUANTIZE:-/work/ref/llama.cpp/build/bin/llama-quantize}

make -j2 CC=clang BUILD=build-clang build-clang/specula >/dev/null  # the trainer: clang's build is ~2x faster
make -j2 build/specula >/dev/null
mkdir -p "$DIR"
if [ ! -f "$TARGET" ]; then
    [ "$TARGET" = "$DIR/target15m.gguf" ] || { echo "no target $TARGET" >&2; exit 1; }
    scripts/train_target.sh "$DIR" "$SHARED"
fi
[ -f "$DIR/train.txt" ] && [ -f "$DIR/stories.jsonl" ] || python3 scripts/osd_data.py "$SHARED" "$DIR" >/dev/null

if [ ! -f "$HEAD" ]; then
    t0=$(date +%s)
    build-clang/specula train-head -m "$TARGET" --head eagle3 --data "$DIR/train.txt" --head-ffn "$HEAD_FFN" \
        --unroll "$HEAD_UNROLL" --steps "$HEAD_STEPS" --batch 4 --seq 64 --lr 3e-3 --lr-min 3e-4 --warmup 10 \
        --seed 1 -t 2 --out "$HEAD" 2>&1 | tee "$DIR/head.log"
    echo "train-head: $(( $(date +%s) - t0 )) s"
fi

head -n "$PROMPTS" "$DIR/stories.jsonl" > "$DIR/heads_prompts.jsonl"
for T in $TEMPS; do
    # a head must be bench's only -md: one bench run per drafter kind, each with its own plain decoding
    build/specula bench -m "$TARGET" -md "$DRAFT" --prompts "$DIR/heads_prompts.jsonl" -n "$N" --temp "$T" \
        --seed 7 -t 2 --configs "gamma=4;adaptive=1;tree=$TREE" --out "$DIR/heads_t${T}_draft" >/dev/null
    build/specula bench -m "$TARGET" -md "$HEAD" --prompts "$DIR/heads_prompts.jsonl" -n "$N" --temp "$T" \
        --seed 7 -t 2 --configs "draft=eagle3,gamma=4;draft=eagle3,tree=$TREE" --out "$DIR/heads_t${T}_head" \
        >/dev/null
done

if [ -n "$L1B" ] && [ -f "$L1B" ]; then
    # one head drafting step against one target step on the l1b shape: a
    # random head (acceptance ~0: every iteration drafts 4 steps and verifies)
    # (Llama 3 heads: dim and FFN of the target, draft vocabulary 32000),
    # quantized like the target (Q4_K_M; an F16 head measured 24% of a step)
    if [ ! -f "$DIR/l1b-head-q4_K_M.gguf" ]; then
        PYTHONPATH="$GGUF_PY" /usr/bin/python3 scripts/mkeagle3.py --target "$L1B" --draft-vocab 32000 --f16 \
            --seed 1 --out "$DIR/l1b-head-f16.gguf" >/dev/null
        "$QUANTIZE" "$DIR/l1b-head-f16.gguf" "$DIR/l1b-head-q4_K_M.gguf" Q4_K_M 2 >/dev/null 2>&1
        rm -f "$DIR/l1b-head-f16.gguf"
    fi
    head -n 2 "$DIR/stories.jsonl" > "$DIR/l1b_prompts.jsonl"
    build/specula bench -m "$L1B" -md "$DIR/l1b-head-q4_K_M.gguf" --prompts "$DIR/l1b_prompts.jsonl" -n 32 --temp 0 \
        --seed 7 -t 2 --configs "draft=eagle3,gamma=4" --out "$DIR/heads_l1b" >/dev/null
fi

python3 - "$DIR" $TEMPS <<'EOF'
import json, os, sys
d, temps = sys.argv[1], sys.argv[2:]
print("T  drafter     config          accept  tok/step  mean acc  draft share  draft step/target step  tok/s  vs plain")
for t in temps:
    for kind in ("draft", "head"):
        r = json.load(open(os.path.join(d, f"heads_t{t}_{kind}", "results.json")))
        plain = r["configs"][0]["tokens_per_second"]
        for c in r["configs"]:
            s = c.get("spec")
            if s is None:
                print(f"{t:<2} {kind:<11} {c['name']:<15} {'':>6}  {1.0:8.2f}  {'':>8}  {'':>11}  {'':>22}  {c['tokens_per_second']:5.1f}  1.00")
                continue
            share = s["seconds_draft"] / max(s["seconds_draft"] + s["seconds_target"], 1e-12)
            step = (s["seconds_draft"] / max(s["draft_forwards"], 1)) / (s["seconds_target"] / max(s["target_forwards"], 1))
            print(f"{t:<2} {kind:<11} {c['name'].replace('draft=eagle3,', ''):<15} {s['acceptance_rate']:6.3f}  "
                  f"{s['block_efficiency']:8.2f}  {s['mean_accepted']:8.2f}  {share:11.3f}  {step:22.3f}  "
                  f"{c['tokens_per_second']:5.1f}  {c['tokens_per_second'] / plain:.2f}")
p = os.path.join(d, "heads_l1b", "results.json")
if os.path.exists(p):
    r = json.load(open(p))
    plain = r["configs"][0]["tokens_per_second"]
    s = r["configs"][1]["spec"]
    step = s["seconds_draft"] / max(s["draft_forwards"], 1)
    print(f"l1b: head drafting step {step * 1e3:.2f} ms, plain decoding {1e3 / plain:.2f} ms per token: "
          f"{step * plain * 100:.1f}% of a target step ({r['draft_model_desc']})")
EOF
