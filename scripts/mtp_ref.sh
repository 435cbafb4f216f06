#!/bin/sh
# mtp_ref.sh: remake the MTP test vectors of tests/data/mtp: two small
# random qwen35 models with one MTP block each (scripts/mkmtp.py), and
# llama.cpp's MTP drafts on them (llama-speculative-simple --spec-type
# draft-mtp, T = 0, 4 tokens a draft, 128 tokens after the prompt below),
# one line per iteration (scripts/eagle3_ref.py reads the log; the format
# is the same). The prompt's ids under llama.cpp's test tokenizer (5-byte
# chunks, hash * 31 + byte, modulo the vocabulary; no BOS) head each
# record. Needs a llama.cpp tree with build/bin/llama-speculative-simple
# and gguf-py, and numpy.
#   usage: scripts/mtp_ref.sh [LLAMA_CPP_DIR (default /work/ref/llama.cpp)]
set -eu
LCPP=${1:-/work/ref/llama.cpp}
OUT=tests/data/mtp
PY=${PYTHON:-/usr/bin/python3}
BIN=$LCPP/build/bin/llama-speculative-simple
PROMPT="Once upon a time there was"
[ -x "$BIN" ] || { echo "mtp_ref: $BIN not found" >&2; exit 1; }
export PYTHONPATH=$LCPP/gguf-py
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# F32, the model's own embeddings and output matrix (no shared_head_head)
$PY scripts/mkmtp.py --out-gain 0.2 --route 4 --seed 1 --out "$OUT/qwen35-mtp-f32.gguf"
# F16 matrices, the block's own embed_tokens and shared_head_head, 4 trunk layers
$PY scripts/mkmtp.py --out-gain 0.2 --route 4 --seed 2 --layers 4 --own-head --f16 --out "$OUT/qwen35-mtp-f16.gguf"

for name in qwen35-mtp-f32 qwen35-mtp-f16; do
    "$BIN" -m "$OUT/$name.gguf" --spec-type draft-mtp -p "$PROMPT" -n 128 --temp 0 -t 1 -c 256 \
        --spec-draft-n-max 4 -fa off -v >"$TMP/$name.log" 2>&1
    {
        echo "# llama.cpp $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?') llama-speculative-simple"
        echo "# -m $name.gguf --spec-type draft-mtp -p \"$PROMPT\" -n 128 --temp 0 -t 1 -c 256 --spec-draft-n-max 4 -fa off"
        grep -a -E "n_drafted|n_accept " "$TMP/$name.log" | sed 's/^.* I /# /'
        $PY -c 'import sys
t = sys.argv[1].encode(); V = int(sys.argv[2]); ids = []
for i in range(0, len(t), 5):
    h = 0
    for b in t[i:i + 5]: h = (h * 31 + b) % (1 << 64)
    ids.append(h % V)
print("# prompt", " ".join(map(str, ids)))' "$PROMPT" 128
        $PY scripts/eagle3_ref.py "$TMP/$name.log"
    } >"$OUT/$name.llamacpp.txt"
    echo "mtp_ref: $OUT/$name.llamacpp.txt"
done
