#!/bin/sh
# arch_refs.sh: re-creates a reference set like ../shared/reference/arch2026
# (its README says what is in it) with llama.cpp: random-weight models of
# llama.cpp's architectures written by its own test generator, their F16
# (and, for gpt-oss, MXFP4-expert) copies, and llama.cpp's logits and greedy
# ids for two id sequences. Not part of Specula's build or CI; the tests
# read the set from ../shared.
#
# usage: scripts/arch_refs.sh OUT_DIR [LLAMA_CPP_DIR] [REF_LOGITS]
#   LLAMA_CPP_DIR  a llama.cpp tree built with cmake into LLAMA_CPP_DIR/build
#                  with -DLLAMA_BUILD_TESTS=ON (build/bin/test-llama-archs,
#                  llama-quantize); default /work/ref/llama.cpp
#   REF_LOGITS     scripts/ref_logits.c built against that tree by
#                  scripts/ref_logits.sh; default /work/ref/bin/ref-logits
# environment:
#   ARCHS  architectures to make (llama.cpp names, each given to
#          test-llama-archs -a as an exact match); default the set of
#          arch2026: llama qwen2 qwen3 phi3 gemma2 gemma3 qwen3moe gpt-oss
#          qwen35 qwen35moe qwen3next
#   SEED   the generator's seed (default 20261126, the one of arch2026)
#
# Writes OUT_DIR/models/NAME-f16.gguf (NAME = ARCH-dense or ARCH-moe, as the
# generator names its files; gpt-oss also gpt-oss-moe-mxfp4.gguf),
# OUT_DIR/logits/seqA.ids, seqB.ids and per model NAME.seqX.logits.txt (all
# ids in one decode, one %.6g line per position, F32 KV cache, flash
# attention off), NAME.seqX.greedy32.txt (32 greedy ids, one decode per
# token) and NAME.seqA.kvf16.logits.txt (F16 KV cache), and
# OUT_DIR/MANIFEST.sha256 of the models. The F32 files the generator writes
# stay in OUT_DIR/f32.
set -eu
OUT=${1:?output directory}
L=${2:-/work/ref/llama.cpp}
REF=${3:-/work/ref/bin/ref-logits}
SEED=${SEED:-20261126}
ARCHS=${ARCHS:-llama qwen2 qwen3 phi3 gemma2 gemma3 qwen3moe gpt-oss qwen35 qwen35moe qwen3next}
BIN=$L/build/bin
for x in "$BIN/test-llama-archs" "$BIN/llama-quantize" "$REF"; do
    [ -x "$x" ] || { echo "arch_refs.sh: $x is missing (see the usage at the top)" >&2; exit 1; }
done
mkdir -p "$OUT/f32" "$OUT/models" "$OUT/logits"

# the two id sequences of arch2026 (ids < 128, the generator's vocabulary)
echo "5 17 99 3 64 12 77 41 8 120 33 56 90 2 71 15" > "$OUT/logits/seqA.ids"
echo "100 1 23 45 67 89 11 13 120 7 9 31 52 74 96 18 40 62 84 106 27 49 70 92" > "$OUT/logits/seqB.ids"

# 1. the generator's F32 files, then the F16 copies (1-D tensors stay F32)
for a in $ARCHS; do
    "$BIN/test-llama-archs" -s "$SEED" -a "^$a\$" -o "$OUT/f32" >/dev/null 2>&1 ||
        { echo "arch_refs.sh: test-llama-archs failed for $a" >&2; exit 1; }
done
for f in "$OUT"/f32/*.gguf; do
    n=$(basename "$f" .gguf)
    "$BIN/llama-quantize" "$f" "$OUT/models/$n-f16.gguf" F16 >/dev/null 2>&1
    if [ "$n" = gpt-oss-moe ]; then
        "$BIN/llama-quantize" "$f" "$OUT/models/gpt-oss-moe-mxfp4.gguf" MXFP4_MOE >/dev/null 2>&1
    fi
done

# 2. llama.cpp's logits and greedy ids
ids() { tr -s ' \n' ',,' < "$OUT/logits/$1.ids" | sed 's/,$//'; }
for m in "$OUT"/models/*.gguf; do
    n=$(basename "$m" .gguf)
    for s in seqA seqB; do
        k=$(wc -w < "$OUT/logits/$s.ids")
        "$REF" -m "$m" --ids "$(ids $s)" --greedy 32 > "$OUT/logits/$n.$s.out"
        head -n "$k" "$OUT/logits/$n.$s.out" > "$OUT/logits/$n.$s.logits.txt"
        tail -n 1 "$OUT/logits/$n.$s.out" > "$OUT/logits/$n.$s.greedy32.txt"
        rm "$OUT/logits/$n.$s.out"
    done
    "$REF" -m "$m" --ids "$(ids seqA)" -ctk f16 -ctv f16 > "$OUT/logits/$n.seqA.kvf16.logits.txt"
done
(cd "$OUT/models" && sha256sum *.gguf) > "$OUT/MANIFEST.sha256"
echo "arch_refs.sh: $(ls "$OUT/models" | wc -l) models and their logits in $OUT"
