#!/usr/bin/env bash
# The online speculative decoding experiment (issue: online speculative
# decoding; results in docs/RESULTS.md). Target: stories260K from
# ../shared/models. Draft: a Llama of dim 48, 2 layers, 4/2 heads, FFN 128
# on the same 512-token vocabulary, warmed up by distillation on the first
# 80% of ../shared/data/tinystories_val_sample.txt; prompts come from the
# held-out 20% and, as a second domain the warm-up never saw, from the
# licence texts of Debian's base-files package (scripts/osd_data.py).
# Everything is seeded; learning runs inline (--online-sync) so acceptance
# figures repeat exactly; the speed comparison runs the learner on its
# background thread.
#
# usage: scripts/osd_experiment.sh [OUTDIR] [SHARED]   (defaults /tmp/specula-osd, ../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/specula-osd}
SHARED=${2:-${SPECULA_SHARED:-../shared}}
BIN=build/specula
T=$SHARED/models/stories260K.gguf
STEPS=${OSD_WARMUP_STEPS:-600}
SHAPE=48,2,4,2,128
ONLINE="--online-every 128 --online-steps 32 --online-topk 16"
mkdir -p "$OUT"
[ -x $BIN ] || make -j2 $BIN >/dev/null
python3 scripts/osd_data.py "$SHARED" "$OUT"

# 1. drafts: untrained (one step at lr 1e-7) and warmed up with each loss
$BIN distill -m "$T" --draft-shape $SHAPE --data "$OUT/train.txt" --steps 1 --lr 1e-7 --seed 1 \
    --out "$OUT/fresh.gguf" --quiet
for L in fkl rkl jsd tvd; do
    $BIN distill -m "$T" --draft-shape $SHAPE --data "$OUT/train.txt" --loss $L --steps "$STEPS" \
        --seed 1 --lr 3e-3 --out "$OUT/warm_$L.gguf" --quiet
done
DRAFTS="-md $OUT/fresh.gguf -md $OUT/warm_fkl.gguf -md $OUT/warm_rkl.gguf -md $OUT/warm_jsd.gguf -md $OUT/warm_tvd.gguf"
CFG="gamma=4,route=0;gamma=4,route=1;gamma=4,route=2;gamma=4,route=3;gamma=4,route=4;gamma=4,route=1,online=1"

# 2. acceptance of each draft on the held-out stories, T=1 and T=0, and with
#    online learning on from the fkl warm-up
for TEMP in 1 0; do
    $BIN bench -m "$T" $DRAFTS --prompts "$OUT/stories.jsonl" -n 64 --temp $TEMP --seed 7 \
        --configs "$CFG" $ONLINE --online-sync --block 10 --out "$OUT/accept_t$TEMP" \
        | tee "$OUT/accept_t$TEMP.txt"
done

# 3. the shifted stream (stories 40, licences 40, stories 40): the warm-up
#    draft, the same draft learning online, and two copies of it routed per
#    prompt, each learning from its own prompts
$BIN bench -m "$T" -md "$OUT/warm_fkl.gguf" -md "$OUT/warm_fkl.gguf" --prompts "$OUT/stream.jsonl" \
    -n 64 --temp 1 --seed 7 --configs "gamma=4,route=0;gamma=4,route=0,online=1;gamma=4,route=auto,online=1" \
    $ONLINE --online-sync --block 10 --out "$OUT/stream" | tee "$OUT/stream.txt"

# 4. speed: the learner on its background thread against none (one thread
#    generating, so the learner has the other core)
$BIN bench -m "$T" -md "$OUT/warm_fkl.gguf" --prompts "$OUT/stream.jsonl" -n 64 --temp 1 --seed 7 -t 1 \
    --configs "gamma=4,route=0;gamma=4,route=0,online=1" $ONLINE --block 40 --out "$OUT/speed" \
    | tee "$OUT/speed.txt"

# 5. training speed of a ~15M-parameter model (dim 384, 8 layers) with 2 threads
$BIN train --data "$OUT/train.txt" --vocab-from "$T" --shape 384,8,6,6,1024 --steps 12 --batch 4 --seq 128 \
    --seed 1 -t 2 --out "$OUT/m15.gguf" 2>&1 | tr '\r' '\n' | grep -E "parameters|step 12/12|wrote" | tee "$OUT/train_speed.txt"
echo "osd_experiment: results in $OUT"
