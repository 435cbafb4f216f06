#!/bin/sh
# Writes tests/vectors/hybrid_ref.txt: llama.cpp's logits for qwen35 models
# made by `specula mkmodel --arch qwen35` (random weights, deterministic by
# seed), the reference side of test_hybrid's test_mkmodel_reference.
# usage: scripts/gen_hybrid_vectors.sh SPECULA REF_LOGITS
#   SPECULA: a built specula binary; REF_LOGITS: scripts/ref_logits.c built
#   against llama.cpp 2026-09 (scripts/ref_logits.sh).
set -eu
SP=${1:?specula binary}
REF=${2:?ref-logits binary}
OUT=$(dirname "$0")/../tests/vectors/hybrid_ref.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
IDS=1,5,9,13,2,7,3,60,22,41
{
  echo "# llama.cpp de3ff81 logits (ref-logits, F32 cache, 1 thread) for specula mkmodel --arch qwen35 files"
  echo "# case NAME DIM LAYERS HEADS KV_HEADS FFN VOCAB TYPE SEED, ids, one logits line per id, greedy 16"
  for c in "q8 256 4 2 1 512 64 q8_0 9" "f32 512 4 4 2 256 64 f32 4"; do
    set -- $c
    "$SP" mkmodel --out "$TMP/m.gguf" --arch qwen35 --dim "$2" --layers "$3" --heads "$4" --kv-heads "$5" \
      --ffn "$6" --vocab "$7" --type "$8" --seed "$9" >/dev/null
    echo "case $c"
    echo "ids $(echo $IDS | tr , ' ')"
    "$REF" -m "$TMP/m.gguf" --ids "$IDS" --greedy 16 2>/dev/null | sed '$s/^/greedy /'
  done
} > "$OUT"
