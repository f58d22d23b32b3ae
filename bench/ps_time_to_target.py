#!/usr/bin/env python3
"""Time to a target log loss from braid's JSON step logs, and an SVG plot.

  ps_time_to_target.py EPS OUT.svg NAME=LOG.jsonl ...

The held-out loss of a step is its training loss: the workload runs one
epoch, so every step's batch is samples the model has not seen
(progressive validation). It is smoothed over a trailing window (WINDOW,
default 20 steps) because one batch's loss is noisy. A step's wall time is
the log's `time` (braid ps train: seconds since the worker started) or, for
braid train --dp, the running sum of rank 0's compute + exposed
communication + idle seconds. The target is the done record's
best_log_loss (the test split's entropy floor) + EPS; a mode's time to
target is the time of the first step whose smoothed loss is <= target.
A NAME given several times (runs repeated) is summarised by medians: the
time to target counts a run that never reached it as infinitely late, and
the spread column says how many runs reached it and their range.
Prints a markdown table (with each mode's speed-up over the one named bsp,
or for a name MODE-X over bsp-X, and for braid ps train worker 0's median
step split into compute_s and exchange_s) and writes the plot: smoothed loss against wall time, one line per log.
"""
import statistics
import json
import os
import sys

WINDOW = int(os.environ.get("WINDOW", "20"))
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]


def read(path):
    steps, done, elapsed, split = [], None, 0.0, []
    for line in open(path):
        r = json.loads(line)
        if r.get("event") == "done":
            done = r
            continue
        if "time" in r:
            t = r["time"]
            if "compute_s" in r:
                split.append((r["compute_s"], r["exchange_s"]))
        else:
            elapsed += r["compute_s"][0] + r["exposed_comm_s"][0] + r["idle_s"][0]
            t = elapsed
        steps.append((t, r["loss"]))
    if done is None:
        sys.exit(f"{path}: no done record (the run did not finish)")
    smooth, acc = [], []
    for t, loss in steps:
        acc.append(loss)
        w = acc[-WINDOW:]
        smooth.append((t, sum(w) / len(w)))
    med = tuple(statistics.median(x[i] for x in split) * 1e3 for i in (0, 1)) if split else None
    return smooth, done, med


def svg(curves, target, path):
    W, H, L, R, T, B = 720, 440, 70, 170, 20, 50
    tmax = max(t for c in curves.values() for t, _ in c) or 1.0
    ys = [y for c in curves.values() for _, y in c] + [target]
    ylo, yhi = min(ys), max(ys)
    yhi += (yhi - ylo) * 0.05 or 0.01
    ylo -= (yhi - ylo) * 0.05 or 0.01
    X = lambda t: L + (W - L - R) * t / tmax
    Y = lambda y: T + (H - T - B) * (yhi - y) / (yhi - ylo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>']
    for i in range(6):
        t, y = tmax * i / 5, ylo + (yhi - ylo) * i / 5
        out.append(f'<text x="{X(t):.1f}" y="{H-B+16}" text-anchor="middle">{t:.3g}</text>')
        out.append(f'<text x="{L-6}" y="{Y(y)+4:.1f}" text-anchor="end">{y:.3f}</text>')
    out.append(f'<text x="{(L+W-R)/2}" y="{H-10}" text-anchor="middle">wall time (s)</text>')
    out.append(f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T+H-B)/2})">held-out log loss ({WINDOW}-step mean)</text>')
    out.append(f'<line x1="{L}" y1="{Y(target):.1f}" x2="{W-R}" y2="{Y(target):.1f}" '
               f'stroke="gray" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{W-R+6}" y="{Y(target)+4:.1f}" fill="gray">target</text>')
    for i, (name, c) in enumerate(curves.items()):
        col = COLORS[i % len(COLORS)]
        pts = " ".join(f"{X(t):.1f},{Y(y):.1f}" for t, y in c)
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
        out.append(f'<text x="{W-R+6}" y="{T+16*(i+2)}" fill="{col}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def median_or_none(xs):
    """Median where None (target not reached) counts as infinitely late."""
    inf = float("inf")
    m = statistics.median_low([inf if x is None else x for x in xs])
    return None if m == inf else m


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    eps, out = float(sys.argv[1]), sys.argv[2]
    runs, target = {}, None  # name -> [(smooth, hit, total, test, med)], in order given
    for arg in sys.argv[3:]:
        name, path = arg.split("=", 1)
        smooth, done, med = read(path)
        target = done["best_log_loss"] + eps if target is None else target
        hit = next((t for t, y in smooth if y <= target), None)
        runs.setdefault(name, []).append((smooth, hit, smooth[-1][0], done.get("test_log_loss"), med))
    rows = []
    for name, rs in runs.items():
        hits = [r[1] for r in rs]
        med = None
        if all(r[4] for r in rs):
            med = tuple(statistics.median(r[4][i] for r in rs) for i in (0, 1))
        tests = [r[3] for r in rs if r[3] is not None]
        rows.append((name, median_or_none(hits), hits, statistics.median(r[2] for r in rs),
                     statistics.median(tests) if tests else None, med))
    hits = {name: hit for name, hit, *_ in rows}
    n = max(len(rs) for rs in runs.values())
    print(f"target log loss {target:.4f} (floor + {eps}); {n} run(s) per mode, medians\n")
    print("| mode | time to target (s) | runs reaching it: min-max (s) | vs bsp | run time (s) "
          "| final test log loss | step compute / comm (ms, median) |")
    print("|---|---|---|---|---|---|---|")
    for name, hit, all_hits, total, test, med in rows:
        base = hits.get("bsp" + (name[name.index("-"):] if "-" in name else ""))
        speed = f"{base / hit:.2f}x" if hit and base else "-"
        reached = f"{hit:.2f}" if hit is not None else "not reached"
        got = [h for h in all_hits if h is not None]
        spread = (f"{len(got)}/{len(all_hits)}: {min(got):.2f}-{max(got):.2f}" if got
                  else f"0/{len(all_hits)}")
        tl = f"{test:.4f}" if test is not None else "-"
        split = f"{med[0]:.3f} / {med[1]:.3f}" if med else "-"
        print(f"| {name} | {reached} | {spread} | {speed} | {total:.2f} | {tl} | {split} |")
    svg({name: rs[0][0] for name, rs in runs.items()}, target, out)
    print(f"\nplot: {out} (each mode's first run)")


main()
