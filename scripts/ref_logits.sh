#!/bin/sh
# Builds scripts/ref_logits.c against a llama.cpp build (reference side of
# the exactness tests; not part of Specula's build or CI).
# usage: scripts/ref_logits.sh LLAMA_CPP_DIR OUT_BINARY
#   LLAMA_CPP_DIR: a llama.cpp checkout built with cmake into LLAMA_CPP_DIR/build
#   (e.g. the 2026-09 one from `npm pack node-llama-cpp@3.22.1`, see README).
set -eu
L=${1:?llama.cpp directory}
OUT=${2:?output binary}
cc -O2 -std=c11 -Wall -Wextra -I"$L/include" -I"$L/ggml/include" "$(dirname "$0")/ref_logits.c" \
   -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -o "$OUT"
