#!/usr/bin/env python3
"""eagle3_ref.py: turn a verbose (-v) log of llama.cpp's
llama-speculative-simple --spec-type draft-eagle3 run into the per-iteration
record Specula's test compares with (tests/data/eagle3/README.md):

  iter I draft D1 D2 .. accepted A next Y

D: the drafted tokens the target verified (each draft step's top candidate,
cut to the verified length), A: how many were accepted, Y: the token the
target gave after them. Where the target cannot drop a rejected draft's
positions (a recurrent state without partial rollback: the example's
checkpoint path, "partial acceptance: A < B, restoring checkpoint"), the
example restores the state from before the verification and verifies the
A accepted tokens and the target's correction again, in one forward; that
iteration reads

  iter I draft D1 .. DB accepted A restored next Y

Y then being the token the target gave after the second verification.
Usage: eagle3_ref.py LOG > REF.txt
"""
import re
import sys

CAND = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(\d+)")
PARTIAL = re.compile(r"partial acceptance: (\d+) < (\d+), restoring checkpoint")
ACC = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    cand = {}
    it = 0
    partial = None  # (A, B) of a restored iteration, until its second verification
    for line in text.splitlines():
        m = CAND.search(line)
        if m:
            cand[int(m.group(1))] = int(m.group(2))
            continue
        m = PARTIAL.search(line)
        if m:
            partial = (int(m.group(1)), int(m.group(2)))
            continue
        m = ACC.search(line)
        if m:
            a, b, y = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if partial:
                if a != b or b != partial[0] + 1:
                    sys.exit(f"eagle3_ref: iteration {it}: the second verification accepted {a}/{b}, expected "
                             f"{partial[0] + 1}/{partial[0] + 1}")
                a, b = partial
            draft = [cand[i] for i in range(b)]
            tag = " restored" if partial else ""
            print(f"iter {it} draft {' '.join(map(str, draft))} accepted {a}{tag} next {y}".replace("draft  ", "draft "))
            cand = {}
            partial = None
            it += 1
    if it == 0:
        sys.exit("eagle3_ref: no iterations in the log (was it run with -v?)")


if __name__ == "__main__":
    main()
