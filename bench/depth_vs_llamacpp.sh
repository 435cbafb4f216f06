#!/bin/sh
# Forward cost of k = 1, 8, 16 new tokens at cache depths and the prefill of
# a P-token prompt: Specula, llama.cpp's llama-bench and, when IK_BENCH names
# its llama-bench, ik_llama.cpp's, side by side in one run, same files, same
# threads, same KV cache type (docs/RESULTS.md, "Forward cost at depth").
# usage: bench/depth_vs_llamacpp.sh LLAMA_BENCH DEPTHS MODEL.gguf [MODEL.gguf ...]
#   e.g. IK_BENCH=/work/ref/ik_llama.cpp/build/bin/llama-bench \
#        bench/depth_vs_llamacpp.sh ../llama.cpp/build/bin/llama-bench 128,4096,16384 l1b-q4_K_M.gguf
# Environment: THREADS (2), REPS (3), CTK / CTV (f16), PREFILL (512; 0: none),
#   UBATCH (tokens per forward of Specula's prefill, 512; llama-bench's
#   default ubatch is 512 too), IK_BENCH (unset: no ik_llama.cpp), IK_FLAGS
#   (more ik_llama.cpp flags, e.g. "-rtr 1" for its run-time repacking),
#   AGAIN (set: Specula once more after the others, so that a flip of the
#   machine's memory speed during the run shows as two different figures;
#   each run prints the read bound it measured at its start).
# ik_llama.cpp's llama-bench has no -d: its decode at depth D is -gp D,16
# (16 tokens generated after a D-token prompt), and it has no k = 8 or 16
# forward at a depth. Its prefill is -p P, as llama.cpp's.
set -eu
L=${1:?llama-bench binary}; D=${2:?depths}; shift 2
S="$(dirname "$0")/../build/specula"
T=${THREADS:-2}; R=${REPS:-3}; K=${CTK:-f16}; V=${CTV:-f16}; P=${PREFILL:-512}; U=${UBATCH:-512}
PF=""
if [ "$P" -gt 0 ]; then PF="--prefill $P --ubatch $U"; fi
specula() {
  # shellcheck disable=SC2086 # PF is two flags or none
  "$S" bench-forward -m "$1" -t "$T" --reps "$R" --depths "$D" -ctk "$K" -ctv "$V" $PF 2>&1 |
    sed -n '/^bound/p;/^decode/p;/^prefill/p;/^forward ms/,$p;/^forward at depth/,$p'
}
for f in "$@"; do
  echo "=== $f: specula"
  specula "$f"
  echo "=== $f: llama.cpp"
  "$L" -m "$f" -t "$T" -p 1,8,16 -n 0 -d "$D" -r "$R" -ctk "$K" -ctv "$V" 2>&1 | grep '|'
  if [ "$P" -gt 0 ]; then
    "$L" -m "$f" -t "$T" -p "$P" -n 0 -r "$R" -ctk "$K" -ctv "$V" 2>&1 | grep '|' | tail -n +3
  fi
  if [ -n "${IK_BENCH:-}" ]; then
    echo "=== $f: ik_llama.cpp"
    GP=""
    for d in $(echo "$D" | tr ',' ' '); do GP="$GP -gp $d,16"; done
    # shellcheck disable=SC2086 # GP and IK_FLAGS are lists of flags
    "$IK_BENCH" -m "$f" -t "$T" -p "$P" -n 0 $GP -r "$R" -ctk "$K" -ctv "$V" ${IK_FLAGS:-} 2>&1 | grep '|'
  fi
  if [ -n "${AGAIN:-}" ]; then
    echo "=== $f: specula again"
    specula "$f"
  fi
done
