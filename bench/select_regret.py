#!/usr/bin/env python3
"""How close does the automatic algorithm choice come to the best forced one?

For each world size and collective, runs `braid bench` once with --algo auto
and once per algorithm braid has for that collective, in rotating order,
ROUNDS times, and prints per size: the median time of each algorithm, what
auto picked, and auto's regret = auto's median / the best median. A regret
near 1.0 means the cost model picked the fastest algorithm (or one as fast).

  bench/select_regret.py [--braid build/braid] [-n 3,4,8] [--op all_reduce]
                         [--rounds 3] [--min-bytes 8] [--max-bytes 16M]

Times on 2 cores move 10-30 % between runs: read regrets under ~1.15 as a
tie, and rerun what looks wrong before believing it. Every run warms up for
at least 10 calls: the first large calls of a job touch fresh pages of the
shared-memory rings (all n-1 of them at once for direct), and with 2
warm-up calls the 256 KiB - 1 MiB rows of 4-8 ranks came out 3-12x slow.
"""
import argparse
import json
import statistics
import subprocess
import sys

ALGOS = {
    "all_reduce": ["ring", "hd", "rd", "direct", "chain", "oneshot"],
    "broadcast": ["tree", "chain"],
    "reduce": ["tree", "ring", "direct"],
    "all_gather": ["ring", "direct"],
    "reduce_scatter": ["ring", "direct"],
}


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def run(braid, n, op, algo, lo, hi, iters, extra):
    cmd = [braid, "bench", "-n", str(n), "--op", op, "-b", str(lo), "-e", str(hi), "-f", "4",
           "--iters", str(iters), "-w", str(max(10, iters // 4)), "--algo", algo, "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not rows:
        sys.exit(f"select_regret: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    if any(r["wrong"] for r in rows):
        sys.exit(f"select_regret: {' '.join(cmd)} reported wrong elements")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--braid", default="build/braid")
    ap.add_argument("-n", default="3,4,8", help="world sizes, comma separated")
    ap.add_argument("--op", default="all_reduce", help="collectives, comma separated, or all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="16M")
    ap.add_argument("--split", default="64K", help="sizes up to this get --small-iters")
    ap.add_argument("--small-iters", type=int, default=200)
    ap.add_argument("--large-iters", type=int, default=10)
    ap.add_argument("--transport", default="auto")
    args = ap.parse_args()
    ops = list(ALGOS) if args.op == "all" else args.op.split(",")
    lo, hi, split = size_arg(args.min_bytes), size_arg(args.max_bytes), size_arg(args.split)
    extra = ["--transport", args.transport]
    worst = []
    for n in [int(x) for x in args.n.split(",")]:
        for op in ops:
            algos = ["auto"] + ALGOS[op]
            times = {}  # (algo, bytes) -> [µs]
            picked = {}  # bytes -> algorithm auto ran
            for rnd in range(args.rounds):
                k = rnd % len(algos)
                for algo in algos[k:] + algos[:k]:  # rotate: no algorithm always runs first
                    for a, b, it in ((lo, min(hi, split), args.small_iters),
                                     (max(lo, split * 4), hi, args.large_iters)):
                        if a > b:
                            continue
                        for r in run(args.braid, n, op, algo, a, b, it, extra):
                            times.setdefault((algo, r["bytes"]), []).append(r["time_us"])
                            if algo == "auto":
                                picked[r["bytes"]] = r["algo"]
            sizes = sorted(picked)
            print(f"\n{op}, {n} ranks ({args.transport}), median µs of {args.rounds} rounds")
            print("| bytes | " + " | ".join(ALGOS[op]) + " | auto | auto ran | regret |")
            print("|---" * (len(ALGOS[op]) + 4) + "|")
            for b in sizes:
                med = {a: statistics.median(times[(a, b)]) for a in algos if (a, b) in times}
                best = min(med[a] for a in ALGOS[op] if a in med)
                regret = med["auto"] / best
                cells = []
                for a in ALGOS[op]:
                    v = med.get(a)
                    cell = "—" if v is None else f"{v:.4g}"
                    cells.append(f"**{cell}**" if v == best else cell)
                print(f"| {b} | " + " | ".join(cells) +
                      f" | {med['auto']:.4g} | {picked[b]} | {regret:.2f} |")
                worst.append((regret, n, op, b, picked[b],
                              min((m, a) for a, m in med.items() if a != "auto")[1]))
    worst.sort(reverse=True)
    print("\nworst regrets (regret, ranks, op, bytes, auto ran, fastest):")
    for w in worst[:10]:
        print(f"  {w[0]:.2f}  n={w[1]} {w[2]} {w[3]} B: ran {w[4]}, fastest {w[5]}")


if __name__ == "__main__":
    main()
