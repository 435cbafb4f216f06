#!/bin/sh
# Writes tests/vectors/hybrid_ref.txt: llama.cpp's logits for qwen35,
# qwen35moe and qwen3next models made by `specula mkmodel` (random weights,
# deterministic by
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
  echo "# llama.cpp de3ff81 logits (ref-logits, F32 cache, 1 thread) for specula mkmodel files"
  echo "# case NAME DIM LAYERS HEADS KV_HEADS FFN VOCAB TYPE SEED ARCH EXPERTS USED, ids, one logits line per id, greedy 16"
  for c in "q8 256 4 2 1 512 64 q8_0 9 qwen35 0 0" "f32 512 4 4 2 256 64 f32 4 qwen35 0 0" \
           "m35 512 4 4 2 128 64 f32 5 qwen35moe 8 2" "nx 512 4 4 2 128 64 q8_0 6 qwen3next 8 2" \
           "lp 512 4 4 2 128 64 f32 7 qwen3next 8 2"; do
    set -- $c
    ids=$IDS
    # lp: a 150-token prefill, which Specula evaluates in chunks (64, 64, 22)
    [ "$1" = lp ] && ids=$(seq 1 150 | awk '{ printf("%s%d", (NR > 1) ? "," : "", ($1 * 37 + 11) % 64) }')
    ex=""
    [ "${11}" -gt 0 ] && ex="--experts ${11} --experts-used ${12}"
    "$SP" mkmodel --out "$TMP/m.gguf" --arch "${10}" --dim "$2" --layers "$3" --heads "$4" --kv-heads "$5" \
      --ffn "$6" --vocab "$7" --type "$8" --seed "$9" $ex >/dev/null
    echo "case $c"
    echo "ids $(echo $ids | tr , ' ')"
    "$REF" -m "$TMP/m.gguf" --ids "$ids" -c 512 --greedy 16 2>/dev/null | sed '$s/^/greedy /'
  done
} > "$OUT"
