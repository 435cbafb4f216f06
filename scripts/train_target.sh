#!/usr/bin/env bash
# A real target/draft pair for speed on this project's data: trains a
# 14.6M-parameter Llama (dim 384, 8 layers, 6 heads, FFN 1024) on the
# 512-token stories260K vocabulary from the training split of
# ../shared/data/tinystories_val_sample.txt (scripts/osd_data.py: the first
# 80% of its paragraphs), with fixed seeds, then reports its held-out loss
# next to stories260K's and runs `specula bench` with it as the target and
# stories260K as the draft against plain decoding in one run.
# The model file is not committed: this script rebuilds it.
#
# usage: scripts/train_target.sh [OUTDIR] [SHARED] [STEPS]
#        (defaults /tmp/specula-target, ../shared, 600 steps of 8 x 128 tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/specula-target}
SHARED=${2:-${SPECULA_SHARED:-../shared}}
STEPS=${3:-600}
S260=$SHARED/models/stories260K.gguf
mkdir -p "$OUT"
# clang's build of the trainer is about twice as fast as gcc 12's here
# (the results are bit-identical: docs/RESULTS.md)
make -j2 CC=clang BUILD=build-clang build-clang/specula >/dev/null
BIN=build-clang/specula
make -j2 build/specula >/dev/null
python3 scripts/osd_data.py "$SHARED" "$OUT" >/dev/null  # train.txt, heldout.txt, stories.jsonl
t0=$(date +%s)
$BIN train --data "$OUT/train.txt" --eval "$OUT/heldout.txt" --vocab-from "$S260" --shape 384,8,6,6,1024 \
    --steps "$STEPS" --batch 8 --seq 128 --lr 1e-3 --lr-min 1e-4 --warmup 30 --seed 1 -t 2 \
    --out "$OUT/target15m.gguf" 2>&1 | tr '\r' '\n' | grep -v '^\[' | tee "$OUT/train.log"
echo "train: $(( $(date +%s) - t0 )) s"
# stories260K's held-out loss on the same text (one step at the smallest rate changes nothing measurable)
$BIN train --init "$S260" --data "$OUT/train.txt" --eval "$OUT/heldout.txt" --steps 1 --lr 1e-8 --lr-min 1e-8 \
    --seed 1 -t 2 --out "$OUT/s260-copy.gguf" 2>&1 | tr '\r' '\n' | grep "held-out"
# speculation with the new target and stories260K as its draft, greedy and T=1
for TEMP in 0 1; do
    build/specula bench -m "$OUT/target15m.gguf" -md "$S260" --prompts "$OUT/stories.jsonl" -n 64 --temp $TEMP \
        --seed 7 -t 2 --configs "gamma=4;gamma=2;adaptive=1" --out "$OUT/bench_t$TEMP" | tee "$OUT/bench_t$TEMP.txt"
done
