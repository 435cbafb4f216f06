#!/bin/sh
# check_layers: the tree's folders form layers that point one way,
#   base -> text -> engine -> speculation -> train -> tools
# (the order of SRC_DIRS in the Makefile, then tools/ and examples/; README.md
# and docs/DESIGN.md must state the same order). A file may include headers of
# its own layer or of a lower one, never of a higher one. Public headers
# (include/sp_NAME.h, include/dev/sp_NAME.h) belong to the layer of the folder
# holding src/*/NAME.c; include/specula.h, the umbrella, to the top. A
# folder's own headers (src/LAYER/*.h) are internal to it: another folder
# includes one only when it is listed in IFACES below as a deliberate
# internal interface for that folder. Who may include what:
#   include/sp_*.h    public headers only (no internal, no third-party type)
#   include/dev/*.h   public headers and the interfaces IFACES lists for tools
#   tools/            the public API, include/dev/, and the interfaces IFACES
#                     lists for tools (the developer's utilities: files, GGUF
#                     reading, clocks, random numbers, the worker pool, ...)
#   examples/         the public API only (include/*.h)
#   tests/, bench/, fuzz/  white-box: any header (not checked)
# Prints every offence, one line each, and exits 1 if there is any.
# usage: scripts/check_layers.sh [ROOT]   (ROOT: the tree to check, default
# this script's checkout)
cd "${1:-$(dirname "$0")/..}" || exit 2

# Internal interfaces: HEADER (under src/) and the layers that may include it.
IFACES='
base/gguf.h             text engine speculation train tools  reading GGUF files: keys, tensors, type sizes
base/file.h             text engine tools  opening, mapping and reading files; SHA-256
base/clock.h            engine speculation train tools  the wall and thread CPU clocks
base/rng.h              engine speculation train tools  the seeded random number generator
base/utf8.h             tools         UTF-8 validation and repair
base/threadpool.h       engine train tools  creating a worker pool, running jobs on it
base/heap.h             text          the binary heap of the BPE merges
base/gguf_write.h       engine train  writing GGUF files (random models, trained drafts)
text/tokenizer_load.h   engine speculation tools  tokenizers from files (GGUF metadata, llama2.c), raw pieces
engine/sampler_internal.h speculation tools  draws with an sp_rng, the inverse-CDF draw over weights
speculation/verify.h    tools         the verifiers over probability rows (the simulator)
speculation/spec_config.h tools       low-bit type names (the low-bit types a server allows)
engine/ops.h            train         the kernels the trainer shares with the forward pass
engine/quant.h          train         row quantisers, for saving trained weights
engine/model_plain.h    train         a plain Llama model as float tensors, both ways
engine/eagle3.h         speculation train  the EAGLE-3 head cache and forward (the eagle3 drafter); heads built from trained weights (the online learner)
engine/requant.h        speculation tools  re-quantised copies of a model (the lowbit drafter; shared copies in the server)
'

