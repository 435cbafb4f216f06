#!/bin/sh
# mtp_ref.sh: remake the MTP test vectors of tests/data/mtp: small random
# qwen35, qwen35moe and qwen3next models with one MTP block each
# (scripts/mkmtp.py), and llama.cpp's MTP drafts on them
# (llama-speculative-simple --spec-type draft-mtp, T = 0, 4 tokens a draft,
# 128 tokens after the prompt below), one line per iteration
# (scripts/eagle3_ref.py reads the log; the format is the same, with
# "restored" where the example took its checkpoint path). The prompt's ids under llama.cpp's test tokenizer (5-byte
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
# qwen35moe, F32: 4 experts of width 16 (2 used) and a shared expert of 32
# in every FFN, the MTP block's too (its FFN at full scale: it moves the
# drafts)
$PY scripts/mkmtp.py --arch qwen35moe --exp-ffn 16 --sh-ffn 32 --out-gain 0.2 --mtp-ffn-gain 1 --route 4 --seed 3 \
    --out "$OUT/qwen35moe-mtp-f32.gguf"
# qwen3next, F16: 4 experts of width 32 (2 used), a shared expert of 48,
# 3 trunk layers (recurrent, attention, recurrent), NeoX RoPE over 16 of
# the 32 head dimensions
$PY scripts/mkmtp.py --arch qwen3next --f16 --layers 3 --rope-dim 16 --out-gain 0.2 --mtp-ffn-gain 1 --route 4 --seed 4 \
    --out "$OUT/qwen3next-mtp-f16.gguf"

# run_ref NAME MODEL PROMPT_IDS_LINE [HEADER]: llama.cpp's record of MODEL
# into $OUT/NAME.llamacpp.txt
run_ref() {
    name=$1 model=$2 prompt_line=$3 header=${4:-}
    # the example's log thread now and then loses the log's tail at exit:
    # run again until the totals are there
    for try in 1 2 3 4 5; do
        "$BIN" -m "$model" --spec-type draft-mtp -p "$PROMPT" -n 128 --temp 0 -t 1 -c 256 \
            --spec-draft-n-max 4 -fa off -v >"$TMP/$name.log" 2>&1
        grep -a -q "n_accept " "$TMP/$name.log" && break
        [ "$try" = 5 ] && { echo "mtp_ref: $name: no totals in 5 runs" >&2; exit 1; }
    done
    {
        echo "# llama.cpp $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?') llama-speculative-simple"
        echo "# -m $(basename "$model") --spec-type draft-mtp -p \"$PROMPT\" -n 128 --temp 0 -t 1 -c 256 --spec-draft-n-max 4 -fa off"
        [ -n "$header" ] && echo "$header"
        grep -a -E "n_drafted|n_accept |will use checkpoints" "$TMP/$name.log" | sed 's/^.* I /# /'
        echo "$prompt_line"
        $PY scripts/eagle3_ref.py "$TMP/$name.log"
    } >"$OUT/$name.llamacpp.txt"
    echo "mtp_ref: $OUT/$name.llamacpp.txt"
}

# the prompt under the test tokenizer of the mkmtp.py files
TEST_IDS=$($PY -c 'import sys
t = sys.argv[1].encode(); V = int(sys.argv[2]); ids = []
for i in range(0, len(t), 5):
    h = 0
    for b in t[i:i + 5]: h = (h * 31 + b) % (1 << 64)
    ids.append(h % V)
print("# prompt", " ".join(map(str, ids)))' "$PROMPT" 128)
for name in qwen35-mtp-f32 qwen35-mtp-f16 qwen35moe-mtp-f32 qwen3next-mtp-f16; do
    run_ref "$name" "$OUT/$name.gguf" "$TEST_IDS"
done

# Files of specula mkmodel (F16, 8 experts of 128, 2 used, a shared expert
# of 128, 4 trunk layers: three Gated DeltaNet, one attention; one MTP
# block), not kept: tests/test_mtp_llamacpp.c makes them again from the
# "# mkmodel" line (ARCH DIM LAYERS HEADS KV_HEADS FFN EXPERTS USED VOCAB
# TYPE SEED MTP). Their vocabulary is mkmodel's made-up SentencePiece one;
# the prompt's ids are Specula's tokenisation (BOS first), which llama.cpp's
# record then confirms token by token.
[ -x build/specula ] || { echo "mtp_ref: build/specula not found (make build/specula)" >&2; exit 1; }
for arch in qwen35moe qwen3next; do
    set -- "$arch" 256 4 2 1 128 8 2 64 f16 11 1
    build/specula mkmodel --arch "$1" --dim "$2" --layers "$3" --heads "$4" --kv-heads "$5" --ffn "$6" \
        --experts "$7" --experts-used "$8" --vocab "$9" --type "${10}" --seed "${11}" --mtp "${12}" \
        --out "$TMP/mk-$arch.gguf" >/dev/null
    ids=$(build/specula tokenize -m "$TMP/mk-$arch.gguf" -p "$PROMPT" --ids | tr -d '[],')
    run_ref "mkmodel-$arch" "$TMP/mk-$arch.gguf" "# prompt $ids" "# mkmodel $*"
done
