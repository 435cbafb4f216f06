#!/usr/bin/env python3
"""Data for the online speculative decoding experiment (scripts/osd_experiment.sh).

Splits ../shared/data/tinystories_val_sample.txt by paragraph (blank-line
separated) into a training part (the first 80%: warm-up distillation) and a
held-out part (the last 20%: prompts), and builds a second domain the
warm-up never sees: sentences of the licence texts in /usr/share/common-licenses
(Debian's base-files package, present on every Debian system): English in a
legal register, whose words and sentence shapes are far from children's
stories, tokenised by the same 512-token vocabulary.

Writes into OUTDIR:
  train.txt           training text (warm-up distillation)
  heldout.txt         the held-out paragraphs (held-out loss)
  stories.jsonl       60 held-out story openings      {"prompt", "domain": "stories"}
  legal.jsonl         60 licence sentences            {"prompt", "domain": "legal"}
  stream.jsonl        stories 40, legal 40, stories 40 (the shift and the return)

Usage: python3 scripts/osd_data.py SHARED_DIR OUTDIR
Deterministic: no randomness; the choices are by position.
"""
import glob
import json
import os
import re
import sys


def main():
    shared, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    text = open(os.path.join(shared, "data", "tinystories_val_sample.txt"), encoding="utf-8").read()
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    cut = int(len(paras) * 0.8)
    with open(os.path.join(out, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(paras[:cut]) + "\n")
    held = paras[cut:]
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(held) + "\n")
    # story openings: the first 8 words of held-out paragraphs that start a sentence
    stories = []
    for p in held:
        words = p.split()
        if len(words) >= 20 and p[0].isupper():
            stories.append(" ".join(words[:8]))
        if len(stories) == 100:
            break
    # licence sentences: 8-word openings of sentences of 12+ words
    legal = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        body = re.sub(r"\s+", " ", open(path, encoding="utf-8", errors="replace").read())
        for s in re.split(r"(?<=[.;:])\s+", body):
            words = s.split()
            if len(words) >= 12 and words[0][:1].isupper() and all(w.isascii() for w in words[:8]):
                legal.append(" ".join(words[:8]))
    # spread the picks over all licences: every k-th sentence
    step = max(1, len(legal) // 100)
    legal = legal[::step][:100]
    if len(stories) < 80 or len(legal) < 80:
        sys.exit("osd_data: not enough prompts (%d stories, %d legal)" % (len(stories), len(legal)))

    def dump(name, rows):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            for p, d in rows:
                f.write(json.dumps({"prompt": p, "domain": d}) + "\n")

    dump("stories.jsonl", [(p, "stories") for p in stories[:60]])
    dump("legal.jsonl", [(p, "legal") for p in legal[:60]])
    dump("stream.jsonl", [(p, "stories") for p in stories[:40]] + [(p, "legal") for p in legal[:40]] +
         [(p, "stories") for p in stories[40:80]])
    print("osd_data: %d paragraphs, %d for training; %d story and %d legal prompts"
          % (len(paras), cut, len(stories), len(legal)))


if __name__ == "__main__":
    main()