order="$(sed -n 's/^SRC_DIRS *:= *//p' Makefile) tools"
[ "$order" != " tools" ] || { echo "check_layers: no SRC_DIRS line in the Makefile"; exit 2; }
arrow=$(echo $order | sed 's/ / -> /g')
{
  for doc in README.md docs/DESIGN.md; do
    grep -qF "$arrow" "$doc" || echo "$doc does not state the layer order: $arrow"
  done
  # public headers: no third-party type (system includes from the C library only)
  for f in include/*.h include/dev/*.h; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1/p' "$f" | while read -r h; do
      case "$h" in
        assert.h|complex.h|ctype.h|errno.h|fenv.h|float.h|inttypes.h|iso646.h|limits.h|locale.h|math.h|\
        setjmp.h|signal.h|stdalign.h|stdarg.h|stdatomic.h|stdbool.h|stddef.h|stdint.h|stdio.h|stdlib.h|\
        stdnoreturn.h|string.h|tgmath.h|threads.h|time.h|uchar.h|wchar.h|wctype.h) ;;
        *) echo "$f includes <$h>: a public header uses the C standard library only (no third-party type)";;
      esac
    done
    grep -nE '\bjson_t\b|\bMHD_|\bcmocka' "$f" | sed "s|^|$f:|; s|\$| (a third-party type in a public header)|"
  done
  # one line per quoted include: FILE HEADER
  for f in src/*/*.[ch] include/*.h include/dev/*.h tools/*.[ch] examples/*.[ch]; do
    [ -f "$f" ] || continue
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
      while read -r h; do echo "INC $f $h"; done
  done
  ls src/*/*.c src/*/*.h include/*.h include/dev/*.h tools/*.h examples/*.h 2>/dev/null |
    sed 's/^/FILE /'
} | awk -v order="$order" -v ifaces="$IFACES" '
  function layer_of(path,   a, n, base, nm) {
    n = split(path, a, "/")
    if (a[1] == "src") return a[2]
    if (a[1] == "tools" || a[1] == "examples") return "tools"
    if (a[1] == "include") {
      base = a[n]
      if (base == "specula.h") return "tools"
      nm = base; sub(/^sp_/, "", nm); sub(/\.h$/, "", nm)
      if ((nm ".c") in impl) return impl[nm ".c"]
      return ""
    }
    return ""
  }
  function dir_of(path) { sub(/\/[^\/]*$/, "", path); return path }
  # where the compiler finds #include "h" from file f (-Iinclude, -Isrc/*, -Itools)
  function resolve(f, h,   d, l) {
    if ((dir_of(f) "/" h) in exists) return dir_of(f) "/" h
    if (("include/" h) in exists) return "include/" h
    for (l in rank) if (("src/" l "/" h) in exists) return "src/" l "/" h
    if (("tools/" h) in exists) return "tools/" h
    return ""
  }
  BEGIN {
    n = split(order, o, " ")
    for (i = 1; i <= n; i++) rank[o[i]] = i
    m = split(ifaces, lines, "\n")
    for (i = 1; i <= m; i++) {
      k = split(lines[i], w, " ")
      if (k < 2) continue
      for (j = 2; j <= k && (w[j] in rank); j++) allowed[w[1] " " w[j]] = 1
    }
  }
  $1 == "FILE" {
    exists[$2] = 1
    if ($2 ~ /^src\/.*\.c$/) { k = split($2, a, "/"); impl[a[3]] = a[2] }
    next
  }
  $1 == "INC" { inc[++ni] = $2 " " $3; next }
  { print; bad = 1 }
  END {
    for (i = 1; i <= ni; i++) {
      split(inc[i], p, " "); f = p[1]; h = p[2]
      fl = layer_of(f)
      if (fl == "" || !(fl in rank)) {
        print f ": in no layer (a public header is named after its src/*/NAME.c; folders are " order ")"
        bad = 1; continue
      }
      r = resolve(f, h)
      if (r == "") { print f ": includes \"" h "\", which is in no folder of the tree"; bad = 1; continue }
      hl = layer_of(r)
      if (hl == "" || !(hl in rank)) { print r ": in no layer (a public header is named after its src/*/NAME.c)"; bad = 1; continue }
      if (rank[hl] > rank[fl]) {
        print f " (" fl ") includes " h " (" hl "), a layer above it: the order is " order
        bad = 1; continue
      }
      if (f ~ /^examples\// && r !~ /^include\/[^\/]*$/) {
        print f " includes " h ": an example uses the public API (include/*.h) only"
        bad = 1; continue
      }
      if (f ~ /^include\/[^\/]*$/ && r !~ /^include\/[^\/]*$/) {
        print f " includes " h ": a public header includes public headers only"
        bad = 1; continue
      }
      if (f ~ /^include\/dev\// && r ~ /^src\//) {
        split(r, a, "/")
        if (!((a[2] "/" a[3] " tools") in allowed)) {
          print f " includes " h ": a developer header includes public headers and the interfaces for tools only"
          bad = 1
        }
        continue
      }
      if (r ~ /^src\//) {
        split(r, a, "/")
        if (dir_of(f) != dir_of(r) && !((a[2] "/" a[3] " " fl) in allowed)) {
          print f " includes " h ", internal to src/" a[2] " (not an interface of it for " fl ")"
          bad = 1
        }
      }
    }
    exit bad
  }'
