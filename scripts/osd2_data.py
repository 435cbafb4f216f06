#!/usr/bin/env python3
"""Two-domain data for the OSD experiment on a trained target (scripts/osd2_experiment.sh).

Domain A, stories: ../shared/data/tinystories_val_sample.txt split by paragraph
(blank-line separated): the first 80% for training, the last 20% held out (the
same split as scripts/osd_data.py).

Domain B, code: the Python standard library's top-level modules
(/usr/lib/python3.X/*.py: Debian's libpython3.X-minimal and -stdlib,
installed with python3; else the stdlib of the python3 running this script). Files sorted by name; every fifth (index % 5 == 4) is held out, the
others train. Each file is cut into one paragraph per function, method or
class (blank lines inside removed, a blank line before each line that starts
with "def ", "class ", "@" or "    def "), so that a paragraph starts at BOS
with a definition, as the prompts do. The training paragraphs are thinned
evenly (every k-th) to about CODE_CHARS characters (default 620,000: about
the stories' training tokens under the 512-token vocabulary, which covers
code by byte fallback).

Writes into OUTDIR:
  train_stories.txt, train_code.txt, train.txt (both, paragraphs interleaved)
  heldout_stories.txt, heldout_code.txt, heldout.txt (both)
  stories.jsonl  60 held-out story openings (first 8 words) {"prompt", "domain": "stories"}
  code.jsonl     60 held-out definitions (the def line and the next line) {"domain": "code"}
  stream.jsonl   stories 40, code 40, stories 40 (the shift and the return)

Usage: python3 scripts/osd2_data.py SHARED_DIR OUTDIR [CODE_CHARS]
Deterministic: no randomness; every choice is by position.
"""
import glob
import json
import os
import re
import sys
import sysconfig


def code_paragraphs(path):
    lines = [l.rstrip() for l in open(path, encoding="utf-8", errors="replace").read().split("\n")]
    lines = [l.replace("\t", "    ") for l in lines if l.strip() and l.isascii()]
    paras, cur = [], []
    for l in lines:
        if re.match(r"(def |class |@|    def )", l) and cur and not cur[-1].lstrip().startswith("@"):
            paras.append("\n".join(cur))
            cur = []
        cur.append(l)
    if cur:
        paras.append("\n".join(cur))
    return paras


def main():
    shared, out = sys.argv[1], sys.argv[2]
    code_chars = int(sys.argv[3]) if len(sys.argv) > 3 else 620000
    os.makedirs(out, exist_ok=True)
    text = open(os.path.join(shared, "data", "tinystories_val_sample.txt"), encoding="utf-8").read()
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    cut = int(len(paras) * 0.8)
    s_train, s_held = paras[:cut], paras[cut:]

    # Debian's own stdlib (/usr/lib/python3.X), else that of the running python3
    debian = sorted(d for d in glob.glob("/usr/lib/python3.*") if os.path.isfile(os.path.join(d, "os.py")))
    stdlib = debian[-1] if debian else sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    c_train, c_held = [], []
    for i, f in enumerate(files):
        (c_held if i % 5 == 4 else c_train).extend(code_paragraphs(f))
    # drop tiny paragraphs (one-line stubs) and thin the training part evenly
    c_train = [p for p in c_train if len(p) >= 80]
    total = sum(len(p) for p in c_train)
    k = max(1, round(total / code_chars))
    c_train = c_train[::k]

    def write(name, rows):
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(rows) + "\n")

    write("train_stories.txt", s_train)
    write("train_code.txt", c_train)
    mixed, n = [], max(len(s_train), len(c_train))
    for i in range(n):  # interleave proportionally so every stretch of the file has both
        if i * len(s_train) // n < len(s_train) and (i == 0 or i * len(s_train) // n != (i - 1) * len(s_train) // n):
            mixed.append(s_train[i * len(s_train) // n])
        if i * len(c_train) // n < len(c_train) and (i == 0 or i * len(c_train) // n != (i - 1) * len(c_train) // n):
            mixed.append(c_train[i * len(c_train) // n])
    write("train.txt", mixed)
    write("heldout_stories.txt", s_held)
    c_held_eval = [p for p in c_held if len(p) >= 80]
    c_held_eval = c_held_eval[::max(1, len(c_held_eval) // 300)][:300]
    write("heldout_code.txt", c_held_eval)
    write("heldout.txt", s_held + c_held_eval)

    stories = []
    for p in s_held:
        words = p.split()
        if len(words) >= 20 and p[0].isupper():
            stories.append(" ".join(words[:8]))
        if len(stories) == 100:
            break
    # code prompts: a def line and the line after it, from held-out paragraphs
    # whose body has at least 4 lines
    defs = []
    for p in c_held:
        ls = p.split("\n")
        while ls and ls[0].lstrip().startswith("@"):
            ls = ls[1:]
        if len(ls) >= 5 and re.match(r"\s*def \w+\(.*\):$", ls[0]) and len(ls[0]) + len(ls[1]) < 120:
            defs.append(ls[0] + "\n" + ls[1])
    defs = defs[::max(1, len(defs) // 100)][:100]
    if len(stories) < 80 or len(defs) < 80:
        sys.exit("osd2_data: not enough prompts (%d stories, %d code)" % (len(stories), len(defs)))

    def dump(name, rows):
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            for p, d in rows:
                fh.write(json.dumps({"prompt": p, "domain": d}) + "\n")

    dump("stories.jsonl", [(p, "stories") for p in stories[:60]])
    dump("code.jsonl", [(p, "code") for p in defs[:60]])
    dump("stream.jsonl", [(p, "stories") for p in stories[:40]] + [(p, "code") for p in defs[:40]] +
         [(p, "stories") for p in stories[40:80]])
    print("osd2_data: stories %d train / %d held-out paragraphs; code (%s, %d files) %d train paragraphs "
          "(%d chars, every %d-th), %d held-out; %d story and %d code prompts"
          % (len(s_train), len(s_held), stdlib, len(files), len(c_train), sum(len(p) for p in c_train), k,
             len(c_held), len(stories), len(defs)))


if __name__ == "__main__":
    main()
