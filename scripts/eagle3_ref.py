#!/usr/bin/env python3
"""eagle3_ref.py: turn a verbose (-v) log of llama.cpp's
llama-speculative-simple --spec-type draft-eagle3 run into the per-iteration
record Specula's test compares with (tests/data/eagle3/README.md):

  iter I draft D1 D2 .. accepted A next Y

D: the drafted tokens the target verified (each draft step's top candidate,
cut to the verified length), A: how many were accepted, Y: the token the
target gave after them. Usage: eagle3_ref.py LOG > REF.txt
"""
import re
import sys

CAND = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(\d+)")
ACC = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    cand = {}
    it = 0
    for line in text.splitlines():
        m = CAND.search(line)
        if m:
            cand[int(m.group(1))] = int(m.group(2))
            continue
        m = ACC.search(line)
        if m:
            a, b, y = int(m.group(1)), int(m.group(2)), int(m.group(3))
            draft = [cand[i] for i in range(b)]
            print(f"iter {it} draft {' '.join(map(str, draft))} accepted {a} next {y}".replace("draft  ", "draft "))
            cand = {}
            it += 1
    if it == 0:
        sys.exit("eagle3_ref: no iterations in the log (was it run with -v?)")


if __name__ == "__main__":
    main()
