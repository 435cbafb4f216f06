#!/bin/sh
# eagle3_ref.sh: remake the EAGLE-3 test vectors of tests/data/eagle3:
# random heads for two shared reference targets (scripts/mkeagle3.py), and
# llama.cpp's drafts with them (llama-speculative-simple --spec-type
# draft-eagle3, T = 0, 4 tokens a draft, 96 tokens after "Once upon a
# time"), one line per iteration (scripts/eagle3_ref.py). Needs a llama.cpp
# tree with build/bin/llama-speculative-simple and gguf-py, and numpy.
#   usage: scripts/eagle3_ref.sh [LLAMA_CPP_DIR (default /work/ref/llama.cpp)]
set -eu
LCPP=${1:-/work/ref/llama.cpp}
SHARED=${SPECULA_SHARED:-../shared}
OUT=tests/data/eagle3
PY=${PYTHON:-/usr/bin/python3}
BIN=$LCPP/build/bin/llama-speculative-simple
[ -x "$BIN" ] || { echo "eagle3_ref: $BIN not found" >&2; exit 1; }
export PYTHONPATH=$LCPP/gguf-py
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# stories260K: layers 1, 2, 4 (of 5), a 16-token draft vocabulary (d2t: the
# 16 most frequent ids of the target's greedy continuation, so that a random
# head's draft is accepted now and then), its own output, the target's
# embeddings, F32
$PY scripts/mkeagle3.py --target "$SHARED/models/stories260K.gguf" --layers 1,2,4 \
    --d2t-ids 261,265,267,282,286,292,295,298,317,337,338,419,426,432,433,439 \
    --ffn 128 --gain 2 --seed 1 --out "$OUT/stories260K-head.gguf"
# llama-gqa4 (2 layers): layers 0, 1, 1, its own embeddings, norm_before_fc
# and norm_before_residual, F16 matrices, the full vocabulary (no d2t)
$PY scripts/mkeagle3.py --target "$SHARED/reference/arch/models/llama-gqa4-f32.gguf" --layers 0,1,1 \
    --ffn 128 --own-embd --norm-before-fc --norm-before-residual --f16 --seed 2 \
    --out "$OUT/llama-gqa4-head.gguf"

# a head trained by Specula (specula train-head, deterministic given the
# seed): stories260K, its default layers, FFN 64, 120 steps on the first
# 20,000 bytes of the shared TinyStories sample
make -j2 build/specula >/dev/null
head -c 20000 "$SHARED/data/tinystories_val_sample.txt" >"$TMP/train.txt"
build/specula train-head -m "$SHARED/models/stories260K.gguf" --head eagle3 --data "$TMP/train.txt" \
    --head-ffn 64 --steps 120 --batch 4 --seq 48 --seed 1 --quiet --out "$OUT/stories260K-trained-head.gguf"
# and with the trainer's options: the taps RMS-normed before fc, and a draft
# vocabulary of the text's 64 most frequent tokens (d2t)
build/specula train-head -m "$SHARED/models/stories260K.gguf" --head eagle3 --data "$TMP/train.txt" \
    --head-ffn 64 --steps 60 --batch 4 --seq 48 --seed 1 --quiet --norm-before-fc \
    --out "$OUT/stories260K-nbf-head.gguf"
build/specula train-head -m "$SHARED/models/stories260K.gguf" --head eagle3 --data "$TMP/train.txt" \
    --head-ffn 64 --steps 60 --batch 4 --seq 48 --seed 1 --quiet --draft-vocab 64 \
    --out "$OUT/stories260K-dvocab-head.gguf"

for pair in stories260K:models/stories260K.gguf llama-gqa4:reference/arch/models/llama-gqa4-f32.gguf \
    stories260K-trained:models/stories260K.gguf stories260K-nbf:models/stories260K.gguf \
    stories260K-dvocab:models/stories260K.gguf; do
    name=${pair%%:*}
    "$BIN" -m "$SHARED/${pair#*:}" -md "$OUT/$name-head.gguf" --spec-type draft-eagle3 \
        -p "Once upon a time" -n 96 --temp 0 -t 1 -c 256 --spec-draft-n-max 4 \
        -ctk f32 -ctv f32 -ctkd f32 -ctvd f32 -v >"$TMP/$name.log" 2>&1
    {
        echo "# llama.cpp $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?') llama-speculative-simple"
        echo "# -m ${pair#*:} -md $name-head.gguf --spec-type draft-eagle3 -p \"Once upon a time\" -n 96 --temp 0 -t 1 -c 256 --spec-draft-n-max 4 -ctk f32 -ctv f32 -ctkd f32 -ctvd f32"
        grep -a -E "n_drafted|n_accept " "$TMP/$name.log" | sed 's/^.* I /# /'
        $PY scripts/eagle3_ref.py "$TMP/$name.log"
    } >"$OUT/$name-head.llamacpp.txt"
    echo "eagle3_ref: $OUT/$name-head.llamacpp.txt"
done
