#!/bin/sh
# Builds scripts/ref_ngram_map.cpp against a llama.cpp build and writes the
# test vectors of tests/test_ngram_map.c (reference side; not part of
# Specula's build or CI).
# usage: scripts/ref_ngram_map.sh LLAMA_CPP_DIR [OUT_FILE]
#   LLAMA_CPP_DIR: a llama.cpp checkout built with cmake into LLAMA_CPP_DIR/build
#   (the 2026-09 one from `npm pack node-llama-cpp@3.22.1`, see README).
#   OUT_FILE: default tests/data/ngram_map/drafts.txt (seed 20261126); the
#   ngram-mod drafts go beside it as mod_drafts.txt
set -eu
L=${1:?llama.cpp directory}
here=$(dirname "$0")
OUT=${2:-$here/../tests/data/ngram_map/drafts.txt}
bin=$(mktemp -d)/ref_ngram_map
c++ -O2 -std=c++17 -Wall -Wextra -I"$L/common" -I"$L/include" -I"$L/ggml/include" \
    "$here/ref_ngram_map.cpp" -L"$L/build/bin" -lllama-common -lllama -lggml -lggml-base \
    -Wl,-rpath,"$L/build/bin" -o "$bin"
mkdir -p "$(dirname "$OUT")"
"$bin" 20261126 > "$OUT"
"$bin" 20261126 mod > "$(dirname "$OUT")/mod_drafts.txt"
rm -f "$bin"
echo "wrote $(dirname "$OUT")/mod_drafts.txt ($(grep -c '^draft' "$(dirname "$OUT")/mod_drafts.txt") drafts, $(awk '$1=="draft" && $3>0' "$(dirname "$OUT")/mod_drafts.txt" | wc -l) non-empty)"
echo "wrote $OUT ($(grep -c '^draft' "$OUT") drafts, $(awk '$1=="draft" && $3>0' "$OUT" | wc -l) non-empty)"
