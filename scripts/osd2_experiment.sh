#!/usr/bin/env bash
# Online speculative decoding on a trained two-domain target (issue #24, "the
# OSD picture on real weights"; results in docs/results/). stories260K knows
# one domain only, so scripts/osd_experiment.sh could show no dip at a shift;
# here the target is trained by `specula train` on two domains
# (scripts/osd2_data.py, fixed split): TinyStories paragraphs and the Python
# standard library's sources (/usr/lib/python3.X/*.py, which Debian's python3
# installs), both through stories260K's 512-token vocabulary (byte fallback
# covers code's characters). Drafts (Llama dim 48, 2 layers, 4/2 heads, FFN
# 128) are distilled from the target on one domain each. A stream of 120
# requests, stories 40 -> code 40 -> stories 40, 64 tokens each, gamma 4,
# block verification, T=0, is run with:
#   static     the stories draft throughout
#   online     the stories draft learning online from the verified positions
#   routed     both drafts, a router picking one per request (route=auto)
#   routed+online  both, each learning from the requests routed to it
#   code draft the code draft throughout (what routing can reach on code)
# reporting acceptance per block of 8 requests. Everything is seeded; the
# learner runs inline (--online-sync) so acceptance figures repeat exactly.
# Model files stay in OUTDIR (not committed); an existing target, drafts and
# held-out losses in OUTDIR are reused unless OSD2_RETRAIN=1.
#
# usage: scripts/osd2_experiment.sh [OUTDIR] [SHARED]   (defaults /tmp/specula-osd2, ../shared)
# env:   OSD2_TRAIN_STEPS (700), OSD2_DISTILL_STEPS (400), OSD2_TEMP (0),
#        OSD2_ONLINE (the learner's flags, default "--online-every 128 --online-steps 32")
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/specula-osd2}
SHARED=${2:-${SPECULA_SHARED:-../shared}}
S260=$SHARED/models/stories260K.gguf
TSTEPS=${OSD2_TRAIN_STEPS:-700}
DSTEPS=${OSD2_DISTILL_STEPS:-400}
TEMP=${OSD2_TEMP:-0}
ONLINE=${OSD2_ONLINE:---online-every 128 --online-steps 32}
SHAPE=48,2,4,2,128
mkdir -p "$OUT"
# clang's build of the trainer is about twice as fast as gcc 12's here (bit-identical results)
make -j2 CC=clang BUILD=build-clang build-clang/specula >/dev/null
BIN=build-clang/specula
python3 scripts/osd2_data.py "$SHARED" "$OUT" | tee "$OUT/data.txt"

# 1. the target: 2.0M parameters (dim 192, 4 layers, 6 heads, FFN 512) on both domains
if [ ! -f "$OUT/target.gguf" ] || [ "${OSD2_RETRAIN:-0}" = 1 ]; then
    t0=$(date +%s)
    $BIN train --data "$OUT/train.txt" --eval "$OUT/heldout.txt" --vocab-from "$S260" --shape 192,4,6,6,512 \
        --steps "$TSTEPS" --batch 8 --seq 128 --lr 2e-3 --lr-min 2e-4 --warmup 30 --seed 1 -t 2 \
        --out "$OUT/target.gguf" 2>&1 | tr '\r' '\n' | grep -v '^\[' | tee "$OUT/train.log"
    echo "train: $(($(date +%s) - t0)) s" | tee -a "$OUT/train.log"
fi
# 2. per-domain drafts distilled from the target (the stories one is the static draft)
for D in stories code; do
    [ -f "$OUT/draft_$D.gguf" ] && [ "${OSD2_RETRAIN:-0}" != 1 ] && continue
    $BIN distill -m "$OUT/target.gguf" --draft-shape $SHAPE --data "$OUT/train_$D.txt" --steps "$DSTEPS" \
        --batch 8 --seq 64 --seed 1 --lr 3e-3 -t 2 --out "$OUT/draft_$D.gguf" --quiet
done

# 3. the shifted stream
$BIN bench -m "$OUT/target.gguf" -md "$OUT/draft_stories.gguf" -md "$OUT/draft_code.gguf" \
    --prompts "$OUT/stream.jsonl" -n 64 --temp "$TEMP" --seed 7 -t 2 \
    --configs "gamma=4,route=0;gamma=4,route=0,online=1;gamma=4,route=auto;gamma=4,route=auto,online=1;gamma=4,route=1" \
    $ONLINE --online-sync --block 8 --out "$OUT/stream_t$TEMP" | tee "$OUT/stream_t$TEMP.txt"
python3 scripts/osd2_table.py "$OUT/stream_t$TEMP/stream.csv" 8 "$OUT/osd2_stream_t$TEMP.png" \
    "Two-domain target: stories 40, code 40, stories 40; T=$TEMP, gamma 4 (2 vCPU AMD EPYC Zen 4, loaded)" |
    tee "$OUT/table_t$TEMP.md"
# 3b. the learner with a smaller ring (1024 rows, 16 requests) and a 3x
#     higher rate, on the first 80 requests (stories 40 -> code 40)
head -80 "$OUT/stream.jsonl" >"$OUT/stream80.jsonl"
$BIN bench -m "$OUT/target.gguf" -md "$OUT/draft_stories.gguf" --prompts "$OUT/stream80.jsonl" -n 64 \
    --temp "$TEMP" --seed 7 -t 2 --configs "gamma=4,route=0,online=1" --online-every 128 --online-steps 32 \
    --online-buffer 1024 --online-lr 1e-3 --online-sync --block 8 --out "$OUT/tuned_t$TEMP" |
    tee "$OUT/tuned_t$TEMP.txt"
# 4. held-out cross-entropy per domain, the target's and stories260K's (one step
# at the smallest rate changes nothing measurable)
[ -s "$OUT/heldout_loss.txt" ] && [ "${OSD2_RETRAIN:-0}" != 1 ] || for M in target:"$OUT/target.gguf" stories260K:"$S260"; do
    for D in stories code; do
        L=$($BIN train --init "${M#*:}" --data "$OUT/train_$D.txt" --eval "$OUT/heldout_$D.txt" --steps 1 \
            --lr 1e-8 --lr-min 1e-8 --seed 1 -t 2 --out "$OUT/copy.gguf" 2>&1 | tr '\r' '\n' |
            grep -o "held-out[^,]*" | tail -1)
        echo "${M%%:*} $D: $L" >>"$OUT/heldout_loss.txt"
    done
done
rm -f "$OUT/copy.gguf" "$OUT/copy.gguf.loss."*
cat "$OUT/heldout_loss.txt"

echo "osd2_experiment: results in $OUT (table_t$TEMP.md, osd2_stream_t$TEMP.png)"
