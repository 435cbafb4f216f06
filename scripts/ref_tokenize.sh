#!/bin/sh
# Builds scripts/ref_tokenize.c against a llama.cpp build and writes llama.cpp's
# ids for a vector file (reference side of tests/test_tokenizer_vectors.c; not
# part of Specula's build or CI).
# usage: scripts/ref_tokenize.sh LLAMA_CPP_DIR VOCAB.gguf VECTORS
#   reads VECTORS.inp, writes VECTORS.out (one line of ids per string).
# tests/data/qwen35/vectors was made with
#   scripts/ref_tokenize.sh /work/ref/llama.cpp ../shared/reference/tokenizers/qwen35-vocab.gguf \
#       tests/data/qwen35/vectors
# (llama.cpp de3ff81).
set -eu
L=${1:?llama.cpp directory}
VOCAB=${2:?vocabulary gguf}
VEC=${3:?vector file prefix}
BIN=$(mktemp /tmp/ref-tokenize.XXXXXX)
trap 'rm -f "$BIN"' EXIT
cc -O2 -std=c11 -Wall -Wextra -I"$L/include" -I"$L/ggml/include" "$(dirname "$0")/ref_tokenize.c" \
   -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -o "$BIN"
"$BIN" "$VOCAB" < "$VEC.inp" > "$VEC.out"
