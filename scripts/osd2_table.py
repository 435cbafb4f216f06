#!/usr/bin/env python3
"""Compact tables of a `specula bench` stream (stream.csv) for scripts/osd2_experiment.sh.

Per block of BLOCK requests in stream order and per configuration: the
acceptance rate (accepted / drafted draft tokens) and, by phase (runs of one
domain), the rate, the mean accepted draft tokens per verification step
(accepted / (generated - accepted): each step emits its accepted tokens plus
one from the target), the first block after each shift (the dip) and the
phase's last block (the recovery). Markdown on stdout; with PNG given, also a
gnuplot plot of the per-block rates (TITLE as its title).

Usage: python3 scripts/osd2_table.py STREAM.csv BLOCK [PNG TITLE]
"""
import csv
import subprocess
import sys


def main():
    path, block = sys.argv[1], int(sys.argv[2])
    rows = [r for r in csv.DictReader(open(path)) if r["config"] != "plain"]
    cfgs = []
    for r in rows:
        if r["config"] not in cfgs:
            cfgs.append(r["config"])
    by = {c: sorted((r for r in rows if r["config"] == c), key=lambda r: int(r["stream_index"])) for c in cfgs}
    n = len(by[cfgs[0]])
    dom = [r["domain"] for r in by[cfgs[0]]]

    def rate(rs):
        d = sum(int(r["drafted"]) for r in rs)
        return sum(int(r["accepted"]) for r in rs) / d if d else 0.0

    def per_step(rs):
        a = sum(int(r["accepted"]) for r in rs)
        steps = sum(int(r["n_generated"]) for r in rs) - a
        return a / steps if steps else 0.0

    # phases: maximal runs of one domain
    phases, s = [], 0
    for i in range(1, n + 1):
        if i == n or dom[i] != dom[s]:
            phases.append((s, i))
            s = i
    print("Acceptance rate per block of %d requests (stream order):\n" % block)
    print("| requests | domain | " + " | ".join(cfgs) + " |")
    print("| --- | --- |" + " ---: |" * len(cfgs))
    blocks = []
    for k in range(0, n, block):
        e = min(n, k + block)
        vals = [rate(by[c][k:e]) for c in cfgs]
        blocks.append((k, e, vals))
        d = "/".join(sorted(set(dom[k:e]), key=dom[k:e].index))
        print("| %d-%d | %s | " % (k, e - 1, d) + " | ".join("%.3f" % v for v in vals) + " |")
    print("\nBy phase: acceptance rate (mean accepted per step), first block -> last block:\n")
    print("| configuration | " + " | ".join("%s %d-%d" % (dom[a], a, b - 1) for a, b in phases) + " | whole stream |")
    print("| --- |" + " ---: |" * (len(phases) + 1))
    for c in cfgs:
        cells = []
        for a, b in phases:
            first, last = by[c][a:min(b, a + block)], by[c][max(a, b - block):b]
            cells.append("%.3f (%.2f), %.3f -> %.3f" % (rate(by[c][a:b]), per_step(by[c][a:b]), rate(first), rate(last)))
        print("| %s | " % c + " | ".join(cells) + " | %.3f (%.2f) |" % (rate(by[c]), per_step(by[c])))
    if len(sys.argv) > 4:
        png, title = sys.argv[3], sys.argv[4]
        dat = png + ".dat"
        with open(dat, "w") as f:
            f.write("block " + " ".join('"%s"' % c for c in cfgs) + "\n")
            for k, e, vals in blocks:
                f.write("%g " % ((k + e - 1) / 2) + " ".join("%.4f" % v for v in vals) + "\n")
        arrows = "".join("set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lc rgb 'gray'\n" % (a - 0.5, a - 0.5)
                         for a, _ in phases[1:])
        labels = "".join("set label '%s' at %g, graph 0.96 center\n" % (dom[a], (a + b - 1) / 2) for a, b in phases)
        gp = ("set terminal pngcairo size 900,480 noenhanced\nset output '%s'\nset title '%s'\n"
              "set xlabel 'request (stream order; points at block centres, %d requests per block)'\n"
              "set ylabel 'acceptance rate'\nset yrange [0:1]\nset grid\nset key below\n%s%s"
              "plot for [i=2:%d] '%s' using 1:i with linespoints title columnheader(i)\n"
              % (png, title, block, arrows, labels, len(cfgs) + 1, dat))
        subprocess.run(["gnuplot"], input=gp.encode(), check=True)


if __name__ == "__main__":
    main()
